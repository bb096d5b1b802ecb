import { DECISION_FUNCTION } from "./decision-store.js";
import { EACH_HOLDER } from "./all-users.js";
import type { Queryable } from "./db.js";
import { checkFunction, PlannedStatement, type CheckFunction } from "./check-functions.js";
import { distinctKeys, distinctQuestions, KEYS_VALID, perApplication, REPLAYED } from "./per-application.js";
import { LIVE_GRANT, NOW_MS } from "./relationships-store.js";
import { GRAPH_CHECK_ENTRIES_SQL, GRAPH_CHECK_FLAT_SQL, GRAPH_CHECK_SQL, type GraphGroups } from "./graph-check-sql.js";
import { WHO_CAN_FUNCTION, WHO_CAN_LEAN_FUNCTION } from "./graph-store.js";

/** Whose facts on which instance: what a check, or a permissions question, asks the database. */
export interface CheckInput {
  appId: string;
  /** The SHA-256 of the calling key, verified live in the same statement. */
  keyHash: string;
  userId: string;
  resource: string;
  resourceId: string;
  /** The action asked (null or absent for a permissions question): the graph's walk starts from the relations implying it. */
  action?: string | null;
  /**
   * The graph's walk starts from these relations implying the action (and
   * the action's entries) instead of all of them: the answer's relations
   * are then those of these held. Absent: all of them.
   */
  roots?: readonly string[] | undefined;
}

export interface CheckRow {
  /** The calling key is live and belongs to the application. */
  keyValid: boolean;
  /** The application's model version (see model-store); null when the application is gone. */
  version: string | null;
  /** The user's relations on the instance, by grants with no condition. */
  relations: string[];
  /** The user's grants on the instance itself that hold only when their condition does. */
  conditional: ConditionalRelation[];
  /**
   * A conditional row could lie on a path to the instance (the graph's
   * statement; false for the direct one, which has no paths): when nothing
   * else allows, the conditional paths are asked (conditional-paths-store.ts).
   */
  pathsPossible: boolean;
  /** The user's roles in the application, by assignments with no condition. */
  roles: string[];
  /** The user's roles by assignments that hold only when their condition does. */
  conditionalRoles: ConditionalRole[];
  /** The statement's clock (ms since the epoch): a condition's `now`. */
  nowMs: number | undefined;
}

/** A role the user has by an assignment with a condition. */
export interface ConditionalRole {
  roleId: string;
  condition: string;
}

/** A relation the user holds by a grant with a condition. */
export interface ConditionalRelation {
  relation: string;
  condition: string;
}

export interface CheckRows {
  rows: CheckRow[];
  /**
   * With `replayed`: the standby's replay position (pg_last_wal_replay_lsn)
   * read by the statements, the lowest of them; null on a primary.
   */
  replayed: string | null;
}

/**
 * The per-user half of the checks of one application (any number of them,
 * of any of its keys), in one statement, so one round trip answers them all
 * from one snapshot: whether each calling key still holds, the version of
 * the application's model, and for each question the user's relations on
 * the very instance (the grants that have not expired by the statement's
 * clock: the user's own and the allUsers ones, a probe of the same index
 * for each of the two ids, see all-users.ts) and the user's roles, against which the domain evaluates
 * the rest from memory (see domain/access-model). Each part is an index
 * lookup. On a `relationships` table Postgres has never analyzed, the
 * planner may serve the probe of the user's grants on the instance with
 * relationships_user_relation_idx, whose resource_id comes after the
 * relation, reading every grant of the user on that resource type (9 ms
 * for a user with 100,000, against 0.015 ms by relationships_user_idx):
 * the plan is right once autoanalyze, or ANALYZE, has given it statistics.
 *
 * One application per statement, named as `app_id = $1` on every table: on
 * Citus the statement then goes whole to the one shard that holds the
 * application (api_keys is a reference table, present on every node). A
 * statement mixing applications would join shards, which Citus cannot plan.
 */
const checkSql = (replayed: boolean) => `
  SELECT
    ${KEYS_VALID} AS keys,
    (SELECT v.version::text FROM model_versions v WHERE v.app_id = $1) AS version,
    ${NOW_MS} AS now_ms,
    (SELECT json_agg(json_build_array(
        ARRAY(${EACH_HOLDER("q.user_id", (holder) => `SELECT g.relation || coalesce(chr(10) || g.condition, '') FROM relationships g
              WHERE g.app_id = $1 AND g.user_id = ${holder} AND g.resource = q.resource AND g.resource_id = q.resource_id
                AND ${LIVE_GRANT("g")}`)}),
        ARRAY(SELECT a.role_id || coalesce(chr(10) || a.condition, '') FROM role_assignments a
              WHERE a.app_id = $1 AND a.user_id = q.user_id)
      ) ORDER BY q.n)
     FROM ROWS FROM (jsonb_to_recordset($3::jsonb) AS (u text, r text, i text))
          WITH ORDINALITY AS q(user_id, resource, resource_id, n)) AS rows${replayed ? REPLAYED : ""}`;

/** The direct statement and the graph's, as functions planned once per connection (check-functions.ts). */
const CHECK_FUNCTION = checkFunction("portcullis_check_facts", "check", ["text", "text[]", "jsonb"], checkSql(false));
const GRAPH_CHECK_FUNCTION = checkFunction("portcullis_graph_check", "graph check", ["text", "text[]", "jsonb", "jsonb", "jsonb"], GRAPH_CHECK_SQL.plain);
const GRAPH_CHECK_FLAT_FUNCTION = checkFunction("portcullis_graph_check", "graph check with no inherits within an instance", ["text", "text[]", "jsonb", "jsonb", "jsonb"], GRAPH_CHECK_FLAT_SQL.plain);
const GRAPH_CHECK_ENTRIES_FUNCTION = checkFunction(
  "portcullis_graph_check",
  "graph check with requires and unless entries through links",
  ["text", "text[]", "jsonb", "jsonb", "jsonb", "jsonb"],
  GRAPH_CHECK_ENTRIES_SQL.plain,
);

/** This build's functions, which migrate() creates (installCheckFunctions): the check's, the decision's with requires and unless, and who can's (lean and full). */
export const CHECK_FUNCTIONS: readonly CheckFunction[] = [
  CHECK_FUNCTION,
  GRAPH_CHECK_FUNCTION,
  GRAPH_CHECK_FLAT_FUNCTION,
  GRAPH_CHECK_ENTRIES_FUNCTION,
  DECISION_FUNCTION,
  WHO_CAN_LEAN_FUNCTION,
  WHO_CAN_FUNCTION,
];

/** Each statement and its function (check-functions.ts). */
const STATEMENTS = { fn: CHECK_FUNCTION, inline: { plain: checkSql(false), replayed: checkSql(true) } };
const GRAPH_STATEMENTS = { fn: GRAPH_CHECK_FUNCTION, inline: GRAPH_CHECK_SQL };
/** For a catalog with no inherits rule within an instance: one probe of the rules a node less. */
const GRAPH_FLAT_STATEMENTS = { fn: GRAPH_CHECK_FLAT_FUNCTION, inline: GRAPH_CHECK_FLAT_SQL };
/** For a catalog whose quick rules have entries through links (AccessModel.quickRules): their steps too. */
const GRAPH_ENTRIES_STATEMENTS = { fn: GRAPH_CHECK_ENTRIES_FUNCTION, inline: GRAPH_CHECK_ENTRIES_SQL };

type QuestionRow = [relations: string[], roles: string[], pathsPossible?: boolean];
interface StatementRow {
  keys: boolean[] | null;
  version: string | null;
  /** The statement's clock (NOW_MS), once for all its questions. */
  now_ms: number | null;
  rows: QuestionRow[] | null;
  replayed?: string | null;
}

/**
 * The check's statements. The questions go as a JSON parameter and the
 * answers come back as JSON values: for a batch of dozens, encoding and
 * decoding that is a fraction of what text arrays in and a row per question
 * out cost the driver.
 *
 * The statement planned once is used until the database refuses it
 * (PlannedStatement, check-functions.ts) with feature_not_supported: Citus
 * cannot distribute the function's generic plan (its parameters are unknown
 * when it plans), and there the statement is sent inline, planned with its
 * values at every call. The call that met the refusal is answered by the
 * inline statement, as is a call to a database that lacks the function
 * (undefined_function: a read replica that has not yet replayed the
 * functions of this build's migrate(), or a build whose functions two newer
 * builds replaced).
 */
export class CheckStatements {
  /**
   * @param planOnce false: always the inline statement. For a caller inside
   * a transaction of its own, where a refusal of the function would abort
   * the transaction before the inline statement could answer.
   */
  constructor(planOnce = true) {
    this.state = { planOnce };
    const planned = (s: typeof STATEMENTS) => new PlannedStatement(s.fn, s.inline, this.state);
    this.direct = planned(STATEMENTS);
    this.graph = planned(GRAPH_STATEMENTS);
    this.graphFlat = planned(GRAPH_FLAT_STATEMENTS);
    this.graphEntries = planned(GRAPH_ENTRIES_STATEMENTS);
  }

  /** Shared by the three statements: a refusal of one function sends them all inline. */
  private readonly state: { planOnce: boolean };
  private readonly direct: PlannedStatement;
  private readonly graph: PlannedStatement;
  private readonly graphFlat: PlannedStatement;
  private readonly graphEntries: PlannedStatement;

  /** Whether the statement planned once is still used (false once a database refused it). */
  get plannedOnce(): boolean {
    return this.state.planOnce;
  }

  /**
   * Answers in input order. Checks of several applications take a statement
   * each, run side by side. With `replayed`, each statement also reads the
   * standby's replay position (for a read replica: see read-replicas.ts).
   */
  async check(
    q: Queryable,
    checks: readonly CheckInput[],
    options: { replayed?: boolean; graph?: (appId: string) => GraphGroups | undefined } = {},
  ): Promise<CheckRows> {
    return perApplication(checks, (appId, ofApp) => this.checkApplication(q, appId, ofApp, options.replayed === true, options.graph?.(appId)));
  }

  private async checkApplication(
    q: Queryable,
    appId: string,
    checks: readonly CheckInput[],
    replayed: boolean,
    graph: GraphGroups | undefined,
  ): Promise<CheckRows> {
    const { keys, keyOf } = distinctKeys(checks);
    // The same question asked twice in a batch (callers asking at once about one hot instance) is asked of the statement once.
    const { json, at } = distinctQuestions(
      graph !== undefined
        ? checks.map((c) => graphQuestion(c, c.action == null ? null : (graph.walks[`${c.resource}\0${c.action}`] ?? null)))
        : checks.map((c) => ({ u: c.userId, r: c.resource, i: c.resourceId })),
    );
    const row = graph !== undefined
      ? await (graph.entries.length > 0 ? this.graphEntries : graph.within ? this.graph : this.graphFlat).row<StatementRow>(q, replayed, [
          appId,
          keys,
          json,
          JSON.stringify(graph.pairs),
          JSON.stringify(graph.steps),
          ...(graph.entries.length > 0 ? [JSON.stringify(graph.entries)] : []),
        ])
      : await this.direct.row<StatementRow>(q, replayed, [appId, keys, json]);
    const keyRows = row.keys ?? [];
    const answers = row.rows;
    if (answers === null) return { rows: [], replayed: row.replayed ?? null };
    return {
      rows: checks.map((_, i) => {
        const [encoded, encodedRoles, pathsPossible] = answers[at[i]!]!;
        const { relations, conditional } = decodeRelations(encoded);
        const split = decodeRelations(encodedRoles);
        const conditionalRoles = split.conditional.map((c) => ({ roleId: c.relation, condition: c.condition }));
        return {
          keyValid: keyRows[keyOf[i]!] === true,
          version: row.version,
          relations,
          conditional,
          pathsPossible: pathsPossible === true,
          roles: split.relations,
          conditionalRoles,
          nowMs: row.now_ms ?? undefined,
        };
      }),
      replayed: row.replayed ?? null,
    };
  }
}

/** A question of the graph's statement: its roots narrowed (o) when the input names them. */
function graphQuestion(c: CheckInput, walks: string[] | null) {
  const a = c.action ?? null;
  if (c.roots === undefined) return { u: c.userId, r: c.resource, i: c.resourceId, a, x: walks };
  return { u: c.userId, r: c.resource, i: c.resourceId, a, x: walks === null ? c.roots : c.roots.concat(walks), o: true };
}

/**
 * The statement's relations (or roles) apart: a plain name, or a name, a
 * newline and the grant's (assignment's) condition (migration 013). A user
 * holding one both plainly and conditionally holds it plainly.
 */
function decodeRelations(encoded: string[]): { relations: string[]; conditional: ConditionalRelation[] } {
  // The common case, nothing conditional: the array as it came, nothing allocated.
  if (!encoded.some((r) => r.includes("\n"))) return { relations: encoded, conditional: NONE };
  const relations: string[] = [];
  const conditional: ConditionalRelation[] = [];
  for (const r of encoded) {
    const cut = r.indexOf("\n");
    if (cut < 0) relations.push(r);
    else conditional.push({ relation: r.slice(0, cut), condition: r.slice(cut + 1) });
  }
  return { relations, conditional: conditional.filter((c) => !relations.includes(c.relation)) };
}

const NONE: ConditionalRelation[] = [];
