/**
 * The rows a decision with `requires` and `unless` reads (API.md, "Round
 * 4 additions"; docs/exclusion.md): one statement per application for a
 * batch of questions, which walks outward from each question's instance
 * (from the relations it asks to decide, the union of its questions'), as
 * the check's walk does, and also into each `requires` and `unless` entry
 * of every relation it reaches (on the instance, or on each one linked by
 * the entry's `through`), each entry's walk starting again at depth 0: its
 * own bound of hops. Exclusion is that second walk; the domain cancels the
 * first with it (relation-decision.ts), and intersection is a walk that
 * must meet.
 *
 * It returns what the decision needs of the nodes it reached, every live
 * row with its condition (the domain evaluates them with each question's
 * facts): the grants of each node to subject sets (for a node reached below
 * the bound), the links its rules go through, and each question's user's
 * (and every user's) grants on each node. The walk's rows are read lazily
 * up to DECISION_LIMITS.walkRows per instance of the batch; a batch that
 * reaches the cap is answered as if nothing were held through its walks
 * (`truncated`), so a cut can deny but never allow.
 *
 * Every table is named with app_id = $1: on Citus a router query, the one
 * kind in which Citus runs a recursive query. The reads of each node's rows
 * are lateral subqueries fenced with OFFSET 0, so each stays one index
 * probe: joined flat, the planner read every subject set of the
 * application (100,000 rows for 50 questions) and hashed them.
 */
import type { Queryable } from "./db.js";
import { EACH_HOLDER } from "./all-users.js";
import { perApplication, REPLAYED, type ReadRows } from "./per-application.js";
import { checkFunction, PlannedStatement } from "./check-functions.js";
import { contextHop, contextOperatorHop, MAX_HOPS, operatorHop, outwardHop } from "./outward-hop.js";
import { LIVE_GRANT, NOW_MS } from "./relationships-store.js";

export const DECISION_LIMITS = {
  /** Rows of the walk read per instance of a statement's questions. */
  walkRows: 10_000,
} as const;

export interface DecisionInput {
  appId: string;
  userId: string;
  resource: string;
  resourceId: string;
  /**
   * The relations of the instance to decide: those the check's own walks
   * found the user may hold (a superset of what is held), so the walk starts
   * from no relation that cannot be.
   */
  roots: readonly string[];
  /** The question's contextual subject sets and links (contextual-grants.ts): steps the walk follows besides the stored ones. */
  contextual?: readonly ContextEdge[] | undefined;
}

/** A contextual grant to a subject set (sl the set's relation) or a link (sl ''): r:i#l held by sr:si#sl. */
export interface ContextEdge {
  r: string;
  i: string;
  l: string;
  sr: string;
  si: string;
  sl: string;
}

/** [resource, id, relation, subject resource, subject id, subject relation, condition] */
export type SetRow = [string, string, string, string, string, string, string | null];
/** [resource, id, link relation, linked resource, linked id, condition] */
export type LinkRow = [string, string, string, string, string, string | null];
/** [resource, id, relation, condition]: a grant of the node to the question's user, or to every user */
export type HeldRow = [string, string, string, string | null];

export interface DecisionRows {
  /** The walk reached DECISION_LIMITS.walkRows per instance: nothing may be taken as held through it. */
  truncated: boolean;
  /** The model version the statement read: the rules it followed are that version's. */
  version: string | null;
  nowMs: number;
  sets: SetRow[];
  links: LinkRow[];
  /** The question's user's (and every user's) grants on the nodes of its walk. */
  held: HeldRow[];
}

const decisionSql = (replayed: boolean) => `
  WITH RECURSIVE
  q AS (SELECT q.*, dense_rank() OVER (ORDER BY q.resource, q.resource_id) AS k
        FROM ROWS FROM (jsonb_to_recordset($2::jsonb) AS (u text, r text, i text, o text[]))
             WITH ORDINALITY AS q(user_id, resource, resource_id, roots, n)),
  extra AS (SELECT * FROM jsonb_to_recordset($4::jsonb) AS x(resource text, relation text, through text, target text, fresh boolean)),
  ctx AS (SELECT * FROM jsonb_to_recordset($5::jsonb) AS c(r text, i text, l text, sr text, si text, sl text)),
  walk(k, resource, resource_id, relation, depth) AS (
    SELECT DISTINCT q.k, q.resource, q.resource_id, root.relation, 0
    FROM q CROSS JOIN unnest(q.roots) AS root(relation)
    UNION
    SELECT w.k, e.resource, e.resource_id, e.relation, e.depth
    FROM walk w CROSS JOIN LATERAL (
      SELECT x.resource, x.resource_id, x.relation, w.depth + x.hops, ''
      FROM (${outwardHop(LIVE_GRANT)}${contextHop()}) x(resource, resource_id, relation, hops)
      UNION ALL${operatorHop(LIVE_GRANT)}${contextOperatorHop()}
      UNION ALL
      SELECT w.resource, w.resource_id, x.target, CASE WHEN x.fresh THEN 0 ELSE w.depth END, ''
      FROM extra x WHERE x.resource = w.resource AND x.relation = w.relation AND x.through = ''
      UNION ALL
      SELECT s.subject_resource, s.subject_id, x.target, CASE WHEN x.fresh THEN 0 ELSE w.depth + 1 END, ''
      FROM extra x
      JOIN subject_relationships s
        ON s.app_id = $1 AND s.resource = w.resource AND s.resource_id = w.resource_id AND s.relation = x.through
       AND s.subject_relation = '' AND ${LIVE_GRANT("s")}
      WHERE x.resource = w.resource AND x.relation = w.relation AND x.through <> '' AND (x.fresh OR w.depth < ${MAX_HOPS})
    ) e(resource, resource_id, relation, depth, operator)
  ),
  capped AS MATERIALIZED (SELECT * FROM walk LIMIT $3 + 1),
  nodes AS MATERIALIZED (
    SELECT c.k, c.resource, c.resource_id, c.relation, min(c.depth) AS depth
    FROM capped c GROUP BY c.k, c.resource, c.resource_id, c.relation
  ),
  distinct_nodes AS MATERIALIZED (
    SELECT d.resource, d.resource_id, d.relation, min(d.depth) AS depth
    FROM nodes d GROUP BY d.resource, d.resource_id, d.relation
  ),
  links AS (
    SELECT DISTINCT d.resource, d.resource_id, r.through
    FROM distinct_nodes d
    JOIN (SELECT ci.resource, ci.relation, ci.through FROM catalog_inherits ci WHERE ci.app_id = $1 AND ci.through <> ''
          UNION
          SELECT o.resource, o.relation, o.through FROM catalog_operators o WHERE o.app_id = $1 AND o.through <> ''
          UNION
          SELECT x.resource, x.relation, x.through FROM extra x WHERE x.through <> '') r
      ON r.resource = d.resource AND r.relation = d.relation
  )
  SELECT
    (SELECT count(*) > $3 FROM capped) AS truncated,
    (SELECT v.version::text FROM model_versions v WHERE v.app_id = $1) AS version,
    ${NOW_MS} AS now_ms,
    (SELECT coalesce(json_agg(json_build_array(d.resource, d.resource_id, d.relation, s.subject_resource, s.subject_id, s.subject_relation, s.condition)), '[]')
     FROM distinct_nodes d
     CROSS JOIN LATERAL (
       SELECT s.subject_resource, s.subject_id, s.subject_relation, s.condition FROM subject_relationships s
       WHERE s.app_id = $1 AND s.resource = d.resource AND s.resource_id = d.resource_id AND s.relation = d.relation
         AND s.subject_relation <> '' AND ${LIVE_GRANT("s")}
       OFFSET 0) s
     WHERE d.depth < ${MAX_HOPS}) AS sets,
    (SELECT coalesce(json_agg(json_build_array(l.resource, l.resource_id, l.through, s.subject_resource, s.subject_id, s.condition)), '[]')
     FROM links l
     CROSS JOIN LATERAL (
       SELECT s.subject_resource, s.subject_id, s.condition FROM subject_relationships s
       WHERE s.app_id = $1 AND s.resource = l.resource AND s.resource_id = l.resource_id AND s.relation = l.through
         AND s.subject_relation = '' AND ${LIVE_GRANT("s")}
       OFFSET 0) s) AS links,
    (SELECT json_agg(
        (SELECT coalesce(json_agg(json_build_array(d.resource, d.resource_id, d.relation, g.condition)), '[]')
         FROM nodes d
         CROSS JOIN LATERAL (${EACH_HOLDER("q.user_id", (holder) => `SELECT g.condition FROM relationships g
           WHERE g.app_id = $1 AND g.user_id = ${holder} AND g.resource = d.resource AND g.resource_id = d.resource_id
             AND g.relation = d.relation AND ${LIVE_GRANT("g")}`)}) g
         WHERE d.k = q.k)
      ORDER BY q.n)
     FROM q) AS held${replayed ? REPLAYED : ""}`;

const STATEMENTS = { plain: decisionSql(false), replayed: decisionSql(true) };

/** The statement as a function planned once per connection (check-functions.ts): planned at every call, its planning cost more than its run. */
export const DECISION_FUNCTION = checkFunction("portcullis_decision_rows", "decision rows", ["text", "jsonb", "bigint", "jsonb", "jsonb"], STATEMENTS.plain, [
  ["truncated", "boolean"],
  ["version", "text"],
  ["now_ms", "float8"],
  ["sets", "json"],
  ["links", "json"],
  ["held", "json"],
]);

interface StatementRow {
  truncated: boolean;
  version: string | null;
  now_ms: number;
  sets: SetRow[];
  links: LinkRow[];
  held: HeldRow[][] | null;
  replayed?: string | null;
}

/**
 * A rule to follow beyond the catalog's (a plan's catalog after its change:
 * grant-impact.ts): `fresh` for a `requires` or `unless` entry, which starts
 * its own bound; an `inherits` rule's step is a hop through a link and none
 * within the instance.
 */
export interface ExtraRule {
  resource: string;
  relation: string;
  through: string;
  target: string;
  fresh: boolean;
}

/** The decision's statement, planned once per connection where the database takes its function. */
export class DecisionStatements {
  private readonly statement: PlannedStatement;

  /**
   * @param planOnce false: always the inline statement (inside a transaction
   * of the caller's, where the function's refusal would abort it).
   * @param extra rules the walk follows beyond the catalog's.
   */
  constructor(planOnce = true, private readonly extra: readonly ExtraRule[] = []) {
    this.statement = new PlannedStatement(DECISION_FUNCTION, STATEMENTS, { planOnce });
  }

  /**
   * The rows each question's decision reads: one result per input, in input
   * order (the questions of one application share theirs but for `held`).
   */
  async rows(q: Queryable, inputs: readonly DecisionInput[], options: { replayed?: boolean } = {}): Promise<ReadRows<DecisionRows>> {
    // One statement per application and set of contextual edges: the walk probes every edge it carries at each row, so a batch's
    // questions share a statement only where they share their edges (most often all or none), and each walk probes at most 100.
    const grouped = inputs.map((input) => ({ appId: JSON.stringify([input.appId, input.contextual ?? []]), input }));
    return perApplication(grouped, async (group, ofGroup) => {
      const [appId, edges] = JSON.parse(group) as [string, ContextEdge[]];
      const ofApp = ofGroup.map((g) => g.input);
      const questions = ofApp.map((i) => ({ u: i.userId, r: i.resource, i: i.resourceId, o: i.roots }));
      const instances = new Set(ofApp.map((i) => JSON.stringify([i.resource, i.resourceId]))).size;
      const row = await this.statement.row<StatementRow>(q, options.replayed === true, [
        appId,
        JSON.stringify(questions),
        DECISION_LIMITS.walkRows * instances,
        JSON.stringify(this.extra),
        JSON.stringify(edges),
      ]);
      const held = row.held ?? [];
      return {
        rows: ofApp.map(
          (_, i): DecisionRows => ({ truncated: row.truncated, version: row.version, nowMs: row.now_ms, sets: row.sets, links: row.links, held: held[i] ?? [] }),
        ),
        replayed: row.replayed ?? null,
      };
    });
  }
}

/** The statement's text, for the SQL rules' test. */
export const DECISION_SQL = STATEMENTS.plain;
