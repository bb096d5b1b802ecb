/**
 * The walks of groups and hierarchy (API.md, "Groups and hierarchy"), each
 * one statement per application whatever the depth: a recursive query over
 * subject_relationships, the graph's edges, with the catalog's inheritance
 * rules (catalog_inherits) joined in.
 *
 * Two directions:
 * - from an instance outward (the check, explain, who can): the nodes
 *   (resource, id, relation) whose holders hold a relation on the instance:
 *   a grant to a subject set Y#r on node N makes (Y, r) a node; a rule "R
 *   inherits R' through L" and a link grant N --L--> Y make (Y, R') a node.
 *   Then the question is whether the user holds a grant on one of them (the
 *   check), or who does (who can). The walk never visits a user: a team of
 *   10,000 members costs the check one index probe.
 * - from a user inward (lookup): the nodes the user holds, from their own
 *   grants through the edges the other way, kept to the (resource,
 *   relation) pairs from which the asked one can still be reached (the
 *   domain computes those from the catalog), and one last hop into the
 *   asked type, paged in resource_id order.
 *
 * Depth is counted in hops (one subject set or one link) from the instance
 * and stops at LIMITS.hops (16): a node is expanded only below it. UNION
 * (not UNION ALL) drops a row already produced, so a cycle in the data (a
 * team inside itself, a folder its own ancestor) adds no row once each of
 * its nodes was reached at each depth: at most 17 rows per node, and the
 * walk ends. Who can's and lookup's walks go by levels instead (whoCanSql,
 * graphLookupSql), each node expanded once, at its least depth.
 *
 * Every table is named with app_id = $1, so on Citus the statement goes
 * whole to the shard of the application (a router query: the only kind in
 * which Citus runs a recursive query).
 */
import { ALL_USERS_SQL, ANY_ALL_USERS, EACH_HOLDER, HOLDERS_OF } from "./all-users.js";
import { checkFunction, PlannedStatement } from "./check-functions.js";
import { bindable } from "./bound-statements.js";
import type { Queryable } from "./db.js";
import { distinctKeys, distinctQuestions, KEYS_VALID, perApplication, REPLAYED } from "./per-application.js";
import { ACTIONS_AND_ROLE, type LookupInput, type LookupRow } from "./lookup-store.js";
import { CONDITIONAL_ROLE, lookupPage, readThroughPaths, whoCanPage, withPathCandidates, type ThroughPaths } from "./conditional-candidates.js";
import { andExtra, NO_EXTRA, PAGE_CTES, PAGE_OF_Q, type PageExtra, type Probe } from "./keyset-pages.js";
import { LIVE_GRANT, PLAIN_GRANT } from "./relationships-store.js";
import { DENSE, denseCtes, denseIds, denseSources, inwardHop, type DenseSettings } from "./dense-pages.js";
import { MAX_HOPS, outwardHop } from "./outward-hop.js";
import { CONDITIONAL_EDGES, type InwardStep } from "./graph-check-sql.js";
import { LeanOrFull, plainOnly } from "./plain-only.js";

export type { GraphGroups, InwardStep } from "./graph-check-sql.js";


// ------------------------------------------------------------------ pages

/**
 * Which rows a page's statement follows and reads: PLAIN_GRANT for the plain
 * page (with no condition), LIVE_GRANT for the page through conditional
 * paths (conditional-candidates.ts, withPathCandidates).
 */
export type Grants = (alias: string) => string;

// ------------------------------------------------------------------ who can

export interface WhoCanInput {
  appId: string;
  keyHash: string;
  resource: string;
  resourceId: string;
  action: string;
  tenantId: string | undefined;
  /** The page starts after this user id ("" for the first page). */
  after: string;
  /** Ids to read: the page size plus one. */
  limit: number;
}

export interface WhoCanRow {
  keyValid: boolean;
  /** The model version the statement read. */
  version: string | null;
  /** The resource's actions; null when the catalog has no such resource. */
  actions: string[] | null;
  userIds: string[];
  /** A node the walk reached has a live allUsers grant with no condition: every user may. */
  allUsers: boolean;
  /** A conditional row could put users on a path the walk did not follow: ask whoCanThroughPaths. */
  pathsPossible: boolean;
  /**
   * Every user may be allowed under conditions (ALL_USERS_PATHS_POSSIBLE):
   * ask the allUsers id's conditional paths (Checker.everyoneWays).
   * Undefined from the statement through paths.
   */
  allUsersPathsPossible?: boolean;
}

/**
 * Who can's sources (PAGE_CTES), read in user_id order: the holders of a
 * node (kind 0: a = resource, b = id, c = relation; relationships' primary
 * key) or the users of a role (kind 1: a = the role; role_assignments').
 * An allUsers grant's row (user_id '', all-users.ts) is never an id of a
 * page: every page starts after a cursor that is '' or a user id, and ''
 * is after none of them; the statement answers it apart (ALL_USERS_HELD).
 * Roles are read alike in both statements: a conditional assignment is a
 * candidate of the plain page already (whoCanPage).
 */
const holderIds =
  (grants: Grants): Probe =>
  (limit, bounded, gate) => `
      (SELECT g.user_id FROM relationships g
       WHERE p.kind = 0${gate} AND g.app_id = $1 AND g.resource = p.a AND g.resource_id = p.b AND g.relation = p.c
         AND g.user_id > p.after${bounded ? " AND g.user_id <= p.upto" : ""} AND ${grants("g")}
       ORDER BY g.user_id LIMIT ${limit})
      UNION ALL
      (SELECT a.user_id FROM role_assignments a
       WHERE p.kind = 1${gate} AND a.app_id = $1 AND a.role_id = p.a AND a.condition IS NULL
         AND a.user_id > p.after${bounded ? " AND a.user_id <= p.upto" : ""}
       ORDER BY a.user_id LIMIT ${limit})`;

/**
 * Whether a node of question q's walk has a live allUsers grant with no
 * condition (one probe of relationships_user_idx a node): then every user
 * may, and who can says so beside the ids it lists (API.md, "Everyone").
 * Read by the plain statement only: neither a conditional allUsers grant
 * nor one reached through a conditional path sets it; those are who can's
 * `allUsersConditions` (ALL_USERS_PATHS_POSSIBLE).
 */
const ALL_USERS_HELD = `EXISTS (SELECT 1 FROM walk w
                JOIN relationships g ON g.app_id = $1 AND g.user_id = ${ALL_USERS_SQL} AND g.resource = w.resource
                 AND g.resource_id = w.resource_id AND g.relation = w.relation AND ${PLAIN_GRANT("g")}
                WHERE w.n = q.n)`;

/**
 * Whether every user may be allowed under conditions: the application has a live
 * allUsers grant with a condition (a probe of relationships_conditional_user_idx),
 * or a conditional subject set or link (CONDITIONAL_EDGES) and an allUsers
 * grant at all, which could lie behind it. Both name no row of the query,
 * so they are probed once a statement. False in most applications; when
 * true, who can asks the conditional paths of the allUsers id.
 */
const ALL_USERS_PATHS_POSSIBLE = `(EXISTS (SELECT 1 FROM relationships g
                    WHERE g.app_id = $1 AND g.user_id = ${ALL_USERS_SQL} AND g.condition IS NOT NULL AND ${LIVE_GRANT("g")})
         OR (${CONDITIONAL_EDGES} AND ${ANY_ALL_USERS}))`;

/**
 * Whether users could be reachable only through a path with a conditional
 * row, which the plain walk does not follow: the application has a
 * conditional edge (CONDITIONAL_EDGES), or a live conditional grant of a
 * user anywhere but on the instance under a relation implying the action
 * (those are candidates of the plain page already: whoCanPage). A
 * conditional allUsers grant does not count: it lists no user. A probe of
 * relationships_conditional_user_idx (migration 017), which holds only the
 * conditional rows: an application with none probes two empty ranges.
 */
const WHO_CAN_PATHS_POSSIBLE = `(${CONDITIONAL_EDGES}
         OR EXISTS (SELECT 1 FROM relationships g
                    WHERE g.app_id = $1 AND g.user_id <> ${ALL_USERS_SQL} AND g.condition IS NOT NULL AND ${LIVE_GRANT("g")}
                      AND NOT (g.resource = q.resource AND g.resource_id = q.resource_id
                               AND g.relation IN (SELECT cr.relation FROM catalog_relations cr
                                                  WHERE cr.app_id = $1 AND cr.resource = q.resource AND q.action = ANY (cr.actions)))))`;

const WHO_CAN_PLAIN_ONLY = plainOnly(true);
/** The actions of question q's resource; null when the catalog has no such resource. */
const RESOURCE_ACTIONS = "(SELECT r.actions FROM catalog_resources r WHERE r.app_id = $1 AND r.resource = q.resource)";
const LOOKUP_PLAIN_ONLY = plainOnly(false);

/** The steps within an instance from the nodes of `c`, a recursive CTE's own name (hops 0: API.md, "Relations within an instance"). */
const WITHIN_STEP = (c: string) => `
          SELECT ${c}.resource, ${c}.resource_id, ci.inherited FROM ${c}
          JOIN catalog_inherits ci ON ci.app_id = $1 AND ci.resource = ${c}.resource AND ci.relation = ${c}.relation AND ci.through = ''`;

/**
 * Who can, a page per question: the outward walk from the instance (every
 * relation implying the action), by levels (`lv`): a row per question and
 * depth holding that level's nodes as arrays, the one-hop steps from the
 * level before (below the bound) closed under the steps within an
 * instance, less the nodes of every earlier level (`seen_*`). A node on a
 * cycle is then expanded once, at its least depth, not once at each depth
 * up to the bound; `walk` is every level's nodes. Its sources of holders: each node walked,
 * and each role in scope that holds resource:action (role_permissions);
 * the page from them as PAGE_CTES reads it; whether an allUsers grant
 * on a node walked lets every user; WHO_CAN_PATHS_POSSIBLE; and
 * ALL_USERS_PATHS_POSSIBLE.
 *
 * Through conditional paths (`grants` LIVE_GRANT), the same walk and
 * sources along and of live rows with or without a condition, the page
 * merged with the plain one (withPathCandidates): asked only when the plain
 * statement's flag is set.
 */
export const whoCanSql = (replayed: boolean, grants: Grants, x: PageExtra = NO_EXTRA, lean = false) => `
  WITH RECURSIVE
  q AS (SELECT * FROM ROWS FROM (jsonb_to_recordset($3::jsonb) AS (r text, i text, a text, t text, c text, l int, p text[]${x.columns}))
             WITH ORDINALITY AS q(resource, resource_id, action, tenant_id, after, lim, prior${x.names}, n)),${x.ctes}
  lv(n, depth, rs, ids, rels, seen_r, seen_i, seen_l) AS (
    SELECT q.n, 0, z.rs, z.ids, z.rels, z.rs, z.ids, z.rels
    FROM q CROSS JOIN LATERAL (
      SELECT array_agg(c.resource) AS rs, array_agg(c.resource_id) AS ids, array_agg(c.relation) AS rels FROM (
        WITH RECURSIVE c(resource, resource_id, relation) AS (
          SELECT q.resource, q.resource_id, cr.relation FROM catalog_relations cr
          WHERE cr.app_id = $1 AND cr.resource = q.resource AND q.action = ANY (cr.actions)
          UNION${WITHIN_STEP("c")}
        )
        SELECT * FROM c) c) z
    WHERE z.rs IS NOT NULL
    UNION ALL
    SELECT l.n, l.depth + 1, x.rs, x.ids, x.rels, l.seen_r || x.rs, l.seen_i || x.ids, l.seen_l || x.rels
    FROM lv l CROSS JOIN LATERAL (
      SELECT array_agg(z.resource) AS rs, array_agg(z.resource_id) AS ids, array_agg(z.relation) AS rels FROM (
        WITH RECURSIVE z(resource, resource_id, relation) AS (
          SELECT e.resource, e.resource_id, e.relation
          FROM unnest(l.rs, l.ids, l.rels) AS f(resource, resource_id, relation)
          CROSS JOIN LATERAL (SELECT l.n, f.resource, f.resource_id, f.relation, l.depth) AS w(n, resource, resource_id, relation, depth)
          CROSS JOIN LATERAL (${outwardHop(grants, "", "", false)}${x.hops}) e(resource, resource_id, relation, hops)
          UNION${WITHIN_STEP("z")}
        )
        SELECT * FROM z EXCEPT SELECT * FROM unnest(l.seen_r, l.seen_i, l.seen_l)) z) x
    WHERE x.rs IS NOT NULL
  ),
  walk(n, resource, resource_id, relation) AS (
    SELECT l.n, f.resource, f.resource_id, f.relation FROM lv l CROSS JOIN LATERAL unnest(l.rs, l.ids, l.rels) AS f(resource, resource_id, relation)
  ),
  src AS (
    SELECT DISTINCT q.n, q.lim, q.after, 0 AS kind, w.resource AS a, w.resource_id AS b, w.relation AS c, '' AS res, '' AS rel
    FROM q JOIN walk w ON w.n = q.n
    UNION
    SELECT q.n, q.lim, q.after, 1, p.role_id, '', '', '', ''
    FROM q JOIN role_permissions p ON p.app_id = $1 AND p.resource = q.resource AND p.action = q.action
     AND (p.tenant_id IS NULL OR p.tenant_id = q.tenant_id) AND p.conditions IS NULL${x.sources}
  ),${PAGE_CTES(andExtra(holderIds(grants), x))}
  SELECT
    ${KEYS_VALID} AS keys,
    (SELECT v.version::text FROM model_versions v WHERE v.app_id = $1) AS version,
    (SELECT json_agg(${
      grants !== PLAIN_GRANT
        ? withPathCandidates(PAGE_OF_Q)
        : lean
          ? `json_build_array(${RESOURCE_ACTIONS}, ${PAGE_OF_Q}, false, false, false)`
          : `json_build_array(
        ${RESOURCE_ACTIONS},
        ${whoCanPage(PAGE_OF_Q)},
        ${ALL_USERS_HELD},
        ${WHO_CAN_PATHS_POSSIBLE},
        ${ALL_USERS_PATHS_POSSIBLE}
      )`
    } ORDER BY q.n)
     FROM q) AS rows${grants === PLAIN_GRANT ? `,
    ${WHO_CAN_PLAIN_ONLY} AS plain_only` : ""}${replayed ? REPLAYED : ""}`;

const WHO_CAN = { plain: whoCanSql(false, PLAIN_GRANT), replayed: whoCanSql(true, PLAIN_GRANT) };
const WHO_CAN_LEAN = { plain: whoCanSql(false, PLAIN_GRANT, NO_EXTRA, true), replayed: whoCanSql(true, PLAIN_GRANT, NO_EXTRA, true) };
const WHO_CAN_COLUMNS: readonly (readonly [string, string])[] = [
  ["keys", "json"],
  ["version", "text"],
  ["rows", "json"],
  ["plain_only", "boolean"],
];

/**
 * Who can's statement as a function planned once per connection
 * (check-functions.ts), as the check's is. Sent as a prepared statement,
 * Postgres planned it with its values on every call: its 12,800 characters
 * took 2.1 ms to plan beside 1.5 ms to run (a document viewed by a team of
 * 300; 3.8 ms a call, and 1.3-1.5 ms with the plan kept). Its values are
 * the application and a JSON array, so the one generic plan is the plan for
 * every call. migrate() creates it with the check's (CHECK_FUNCTIONS); where
 * a database refuses it (Citus), the inline statement goes instead.
 */
export const WHO_CAN_FUNCTION = checkFunction("portcullis_who_can", "who can", ["text", "text[]", "jsonb"], WHO_CAN.plain, WHO_CAN_COLUMNS);
/**
 * Who can's lean statement (whoCanSql's `lean`), for the applications
 * WHO_CAN_PLAIN_ONLY holds for, most of them: the plain page and nothing
 * beside it. Where each call is planned (Citus: the worker plans the shard
 * query at every call, docs/scale-out.md) it plans less; where its plan is
 * kept (one Postgres) it runs fewer probes (docs/performance.md).
 */
export const WHO_CAN_LEAN_FUNCTION = checkFunction("portcullis_who_can_lean", "who can, plain only", ["text", "text[]", "jsonb"], WHO_CAN_LEAN.plain, WHO_CAN_COLUMNS);
const WHO_CAN_PLANNED = { planOnce: true };
const WHO_CAN_STATEMENT = new PlannedStatement(WHO_CAN_FUNCTION, WHO_CAN, WHO_CAN_PLANNED);
const WHO_CAN_LEAN_STATEMENT = new PlannedStatement(WHO_CAN_LEAN_FUNCTION, WHO_CAN_LEAN, WHO_CAN_PLANNED);

const WHO_CAN_LEAN_OR_FULL = new LeanOrFull();
const LOOKUP_LEAN_OR_FULL = new LeanOrFull();
const WHO_CAN_THROUGH_PATHS = bindable({ plain: whoCanSql(false, LIVE_GRANT), replayed: whoCanSql(true, LIVE_GRANT) });

// ------------------------------------------------------------------ lookup


export interface GraphLookupInput extends LookupInput {
  /** The relations of `resource` that imply `action`: the answers. */
  answers: string[];
  /**
   * The catalog's edges between the (resource, relation) pairs from which
   * an answer can be reached in one hop or more, and into the answers
   * (AccessModel.inward); their origins are those pairs.
   */
  steps: InwardStep[];
  last: InwardStep[];
  /** Read also which answer relations reach each id (REACHED_BY): where the catalog has `requires` or `unless`. */
  reach?: boolean | undefined;
}

export type GraphLookupRow = LookupRow & {
  /** With `reach`: the answer relations through which each id of the plain page is reached. */
  reachedBy?: Readonly<Record<string, string[]>> | undefined;
};

/**
 * Lookup's sources (PAGE_CTES), read in resource_id order: the user's own
 * grants of a relation, and the allUsers ones (kind 0: a = the user, or ''
 * for allUsers: all-users.ts;
 * relationships_user_relation_idx) or the grants held by one subject (kind
 * 1: a, b, c = the subject; subject_relationships_subject_idx), of `res`
 * and `rel`.
 */
const sourceIds =
  (grants: Grants): Probe =>
  (limit, bounded, gate) => `
      (SELECT g.resource_id FROM relationships g
       WHERE p.kind = 0${gate} AND g.app_id = $1 AND g.user_id = p.a AND g.resource = p.res AND g.relation = p.rel
         AND g.resource_id > p.after${bounded ? " AND g.resource_id <= p.upto" : ""} AND ${grants("g")}
       ORDER BY g.resource_id LIMIT ${limit})
      UNION ALL
      (SELECT s.resource_id FROM subject_relationships s
       WHERE p.kind = 1${gate} AND s.app_id = $1 AND s.subject_resource = p.a AND s.subject_id = p.b
         AND s.subject_relation = p.c AND s.resource = p.res AND s.relation = p.rel
         AND s.resource_id > p.after${bounded ? " AND s.resource_id <= p.upto" : ""} AND ${grants("s")}
       ORDER BY s.resource_id LIMIT ${limit})`;

/**
 * Whether instances could be reachable only through a path with a
 * conditional row, which the plain walk does not follow: the application
 * has a conditional edge (CONDITIONAL_EDGES), or the user, or every user,
 * has a live conditional grant on a pair a path to an answer can start
 * from (`pairs`; a conditional grant of an answer relation on the type
 * itself is a candidate of the plain page already: lookupPage). A probe of
 * relationships_conditional_user_idx (migration 017) per pair and holder,
 * each an empty range for a user with no conditional grant.
 */
const LOOKUP_PATHS_POSSIBLE = `(${CONDITIONAL_EDGES}
         OR EXISTS (SELECT 1 FROM pairs p
                    WHERE p.n = q.n
                      AND EXISTS (${EACH_HOLDER("q.user_id", (holder) => `SELECT 1 FROM relationships g
                                  WHERE g.app_id = $1 AND g.user_id = ${holder} AND g.resource = p.resource AND g.relation = p.relation
                                    AND g.condition IS NOT NULL AND ${LIVE_GRANT("g")}`)})))`;

/**
 * For each id of question q's plain page, the answer relations through
 * which the walk reached it (`g` of each source, PAGE_CTES: the relation
 * of the user's own grant, or the one the last step gives): an object from
 * id to relations. Complete: an id of the page is among the ids `found`
 * read of every source that holds it (each source's first `lim` ids up to
 * the bound), so every source that reaches it is named.
 */
const REACHED_BY = `(SELECT coalesce(json_object_agg(x.id, x.gs), '{}') FROM (
          SELECT f.id, array_agg(DISTINCT k.g) AS gs
          FROM found f
          JOIN counted k ON k.n = q.n AND k.sid = f.sid AND k.m = f.m
          JOIN bound b ON b.n = q.n AND b.upto = f.upto
          WHERE f.id = ANY (${PAGE_OF_Q})
          GROUP BY f.id) x)`;

/**
 * Lookup through the graph, a page per question.
 *
 * The walk, by levels as who can's (`lv`, each node once, at its least
 * depth): the user's own grants on the pairs the edges start from (and
 * the allUsers grants there: every user holds those), then
 * inward along the catalog's edges between those pairs (`steps`, from the
 * model of the version the statement reads: AccessModel.inward): a node
 * held makes held every grant to it as a subject set, and every instance
 * linking to it through a link whose rule inherits the node's relation. Each edge is one
 * probe of subject_relationships_subject_idx with the subject and the
 * target's resource and relation, so only what the walk keeps is read (a
 * folder's 100 documents are not read to be dropped), below the hop bound.
 * The probes are lateral subqueries fenced with OFFSET 0, so that they
 * stay whole: joined flat, the planner probed by the subject alone and
 * filtered the target after (a folder's 100 links read to keep none).
 *
 * The sources of answers: the user's own grants of an answer relation and
 * the allUsers ones (a source each), and for each node walked, each edge of `last` from its pair: the grants of an
 * answer relation to it as a subject set, or the links to it whose rule
 * gives an answer relation. Each is a run of ids in resource_id order in an
 * index. Many sources through nodes of one kind are first tried as one, by
 * reading their type's edges in id order, and many nodes of a level are
 * stepped from the same way (dense-pages.ts: denseCtes, inwardHop).
 *
 * The page from the sources as PAGE_CTES reads it, and
 * LOOKUP_PATHS_POSSIBLE. Through conditional paths (`grants` LIVE_GRANT),
 * the same walk and sources along and of live rows with or without a
 * condition, the page merged with the plain one (withPathCandidates):
 * asked only when the plain statement's flag is set.
 */
export const graphLookupSql = (replayed: boolean, grants: Grants, x: PageExtra = NO_EXTRA, reach = false, dense: DenseSettings = DENSE, lean = false) => `
  WITH RECURSIVE
  q AS (SELECT * FROM ROWS FROM (jsonb_to_recordset($3::jsonb) AS (u text, r text, a text, t text, c text, l int, ans text[], st jsonb, ls jsonb, p text[]${x.columns}))
             WITH ORDINALITY AS q(user_id, resource, action, tenant_id, after, lim, answers, steps, last, prior${x.names}, n)),${x.ctes}
  pairs AS (SELECT DISTINCT q.n, e.fr AS resource, e.fl AS relation FROM q CROSS JOIN LATERAL jsonb_to_recordset(q.steps || q.last) AS e(fr text, fl text)),
  steps AS (SELECT q.n, t.* FROM q CROSS JOIN LATERAL jsonb_to_recordset(q.steps) AS t(fr text, fl text, sr text, r text, p text, g text)),
  lv(n, depth, rs, ids, rels, seen_r, seen_i, seen_l) AS (
    SELECT b.n, 0, array_agg(b.resource), array_agg(b.resource_id), array_agg(b.relation),
           array_agg(b.resource), array_agg(b.resource_id), array_agg(b.relation)
    FROM (
      SELECT DISTINCT p.n, p.resource, e.resource_id, p.relation, 0
      FROM pairs p JOIN q ON q.n = p.n
      CROSS JOIN ${HOLDERS_OF("q.user_id")}
      CROSS JOIN LATERAL (
        SELECT g.resource_id FROM relationships g
        WHERE g.app_id = $1 AND g.user_id = h.user_id AND g.resource = p.resource AND g.relation = p.relation AND ${grants("g")}
        OFFSET 0) e${x.start}) AS b(n, resource, resource_id, relation, depth)
    GROUP BY b.n
    UNION ALL
    SELECT l.n, l.depth + 1, x.rs, x.ids, x.rels, l.seen_r || x.rs, l.seen_i || x.ids, l.seen_l || x.rels
    FROM lv l CROSS JOIN LATERAL (
      SELECT array_agg(z.resource) AS rs, array_agg(z.resource_id) AS ids, array_agg(z.relation) AS rels FROM (
${inwardHop(grants, dense)}
        EXCEPT SELECT * FROM unnest(l.seen_r, l.seen_i, l.seen_l)) AS z(resource, resource_id, relation)) x
    WHERE x.rs IS NOT NULL AND l.depth < ${MAX_HOPS - 1}
  ),
  walk(n, resource, resource_id, relation) AS (
    SELECT l.n, f.resource, f.resource_id, f.relation FROM lv l CROSS JOIN LATERAL unnest(l.rs, l.ids, l.rels) AS f(resource, resource_id, relation)
  ),${denseCtes(grants, reach, dense)}
  src AS (
    SELECT q.n, q.lim, q.after, 0 AS kind, h.user_id AS a, '' AS b, '' AS c, q.resource AS res, ans.relation AS rel${reach ? ", ans.relation AS g" : ""}
    FROM q CROSS JOIN unnest(q.answers) AS ans(relation) CROSS JOIN ${HOLDERS_OF("q.user_id")}
    UNION${denseSources(reach)}${x.sources}
  ),${PAGE_CTES(andExtra((l, b, g) => sourceIds(grants)(l, b, g) + denseIds(l, b, g), x))}
  SELECT
    ${KEYS_VALID} AS keys,${
      grants === PLAIN_GRANT
        ? `
    (SELECT v.version::text FROM model_versions v WHERE v.app_id = $1) AS version,
    (SELECT json_agg(json_build_array(
        ${ACTIONS_AND_ROLE},
        ${lean ? `${PAGE_OF_Q},
        false,
        false` : `${lookupPage(PAGE_OF_Q)},
        ${CONDITIONAL_ROLE},
        ${LOOKUP_PATHS_POSSIBLE}`}${reach ? `,
        ${REACHED_BY}` : ""}
      ) ORDER BY q.n)`
        : `
    (SELECT json_agg(${withPathCandidates(PAGE_OF_Q)} ORDER BY q.n)`
    }
     FROM q) AS rows${grants === PLAIN_GRANT ? `,
    ${LOOKUP_PLAIN_ONLY} AS plain_only` : ""}${replayed ? REPLAYED : ""}`;

type Sql = { plain: string; replayed: string };

/**
 * Lookup's statements by which one (the full one, the lean one for an
 * application plainOnly holds for, or the one through conditional paths),
 * whether they read the relations that reach each id (REACHED_BY: for a
 * catalog with `requires` or `unless`) and the dense settings (the
 * service's, or the tests' differential's others), each made once.
 */
const lookupSql = new Map<string, Sql>();
function lookupStatement(which: "full" | "lean" | "through paths", reach: boolean, dense: DenseSettings = DENSE): Sql {
  const key = `${which} ${reach} ${dense.minSources} ${dense.rowsPerSource}`;
  let sql = lookupSql.get(key);
  if (sql === undefined) {
    const grants = which === "through paths" ? LIVE_GRANT : PLAIN_GRANT;
    const lean = which === "lean";
    sql = bindable({ plain: graphLookupSql(false, grants, NO_EXTRA, reach, dense, lean), replayed: graphLookupSql(true, grants, NO_EXTRA, reach, dense, lean) });
    lookupSql.set(key, sql);
  }
  return sql;
}

type Replayed = { replayed?: string | null };

/** The statements through conditional paths, for the SQL rules' test. */
export const THROUGH_PATHS_SQL = { whoCan: WHO_CAN_THROUGH_PATHS.plain, lookup: lookupStatement("through paths", false).plain };
/** Lookup's full and lean statements as the service sends them on Postgres, for the SQL rules' test. */
export const LOOKUP_SQL = { full: lookupStatement("full", false).plain, lean: lookupStatement("lean", false).plain };

export const whoCanQuestion = (i: WhoCanInput) => ({ r: i.resource, i: i.resourceId, a: i.action, t: i.tenantId ?? null, c: i.after, l: i.limit });
export const lookupQuestion = (i: GraphLookupInput) => ({
  u: i.userId,
  r: i.resource,
  a: i.action,
  t: i.tenantId ?? null,
  c: i.after,
  l: i.limit,
  ans: i.answers,
  st: i.steps,
  ls: i.last,
});

export const graphStore = {
  /** Who can: answers in input order, a statement per application. */
  async whoCan(q: Queryable, inputs: readonly WhoCanInput[], options: { replayed?: boolean } = {}) {
    return perApplication(inputs, async (appId, ofApp) => {
      const { keys, keyOf } = distinctKeys(ofApp);
      const { json, at } = distinctQuestions(ofApp.map(whoCanQuestion));
      type Row = { keys: boolean[] | null; version: string | null; rows: [string[] | null, string[], boolean, boolean, boolean][] | null; plain_only: boolean } & Replayed;
      const row = await WHO_CAN_LEAN_OR_FULL.answer(appId, (lean) =>
        (lean ? WHO_CAN_LEAN_STATEMENT : WHO_CAN_STATEMENT).row<Row>(q, options.replayed === true, [appId, keys, json]),
      );
      const answers = row.rows ?? [];
      return {
        rows: ofApp.map((_, i): WhoCanRow => {
          const [actions, userIds, allUsers, pathsPossible, allUsersPathsPossible] = answers[at[i]!]!;
          return { keyValid: row.keys?.[keyOf[i]!] === true, version: row.version, actions, userIds, allUsers, pathsPossible, allUsersPathsPossible };
        }),
        replayed: row.replayed ?? null,
      };
    });
  },

  /** Who can's pages through conditional paths, each merged with its plain page (`prior`): in input order, a statement per application. */
  whoCanThroughPaths(q: Queryable, inputs: readonly (WhoCanInput & ThroughPaths)[], options: { replayed?: boolean } = {}) {
    const sql = options.replayed === true ? WHO_CAN_THROUGH_PATHS.replayed : WHO_CAN_THROUGH_PATHS.plain;
    return perApplication(inputs, (appId, ofApp) => readThroughPaths(q, sql, appId, ofApp, ofApp.map((i) => ({ ...whoCanQuestion(i), p: i.prior }))));
  },

  /** Lookup through the graph: answers in input order, a statement per application. */
  async lookup(q: Queryable, inputs: readonly GraphLookupInput[], options: { replayed?: boolean; dense?: DenseSettings } = {}) {
    return perApplication(inputs, async (appId, ofApp) => {
      const { keys, keyOf } = distinctKeys(ofApp);
      const { json, at } = distinctQuestions(ofApp.map(lookupQuestion));
      const reach = ofApp.some((i) => i.reach === true);
      type Row = {
        keys: boolean[] | null;
        version: string | null;
        rows: [string[] | null, boolean, string[], boolean, boolean, Record<string, string[]>?][] | null;
        plain_only: boolean;
      } & Replayed;
      const row = await LOOKUP_LEAN_OR_FULL.answer(appId, async (lean) => {
        const sql = lookupStatement(lean ? "lean" : "full", reach, options.dense);
        return (await q.query<Row>(options.replayed === true ? sql.replayed : sql.plain, [appId, keys, json])).rows[0]!;
      });
      const answers = row.rows ?? [];
      return {
        rows: ofApp.map((_, i): GraphLookupRow => {
          const [actions, allInstances, resourceIds, conditionalRole, pathsPossible, reachedBy] = answers[at[i]!]!;
          return { keyValid: row.keys?.[keyOf[i]!] === true, version: row.version, actions, allInstances, resourceIds, conditionalRole, pathsPossible, reachedBy };
        }),
        replayed: row.replayed ?? null,
      };
    });
  },

  /** Lookup's pages through conditional paths, each merged with its plain page (`prior`): in input order, a statement per application. */
  lookupThroughPaths(q: Queryable, inputs: readonly (GraphLookupInput & ThroughPaths)[], options: { replayed?: boolean; dense?: DenseSettings } = {}) {
    const statements = lookupStatement("through paths", false, options.dense);
    const sql = options.replayed === true ? statements.replayed : statements.plain;
    return perApplication(inputs, (appId, ofApp) => readThroughPaths(q, sql, appId, ofApp, ofApp.map((i) => ({ ...lookupQuestion(i), p: i.prior }))));
  },
};
