/**
 * The check's second phase (docs/conditions.md): the
 * paths to a question's instance that hold only under conditions, a
 * conditional membership, subject set, link or grant on a node on the way.
 *
 * The check's own statement (graphCheckSql) walks only rows with no
 * condition, with no CEL, as it would with no conditions; it also says whether
 * a conditional row could lie on a path (CONDITIONAL_PATHS_POSSIBLE). Only
 * when it could, and nothing else allowed, is this statement asked: one for
 * the batch, on the same kind of server as the check's (a primary, or a
 * standby that has replayed every commit before the batch).
 *
 * It walks outward from the instance as who can does (no meeting in the
 * middle: it is asked rarely, and must see every edge of a path to carry
 * its condition), following live rows with or without a condition, each
 * walk row carrying the set of conditions met on its way (sorted, distinct:
 * a path through the same condition twice needs it once). The walk depends
 * on the instance and the action only, so it runs once for each distinct
 * one of the batch (`k`): a batch asking many users about one document
 * walks it once. Then each question's user's (or every user's) live grants
 * on the nodes reached close the paths. The
 * answer, per question: the distinct (root relation, conditions) of paths
 * with at least one condition, the fewest conditions first. The domain
 * evaluates them (any path whose conditions all hold allows).
 *
 * Bounded, so hostile data (many conditional edges between the same nodes,
 * each condition different, multiplying the condition sets a node is
 * reached with) cannot explode it: the walk reads at most
 * CONDITIONAL_PATH_LIMITS.walkRows rows per distinct instance of the statement (the
 * recursive query is read lazily, so the LIMIT stops it), and each question
 * gets at most CONDITIONAL_PATH_LIMITS.paths paths. A path beyond either
 * bound is not counted: the question is denied through it (docs/limits.md).
 *
 * Every table is named with app_id = $1, so on Citus the statement is a
 * router query, the one kind in which Citus runs a recursive query.
 */
import type { Queryable } from "./db.js";
import { EACH_HOLDER } from "./all-users.js";
import { perApplication, REPLAYED, type ReadRows } from "./per-application.js";
import { outwardHop } from "./outward-hop.js";
import { LIVE_GRANT } from "./relationships-store.js";

export const CONDITIONAL_PATH_LIMITS = {
  /** Rows of the conditional walk read per instance (and action) of a statement's questions. */
  walkRows: 10_000,
  /** Paths (distinct root relation and conditions) returned per question. */
  paths: 64,
} as const;

export interface ConditionalPathInput {
  appId: string;
  userId: string;
  resource: string;
  resourceId: string;
  /** The action asked; null for a permissions question (every relation is a root). */
  action: string | null;
}

/** A path that holds where all its conditions do, from the relation it gives on the instance. */
export interface ConditionalPath {
  relation: string;
  conditions: string[];
}

/** The conditions of a walk row, with `c` added when it is one (sorted, distinct). */
const withCondition = (conds: string, c: string) =>
  `CASE WHEN ${c} IS NULL OR ${c} = ANY (${conds}) THEN ${conds} ELSE ARRAY(SELECT DISTINCT x FROM unnest(${conds} || ${c}) AS x ORDER BY 1) END`;

const conditionalPathsSql = (replayed: boolean) => `
  WITH RECURSIVE
  q AS (SELECT q.*, dense_rank() OVER (ORDER BY q.resource, q.resource_id, q.action) AS k
        FROM ROWS FROM (jsonb_to_recordset($2::jsonb) AS (u text, r text, i text, a text))
             WITH ORDINALITY AS q(user_id, resource, resource_id, action, n)),
  inst AS (SELECT DISTINCT q.k, q.resource, q.resource_id, q.action FROM q),
  walk(k, root, resource, resource_id, relation, depth, conds) AS (
    SELECT i.k, cr.relation, i.resource, i.resource_id, cr.relation, 0, '{}'::text[]
    FROM inst i JOIN catalog_relations cr ON cr.app_id = $1 AND cr.resource = i.resource
    WHERE i.action IS NULL OR i.action = ANY (cr.actions)
    UNION
    SELECT w.k, w.root, e.resource, e.resource_id, e.relation, w.depth + e.hops, ${withCondition("w.conds", "e.condition")}
    FROM walk w CROSS JOIN LATERAL (${outwardHop(LIVE_GRANT, ", s.condition", ", NULL::text")}
    ) e(resource, resource_id, relation, hops, condition)
  ),
  capped AS MATERIALIZED (SELECT * FROM walk LIMIT $3),
  nodes AS MATERIALIZED (SELECT DISTINCT c.k, c.resource, c.resource_id, c.relation FROM capped c),
  held AS MATERIALIZED (
    SELECT DISTINCT q.n, d.k, d.resource, d.resource_id, d.relation, g.condition
    FROM nodes d JOIN q ON q.k = d.k
    CROSS JOIN LATERAL (${EACH_HOLDER("q.user_id", (holder) => `SELECT g.condition FROM relationships g
      WHERE g.app_id = $1 AND g.user_id = ${holder} AND g.resource = d.resource AND g.resource_id = d.resource_id
        AND g.relation = d.relation AND ${LIVE_GRANT("g")}`)}) g
  ),
  found AS MATERIALIZED (
    SELECT DISTINCT h.n, c.root, ${withCondition("c.conds", "h.condition")} AS conds
    FROM capped c JOIN held h ON h.k = c.k AND h.resource = c.resource AND h.resource_id = c.resource_id AND h.relation = c.relation
  )
  SELECT
    (SELECT json_agg(
        (SELECT coalesce(json_agg(json_build_array(f.root, f.conds) ORDER BY cardinality(f.conds), f.root, f.conds), '[]')
         FROM (SELECT f.root, f.conds FROM found f WHERE f.n = q.n AND cardinality(f.conds) > 0
               ORDER BY cardinality(f.conds), f.root, f.conds LIMIT ${CONDITIONAL_PATH_LIMITS.paths}) f)
      ORDER BY q.n)
     FROM q) AS rows${replayed ? REPLAYED : ""}`;

const STATEMENTS = { plain: conditionalPathsSql(false), replayed: conditionalPathsSql(true) };

interface StatementRow {
  rows: [relation: string, conditions: string[]][][] | null;
  replayed?: string | null;
}

export const conditionalPathsStore = {
  /**
   * Each question's conditional paths, in input order: a statement per
   * application, side by side. With `replayed`, each also reads the
   * standby's replay position (read-replicas.ts).
   */
  paths(q: Queryable, inputs: readonly ConditionalPathInput[], options: { replayed?: boolean } = {}): Promise<ReadRows<ConditionalPath[]>> {
    return perApplication(inputs, async (appId, ofApp) => {
      const questions = ofApp.map((i) => ({ u: i.userId, r: i.resource, i: i.resourceId, a: i.action }));
      const sql = options.replayed === true ? STATEMENTS.replayed : STATEMENTS.plain;
      // The walk is the instance's, whoever asks: one per distinct instance and action.
      const instances = new Set(ofApp.map((i) => JSON.stringify([i.resource, i.resourceId, i.action]))).size;
      const { rows } = await q.query<StatementRow>(sql, [appId, JSON.stringify(questions), CONDITIONAL_PATH_LIMITS.walkRows * instances]);
      const row = rows[0]!;
      return {
        rows: (row.rows ?? []).map((paths) => paths.map(([relation, conditions]) => ({ relation, conditions }))),
        replayed: row.replayed ?? null,
      };
    });
  },
};

/** The statement's text, for the SQL rules' test. */
export const CONDITIONAL_PATHS_SQL = STATEMENTS.plain;
