import type { Queryable } from "./db.js";
import { EACH_HOLDER } from "./all-users.js";
import { contextHop, contextOperatorHop, operatorHop, outwardHop } from "./outward-hop.js";
import { distinctKeys, KEYS_VALID, perApplication, REPLAYED } from "./per-application.js";
import { LIVE_GRANT, NOW_MS } from "./relationships-store.js";
import type { ContextEdge } from "./decision-store.js";

/**
 * A grant on a path: [resource, resourceId, relation, userId ("" for a subject's), subject resource, subject id, subject relation,
 * created ms (null for a contextual grant, which is never stored), expires ms, condition, and true for one of the question's
 * contextual grants (absent for a stored one)].
 */
export type PathGrantRow = [string, string, string, string, string | null, string | null, string | null, number | null, number | null, string | null, true?];

/**
 * A question's contextual grant to a subject set (sl the set's relation) or
 * a link (sl ''), r:i#l held by sr:si#sl, as explain's walk follows it
 * beside the stored ones; `g` is the grant as its edges carry it.
 */
export interface ContextualStep extends ContextEdge {
  g: PathGrantRow;
}

/**
 * One edge of the outward walk: the node it leaves (resource, id, relation),
 * the grant it follows (null for a step within the instance, which follows
 * none and is no hop), the node it reaches, and its kind: "" for a step of
 * the relation's own (a subject set, a link, an inherits rule), "requires"
 * or "unless" for a step into one of those entries (docs/exclusion.md),
 * which starts its own bound of hops.
 */
export type WalkEdgeRow = [from: [string, string, string], grant: PathGrantRow | null, to: [string, string, string], kind: "" | "requires" | "unless"];

const grantRow = (g: string, subject: boolean) =>
  `jsonb_build_array(${g}.resource, ${g}.resource_id, ${g}.relation, ${subject ? "''" : `${g}.user_id`},
     ${subject ? `${g}.subject_resource, ${g}.subject_id, ${g}.subject_relation` : "NULL, NULL, NULL"},
     (extract(epoch FROM ${g}.created_at) * 1000)::bigint, (extract(epoch FROM ${g}.expires_at) * 1000)::bigint, ${g}.condition)`;

/**
 * Explain's walk, for the questions `q` (n, user_id, resource,
 * resource_id) of explain-store's statement, in two parts. `walk`: the nodes
 * reached from every relation of the resource, each at each depth it is
 * reached at (UNION drops a row already produced, so a cycle ends), and
 * `nodes`: each node once, at the least of those depths. Then `edges`: every
 * step out of each node, with the grant it follows, so the domain can find,
 * per relation, a path with the fewest hops. A node's steps are read once,
 * from its least depth (a step below the bound there is below it at every
 * depth the node is reached at), not once for each depth and each way in,
 * which in a graph with cycles multiplied the rows by both.
 * `EXPLAIN_EDGES(n)` and `EXPLAIN_GRANTS(n, user)` read them per question.
 * Edges with a condition are walked too: the domain follows one only where
 * its condition holds with the question's facts, as the check's conditional
 * phase counts it (conditional-paths-store.ts). The walk also goes into each
 * `requires` and `unless` entry of a relation it reaches (on the instance, or
 * through each link of the entry's `through`), starting again at depth 0, as
 * the decision's statement does (decision-store.ts): with them the domain
 * decides what is held. With `contextual`, it also follows the contextual
 * subject sets and links its questions share (`ctx`, from $4: contextHop and
 * contextOperatorHop).
 */
const explainWalk = (contextual: boolean) => `${
  contextual
    ? `
  ctx AS (SELECT * FROM jsonb_to_recordset($4::jsonb) AS c(r text, i text, l text, sr text, si text, sl text, g jsonb)),`
    : ""
}
  walk(n, resource, resource_id, relation, depth) AS (
    SELECT q.n, q.resource, q.resource_id, cr.relation, 0
    FROM q JOIN catalog_relations cr ON cr.app_id = $1 AND cr.resource = q.resource
    UNION
    SELECT w.n, e.resource, e.resource_id, e.relation, e.depth
    FROM walk w CROSS JOIN LATERAL (
      SELECT x.resource, x.resource_id, x.relation, w.depth + x.hops, ''
      FROM (${outwardHop(LIVE_GRANT)}${contextual ? contextHop() : ""}) x(resource, resource_id, relation, hops)
      UNION ALL${operatorHop(LIVE_GRANT)}${contextual ? contextOperatorHop() : ""}
    ) e(resource, resource_id, relation, depth, kind)
  ),
  nodes AS (
    SELECT w.n, w.resource, w.resource_id, w.relation, min(w.depth) AS depth
    FROM walk w GROUP BY w.n, w.resource, w.resource_id, w.relation
  ),
  edges AS (
    SELECT w.n, jsonb_build_array(jsonb_build_array(w.resource, w.resource_id, w.relation), e.grant_row,
                                  jsonb_build_array(e.resource, e.resource_id, e.relation), e.kind) AS edge
    FROM nodes w CROSS JOIN LATERAL (
      SELECT x.resource, x.resource_id, x.relation, x.hops, x.grant_row, ''
      FROM (${outwardHop(LIVE_GRANT, `, ${grantRow("s", true)}`, ", NULL::jsonb")}${contextual ? contextHop(", c.g") : ""}) x(resource, resource_id, relation, hops, grant_row)
      UNION ALL${operatorHop(LIVE_GRANT, `, ${grantRow("s", true)}`, ", NULL::jsonb")}${contextual ? contextOperatorHop(", c.g") : ""}
    ) e(resource, resource_id, relation, hops, grant_row, kind)
  )`;

export const EXPLAIN_EDGES = (n: string) => `
  (SELECT coalesce(jsonb_agg(DISTINCT x.edge), '[]') FROM edges x WHERE x.n = ${n})`;

/** The user's own grants on the walk's nodes, conditional ones included (explain evaluates those on its paths, as the check does). */
export const EXPLAIN_GRANTS = (n: string, user: string) => `
  (SELECT coalesce(jsonb_agg(${grantRow("g", false)}), '[]')
   FROM nodes d
   CROSS JOIN LATERAL (${EACH_HOLDER(user, (holder) => `SELECT g.* FROM relationships g
     WHERE g.app_id = $1 AND g.user_id = ${holder} AND g.resource = d.resource AND g.resource_id = d.resource_id AND g.relation = d.relation
       AND ${LIVE_GRANT("g")}`)}) g
   WHERE d.n = ${n})`;


export interface ExplainInput {
  appId: string;
  /** The SHA-256 of the calling key, verified live in the same statement. */
  keyHash: string;
  userId: string;
  resource: string;
  resourceId: string;
  action: string;
  tenantId: string | undefined;
  /** The question's contextual subject sets and links: steps its walk follows besides the stored ones (a statement's questions share theirs). */
  contextual?: readonly ContextualStep[] | undefined;
}

/** A relation of the resource and the actions it implies. */
export interface ExplainRelationRow {
  relation: string;
  actions: string[];
}

/** A role of the user in the question's scope, with its policies that hold resource:action. */
export interface ExplainRoleRow {
  roleId: string;
  name: string;
  tenantId: string | null;
  /** The assignment's condition (null: none). */
  condition: string | null;
  /** Each with its condition (null: none): the permission holds through it only where that holds. */
  policies: { policyId: string; name: string; condition: string | null }[];
}

export interface ExplainRow {
  keyValid: boolean;
  /** The model version the statement read. */
  version: string | null;
  /** The resource's actions; null when the catalog has no such resource. */
  actions: string[] | null;
  /** Every relation of the resource, in catalog order. */
  relations: ExplainRelationRow[];
  /** The walk from the instance outward: every edge, with its grant (none without hierarchy). */
  edges: WalkEdgeRow[];
  /** The user's own grants on the walk's nodes (the instance's relations among them). */
  grants: PathGrantRow[];
  roles: ExplainRoleRow[];
  /** The statement's clock (ms since the epoch): a condition's `now`. */
  nowMs: number;
}

export interface ExplainRows {
  rows: ExplainRow[];
  /** With `replayed`: the standby's replay position the statements read, the lowest; null on a primary. */
  replayed: string | null;
}

type QuestionRow = [
  actions: string[] | null,
  relations: [relation: string, actions: string[]][],
  edges: WalkEdgeRow[],
  grants: PathGrantRow[],
  roles: [roleId: string, name: string, tenantId: string | null, policies: [policyId: string, name: string, condition: string | null][], condition: string | null][],
  nowMs: number,
];

interface StatementRow {
  keys: boolean[] | null;
  version: string | null;
  rows: QuestionRow[] | null;
  replayed?: string | null;
}

/**
 * Everything explain shows for questions of one application (any number, of
 * any of its keys), in one statement, so from one snapshot: each key's
 * validity, and for each question the resource's actions, the user's grants
 * on the instance with what each relation implies (catalog_relations), and
 * the user's roles application-wide or of the tenant with the policies of
 * each that hold resource:action (role_policies and policy_permissions: what
 * role_permissions, which the check reads, is derived from in the same
 * transactions). Every table is named with `app_id = $1`, or joined on
 * app_id to one that is (docs/scale-out.md).
 *
 * The order is the answer's: grants by relation, roles by name (an
 * application-wide role before a tenant's of the same name), policies by name.
 */
const explainSql = (replayed: boolean, contextual: boolean) => `
  WITH RECURSIVE
  q AS (SELECT * FROM ROWS FROM (jsonb_to_recordset($3::jsonb) AS (u text, r text, i text, a text, t text))
             WITH ORDINALITY AS q(user_id, resource, resource_id, action, tenant_id, n)),
  ${explainWalk(contextual)}
  SELECT
    ${KEYS_VALID} AS keys,
    (SELECT v.version::text FROM model_versions v WHERE v.app_id = $1) AS version,
    (SELECT json_agg(json_build_array(
        (SELECT r.actions FROM catalog_resources r WHERE r.app_id = $1 AND r.resource = q.resource),
        (SELECT coalesce(json_agg(json_build_array(cr.relation, cr.actions) ORDER BY cr.position), '[]')
         FROM catalog_relations cr WHERE cr.app_id = $1 AND cr.resource = q.resource),
        ${EXPLAIN_EDGES("q.n")},
        ${EXPLAIN_GRANTS("q.n", "q.user_id")},
        (SELECT coalesce(json_agg(json_build_array(o.role_id, o.name, o.tenant_id,
                  (SELECT coalesce(json_agg(json_build_array(p.policy_id, p.name, p.condition) ORDER BY p.name, p.policy_id), '[]')
                   FROM role_policies rp
                   JOIN policy_permissions pp ON pp.app_id = rp.app_id AND pp.policy_id = rp.policy_id
                   JOIN policies p ON p.app_id = rp.app_id AND p.policy_id = rp.policy_id
                   WHERE rp.app_id = $1 AND rp.role_id = o.role_id AND pp.resource = q.resource AND pp.action = q.action),
                  a.condition)
                ORDER BY o.name, o.tenant_id NULLS FIRST, o.role_id), '[]')
         FROM role_assignments a
         JOIN roles o ON o.app_id = a.app_id AND o.role_id = a.role_id
         WHERE a.app_id = $1 AND a.user_id = q.user_id AND (o.tenant_id IS NULL OR o.tenant_id = q.tenant_id)),
        ${NOW_MS}
      ) ORDER BY q.n)
     FROM q) AS rows${replayed ? REPLAYED : ""}`;
/** The statements, by replayed and by contextual: questions with no contextual step read without the `ctx` steps. */
const STATEMENTS = {
  plain: [explainSql(false, false), explainSql(false, true)],
  replayed: [explainSql(true, false), explainSql(true, true)],
} as const;

/** The statement with the contextual steps, for the SQL rules' test. */
export const EXPLAIN_CONTEXTUAL_SQL = STATEMENTS.plain[1];

export const explainStore = {
  /**
   * Answers in input order: a statement per application, run side by side.
   * With `replayed`, each also reads the standby's replay position (see
   * read-replicas.ts).
   */
  async explain(q: Queryable, inputs: readonly ExplainInput[], options: { replayed?: boolean } = {}): Promise<ExplainRows> {
    // One statement per application and set of contextual steps: the walk scans every step it carries at each row (a list has no
    // index), so questions share a statement only where they share their steps (most often none), and each walk scans at most 100.
    const grouped = inputs.map((input) => ({ appId: JSON.stringify([input.appId, input.contextual ?? []]), input }));
    return perApplication(grouped, (group, ofGroup) => {
      const [appId, steps] = JSON.parse(group) as [string, ContextualStep[]];
      return explainApplication(q, appId, ofGroup.map((g) => g.input), steps, options.replayed === true);
    });
  },
};

async function explainApplication(q: Queryable, appId: string, inputs: readonly ExplainInput[], steps: readonly ContextualStep[], replayed: boolean): Promise<ExplainRows> {
  const { keys, keyOf } = distinctKeys(inputs);
  const questions = inputs.map((i) => ({ u: i.userId, r: i.resource, i: i.resourceId, a: i.action, t: i.tenantId ?? null }));
  const statement = STATEMENTS[replayed ? "replayed" : "plain"][steps.length > 0 ? 1 : 0];
  const params = [appId, keys, JSON.stringify(questions), ...(steps.length > 0 ? [JSON.stringify(steps)] : [])];
  const { rows } = await q.query<StatementRow>(statement, params);
  const row = rows[0]!;
  const keyRows = row.keys ?? [];
  return {
    rows: (row.rows ?? []).map(([actions, relations, edges, grants, roles, nowMs], i) => ({
      keyValid: keyRows[keyOf[i]!] === true,
      version: row.version,
      actions,
      relations: relations.map(([relation, implied]) => ({ relation, actions: implied })),
      edges,
      grants,
      roles: roles.map(([roleId, name, tenantId, policies, condition]) => ({
        roleId,
        name,
        tenantId,
        condition: condition ?? null,
        policies: policies.map(([policyId, policyName, policyCondition]) => ({ policyId, name: policyName, condition: policyCondition ?? null })),
      })),
      nowMs,
    })),
    replayed: row.replayed ?? null,
  };
}
