/**
 * SQL for the part of a model plan's impact that comes through grants
 * (domain/grant-impact.ts): the instances a catalog change reaches, and the
 * users who hold a relation on them, as candidates for the check's own
 * statement under the model before and after. Every statement names one
 * application ($1) in every table it reads.
 */
import type { Queryable } from "./db.js";
import { MAX_HOPS } from "./graph-store.js";
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
 * branch is a run of an index on (app_id, resource, relation) or the
 * primary key's prefix, stopped at $3 rows.
 */
const SEEDS_SQL = `
  SELECT DISTINCT x.resource, x.resource_id AS "resourceId" FROM (
    (SELECT g.resource, g.resource_id
     FROM jsonb_to_recordset($2::jsonb) AS p(r text, l text)
     CROSS JOIN LATERAL (SELECT g.resource, g.resource_id FROM relationships g
                         WHERE g.app_id = $1 AND g.resource = p.r AND g.relation = p.l AND ${PLAIN_GRANT("g")}
                         LIMIT $3) g
     LIMIT $3)
    UNION ALL
    (SELECT s.resource, s.resource_id
     FROM jsonb_to_recordset($2::jsonb) AS p(r text, l text)
     CROSS JOIN LATERAL (SELECT s.resource, s.resource_id FROM subject_relationships s
                         WHERE s.app_id = $1 AND s.resource = p.r AND s.relation = p.l AND ${PLAIN_GRANT("s")}
                         LIMIT $3) s
     LIMIT $3)
  ) x
  LIMIT $3`;

/**
 * From each reached instance, the graph check's outward walk (graph-store's
 * outwardHop) over the rules of both models at once ($4), so that every
 * node either model's walk reaches is reached, within the same hop bound;
 * then the users (and the allUsers id) granted a node's relation with no
 * condition. The walk starts from the relations the change touches ($3).
 * Its rows stream into the LIMIT ($5): the walk stops once enough are read.
 */
const CANDIDATES_SQL = `
  WITH RECURSIVE
  x AS (SELECT * FROM jsonb_to_recordset($2::jsonb) AS x(resource text, "resourceId" text)),
  t AS (SELECT * FROM jsonb_to_recordset($3::jsonb) AS t(r text, l text)),
  ci AS (SELECT * FROM jsonb_to_recordset($4::jsonb) AS ci(r text, l text, t text, i text)),
  walk(xr, xi, resource, resource_id, relation, depth) AS (
    SELECT x.resource, x."resourceId", x.resource, x."resourceId", t.l, 0
    FROM x JOIN t ON t.r = x.resource
    UNION
    SELECT w.xr, w.xi, e.resource, e.resource_id, e.relation, w.depth + 1
    FROM walk w CROSS JOIN LATERAL (
      SELECT s.subject_resource, s.subject_id, s.subject_relation
      FROM subject_relationships s
      WHERE s.app_id = $1 AND s.resource = w.resource AND s.resource_id = w.resource_id AND s.relation = w.relation
        AND s.subject_relation <> '' AND ${PLAIN_GRANT("s")}
      UNION ALL
      SELECT s.subject_resource, s.subject_id, ci.i
      FROM ci
      JOIN subject_relationships s
        ON s.app_id = $1 AND s.resource = w.resource AND s.resource_id = w.resource_id AND s.relation = ci.t
       AND s.subject_relation = '' AND ${PLAIN_GRANT("s")}
      WHERE ci.r = w.resource AND ci.l = w.relation) e(resource, resource_id, relation)
    WHERE w.depth < ${MAX_HOPS}
  )
  SELECT w.xr AS resource, w.xi AS "resourceId", g.user_id AS "userId"
  FROM walk w
  JOIN relationships g
    ON g.app_id = $1 AND g.resource = w.resource AND g.resource_id = w.resource_id AND g.relation = w.relation AND ${PLAIN_GRANT("g")}
  LIMIT $5`;

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
    const { rows } = await q.query<Candidate>(CANDIDATES_SQL, [appId, JSON.stringify(instances), JSON.stringify(targets), JSON.stringify(rules), limit]);
    return rows;
  },
};
