/**
 * SQL for the part of a model plan's impact that comes through grants
 * (domain/grant-impact.ts): the instances a catalog change reaches, the
 * users who hold a relation on them (the candidates), and each candidate's
 * relations on its instance under the model before and the model after, in
 * one walk. Every statement names one application ($1) in every table it
 * reads.
 */
import { EACH_HOLDER } from "./all-users.js";
import type { Queryable } from "./db.js";
import { MAX_HOPS } from "./outward-hop.js";
import { PLAIN_GRANT } from "./relationships-store.js";

/** A (resource, relation) pair of the catalog. */
export interface RelationPair {
  r: string;
  l: string;
}

/** A rule "relation l of resource r inherits i through the link t", of either model. */
export interface InheritRule {
  r: string;
  l: string;
  t: string;
  i: string;
}

/** Which models a relation, or a rule, is part of: bit 1 the model before, bit 2 the model after. */
export type Models = number;

/** A relation to walk from on instances of `r`, in the models `m`. */
export interface RootPair extends RelationPair {
  m: Models;
}

/** An inheritance rule of the models `m`. */
export interface ModelRule extends InheritRule {
  m: Models;
}

/** An instance the change reaches. */
export interface ReachedInstance {
  resource: string;
  resourceId: string;
}

/** A user who holds, or an allUsers grant ('') that gives, a relation on a reached instance. */
export interface Candidate extends ReachedInstance {
  userId: string;
}

/**
 * The instances of the pairs' resources that have a grant of one of the
 * pairs' relations (to a user, every user, a subject set or as a link):
 * only those can have a holder of a relation the change touches. Each
 * branch is a run of the primary key's prefix (app_id, resource) in
 * resource_id order, its distinct instances stopped at $3: a branch that
 * has more gives $3 of them, so $3 rows come back whenever there are more
 * than $3 - 1 instances (several grants on one instance count once).
 */
const SEEDS_SQL = `
  SELECT DISTINCT x.resource, x.resource_id AS "resourceId" FROM (
    SELECT p.r AS resource, g.resource_id
    FROM jsonb_to_recordset($2::jsonb) AS p(r text, l text)
    CROSS JOIN LATERAL (SELECT DISTINCT g.resource_id FROM relationships g
                        WHERE g.app_id = $1 AND g.resource = p.r AND g.relation = p.l AND ${PLAIN_GRANT("g")}
                        ORDER BY g.resource_id LIMIT $3) g
    UNION ALL
    SELECT p.r, s.resource_id
    FROM jsonb_to_recordset($2::jsonb) AS p(r text, l text)
    CROSS JOIN LATERAL (SELECT DISTINCT s.resource_id FROM subject_relationships s
                        WHERE s.app_id = $1 AND s.resource = p.r AND s.relation = p.l AND ${PLAIN_GRANT("s")}
                        ORDER BY s.resource_id LIMIT $3) s
  ) x
  LIMIT $3`;

/**
 * The graph check's outward walk (outward-hop.ts), to the same
 * hop bound, from each instance of `instances` (rows of resource and
 * resource_id) and each relation `t` names for its resource (t: r, l, m).
 * Each row carries the models it is walked in (m: bit 1 before, bit 2
 * after): a subject set keeps the row's models; a link followed by a rule of
 * `ci` (r, l, t, i, m), or a rule within the instance (t ''), keeps those of
 * the row that the rule is part of, and a row of no model is not walked on. So the rows with bit k are the nodes
 * the check of model k reaches. `root` is the relation the row was walked
 * from, or '' where the caller does not need it (then rows from different
 * relations meet and are walked once).
 */
const outwardWalk = (instances: string, root: "t.l" | "''") => `
  walk(xr, xi, root, resource, resource_id, relation, m, depth) AS (
    SELECT x.resource, x.resource_id, ${root}, x.resource, x.resource_id, t.l, t.m, 0
    FROM (${instances}) x JOIN t ON t.r = x.resource
    UNION
    SELECT w.xr, w.xi, w.root, e.resource, e.resource_id, e.relation, e.m, w.depth + e.hops
    FROM walk w CROSS JOIN LATERAL (
      SELECT s.subject_resource, s.subject_id, s.subject_relation, w.m, 1
      FROM subject_relationships s
      WHERE s.app_id = $1 AND s.resource = w.resource AND s.resource_id = w.resource_id AND s.relation = w.relation
        AND s.subject_relation <> '' AND ${PLAIN_GRANT("s")} AND w.depth < ${MAX_HOPS}
      UNION ALL
      SELECT s.subject_resource, s.subject_id, ci.i, w.m & ci.m, 1
      FROM ci
      JOIN subject_relationships s
        ON s.app_id = $1 AND s.resource = w.resource AND s.resource_id = w.resource_id AND s.relation = ci.t
       AND s.subject_relation = '' AND ${PLAIN_GRANT("s")}
      WHERE ci.r = w.resource AND ci.l = w.relation AND ci.t <> '' AND w.m & ci.m <> 0 AND w.depth < ${MAX_HOPS}
      UNION ALL
      SELECT w.resource, w.resource_id, ci.i, w.m & ci.m, 0
      FROM ci
      WHERE ci.r = w.resource AND ci.l = w.relation AND ci.t = '' AND w.m & ci.m <> 0) e(resource, resource_id, relation, m, hops)
  )`;

/** The walk's relations ($3) and rules ($4), each with its models. */
const WALK_INPUTS = `
  t AS (SELECT * FROM jsonb_to_recordset($3::jsonb) AS t(r text, l text, m int)),
  ci AS (SELECT * FROM jsonb_to_recordset($4::jsonb) AS ci(r text, l text, t text, i text, m int))`;

/**
 * From each reached instance ($2), the walk over the rules of both models at
 * once ($4, every one marked as of both), so that every node either model's
 * walk reaches is reached, from the relations the change touches ($3); then
 * the users (and the allUsers id) granted a node's relation with no
 * condition: a run of the primary key per node, a lateral subquery fenced
 * with OFFSET 0 so that it stays one (joined flat, a planner that knows
 * nothing of the table hashed the application's every grant). Its rows
 * stream into the LIMIT ($5): the walk stops once enough are read.
 */
const CANDIDATES_SQL = `
  WITH RECURSIVE ${WALK_INPUTS},
  ${outwardWalk(`SELECT * FROM jsonb_to_recordset($2::jsonb) AS x(resource text, resource_id text)`, "''")}
  SELECT w.xr AS resource, w.xi AS "resourceId", g.user_id AS "userId"
  FROM walk w
  CROSS JOIN LATERAL (
    SELECT g.user_id FROM relationships g
    WHERE g.app_id = $1 AND g.resource = w.resource AND g.resource_id = w.resource_id AND g.relation = w.relation AND ${PLAIN_GRANT("g")}
    OFFSET 0) g
  LIMIT $5`;

/**
 * Each candidate's relations on its instance with no condition, under both
 * models in one walk from each distinct instance: a candidate holds a
 * relation (the walk's root) under model k when a node walked from it with
 * bit k has a grant, with no condition, to the candidate or to every user
 * (EACH_HOLDER): one probe of relationships_user_idx per candidate and
 * node, so a team of 10,000 members costs one probe, as in the check.
 * Beside them, each candidate user's roles, as the check reads them.
 */
const HELD_SQL = `
  WITH RECURSIVE
  p AS (SELECT * FROM ROWS FROM (jsonb_to_recordset($2::jsonb) AS (u text, r text, i text))
             WITH ORDINALITY AS p(user_id, resource, resource_id, n)),${WALK_INPUTS},
  ${outwardWalk(`SELECT DISTINCT p.resource, p.resource_id FROM p`, "t.l")},
  node AS (
    SELECT w.xr, w.xi, w.root, w.resource, w.resource_id, w.relation, bit_or(w.m) AS m
    FROM walk w GROUP BY w.xr, w.xi, w.root, w.resource, w.resource_id, w.relation
  ),
  held AS (
    SELECT p.n, w.root, bit_or(w.m) AS m
    FROM p JOIN node w ON w.xr = p.resource AND w.xi = p.resource_id
    WHERE EXISTS (${EACH_HOLDER("p.user_id", (holder) => `SELECT 1 FROM relationships g
                  WHERE g.app_id = $1 AND g.user_id = ${holder} AND g.resource = w.resource
                    AND g.resource_id = w.resource_id AND g.relation = w.relation AND ${PLAIN_GRANT("g")}`)})
    GROUP BY p.n, w.root
  )
  SELECT
    (SELECT json_agg(json_build_array(h.n, h.root, h.m)) FROM held h) AS held,
    (SELECT json_agg(json_build_array(u.user_id, ARRAY(SELECT a.role_id || coalesce(chr(10) || a.condition, '') FROM role_assignments a
                                                       WHERE a.app_id = $1 AND a.user_id = u.user_id)))
     FROM (SELECT DISTINCT p.user_id FROM p) u) AS roles`;

/** Both models' bits: the candidates' walk follows every rule of either model. */
const BOTH: Models = 3;

/** A candidate's relations on its instance, each with the models it is held in, and the user's roles. */
export interface HeldBoth {
  /** In the candidates' order: relation → models (bit 1 before, bit 2 after). */
  held: Map<string, Models>[];
  /** user → roles by assignments, each a role id, or a role id, a newline and its condition. */
  roles: Map<string, string[]>;
}

export const grantImpactStore = {
  /** At most `limit` instances with a grant of one of `pairs`. */
  async seeds(q: Queryable, appId: string, pairs: readonly RelationPair[], limit: number): Promise<ReachedInstance[]> {
    if (pairs.length === 0) return [];
    const { rows } = await q.query<ReachedInstance>(SEEDS_SQL, [appId, JSON.stringify(pairs), limit]);
    return rows;
  },

  /** At most `limit` rows (user, instance), possibly repeated, of holders of `targets` on `instances` under `rules`. */
  async candidates(
    q: Queryable,
    appId: string,
    instances: readonly ReachedInstance[],
    targets: readonly RelationPair[],
    rules: readonly InheritRule[],
    limit: number,
  ): Promise<Candidate[]> {
    if (instances.length === 0 || targets.length === 0) return [];
    const { rows } = await q.query<Candidate>(CANDIDATES_SQL, [
      appId,
      JSON.stringify(instances.map((x) => ({ resource: x.resource, resource_id: x.resourceId }))),
      JSON.stringify(targets.map((t) => ({ r: t.r, l: t.l, m: BOTH }))),
      JSON.stringify(rules.map((c) => ({ r: c.r, l: c.l, t: c.t, i: c.i, m: BOTH }))),
      limit,
    ]);
    return rows;
  },

  /** The relations `roots` each candidate holds on its instance under `rules`, per model, and the candidates' roles. */
  async held(q: Queryable, appId: string, candidates: readonly Candidate[], roots: readonly RootPair[], rules: readonly ModelRule[]): Promise<HeldBoth> {
    const held = candidates.map(() => new Map<string, Models>());
    if (candidates.length === 0) return { held, roles: new Map() };
    const { rows } = await q.query<{ held: [number, string, number][] | null; roles: [string, string[]][] | null }>(HELD_SQL, [
      appId,
      JSON.stringify(candidates.map((c) => ({ u: c.userId, r: c.resource, i: c.resourceId }))),
      JSON.stringify(roots),
      JSON.stringify(rules),
    ]);
    for (const [n, root, m] of rows[0]!.held ?? []) held[n - 1]!.set(root, m);
    return { held, roles: new Map(rows[0]!.roles ?? []) };
  },
};
