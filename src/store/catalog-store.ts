import { ALL_USERS_SQL, ALL_USERS_SUBJECT, isUserSubject } from "./all-users.js";
import type { Queryable } from "./db.js";
import { LIVE_GRANT } from "./relationships-store.js";

/** A relation of a resource as the catalog holds it: a built-in (derived) or a custom one. */
export interface EffectiveRelation {
  name: string;
  actions: string[];
  builtIn: boolean;
  /** "user", "<resource>#<relation>" or "<resource>" (see domain/subjects.ts). */
  subjects: string[];
  inherits: Inherit[];
  /** Each must hold too (intersection). */
  requires: Inherit[];
  /** None may hold (exclusion). */
  unless: Inherit[];
}

/** A rule's target: `relation` on this instance (`through` ""), or on the instances it links to by `through`. */
export interface Inherit {
  through: string;
  relation: string;
}

/** One resource of an application's catalog, as stored and as answered. */
export interface CatalogEntry {
  resource: string;
  description: string;
  actions: string[];
  relations: EffectiveRelation[];
}

interface ResourceRow {
  resource: string;
  description: string;
  actions: string[];
}

interface RelationRow {
  resource: string;
  relation: string;
  actions: string[];
  builtIn: boolean;
  subjects: string[];
  inherits: Inherit[];
  requires: Inherit[];
  unless: Inherit[];
}

/** A relation's `requires` or `unless` entries, in order, as JSON. */
const operatorEntries = (operator: "requires" | "unless") =>
  `(SELECT coalesce(json_agg(json_build_object('through', o.through, 'relation', o.target) ORDER BY o.position), '[]')
               FROM catalog_operators o WHERE o.app_id = $1 AND o.resource = r.resource AND o.relation = r.relation AND o.operator = '${operator}') AS ${operator}`;

/** SQL for the catalog. */
export const catalogStore = {
  async load(q: Queryable, appId: string): Promise<CatalogEntry[]> {
    const resources = await q.query<ResourceRow>(
      "SELECT resource, description, actions FROM catalog_resources WHERE app_id = $1 ORDER BY position",
      [appId],
    );
    const relations = await q.query<RelationRow>(
      `SELECT r.resource, r.relation, r.actions, r.built_in AS "builtIn", r.subjects,
              (SELECT coalesce(json_agg(json_build_object('through', i.through, 'relation', i.inherited) ORDER BY i.position), '[]')
               FROM catalog_inherits i WHERE i.app_id = $1 AND i.resource = r.resource AND i.relation = r.relation) AS inherits,
              ${operatorEntries("requires")},
              ${operatorEntries("unless")}
       FROM catalog_relations r
       WHERE r.app_id = $1 ORDER BY r.resource, r.position`,
      [appId],
    );
    const byResource = new Map<string, CatalogEntry>();
    const entries = resources.rows.map((r) => {
      const entry: CatalogEntry = { resource: r.resource, description: r.description, actions: r.actions, relations: [] };
      byResource.set(r.resource, entry);
      return entry;
    });
    for (const r of relations.rows) {
      byResource.get(r.resource)?.relations.push({ name: r.relation, actions: r.actions, builtIn: r.builtIn, subjects: r.subjects, inherits: r.inherits, requires: r.requires, unless: r.unless });
    }
    return entries;
  },

  /**
   * Replaces the application's catalog with `entries`, set-based: one
   * statement per table whatever the catalog's size.
   */
  async replace(q: Queryable, appId: string, entries: CatalogEntry[]): Promise<void> {
    // Relations go with their resources (ON DELETE CASCADE).
    await q.query("DELETE FROM catalog_resources WHERE app_id = $1", [appId]);
    if (entries.length === 0) return;
    await q.query(
      `INSERT INTO catalog_resources (app_id, resource, description, actions, position)
       SELECT $1, e->>'resource', e->>'description',
              ARRAY(SELECT jsonb_array_elements_text(e->'actions')), (n - 1)::int
       FROM jsonb_array_elements($2::jsonb) WITH ORDINALITY AS t(e, n)`,
      [appId, JSON.stringify(entries.map(({ resource, description, actions }) => ({ resource, description, actions })))],
    );
    const relations = entries.flatMap((e) =>
      e.relations.map((r, position) => ({
        resource: e.resource,
        relation: r.name,
        actions: r.actions,
        builtIn: r.builtIn,
        subjects: r.subjects,
        position,
      })),
    );
    await q.query(
      `INSERT INTO catalog_relations (app_id, resource, relation, actions, built_in, position, subjects)
       SELECT $1, r->>'resource', r->>'relation', ARRAY(SELECT jsonb_array_elements_text(r->'actions')),
              (r->>'builtIn')::boolean, (r->>'position')::int, ARRAY(SELECT jsonb_array_elements_text(r->'subjects'))
       FROM jsonb_array_elements($2::jsonb) AS t(r)`,
      [appId, JSON.stringify(relations)],
    );
    const inherits = entries.flatMap((e) =>
      e.relations.flatMap((r) => r.inherits.map((i, position) => ({ resource: e.resource, relation: r.name, position, through: i.through, inherited: i.relation }))),
    );
    if (inherits.length > 0) {
      await q.query(
        `INSERT INTO catalog_inherits (app_id, resource, relation, position, through, inherited)
         SELECT $1, i->>'resource', i->>'relation', (i->>'position')::int, i->>'through', i->>'inherited'
         FROM jsonb_array_elements($2::jsonb) AS t(i)`,
        [appId, JSON.stringify(inherits)],
      );
    }
    const operators = entries.flatMap((e) =>
      e.relations.flatMap((r) =>
        (["requires", "unless"] as const).flatMap((operator) =>
          r[operator].map((o, position) => ({ resource: e.resource, relation: r.name, operator, position, through: o.through, target: o.relation })),
        ),
      ),
    );
    if (operators.length > 0) {
      await q.query(
        `INSERT INTO catalog_operators (app_id, resource, relation, operator, position, through, target)
         SELECT $1, o->>'resource', o->>'relation', o->>'operator', (o->>'position')::int, o->>'through', o->>'target'
         FROM jsonb_array_elements($2::jsonb) AS t(o)`,
        [appId, JSON.stringify(operators)],
      );
    }
  },

  /** The policies holding any of `permissions` ("resource:action"). */
  async policiesHolding(
    q: Queryable,
    appId: string,
    permissions: string[],
  ): Promise<{ policyId: string; name: string; permission: string }[]> {
    if (permissions.length === 0) return [];
    const { rows } = await q.query<{ policyId: string; name: string; permission: string }>(
      `SELECT p.policy_id AS "policyId", p.name, pp.resource || ':' || pp.action AS permission
       FROM policy_permissions pp JOIN policies p USING (app_id, policy_id)
       WHERE pp.app_id = $1 AND (pp.resource, pp.action) IN (
         SELECT split_part(x, ':', 1), split_part(x, ':', 2) FROM unnest($2::text[]) AS x)
       ORDER BY p.name, pp.position`,
      [appId, permissions],
    );
    return rows;
  },

  /**
   * Which of `resources` some grant uses, expired grants included (they stay
   * until swept or deleted); `expiredOnly` when every such grant has expired.
   */
  async resourcesWithGrants(q: Queryable, appId: string, resources: string[]): Promise<{ resource: string; expiredOnly: boolean }[]> {
    if (resources.length === 0) return [];
    const { rows } = await q.query<{ resource: string; expiredOnly: boolean }>(
      `SELECT r AS resource,
              NOT EXISTS (SELECT 1 FROM relationships g WHERE g.app_id = $1 AND g.resource = r AND ${LIVE_GRANT("g")}) AS "expiredOnly"
       FROM unnest($2::text[]) AS r
       WHERE EXISTS (SELECT 1 FROM relationships g WHERE g.app_id = $1 AND g.resource = r)
       UNION ALL
       SELECT r, NOT EXISTS (SELECT 1 FROM subject_relationships s WHERE s.app_id = $1 AND s.resource = r AND ${LIVE_GRANT("s")})
       FROM unnest($2::text[]) AS r
       WHERE EXISTS (SELECT 1 FROM subject_relationships s WHERE s.app_id = $1 AND s.resource = r)
       ORDER BY 1`,
      [appId, resources],
    );
    return merged(rows, (r) => r.resource);
  },

  /** Which of the (resource, relation) pairs some grant uses, as resourcesWithGrants. */
  async relationsWithGrants(
    q: Queryable,
    appId: string,
    pairs: { resource: string; relation: string }[],
  ): Promise<{ resource: string; relation: string; expiredOnly: boolean }[]> {
    if (pairs.length === 0) return [];
    const { rows } = await q.query<{ resource: string; relation: string; expiredOnly: boolean }>(
      `SELECT d.resource, d.relation,
              NOT EXISTS (SELECT 1 FROM relationships g
                          WHERE g.app_id = $1 AND g.resource = d.resource AND g.relation = d.relation AND ${LIVE_GRANT("g")}) AS "expiredOnly"
       FROM unnest($2::text[], $3::text[]) AS d(resource, relation)
       WHERE EXISTS (SELECT 1 FROM relationships g
                     WHERE g.app_id = $1 AND g.resource = d.resource AND g.relation = d.relation)
       UNION ALL
       SELECT d.resource, d.relation,
              NOT EXISTS (SELECT 1 FROM subject_relationships s
                          WHERE s.app_id = $1 AND s.resource = d.resource AND s.relation = d.relation AND ${LIVE_GRANT("s")})
       FROM unnest($2::text[], $3::text[]) AS d(resource, relation)
       WHERE EXISTS (SELECT 1 FROM subject_relationships s
                     WHERE s.app_id = $1 AND s.resource = d.resource AND s.relation = d.relation)
       ORDER BY 1, 2`,
      [appId, pairs.map((p) => p.resource), pairs.map((p) => p.relation)],
    );
    return merged(rows, (r) => `${r.resource}#${r.relation}`);
  },

  /**
   * Which of the (resource, relation, subject type) triples some grant
   * uses: a user grant for "user", an allUsers grant for "user:*" (both rows
   * of relationships, told apart by the reserved user_id: all-users.ts), a
   * subject grant whose holder's type (and relation, for a set; none for a
   * link) matches otherwise. As resourcesWithGrants, expired grants included.
   */
  async subjectsWithGrants(
    q: Queryable,
    appId: string,
    triples: { resource: string; relation: string; subject: string }[],
  ): Promise<{ resource: string; relation: string; subject: string; expiredOnly: boolean }[]> {
    if (triples.length === 0) return [];
    const users = triples.filter((t) => isUserSubject(t.subject));
    const holders = triples.filter((t) => !isUserSubject(t.subject));
    // A user grant's row matches "user:*" when it is an allUsers one, "user" otherwise.
    const holderMatches = `(g.user_id = ${ALL_USERS_SQL}) = (d.subject = '${ALL_USERS_SUBJECT}')`;
    const { rows } = await q.query<{ resource: string; relation: string; subject: string; expiredOnly: boolean }>(
      `SELECT d.resource, d.relation, d.subject,
              NOT EXISTS (SELECT 1 FROM relationships g
                          WHERE g.app_id = $1 AND g.resource = d.resource AND g.relation = d.relation AND ${holderMatches}
                            AND ${LIVE_GRANT("g")}) AS "expiredOnly"
       FROM unnest($2::text[], $3::text[], $9::text[]) AS d(resource, relation, subject)
       WHERE EXISTS (SELECT 1 FROM relationships g
                     WHERE g.app_id = $1 AND g.resource = d.resource AND g.relation = d.relation AND ${holderMatches})
       UNION ALL
       SELECT d.resource, d.relation, d.subject,
              NOT EXISTS (SELECT 1 FROM subject_relationships s
                          WHERE s.app_id = $1 AND s.resource = d.resource AND s.relation = d.relation
                            AND s.subject_resource = d.subject_resource AND s.subject_relation = d.subject_relation
                            AND ${LIVE_GRANT("s")})
       FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[]) AS d(resource, relation, subject, subject_resource, subject_relation)
       WHERE EXISTS (SELECT 1 FROM subject_relationships s
                     WHERE s.app_id = $1 AND s.resource = d.resource AND s.relation = d.relation
                       AND s.subject_resource = d.subject_resource AND s.subject_relation = d.subject_relation)
       ORDER BY 1, 2, 3`,
      [
        appId,
        users.map((t) => t.resource),
        users.map((t) => t.relation),
        holders.map((t) => t.resource),
        holders.map((t) => t.relation),
        holders.map((t) => t.subject),
        holders.map((t) => t.subject.split("#")[0]!),
        holders.map((t) => t.subject.split("#")[1] ?? ""),
        users.map((t) => t.subject),
      ],
    );
    return rows;
  },
};

/**
 * Rows of the same key from the user grants and the subject grants made
 * one: expired-only when both parts are. Rows come sorted by key.
 */
function merged<T extends { expiredOnly: boolean }>(rows: T[], key: (row: T) => string): T[] {
  const out = new Map<string, T>();
  for (const row of rows) {
    const seen = out.get(key(row));
    out.set(key(row), seen === undefined ? row : { ...seen, expiredOnly: seen.expiredOnly && row.expiredOnly });
  }
  return [...out.values()];
}
