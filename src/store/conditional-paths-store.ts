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
 * its condition), following live rows with or without a condition. A node
 * of the walk is (k, root, resource, id, relation, conditions): `k` the
 * distinct instance and action of the batch it starts from (a batch asking
 * many users about one document walks it once), `root` the relation on the
 * instance, and the set of conditions met on its way (sorted, distinct: a
 * path through the same condition twice needs it once).
 *
 * The walk goes a level at a time, each level the nodes one hop further
 * (with the relations each gives within its instance, which add no hop),
 * and keeps a node only the first time it meets it: from the fewest hops,
 * whatever follows it a later meeting would reach is reached from the
 * first, with hops to spare. A recursive query with UNION can keep a node
 * once only without its depth in the row, and the depth is what bounds it;
 * so each level is one row of arrays (the level's nodes) beside the set of
 * nodes met so far (a jsonb object keyed by each node's text). In worlds
 * whose teams nest in cycles, a row per node and depth met each node again
 * at every depth up to the bound: about seven rows for each node kept.
 *
 * Then each question's user's (or every user's) live grants on the nodes
 * reached close the paths, probed once per user and node, whichever
 * questions reached it. The answer, per question: the distinct (root
 * relation, conditions) of paths with at least one condition, the fewest
 * conditions first. The domain evaluates them (any path whose conditions
 * all hold allows).
 *
 * Bounded, so hostile data (many conditional edges between the same nodes,
 * each condition different, multiplying the condition sets a node is
 * reached with) cannot explode it: the walk keeps at most
 * CONDITIONAL_PATH_LIMITS.walkRows nodes per distinct instance of the
 * statement (no level goes past it, and none follows once it is reached),
 * and each question gets at most CONDITIONAL_PATH_LIMITS.paths paths. A
 * path beyond either bound is not counted: the question is denied through
 * it (docs/limits.md).
 *
 * Every table is named with app_id = $1, so on Citus the statement is a
 * router query, the one kind in which Citus runs a recursive query.
 */
import type { Queryable } from "./db.js";
import { EACH_HOLDER } from "./all-users.js";
import { perApplication, REPLAYED, type ReadRows } from "./per-application.js";
import { MAX_HOPS, outwardHop } from "./outward-hop.js";
import { LIVE_GRANT } from "./relationships-store.js";

export const CONDITIONAL_PATH_LIMITS = {
  /** Nodes of the conditional walk kept per instance (and action) of a statement's questions. */
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

/**
 * The conditions of a path (a jsonb array of strings, sorted, distinct) with
 * `c` added when it is one.
 */
const withCondition = (conds: string, c: string) =>
  `CASE WHEN ${c} IS NULL OR ${conds} ? ${c} THEN ${conds} ELSE (SELECT jsonb_agg(x ORDER BY x) FROM (SELECT jsonb_array_elements_text(${conds}) UNION SELECT ${c}) AS u(x)) END`;

/** A node of the walk as the text the walk's `seen` set is keyed by. */
const keyOf = (n: string) => `(${n}.k, ${n}.root, ${n}.resource, ${n}.resource_id, ${n}.relation, ${n}.conds)::text`;

/**
 * Nodes `n` (k, root, resource, resource_id, relation, conds) and the nodes
 * each gives within its instance, by the catalog's rules with no link
 * (`within`: no hop, no condition).
 */
const andWithin = (n: string) => `
      SELECT ${n}.k, ${n}.root, ${n}.resource, ${n}.resource_id, ${n}.relation, ${n}.conds FROM ${n}
      UNION ALL
      SELECT ${n}.k, ${n}.root, ${n}.resource, ${n}.resource_id, wi.inherited, ${n}.conds
      FROM ${n} JOIN within wi ON wi.resource = ${n}.resource AND wi.relation = ${n}.relation`;

const conditionalPathsSql = (replayed: boolean) => `
  WITH RECURSIVE
  q AS (SELECT q.*, dense_rank() OVER (ORDER BY q.resource, q.resource_id, q.action) AS k
        FROM ROWS FROM (jsonb_to_recordset($2::jsonb) AS (u text, r text, i text, a text))
             WITH ORDINALITY AS q(user_id, resource, resource_id, action, n)),
  inst AS (SELECT DISTINCT q.k, q.resource, q.resource_id, q.action FROM q),
  within(resource, relation, inherited) AS (
    SELECT ci.resource, ci.relation, ci.inherited FROM catalog_inherits ci WHERE ci.app_id = $1 AND ci.through = ''
    UNION
    SELECT w.resource, w.relation, ci.inherited
    FROM within w JOIN catalog_inherits ci ON ci.app_id = $1 AND ci.resource = w.resource AND ci.relation = w.inherited AND ci.through = ''
  ),
  roots AS (
    SELECT i.k, cr.relation AS root, i.resource, i.resource_id, cr.relation, '[]'::jsonb AS conds
    FROM inst i JOIN catalog_relations cr ON cr.app_id = $1 AND cr.resource = i.resource
    WHERE i.action IS NULL OR i.action = ANY (cr.actions)
  ),
  first AS (SELECT DISTINCT ON (r.key) r.* FROM (SELECT r.*, ${keyOf("r")} AS key FROM (${andWithin("roots")}) r) r LIMIT $3),
  walk(depth, total, k, root, resource, resource_id, relation, conds, seen) AS (
    SELECT 0, count(*)::int, array_agg(f.k), array_agg(f.root), array_agg(f.resource), array_agg(f.resource_id), array_agg(f.relation), array_agg(f.conds),
           coalesce(jsonb_object_agg(f.key, 0), '{}')
    FROM first f
    UNION ALL
    SELECT lv.depth + 1, lv.total + nx.count, nx.k, nx.root, nx.resource, nx.resource_id, nx.relation, nx.conds, lv.seen || nx.seen
    FROM walk lv CROSS JOIN LATERAL (
      SELECT count(*)::int AS count, array_agg(x.k) AS k, array_agg(x.root) AS root, array_agg(x.resource) AS resource,
             array_agg(x.resource_id) AS resource_id, array_agg(x.relation) AS relation, array_agg(x.conds) AS conds,
             coalesce(jsonb_object_agg(x.key, 0), '{}') AS seen
      FROM (
        SELECT DISTINCT ON (y.key) y.* FROM (
          SELECT s.*, ${keyOf("s")} AS key FROM (
            WITH hop AS (
              SELECT w.k, w.root, e.resource, e.resource_id, e.relation, ${withCondition("w.conds", "e.condition")} AS conds
              FROM (SELECT u.*, lv.depth FROM unnest(lv.k, lv.root, lv.resource, lv.resource_id, lv.relation, lv.conds) AS u(k, root, resource, resource_id, relation, conds)) w
              CROSS JOIN LATERAL (${outwardHop(LIVE_GRANT, ", s.condition", "", false)}
              ) e(resource, resource_id, relation, hops, condition)
            )${andWithin("hop")}
          ) s
        ) y
        WHERE NOT lv.seen ? y.key
        LIMIT $3 - lv.total
      ) x
    ) nx
    WHERE lv.depth < ${MAX_HOPS} AND lv.total < $3 AND nx.count > 0
  ),
  capped AS MATERIALIZED (
    SELECT c.k, c.root, c.resource, c.resource_id, c.relation, c.conds
    FROM walk lv CROSS JOIN LATERAL unnest(lv.k, lv.root, lv.resource, lv.resource_id, lv.relation, lv.conds) AS c(k, root, resource, resource_id, relation, conds)
  ),
  nodes AS MATERIALIZED (SELECT DISTINCT c.k, c.resource, c.resource_id, c.relation FROM capped c),
  pairs AS MATERIALIZED (
    SELECT DISTINCT q.user_id, d.resource, d.resource_id, d.relation FROM nodes d JOIN q ON q.k = d.k
  ),
  holds AS MATERIALIZED (
    SELECT p.user_id, p.resource, p.resource_id, p.relation, g.condition
    FROM pairs p
    CROSS JOIN LATERAL (${EACH_HOLDER("p.user_id", (holder) => `SELECT g.condition FROM relationships g
      WHERE g.app_id = $1 AND g.user_id = ${holder} AND g.resource = p.resource AND g.resource_id = p.resource_id
        AND g.relation = p.relation AND ${LIVE_GRANT("g")}`)}) g
  ),
  found AS (
    SELECT DISTINCT q.n, c.root, ${withCondition("c.conds", "h.condition")} AS conds
    FROM q JOIN holds h ON h.user_id = q.user_id
    JOIN capped c ON c.k = q.k AND c.resource = h.resource AND c.resource_id = h.resource_id AND c.relation = h.relation
  ),
  kept AS (
    SELECT f.n, f.root, f.conds, row_number() OVER (PARTITION BY f.n ORDER BY jsonb_array_length(f.conds), f.root, f.conds) AS r
    FROM found f WHERE jsonb_array_length(f.conds) > 0
  ),
  paths AS (
    SELECT k.n, json_agg(json_build_array(k.root, k.conds) ORDER BY k.r) AS paths
    FROM kept k WHERE k.r <= ${CONDITIONAL_PATH_LIMITS.paths} GROUP BY k.n
  )
  SELECT
    (SELECT json_agg(coalesce(p.paths, '[]') ORDER BY q.n) FROM q LEFT JOIN paths p ON p.n = q.n) AS rows${replayed ? REPLAYED : ""}`;

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
