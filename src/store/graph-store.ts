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
 * walk ends.
 *
 * Every table is named with app_id = $1, so on Citus the statement goes
 * whole to the shard of the application (a router query: the only kind in
 * which Citus runs a recursive query).
 */
import { ALL_USERS_SQL, USER_OR_ALL } from "./all-users.js";
import type { Queryable } from "./db.js";
import { distinctKeys, distinctQuestions, KEYS_VALID, perApplication } from "./per-application.js";
import { ACTIONS_AND_ROLE, type LookupInput, type LookupRow } from "./lookup-store.js";
import { CONDITIONAL_ROLE, lookupPage, subjectsPage } from "./conditional-candidates.js";
import { LIVE_GRANT, PLAIN_GRANT } from "./relationships-store.js";

/** Subject sets and links followed at most, from the instance (API.md). */
export const MAX_HOPS = 16;

/** The standby's replay position, read beside a statement's rows on a replica (read-replicas.ts). */
export const REPLAYED = ",\n    pg_last_wal_replay_lsn()::text AS replayed";

/**
 * One hop outward from the walk's row `w`: the subject sets granted the
 * relation on w's instance, and, for each rule of w's relation, the
 * instances w's instance links to, with the relation inherited. `grants`
 * says which rows are edges (the check's walk: PLAIN_GRANT, those with no
 * condition; explain's and the conditional paths': LIVE_GRANT), `carried`
 * what each edge adds after its (resource, id, relation) (a column list
 * starting with a comma, of the row `s`).
 */
export const outwardHop = (grants: (s: string) => string, carried = "") => `
    SELECT s.subject_resource, s.subject_id, s.subject_relation${carried}
    FROM subject_relationships s
    WHERE s.app_id = $1 AND s.resource = w.resource AND s.resource_id = w.resource_id AND s.relation = w.relation
      AND s.subject_relation <> '' AND ${grants("s")}
    UNION ALL
    SELECT s.subject_resource, s.subject_id, ci.inherited${carried}
    FROM catalog_inherits ci
    JOIN subject_relationships s
      ON s.app_id = $1 AND s.resource = w.resource AND s.resource_id = w.resource_id AND s.relation = ci.through
     AND s.subject_relation = '' AND ${grants("s")}
    WHERE ci.app_id = $1 AND ci.resource = w.resource AND ci.relation = w.relation`;

const OUTWARD = outwardHop(PLAIN_GRANT);

/** The groups met from the user's side (AccessModel.groups): their pairs, the edges into them, a key telling sets apart. */
export interface GraphGroups {
  pairs: { r: string; l: string }[];
  steps: InwardStep[];
  key: string;
}

/**
 * The check's statement for an application whose catalog has subject sets
 * or inheritance: the same answer as the direct one (check-store.ts), each
 * question's relations on the instance now those the user holds through the
 * walk, limited to those that imply the question's action (all, for a
 * permissions question: action null).
 *
 * It meets in the middle. The walk from the instance stops at the groups
 * ($4, the pairs of AccessModel.groups: team#member): it keeps the node
 * but does not walk into the teams nested in it. From the user's side,
 * `member` walks up from the user's own grants of those pairs (and the
 * allUsers grants of them: a team everyone is in) along the
 * edges into them ($5), each one probe of subject_relationships_subject_idx:
 * the groups the user is in, directly or nested. A question holds a root
 * relation where the walk reached a node the user holds directly or that
 * an allUsers grant gives everyone (not a group), or a group the user is in
 * with the two depths within the bound. An allUsers grant is a user's grant
 * that every user has: it starts paths as a user's own grant does.
 * Exact: on any path from the user to the instance, take the group nearest
 * the instance; the nodes after it are not groups, so the walk reaches it,
 * and every edge into a group comes from a group, so every node before it
 * is one and the user's side reaches it. Walked down instead, a parent team
 * of 10 teams cost 10 nodes, each probed for subject sets, links and the
 * user's grant: a 4-hop check was about 40 probes, now about 10.
 *
 * The relations held are gathered for the whole batch at once (`held`) and
 * joined to the questions: read per question, each of 50 questions scanned
 * the whole batch's walk.
 *
 * Each question's row ends with CONDITIONAL_PATHS_POSSIBLE: whether its
 * conditional paths, which this walk does not follow, are worth asking.
 */
/**
 * Whether a conditional row could lie on one of question q's paths (issue
 * 29), so that the walk above, which follows only rows with no condition,
 * may have missed a path that holds under conditions: the application has a
 * live subject set or link with a condition (one probe of the partial index
 * subject_relationships_conditional_idx, migration 018, once per statement:
 * the subquery names no question), or the user, or every user, has a live
 * conditional grant anywhere but on the instance itself under a relation
 * the question starts from (those are answered already, just below; two
 * probes of relationships_conditional_user_idx, migration 017). False for
 * an application with no conditional rows, and for a user with none where
 * its subject sets and links have none: then the check's answer is final
 * and no second statement is asked (conditional-paths-store.ts).
 */
const CONDITIONAL_PATHS_POSSIBLE = `(EXISTS (SELECT 1 FROM subject_relationships s
                 WHERE s.app_id = $1 AND s.condition IS NOT NULL AND ${LIVE_GRANT("s")})
         OR EXISTS (SELECT 1 FROM relationships g
                    WHERE g.app_id = $1 AND ${USER_OR_ALL("g.user_id", "q.user_id")} AND g.condition IS NOT NULL AND ${LIVE_GRANT("g")}
                      AND NOT (g.resource = q.resource AND g.resource_id = q.resource_id
                               AND EXISTS (SELECT 1 FROM catalog_relations cr
                                           WHERE cr.app_id = $1 AND cr.resource = q.resource AND cr.relation = g.relation
                                             AND (q.action IS NULL OR q.action = ANY (cr.actions))))))`;

export const graphCheckSql = (replayed: boolean) => `
  WITH RECURSIVE
  q AS (SELECT * FROM ROWS FROM (jsonb_to_recordset($3::jsonb) AS (u text, r text, i text, a text))
             WITH ORDINALITY AS q(user_id, resource, resource_id, action, n)),
  gp AS (SELECT * FROM jsonb_to_recordset($4::jsonb) AS gp(r text, l text)),
  walk(n, root, resource, resource_id, relation, depth) AS (
    SELECT q.n, cr.relation, q.resource, q.resource_id, cr.relation, 0
    FROM q JOIN catalog_relations cr ON cr.app_id = $1 AND cr.resource = q.resource
    WHERE q.action IS NULL OR q.action = ANY (cr.actions)
    UNION
    SELECT w.n, w.root, e.resource, e.resource_id, e.relation, w.depth + 1
    FROM walk w CROSS JOIN LATERAL (${OUTWARD}) e(resource, resource_id, relation)
    WHERE w.depth < ${MAX_HOPS} AND NOT EXISTS (SELECT 1 FROM gp WHERE gp.r = w.resource AND gp.l = w.relation)
  ),
  met AS (
    SELECT w.n, w.root, w.resource, w.resource_id, w.relation, min(w.depth) AS depth
    FROM walk w JOIN gp ON gp.r = w.resource AND gp.l = w.relation
    GROUP BY w.n, w.root, w.resource, w.resource_id, w.relation
  ),
  member(user_id, resource, resource_id, relation, depth) AS (
    SELECT u.user_id, gp.r, e.resource_id, gp.l, 0
    FROM (SELECT DISTINCT q.user_id FROM q JOIN met ON met.n = q.n) u
    CROSS JOIN gp
    CROSS JOIN LATERAL (
      SELECT g.resource_id FROM relationships g
      WHERE g.app_id = $1 AND ${USER_OR_ALL("g.user_id", "u.user_id")} AND g.resource = gp.r AND g.relation = gp.l AND ${PLAIN_GRANT("g")}
      OFFSET 0) e
    UNION
    SELECT m.user_id, t.r, e.resource_id, t.g, m.depth + 1
    FROM member m
    JOIN jsonb_to_recordset($5::jsonb) AS t(fr text, fl text, sr text, r text, p text, g text) ON t.fr = m.resource AND t.fl = m.relation
    CROSS JOIN LATERAL (
      SELECT s.resource_id FROM subject_relationships s
      WHERE s.app_id = $1 AND s.subject_resource = m.resource AND s.subject_id = m.resource_id AND s.subject_relation = t.sr
        AND s.resource = t.r AND s.relation = t.p AND ${PLAIN_GRANT("s")}
      OFFSET 0) e
    WHERE m.depth < ${MAX_HOPS}
  ),
  held AS (
    SELECT h.n, array_agg(DISTINCT h.root) AS roots
    FROM (
      SELECT w.n, w.root FROM walk w JOIN q ON q.n = w.n
      WHERE NOT EXISTS (SELECT 1 FROM gp WHERE gp.r = w.resource AND gp.l = w.relation)
        AND EXISTS (SELECT 1 FROM relationships g
                    WHERE g.app_id = $1 AND ${USER_OR_ALL("g.user_id", "q.user_id")} AND g.resource = w.resource
                      AND g.resource_id = w.resource_id AND g.relation = w.relation AND ${PLAIN_GRANT("g")})
      UNION ALL
      SELECT m.n, m.root FROM met m JOIN q ON q.n = m.n
      WHERE EXISTS (SELECT 1 FROM member i
                    WHERE i.user_id = q.user_id AND i.resource = m.resource AND i.resource_id = m.resource_id
                      AND i.relation = m.relation AND i.depth + m.depth <= ${MAX_HOPS})
    ) h
    GROUP BY h.n
  )
  SELECT
    ${KEYS_VALID} AS keys,
    (SELECT v.version::text FROM model_versions v WHERE v.app_id = $1) AS version,
    (SELECT json_agg(json_build_array(
        coalesce(h.roots, '{}') || ARRAY(SELECT g.relation || chr(10) || g.condition FROM relationships g
              WHERE g.app_id = $1 AND ${USER_OR_ALL("g.user_id", "q.user_id")} AND g.resource = q.resource AND g.resource_id = q.resource_id
                AND g.condition IS NOT NULL AND ${LIVE_GRANT("g")}),
        ARRAY(SELECT a.role_id || coalesce(chr(10) || a.condition, '') FROM role_assignments a WHERE a.app_id = $1 AND a.user_id = q.user_id),
        (extract(epoch FROM now()) * 1000)::float8,
        ${CONDITIONAL_PATHS_POSSIBLE}
      ) ORDER BY q.n)
     FROM q LEFT JOIN held h ON h.n = q.n) AS rows${replayed ? REPLAYED : ""}`;

export const GRAPH_CHECK_SQL = { plain: graphCheckSql(false), replayed: graphCheckSql(true) };

// ------------------------------------------------------------------ pages

/**
 * A page of the `lim` smallest distinct ids after a cursor over many
 * sources, each a run of ids in order in an index (lookup's: the folders a
 * user reaches; who can's: the teams that hold a relation), without reading
 * `lim` ids from every source (1,000 folders would be 100,000 rows for a
 * page of 100).
 *
 * `src` (a CTE the statement defines) has a row per question and source:
 * n (the question), lim, after, and the source (kind, a, b, c, res, rel,
 * which `probe` reads). Then:
 * 1. heads: the first id of each source after the cursor (one probe a
 *    source); if those hold fewer than `lim` distinct ids, then m - 1 more
 *    from each source that had one, m = ceil(lim / those sources) + 1:
 *    about `lim` rows more, and a probe a live source.
 * 2. bound: if the heads hold `lim` distinct ids, the `lim`-th smallest:
 *    every id of the page is at most it (there are `lim` ids up to it).
 *    Otherwise none ('': ids are never empty).
 * 3. found: each source's ids up to the bound (all of them without one),
 *    its first `lim`: those of its heads, then, only for a source whose
 *    heads were all under the bound and did not run out, a read from its
 *    last head on, up to the bound (the index range stops there: the page
 *    and its near misses). 1,000 folders whose first documents are each
 *    past the bound but for 100 cost 100 probes here, not 1,000.
 * 4. pages: each question's found ids, distinct, in order, cut to `lim`;
 *    computed once for all questions with the same sources that have ids
 *    after the cursor (`sig`): the documents of a folder that hold nothing
 *    of their own have the folder's page.
 * Complete: an id of the page is within the first `lim` ids of the source
 * that gives it (those below it are in the page too), and under the bound.
 *
 * A coalesced batch reads each source once in each step however many
 * questions name it (fifty who-can questions on a folder's documents share
 * its teams): the probes are over the distinct sources (`sid`), joined back
 * by number. The ids read are put in order once for the whole batch
 * (`rk`), and each page is then cut by that number.
 */
const PAGE_CTES = (probe: (limit: string, bounded: boolean, gate: string) => string) => `
  sources AS MATERIALIZED (
    SELECT src.*, dense_rank() OVER (ORDER BY src.kind, src.a, src.b, src.c, src.res, src.rel, src.after, src.lim) AS sid FROM src
  ),
  firsts AS MATERIALIZED (
    SELECT p.sid, x.id
    FROM (SELECT DISTINCT sid, kind, a, b, c, res, rel, after FROM sources) p
    CROSS JOIN LATERAL (${probe("1", false, "")}) x(id)
  ),
  depth AS MATERIALIZED (
    SELECT d.n, CASE WHEN d.ids >= d.lim OR d.live = 0 THEN 1 ELSE (d.lim + d.live - 1) / d.live + 1 END AS m
    FROM (SELECT k.n, k.lim, count(f.sid) AS live, count(DISTINCT f.id) AS ids
          FROM sources k LEFT JOIN firsts f ON f.sid = k.sid GROUP BY k.n, k.lim) d
  ),
  counted AS MATERIALIZED (SELECT k.*, d.m FROM sources k JOIN depth d ON d.n = k.n),
  heads AS MATERIALIZED (
    SELECT h.sid, h.m, h.id, dense_rank() OVER (ORDER BY h.id) AS rk, count(*) OVER per AS got, max(h.id) OVER per AS last
    FROM (SELECT f.sid, p.m, f.id FROM (SELECT DISTINCT sid, m FROM counted) p JOIN firsts f ON f.sid = p.sid
          UNION ALL
          SELECT p.sid, p.m, x.id
          FROM (SELECT DISTINCT k.sid, k.kind, k.a, k.b, k.c, k.res, k.rel, f.id AS after, k.m
                FROM counted k JOIN firsts f ON f.sid = k.sid WHERE k.m > 1) p
          CROSS JOIN LATERAL (${probe("p.m - 1", false, "")}) x(id)) h
    WINDOW per AS (PARTITION BY h.sid, h.m)
  ),
  bound AS MATERIALIZED (
    SELECT q.n, coalesce(x.upto, '') AS upto
    FROM q LEFT JOIN (
      SELECT d.n, (array_agg(d.id ORDER BY d.rk))[d.lim] AS upto
      FROM (SELECT DISTINCT ON (k.n, h.rk) k.n, k.lim, h.rk, h.id FROM counted k JOIN heads h ON h.sid = k.sid AND h.m = k.m) d
      GROUP BY d.n, d.lim
    ) x ON x.n = q.n
  ),
  found AS MATERIALIZED (
    SELECT f.sid, f.m, f.upto, f.id, dense_rank() OVER (ORDER BY f.id) AS rk
    FROM (SELECT p.sid, p.m, p.upto, h.id
          FROM (SELECT DISTINCT k.sid, k.m, b.upto FROM counted k JOIN bound b ON b.n = k.n) p
          JOIN heads h ON h.sid = p.sid AND h.m = p.m AND (p.upto = '' OR h.id <= p.upto)
          UNION ALL
          SELECT p.sid, p.m, p.upto, x.id
          FROM (SELECT DISTINCT k.sid, k.kind, k.a, k.b, k.c, k.res, k.rel, k.lim, k.m, h.last AS after, b.upto
                FROM counted k JOIN bound b ON b.n = k.n
                JOIN heads h ON h.sid = k.sid AND h.m = k.m AND h.got = k.m AND k.lim > k.m AND (b.upto = '' OR h.last < b.upto)) p
          CROSS JOIN LATERAL (${probe("p.lim - p.m", true, " AND p.upto <> ''")}
            UNION ALL${probe("p.lim - p.m", false, " AND p.upto = ''")}) x(id)) f
  ),
  sig AS MATERIALIZED (
    SELECT k.n, k.lim, k.m, b.upto, array_agg(k.sid ORDER BY k.sid) AS sids
    FROM counted k JOIN bound b ON b.n = k.n
    WHERE k.sid IN (SELECT h.sid FROM heads h)
    GROUP BY k.n, k.lim, k.m, b.upto
  ),
  pages AS MATERIALIZED (
    SELECT g.sids, g.lim, g.m, g.upto, (array_agg(d.id ORDER BY d.rk))[1:g.lim] AS ids
    FROM (SELECT DISTINCT sids, lim, m, upto FROM sig) g
    CROSS JOIN LATERAL (SELECT DISTINCT ON (f.rk) f.rk, f.id FROM found f
                        WHERE f.sid = ANY (g.sids) AND f.m = g.m AND f.upto = g.upto ORDER BY f.rk) d
    GROUP BY g.sids, g.lim, g.m, g.upto
  )`;

/** A question's page (after PAGE_CTES). */
const PAGE_OF_Q = `coalesce((SELECT g.ids FROM sig x JOIN pages g ON g.sids = x.sids AND g.lim = x.lim AND g.m = x.m AND g.upto = x.upto
                              WHERE x.n = q.n), '{}')`;

// ------------------------------------------------------------------ who can

export interface SubjectsInput {
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

export interface SubjectsRow {
  keyValid: boolean;
  /** The resource's actions; null when the catalog has no such resource. */
  actions: string[] | null;
  userIds: string[];
  /** A node the walk reached has a live allUsers grant with no condition: every user may. */
  allUsers: boolean;
}

/**
 * Who can's sources (PAGE_CTES), read in user_id order: the holders of a
 * node (kind 0: a = resource, b = id, c = relation; relationships' primary
 * key) or the users of a role (kind 1: a = the role; role_assignments').
 * An allUsers grant's row (user_id '', all-users.ts) is never an id of a
 * page: every page starts after a cursor that is '' or a user id, and ''
 * is after none of them; the statement answers it apart (ALL_USERS_HELD).
 */
const holderIds = (limit: string, bounded: boolean, gate: string) => `
      (SELECT g.user_id FROM relationships g
       WHERE p.kind = 0${gate} AND g.app_id = $1 AND g.resource = p.a AND g.resource_id = p.b AND g.relation = p.c
         AND g.user_id > p.after${bounded ? " AND g.user_id <= p.upto" : ""} AND ${PLAIN_GRANT("g")}
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
 */
const ALL_USERS_HELD = `EXISTS (SELECT 1 FROM walk w
                JOIN relationships g ON g.app_id = $1 AND g.user_id = ${ALL_USERS_SQL} AND g.resource = w.resource
                 AND g.resource_id = w.resource_id AND g.relation = w.relation AND ${PLAIN_GRANT("g")}
                WHERE w.n = q.n)`;

/**
 * Who can, a page per question: the outward walk from the instance (every
 * relation implying the action); its sources of holders: each node walked,
 * and each role in scope that holds resource:action (role_permissions);
 * the page from them as PAGE_CTES reads it; and whether an allUsers grant
 * on a node walked lets every user.
 */
const subjectsSql = (replayed: boolean) => `
  WITH RECURSIVE
  q AS (SELECT * FROM ROWS FROM (jsonb_to_recordset($3::jsonb) AS (r text, i text, a text, t text, c text, l int))
             WITH ORDINALITY AS q(resource, resource_id, action, tenant_id, after, lim, n)),
  walk(n, resource, resource_id, relation, depth) AS (
    SELECT q.n, q.resource, q.resource_id, cr.relation, 0
    FROM q JOIN catalog_relations cr ON cr.app_id = $1 AND cr.resource = q.resource
    WHERE q.action = ANY (cr.actions)
    UNION
    SELECT w.n, e.resource, e.resource_id, e.relation, w.depth + 1
    FROM walk w CROSS JOIN LATERAL (${OUTWARD}) e(resource, resource_id, relation)
    WHERE w.depth < ${MAX_HOPS}
  ),
  src AS (
    SELECT DISTINCT q.n, q.lim, q.after, 0 AS kind, w.resource AS a, w.resource_id AS b, w.relation AS c, '' AS res, '' AS rel
    FROM q JOIN walk w ON w.n = q.n
    UNION
    SELECT q.n, q.lim, q.after, 1, p.role_id, '', '', '', ''
    FROM q JOIN role_permissions p ON p.app_id = $1 AND p.resource = q.resource AND p.action = q.action
     AND (p.tenant_id IS NULL OR p.tenant_id = q.tenant_id) AND p.conditions IS NULL
  ),${PAGE_CTES(holderIds)}
  SELECT
    ${KEYS_VALID} AS keys,
    (SELECT json_agg(json_build_array(
        (SELECT r.actions FROM catalog_resources r WHERE r.app_id = $1 AND r.resource = q.resource),
        ${subjectsPage(PAGE_OF_Q)},
        ${ALL_USERS_HELD}
      ) ORDER BY q.n)
     FROM q) AS rows${replayed ? REPLAYED : ""}`;

const SUBJECTS = { plain: subjectsSql(false), replayed: subjectsSql(true) };

// ------------------------------------------------------------------ lookup

/**
 * One edge of the graph as the catalog allows it, read inward: a holder of
 * `fl` on an instance of `fr` holds `g` on every instance of `r` whose
 * grant of `p` names that instance as its subject, with subject relation
 * `sr` ("Y#r": a subject set, sr = fl; a link: sr = "", p the link relation,
 * g the relation that inherits fl through it).
 */
export interface InwardStep {
  fr: string;
  fl: string;
  sr: string;
  r: string;
  p: string;
  g: string;
}

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
}

export type GraphLookupRow = LookupRow;

/**
 * Lookup's sources (PAGE_CTES), read in resource_id order: the user's own
 * grants of a relation, and the allUsers ones (kind 0: a = the user, or ''
 * for allUsers: all-users.ts;
 * relationships_user_relation_idx) or the grants held by one subject (kind
 * 1: a, b, c = the subject; subject_relationships_subject_idx), of `res`
 * and `rel`.
 */
const sourceIds = (limit: string, bounded: boolean, gate: string) => `
      (SELECT g.resource_id FROM relationships g
       WHERE p.kind = 0${gate} AND g.app_id = $1 AND g.user_id = p.a AND g.resource = p.res AND g.relation = p.rel
         AND g.resource_id > p.after${bounded ? " AND g.resource_id <= p.upto" : ""} AND ${PLAIN_GRANT("g")}
       ORDER BY g.resource_id LIMIT ${limit})
      UNION ALL
      (SELECT s.resource_id FROM subject_relationships s
       WHERE p.kind = 1${gate} AND s.app_id = $1 AND s.subject_resource = p.a AND s.subject_id = p.b
         AND s.subject_relation = p.c AND s.resource = p.res AND s.relation = p.rel
         AND s.resource_id > p.after${bounded ? " AND s.resource_id <= p.upto" : ""} AND ${PLAIN_GRANT("s")}
       ORDER BY s.resource_id LIMIT ${limit})`;

/**
 * Lookup through the graph, a page per question.
 *
 * The walk: the user's own grants on the pairs the edges start from (and
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
 * index.
 *
 * The page from the sources as PAGE_CTES reads it.
 */
const graphLookupSql = (replayed: boolean) => `
  WITH RECURSIVE
  q AS (SELECT * FROM ROWS FROM (jsonb_to_recordset($3::jsonb) AS (u text, r text, a text, t text, c text, l int, ans text[], st jsonb, ls jsonb))
             WITH ORDINALITY AS q(user_id, resource, action, tenant_id, after, lim, answers, steps, last, n)),
  pairs AS (SELECT DISTINCT q.n, e.fr AS resource, e.fl AS relation FROM q CROSS JOIN LATERAL jsonb_to_recordset(q.steps || q.last) AS e(fr text, fl text)),
  steps AS (SELECT q.n, t.* FROM q CROSS JOIN LATERAL jsonb_to_recordset(q.steps) AS t(fr text, fl text, sr text, r text, p text, g text)),
  walk(n, resource, resource_id, relation, depth) AS (
    SELECT p.n, p.resource, e.resource_id, p.relation, 0
    FROM pairs p JOIN q ON q.n = p.n
    CROSS JOIN LATERAL (
      SELECT g.resource_id FROM relationships g
      WHERE g.app_id = $1 AND ${USER_OR_ALL("g.user_id", "q.user_id")} AND g.resource = p.resource AND g.relation = p.relation AND ${PLAIN_GRANT("g")}
      OFFSET 0) e
    UNION
    SELECT w.n, t.r, e.resource_id, t.g, w.depth + 1
    FROM walk w
    JOIN steps t ON t.n = w.n AND t.fr = w.resource AND t.fl = w.relation
    CROSS JOIN LATERAL (
      SELECT s.resource_id FROM subject_relationships s
      WHERE s.app_id = $1 AND s.subject_resource = w.resource AND s.subject_id = w.resource_id AND s.subject_relation = t.sr
        AND s.resource = t.r AND s.relation = t.p AND ${PLAIN_GRANT("s")}
      OFFSET 0) e
    WHERE w.depth < ${MAX_HOPS - 1}
  ),
  src AS (
    SELECT q.n, q.lim, q.after, 0 AS kind, h.user_id AS a, '' AS b, '' AS c, q.resource AS res, ans.relation AS rel
    FROM q CROSS JOIN unnest(q.answers) AS ans(relation) CROSS JOIN unnest(ARRAY[q.user_id, ${ALL_USERS_SQL}]) AS h(user_id)
    UNION
    SELECT q.n, q.lim, q.after, 1, w.resource, w.resource_id, t.sr, t.r, t.p
    FROM q CROSS JOIN LATERAL jsonb_to_recordset(q.last) AS t(fr text, fl text, sr text, r text, p text, g text)
    JOIN walk w ON w.n = q.n AND w.resource = t.fr AND w.relation = t.fl
  ),${PAGE_CTES(sourceIds)}
  SELECT
    ${KEYS_VALID} AS keys,
    (SELECT v.version::text FROM model_versions v WHERE v.app_id = $1) AS version,
    (SELECT json_agg(json_build_array(
        ${ACTIONS_AND_ROLE},
        ${lookupPage(PAGE_OF_Q)},
        ${CONDITIONAL_ROLE}
      ) ORDER BY q.n)
     FROM q) AS rows${replayed ? REPLAYED : ""}`;

const GRAPH_LOOKUP = { plain: graphLookupSql(false), replayed: graphLookupSql(true) };

type Replayed = { replayed?: string | null };

export const graphStore = {
  /** Who can: answers in input order, a statement per application. */
  async subjects(q: Queryable, inputs: readonly SubjectsInput[], options: { replayed?: boolean } = {}) {
    return perApplication(inputs, async (appId, ofApp) => {
      const { keys, keyOf } = distinctKeys(ofApp);
      const { json, at } = distinctQuestions(ofApp.map((i) => ({ r: i.resource, i: i.resourceId, a: i.action, t: i.tenantId ?? null, c: i.after, l: i.limit })));
      const { rows } = await q.query<{ keys: boolean[] | null; rows: [string[] | null, string[], boolean][] | null } & Replayed>(
        options.replayed === true ? SUBJECTS.replayed : SUBJECTS.plain,
        [appId, keys, json],
      );
      const row = rows[0]!;
      const answers = row.rows ?? [];
      return {
        rows: ofApp.map((_, i): SubjectsRow => {
          const [actions, userIds, allUsers] = answers[at[i]!]!;
          return { keyValid: row.keys?.[keyOf[i]!] === true, actions, userIds, allUsers };
        }),
        replayed: row.replayed ?? null,
      };
    });
  },

  /** Lookup through the graph: answers in input order, a statement per application. */
  async lookup(q: Queryable, inputs: readonly GraphLookupInput[], options: { replayed?: boolean } = {}) {
    return perApplication(inputs, async (appId, ofApp) => {
      const { keys, keyOf } = distinctKeys(ofApp);
      const { json, at } = distinctQuestions(
        ofApp.map((i) => ({
          u: i.userId,
          r: i.resource,
          a: i.action,
          t: i.tenantId ?? null,
          c: i.after,
          l: i.limit,
          ans: i.answers,
          st: i.steps,
          ls: i.last,
        })),
      );
      const { rows } = await q.query<{ keys: boolean[] | null; version: string | null; rows: [string[] | null, boolean, string[], boolean][] | null } & Replayed>(
        options.replayed === true ? GRAPH_LOOKUP.replayed : GRAPH_LOOKUP.plain,
        [appId, keys, json],
      );
      const row = rows[0]!;
      const answers = row.rows ?? [];
      return {
        rows: ofApp.map((_, i): GraphLookupRow => {
          const [actions, allInstances, resourceIds, conditionalRole] = answers[at[i]!]!;
          return { keyValid: row.keys?.[keyOf[i]!] === true, version: row.version, actions, allInstances, resourceIds, conditionalRole };
        }),
        replayed: row.replayed ?? null,
      };
    });
  },
};
