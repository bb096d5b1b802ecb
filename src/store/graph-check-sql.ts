/**
 * The check's statement for an application whose catalog has groups or
 * hierarchy (graph-store.ts has how the walks go): outward from the
 * instance, met from the user's side at the groups, in three forms: with
 * steps within an instance, without them, and with the walks of
 * `requires` and `unless` entries through links (AccessModel.quickRules).
 */
import { EACH_HOLDER, HOLDERS_OF } from "./all-users.js";
import { KEYS_VALID, REPLAYED } from "./per-application.js";
import { LIVE_GRANT, NOW_MS, PLAIN_GRANT } from "./relationships-store.js";
import { MAX_HOPS, outwardHop } from "./outward-hop.js";

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

/** The groups met from the user's side (AccessModel.groups): their pairs, the edges into them, a key telling sets apart. */
export interface GraphGroups {
  /** Each group (r, l) once for each relation `h` whose grants hold it: l, and those l inherits within the instance. */
  pairs: { r: string; l: string; h: string }[];
  /** The catalog has an inherits rule within an instance: the check's statement takes those steps. */
  within: boolean;
  steps: InwardStep[];
  /** By `resource\0action`: relations the walk starts from besides those implying the action (AccessModel.quickRules' entries). */
  walks: Record<string, string[]>;
  /** The walks' roots for entries through a link: from r#n through the link t to l on each linked instance, the bound started again. */
  entries: { r: string; n: string; t: string; l: string }[];
  key: string;
}

/**
 * Whether the application has a live subject set or link with a condition:
 * one probe of the partial index subject_relationships_conditional_idx
 * (migration 018), once per statement (the subquery names no question).
 * Part of each "conditional paths possible" flag below: the plain walks
 * follow only edges with no condition.
 */
export const CONDITIONAL_EDGES = `EXISTS (SELECT 1 FROM subject_relationships s
                 WHERE s.app_id = $1 AND s.condition IS NOT NULL AND ${LIVE_GRANT("s")})`;

/**
 * Whether a conditional row could lie on one of question q's paths, so that
 * the walk above, which follows only rows with no condition,
 * may have missed a path that holds under conditions: the application has a
 * live subject set or link with a condition (CONDITIONAL_EDGES), or the
 * user, or every user, has a live conditional grant anywhere but on the
 * instance itself under a relation the question starts from (those are answered already, just below; two
 * probes of relationships_conditional_user_idx, migration 017). False for
 * an application with no conditional rows, and for a user with none where
 * its subject sets and links have none: then the check's answer is final
 * and no second statement is asked (conditional-paths-store.ts).
 */
const CONDITIONAL_PATHS_POSSIBLE = `(${CONDITIONAL_EDGES}
         OR CASE WHEN u.conditional THEN EXISTS (${EACH_HOLDER("q.user_id", (holder) => `SELECT 1 FROM relationships g
                    WHERE g.app_id = $1 AND g.user_id = ${holder} AND g.condition IS NOT NULL AND ${LIVE_GRANT("g")}
                      AND NOT (g.resource = q.resource AND g.resource_id = q.resource_id
                               AND EXISTS (SELECT 1 FROM catalog_relations cr
                                           WHERE cr.app_id = $1 AND cr.resource = q.resource AND cr.relation = g.relation
                                             AND (q.action IS NULL OR q.action = ANY (cr.actions))))`)}) ELSE false END)`;

/**
 * Each distinct user of the batch (`uc`), read once however many of its
 * questions the batch holds (a lookup's page asks a hundred instances for
 * one user): whether the user, or every user, has a live conditional grant
 * anywhere (one probe each of relationships_conditional_user_idx), and the
 * user's role assignments. A user with no conditional grant skips the
 * probes of its questions that only such a grant could answer.
 */
const USERS_OF_BATCH = `
  uc AS MATERIALIZED (
    SELECT u.user_id,
           EXISTS (${EACH_HOLDER("u.user_id", (holder) => `SELECT 1 FROM relationships g
                   WHERE g.app_id = $1 AND g.user_id = ${holder} AND g.condition IS NOT NULL AND ${LIVE_GRANT("g")}`)}) AS conditional,
           ARRAY(SELECT a.role_id || coalesce(chr(10) || a.condition, '') FROM role_assignments a WHERE a.app_id = $1 AND a.user_id = u.user_id) AS roles
    FROM (SELECT DISTINCT q.user_id FROM q) u
  )`;

/**
 * Whether catalog relation `cr` is a root of the walk of question row `s`:
 * a relation implying its action (every relation, for a permissions
 * question: action null), or one of its `extra` relations. With `o`
 * (only_extra) its extra relations alone: lookup's pages, which know which
 * of the relations implying the action a candidate's page reached
 * (domain/lookup-reach.ts), ask those and the entries, not every relation.
 */
const ROOT_OF_S = `(s.only_extra IS NOT TRUE AND (s.action IS NULL OR s.action = ANY (cr.actions))) OR cr.relation = ANY (s.extra)`;

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
 * of 10 teams would cost 10 nodes, each probed for subject sets, links and
 * the user's grant: a 4-hop check would be about 40 probes, where this is
 * about 10.
 *
 * The walk is taken once per instance and action of the batch (`k`), not
 * once per question: a batch asking 14 users about 16 documents walks each
 * document once (its walk is the same for every user). The relations held
 * are gathered for the whole batch at once (`held`), each node walked
 * probed once per question, whatever the depths it was reached at, and
 * joined to the questions: read per question, each of 50 questions would
 * scan the whole batch's walk.
 *
 * A root with no rule of its own (`plain` in `cr`: no inherits rule, not a
 * group) is not walked from. Its node on the instance would only be probed
 * for the subject sets granted it there and for the user's grant of it,
 * one index probe each per root, and a relation implying the action
 * usually has neither (the built-ins a catalog never grants). Instead each
 * instance of the batch is read once for the subject sets of all its plain
 * roots (`pk`, the roots as an array in one index scan), which start the
 * walk one hop out, and each question once for the user's grants of them
 * (`held`'s second branch). An entry through a link (GraphGroups.entries)
 * is such a root too, named `through>relation`, which no relation is: the
 * instance's links of its `through` are read once the same way, and start
 * the walk on each linked instance with the entry's relation at depth 0
 * (its bound counted from where it is asked). Fifty checks of `viewer
 * unless blocked`, whose five roots are all plain, walked 250 nodes at
 * depth 0, each probed twice; now none, and 50 scans of each kind
 * (docs/performance.md, "Requires and unless").
 *
 * Each question's row ends with CONDITIONAL_PATHS_POSSIBLE: whether its
 * conditional paths, which this walk does not follow, are worth asking.
 */
export const graphCheckSql = (replayed: boolean, within = true, entries = false) => `
  WITH RECURSIVE
  q AS (SELECT q.*, dense_rank() OVER (ORDER BY q.resource, q.resource_id, q.action) AS k
        FROM ROWS FROM (jsonb_to_recordset($3::jsonb) AS (u text, r text, i text, a text, x text[], o boolean))
             WITH ORDINALITY AS q(user_id, resource, resource_id, action, extra, only_extra, n)),
  gp AS (SELECT * FROM jsonb_to_recordset($4::jsonb) AS gp(r text, l text, h text)),${
    entries
      ? `
  ent AS (SELECT * FROM jsonb_to_recordset($6::jsonb) AS e(r text, n text, t text, l text)),`
      : ""
  }
  cr AS MATERIALIZED (
    SELECT cr.resource, cr.relation, cr.actions,
           NOT EXISTS (SELECT 1 FROM catalog_inherits ci WHERE ci.app_id = $1 AND ci.resource = cr.resource AND ci.relation = cr.relation)
           AND NOT EXISTS (SELECT 1 FROM gp WHERE gp.r = cr.resource AND gp.l = cr.relation) AS plain
    FROM catalog_relations cr WHERE cr.app_id = $1
  ),
  rt AS MATERIALIZED (
    SELECT s.k, r.root, s.resource, s.resource_id, r.plain, r.entry
    FROM (SELECT DISTINCT q.k, q.resource, q.resource_id, q.action, q.extra, q.only_extra FROM q) s
    CROSS JOIN LATERAL (
      SELECT cr.relation, cr.plain, false FROM cr
      WHERE cr.resource = s.resource AND (${ROOT_OF_S})${
        entries
          ? `
      UNION ALL
      SELECT e.n, true, true FROM ent e WHERE e.r = s.resource AND e.n = ANY (s.extra)`
          : ""
      }) r(root, plain, entry)
  ),
  pk AS MATERIALIZED (
    SELECT p.k, p.resource, p.resource_id, coalesce(p.roots, '{}') AS roots${
      entries
        ? `, coalesce(p.ents, '{}') AS ents,
           ARRAY(SELECT DISTINCT e.t FROM ent e WHERE e.r = p.resource AND e.n = ANY (p.ents)) AS links`
        : ""
    }
    FROM (SELECT rt.k, rt.resource, rt.resource_id, array_agg(rt.root) FILTER (WHERE NOT rt.entry) AS roots${
            entries ? ", array_agg(rt.root) FILTER (WHERE rt.entry) AS ents" : ""
          }
          FROM rt WHERE rt.plain GROUP BY rt.k, rt.resource, rt.resource_id) p
  ),
  walk(k, root, resource, resource_id, relation, depth) AS (
    SELECT rt.k, rt.root, rt.resource, rt.resource_id, rt.root, 0 FROM rt WHERE NOT rt.plain
    UNION ALL
    SELECT pk.k, x.relation, x.subject_resource, x.subject_id, x.subject_relation, 1
    FROM pk CROSS JOIN LATERAL (
      SELECT x.relation, x.subject_resource, x.subject_id, x.subject_relation FROM subject_relationships x
      WHERE x.app_id = $1 AND x.resource = pk.resource AND x.resource_id = pk.resource_id AND x.relation = ANY (pk.roots)
        AND x.subject_relation <> '' AND ${PLAIN_GRANT("x")}
      OFFSET 0) x${
       entries
         ? `
    UNION ALL
    SELECT pk.k, e.n, x.subject_resource, x.subject_id, e.l, 0
    FROM pk CROSS JOIN LATERAL (
      SELECT x.relation, x.subject_resource, x.subject_id FROM subject_relationships x
      WHERE x.app_id = $1 AND x.resource = pk.resource AND x.resource_id = pk.resource_id AND x.relation = ANY (pk.links)
        AND x.subject_relation = '' AND ${PLAIN_GRANT("x")}
      OFFSET 0) x
    JOIN ent e ON e.r = pk.resource AND e.t = x.relation AND e.n = ANY (pk.ents)`
         : ""
     }
    UNION
    SELECT w.k, w.root, e.resource, e.resource_id, e.relation, w.depth + e.hops
    FROM walk w CROSS JOIN LATERAL (${outwardHop(PLAIN_GRANT, "", "", within)}) e(resource, resource_id, relation, hops)
    WHERE NOT EXISTS (SELECT 1 FROM gp WHERE gp.r = w.resource AND gp.l = w.relation)
  ),
  met AS (
    SELECT w.k, w.root, w.resource, w.resource_id, w.relation, min(w.depth) AS depth
    FROM walk w JOIN gp ON gp.r = w.resource AND gp.l = w.relation
    GROUP BY w.k, w.root, w.resource, w.resource_id, w.relation
  ),
  member(user_id, resource, resource_id, relation, depth) AS (
    SELECT u.user_id, gp.r, e.resource_id, gp.l, 0
    FROM (SELECT DISTINCT q.user_id FROM q JOIN met ON met.k = q.k) u
    CROSS JOIN gp
    CROSS JOIN ${HOLDERS_OF("u.user_id")}
    CROSS JOIN LATERAL (
      SELECT g.resource_id FROM relationships g
      WHERE g.app_id = $1 AND g.user_id = h.user_id AND g.resource = gp.r AND g.relation = gp.h AND ${PLAIN_GRANT("g")}
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
      SELECT q.n, w.root
      FROM (SELECT DISTINCT w.k, w.root, w.resource, w.resource_id, w.relation FROM walk w
            WHERE NOT EXISTS (SELECT 1 FROM gp WHERE gp.r = w.resource AND gp.l = w.relation)) w
      JOIN q ON q.k = w.k
      WHERE EXISTS (${EACH_HOLDER("q.user_id", (holder) => `SELECT 1 FROM relationships g
                    WHERE g.app_id = $1 AND g.user_id = ${holder} AND g.resource = w.resource
                      AND g.resource_id = w.resource_id AND g.relation = w.relation AND ${PLAIN_GRANT("g")}`)})
      UNION ALL
      SELECT q.n, g.relation FROM q JOIN pk ON pk.k = q.k
      CROSS JOIN LATERAL (${EACH_HOLDER("q.user_id", (holder) => `SELECT g.relation FROM relationships g
                    WHERE g.app_id = $1 AND g.user_id = ${holder} AND g.resource = q.resource
                      AND g.resource_id = q.resource_id AND g.relation = ANY (pk.roots) AND ${PLAIN_GRANT("g")}`)}
                   OFFSET 0) g
      UNION ALL
      SELECT q.n, m.root FROM met m JOIN q ON q.k = m.k
      WHERE EXISTS (SELECT 1 FROM member i
                    WHERE i.user_id = q.user_id AND i.resource = m.resource AND i.resource_id = m.resource_id
                      AND i.relation = m.relation AND i.depth + m.depth <= ${MAX_HOPS})
    ) h
    GROUP BY h.n
  ),${USERS_OF_BATCH}
  SELECT
    ${KEYS_VALID} AS keys,
    (SELECT v.version::text FROM model_versions v WHERE v.app_id = $1) AS version,
    ${NOW_MS} AS now_ms,
    (SELECT json_agg(json_build_array(
        coalesce(h.roots, '{}') || CASE WHEN u.conditional THEN ARRAY(${EACH_HOLDER("q.user_id", (holder) => `SELECT g.relation || chr(10) || g.condition FROM relationships g
              WHERE g.app_id = $1 AND g.user_id = ${holder} AND g.resource = q.resource AND g.resource_id = q.resource_id
                AND g.condition IS NOT NULL AND ${LIVE_GRANT("g")}`)}) ELSE '{}' END,
        u.roles,
        ${CONDITIONAL_PATHS_POSSIBLE}
      ) ORDER BY q.n)
     FROM q JOIN uc u ON u.user_id = q.user_id LEFT JOIN held h ON h.n = q.n) AS rows${replayed ? REPLAYED : ""}`;

/** The check's graph statement, with steps within an instance (`within`) and without. */
export const GRAPH_CHECK_SQL = { plain: graphCheckSql(false), replayed: graphCheckSql(true) };
export const GRAPH_CHECK_FLAT_SQL = { plain: graphCheckSql(false, false), replayed: graphCheckSql(true, false) };
/** With entries through links to walk (GraphGroups.entries), and steps within an instance. */
export const GRAPH_CHECK_ENTRIES_SQL = { plain: graphCheckSql(false, true, true), replayed: graphCheckSql(true, true, true) };
