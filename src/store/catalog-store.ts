import type { Queryable } from "./db.js";
import { LIVE_GRANT } from "./relationships-store.js";

/** A relation of a resource as the catalog holds it: a built-in (derived) or a custom one. */
export interface EffectiveRelation {
  name: string;
  actions: string[];
  builtIn: boolean;
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
}

/** SQL for the catalog. */
export const catalogStore = {
  async load(q: Queryable, appId: string): Promise<CatalogEntry[]> {
    const resources = await q.query<ResourceRow>(
      "SELECT resource, description, actions FROM catalog_resources WHERE app_id = $1 ORDER BY position",
      [appId],
    );
    const relations = await q.query<RelationRow>(
      `SELECT resource, relation, actions, built_in AS "builtIn" FROM catalog_relations
       WHERE app_id = $1 ORDER BY resource, position`,
      [appId],
    );
    const byResource = new Map<string, CatalogEntry>();
    const entries = resources.rows.map((r) => {
      const entry: CatalogEntry = { resource: r.resource, description: r.description, actions: r.actions, relations: [] };
      byResource.set(r.resource, entry);
      return entry;
    });
    for (const r of relations.rows) {
      byResource.get(r.resource)?.relations.push({ name: r.relation, actions: r.actions, builtIn: r.builtIn });
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
      e.relations.map((r, position) => ({ resource: e.resource, relation: r.name, actions: r.actions, builtIn: r.builtIn, position })),
    );
    await q.query(
      `INSERT INTO catalog_relations (app_id, resource, relation, actions, built_in, position)
       SELECT $1, r->>'resource', r->>'relation', ARRAY(SELECT jsonb_array_elements_text(r->'actions')),
              (r->>'builtIn')::boolean, (r->>'position')::int
       FROM jsonb_array_elements($2::jsonb) AS t(r)`,
      [appId, JSON.stringify(relations)],
    );
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
       ORDER BY r`,
      [appId, resources],
    );
    return rows;
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
       ORDER BY d.resource, d.relation`,
      [appId, pairs.map((p) => p.resource), pairs.map((p) => p.relation)],
    );
    return rows;
  },
};
