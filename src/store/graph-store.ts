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
import type { Queryable } from "./db.js";
import { distinctKeys, perApplication } from "./per-application.js";
import { ACTIONS_AND_ROLE, type LookupInput, type LookupRow } from "./lookup-store.js";
import { LIVE_GRANT } from "./relationships-store.js";

/** Subject sets and links followed at most, from the instance (API.md). */
export const MAX_HOPS = 16;

const KEYS = `(SELECT json_agg(EXISTS (SELECT 1 FROM api_keys k
                                   WHERE k.secret_hash = c.key_hash AND k.app_id = $1 AND k.revoked_at IS NULL) ORDER BY c.n)
           FROM unnest($2::text[]) WITH ORDINALITY AS c(key_hash, n))`;

const REPLAYED = ",\n    pg_last_wal_replay_lsn()::text AS replayed";

/**
 * One hop outward from the walk's row `w`: the subject sets granted the
 * relation on w's instance, and, for each rule of w's relation, the
 * instances w's instance links to, with the relation inherited.
 */
const OUTWARD = `
    SELECT s.subject_resource, s.subject_id, s.subject_relation
    FROM subject_relationships s
    WHERE s.app_id = $1 AND s.resource = w.resource AND s.resource_id = w.resource_id AND s.relation = w.relation
      AND s.subject_relation <> '' AND ${LIVE_GRANT("s")}
    UNION ALL
    SELECT s.subject_resource, s.subject_id, ci.inherited
    FROM catalog_inherits ci
    JOIN subject_relationships s
      ON s.app_id = $1 AND s.resource = w.resource AND s.resource_id = w.resource_id AND s.relation = ci.through
     AND s.subject_relation = '' AND ${LIVE_GRANT("s")}
    WHERE ci.app_id = $1 AND ci.resource = w.resource AND ci.relation = w.relation`;

/**
 * The check's statement for an application whose catalog has subject sets
 * or inheritance: the same answer as the direct one (check-store.ts), each
 * question's relations on the instance now those the user holds through the
 * walk, limited to those that imply the question's action (all, for a
 * permissions question: action null).
 */
export const graphCheckSql = (replayed: boolean) => `
  WITH RECURSIVE
  q AS (SELECT * FROM ROWS FROM (jsonb_to_recordset($3::jsonb) AS (u text, r text, i text, a text))
             WITH ORDINALITY AS q(user_id, resource, resource_id, action, n)),
  walk(n, root, resource, resource_id, relation, depth) AS (
    SELECT q.n, cr.relation, q.resource, q.resource_id, cr.relation, 0
    FROM q JOIN catalog_relations cr ON cr.app_id = $1 AND cr.resource = q.resource
    WHERE q.action IS NULL OR q.action = ANY (cr.actions)
    UNION
    SELECT w.n, w.root, e.resource, e.resource_id, e.relation, w.depth + 1
    FROM walk w CROSS JOIN LATERAL (${OUTWARD}) e(resource, resource_id, relation)
    WHERE w.depth < ${MAX_HOPS}
  )
  SELECT
    ${KEYS} AS keys,
    (SELECT v.version::text FROM model_versions v WHERE v.app_id = $1) AS version,
    (SELECT json_agg(json_build_array(
        ARRAY(SELECT DISTINCT w.root FROM walk w
              WHERE w.n = q.n
                AND EXISTS (SELECT 1 FROM relationships g
                            WHERE g.app_id = $1 AND g.user_id = q.user_id AND g.resource = w.resource
                              AND g.resource_id = w.resource_id AND g.relation = w.relation AND ${LIVE_GRANT("g")})),
        ARRAY(SELECT a.role_id FROM role_assignments a WHERE a.app_id = $1 AND a.user_id = q.user_id)
      ) ORDER BY q.n)
     FROM q) AS rows${replayed ? REPLAYED : ""}`;

export const GRAPH_CHECK_SQL = { plain: graphCheckSql(false), replayed: graphCheckSql(true) };

// ------------------------------------------------------------------ explain

/** A grant on a path: [resource, resourceId, relation, userId ("" for a subject's), subject resource, subject id, subject relation, created ms, expires ms]. */
export type PathGrantRow = [string, string, string, string, string | null, string | null, string | null, number, number | null];

/** One edge of the outward walk: the node it leaves (resource, id, relation), the grant it follows, and the node it reaches. */
export type WalkEdgeRow = [from: [string, string, string], grant: PathGrantRow, to: [string, string, string]];

const grantRow = (g: string, subject: boolean) =>
  `jsonb_build_array(${g}.resource, ${g}.resource_id, ${g}.relation, ${subject ? "''" : `${g}.user_id`},
     ${subject ? `${g}.subject_resource, ${g}.subject_id, ${g}.subject_relation` : "NULL, NULL, NULL"},
     (extract(epoch FROM ${g}.created_at) * 1000)::bigint, (extract(epoch FROM ${g}.expires_at) * 1000)::bigint)`;

/**
 * Explain's walk, for the questions `q` (n, user_id, resource,
 * resource_id) of explain-store's statement: from every relation of the
 * resource, each row with the edge it came by (the node left and the grant
 * followed), so the domain can find, per relation, a path with the fewest
 * hops. `EXPLAIN_EDGES(n)` and `EXPLAIN_GRANTS(n, user)` read it per question.
 */
export const EXPLAIN_WALK = `
  walk(n, resource, resource_id, relation, depth, edge) AS (
    SELECT q.n, q.resource, q.resource_id, cr.relation, 0, NULL::jsonb
    FROM q JOIN catalog_relations cr ON cr.app_id = $1 AND cr.resource = q.resource
    UNION
    SELECT w.n, e.resource, e.resource_id, e.relation, w.depth + 1,
           jsonb_build_array(jsonb_build_array(w.resource, w.resource_id, w.relation), e.grant_row)
    FROM walk w CROSS JOIN LATERAL (
      SELECT s.subject_resource, s.subject_id, s.subject_relation, ${grantRow("s", true)}
      FROM subject_relationships s
      WHERE s.app_id = $1 AND s.resource = w.resource AND s.resource_id = w.resource_id AND s.relation = w.relation
        AND s.subject_relation <> '' AND ${LIVE_GRANT("s")}
      UNION ALL
      SELECT s.subject_resource, s.subject_id, ci.inherited, ${grantRow("s", true)}
      FROM catalog_inherits ci
      JOIN subject_relationships s
        ON s.app_id = $1 AND s.resource = w.resource AND s.resource_id = w.resource_id AND s.relation = ci.through
       AND s.subject_relation = '' AND ${LIVE_GRANT("s")}
      WHERE ci.app_id = $1 AND ci.resource = w.resource AND ci.relation = w.relation
    ) e(resource, resource_id, relation, grant_row)
    WHERE w.depth < ${MAX_HOPS}
  )`;

export const EXPLAIN_EDGES = (n: string) => `
  (SELECT coalesce(jsonb_agg(DISTINCT jsonb_build_array(w.edge->0, w.edge->1, jsonb_build_array(w.resource, w.resource_id, w.relation))), '[]')
   FROM walk w WHERE w.n = ${n} AND w.edge IS NOT NULL)`;

export const EXPLAIN_GRANTS = (n: string, user: string) => `
  (SELECT coalesce(jsonb_agg(${grantRow("g", false)}), '[]')
   FROM (SELECT DISTINCT w.resource, w.resource_id, w.relation FROM walk w WHERE w.n = ${n}) d
   JOIN relationships g
     ON g.app_id = $1 AND g.user_id = ${user} AND g.resource = d.resource AND g.resource_id = d.resource_id AND g.relation = d.relation
    AND ${LIVE_GRANT("g")})`;

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
}

/**
 * Who can, a page per question: the outward walk from the instance (every
 * relation implying the action), then, from each node, its next `limit`
 * holders after the cursor in user_id order (the primary key's order within
 * one node), and the next `limit` users of each role in scope that holds
 * resource:action (role_assignments' primary key); the union, distinct, in
 * order, cut to `limit`. A page never skips a user: any id below the page's
 * last is within the first `limit` of the node or role that gives it.
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
  nodes AS (SELECT DISTINCT n, resource, resource_id, relation FROM walk)
  SELECT
    ${KEYS} AS keys,
    (SELECT json_agg(json_build_array(
        (SELECT r.actions FROM catalog_resources r WHERE r.app_id = $1 AND r.resource = q.resource),
        ARRAY(SELECT DISTINCT x.user_id FROM (
                SELECT h.user_id FROM nodes d CROSS JOIN LATERAL (
                  SELECT g.user_id FROM relationships g
                  WHERE g.app_id = $1 AND g.resource = d.resource AND g.resource_id = d.resource_id AND g.relation = d.relation
                    AND g.user_id > q.after AND ${LIVE_GRANT("g")}
                  ORDER BY g.user_id LIMIT q.lim) h
                WHERE d.n = q.n
                UNION ALL
                SELECT h.user_id FROM role_permissions p CROSS JOIN LATERAL (
                  SELECT a.user_id FROM role_assignments a
                  WHERE a.app_id = $1 AND a.role_id = p.role_id AND a.user_id > q.after
                  ORDER BY a.user_id LIMIT q.lim) h
                WHERE p.app_id = $1 AND p.resource = q.resource AND p.action = q.action
                  AND (p.tenant_id IS NULL OR p.tenant_id = q.tenant_id)
              ) x ORDER BY x.user_id LIMIT q.lim)
      ) ORDER BY q.n)
     FROM q) AS rows${replayed ? REPLAYED : ""}`;

const SUBJECTS = { plain: subjectsSql(false), replayed: subjectsSql(true) };

// ------------------------------------------------------------------ lookup

export interface GraphLookupInput extends LookupInput {
  /** The relations of `resource` that imply `action`: the answers. */
  answers: string[];
  /** The (resource, relation) pairs from which an answer can be reached in one hop or more. */
  through: [resource: string, relation: string][];
}

export type GraphLookupRow = LookupRow;

/**
 * Lookup through the graph, a page per question: the user's own grants on
 * the `through` pairs, walked inward (a node held makes held every grant
 * to it as a subject set, and every instance linking to it through a link
 * whose rule inherits the node's relation), kept to `through` pairs and
 * below the hop bound; then the answers, each in resource_id order after
 * the cursor, at most `limit` from each source: the user's own grants of an
 * answer relation, and one hop from every node walked. The union, distinct,
 * in order, cut to `limit`: complete, as the direct lookup's pages.
 */
const graphLookupSql = (replayed: boolean) => `
  WITH RECURSIVE
  q AS (SELECT * FROM ROWS FROM (jsonb_to_recordset($3::jsonb) AS (u text, r text, a text, t text, c text, l int, ans text[], thr jsonb))
             WITH ORDINALITY AS q(user_id, resource, action, tenant_id, after, lim, answers, through, n)),
  pairs AS (SELECT q.n, p.resource, p.relation FROM q CROSS JOIN LATERAL jsonb_to_recordset(q.through) AS p(resource text, relation text)),
  walk(n, resource, resource_id, relation, depth) AS (
    SELECT q.n, g.resource, g.resource_id, g.relation, 0
    FROM q JOIN pairs p ON p.n = q.n
    JOIN relationships g ON g.app_id = $1 AND g.user_id = q.user_id AND g.resource = p.resource AND g.relation = p.relation
     AND ${LIVE_GRANT("g")}
    UNION
    SELECT w.n, e.resource, e.resource_id, e.relation, w.depth + 1
    FROM walk w CROSS JOIN LATERAL (
      SELECT s.resource, s.resource_id, s.relation
      FROM subject_relationships s
      WHERE s.app_id = $1 AND s.subject_resource = w.resource AND s.subject_id = w.resource_id AND s.subject_relation = w.relation
        AND ${LIVE_GRANT("s")}
      UNION ALL
      SELECT s.resource, s.resource_id, ci.relation
      FROM catalog_inherits ci
      JOIN subject_relationships s
        ON s.app_id = $1 AND s.subject_resource = w.resource AND s.subject_id = w.resource_id AND s.subject_relation = ''
       AND s.resource = ci.resource AND s.relation = ci.through AND ${LIVE_GRANT("s")}
      WHERE ci.app_id = $1 AND ci.inherited = w.relation
    ) e(resource, resource_id, relation)
    WHERE w.depth < ${MAX_HOPS - 1}
      AND EXISTS (SELECT 1 FROM pairs p WHERE p.n = w.n AND p.resource = e.resource AND p.relation = e.relation)
  ),
  nodes AS (SELECT DISTINCT n, resource, resource_id, relation FROM walk)
  SELECT
    ${KEYS} AS keys,
    (SELECT v.version::text FROM model_versions v WHERE v.app_id = $1) AS version,
    (SELECT json_agg(json_build_array(
        ${ACTIONS_AND_ROLE},
        ARRAY(SELECT DISTINCT x.resource_id FROM (
                SELECT h.resource_id FROM unnest(q.answers) AS ans(relation) CROSS JOIN LATERAL (
                  SELECT g.resource_id FROM relationships g
                  WHERE g.app_id = $1 AND g.user_id = q.user_id AND g.resource = q.resource AND g.relation = ans.relation
                    AND g.resource_id > q.after AND ${LIVE_GRANT("g")}
                  ORDER BY g.resource_id LIMIT q.lim) h
                UNION ALL
                SELECT h.resource_id FROM nodes d CROSS JOIN unnest(q.answers) AS ans(relation) CROSS JOIN LATERAL (
                  SELECT s.resource_id FROM subject_relationships s
                  WHERE s.app_id = $1 AND s.subject_resource = d.resource AND s.subject_id = d.resource_id
                    AND s.subject_relation = d.relation AND s.resource = q.resource AND s.relation = ans.relation
                    AND s.resource_id > q.after AND ${LIVE_GRANT("s")}
                  ORDER BY s.resource_id LIMIT q.lim) h
                WHERE d.n = q.n
                UNION ALL
                SELECT h.resource_id FROM nodes d
                JOIN catalog_inherits ci ON ci.app_id = $1 AND ci.resource = q.resource AND ci.relation = ANY (q.answers)
                 AND ci.inherited = d.relation
                CROSS JOIN LATERAL (
                  SELECT s.resource_id FROM subject_relationships s
                  WHERE s.app_id = $1 AND s.subject_resource = d.resource AND s.subject_id = d.resource_id
                    AND s.subject_relation = '' AND s.resource = q.resource AND s.relation = ci.through
                    AND s.resource_id > q.after AND ${LIVE_GRANT("s")}
                  ORDER BY s.resource_id LIMIT q.lim) h
                WHERE d.n = q.n
              ) x ORDER BY x.resource_id LIMIT q.lim)
      ) ORDER BY q.n)
     FROM q) AS rows${replayed ? REPLAYED : ""}`;

const GRAPH_LOOKUP = { plain: graphLookupSql(false), replayed: graphLookupSql(true) };

type Replayed = { replayed?: string | null };

export const graphStore = {
  /** Who can: answers in input order, a statement per application. */
  async subjects(q: Queryable, inputs: readonly SubjectsInput[], options: { replayed?: boolean } = {}) {
    return perApplication(inputs, async (appId, ofApp) => {
      const { keys, keyOf } = distinctKeys(ofApp);
      const questions = ofApp.map((i) => ({ r: i.resource, i: i.resourceId, a: i.action, t: i.tenantId ?? null, c: i.after, l: i.limit }));
      const { rows } = await q.query<{ keys: boolean[] | null; rows: [string[] | null, string[]][] | null } & Replayed>(
        options.replayed === true ? SUBJECTS.replayed : SUBJECTS.plain,
        [appId, keys, JSON.stringify(questions)],
      );
      const row = rows[0]!;
      return {
        rows: (row.rows ?? []).map(([actions, userIds], i): SubjectsRow => ({ keyValid: row.keys?.[keyOf[i]!] === true, actions, userIds })),
        replayed: row.replayed ?? null,
      };
    });
  },

  /** Lookup through the graph: answers in input order, a statement per application. */
  async lookup(q: Queryable, inputs: readonly GraphLookupInput[], options: { replayed?: boolean } = {}) {
    return perApplication(inputs, async (appId, ofApp) => {
      const { keys, keyOf } = distinctKeys(ofApp);
      const questions = ofApp.map((i) => ({
        u: i.userId,
        r: i.resource,
        a: i.action,
        t: i.tenantId ?? null,
        c: i.after,
        l: i.limit,
        ans: i.answers,
        thr: i.through.map(([resource, relation]) => ({ resource, relation })),
      }));
      const { rows } = await q.query<{ keys: boolean[] | null; version: string | null; rows: [string[] | null, boolean, string[]][] | null } & Replayed>(
        options.replayed === true ? GRAPH_LOOKUP.replayed : GRAPH_LOOKUP.plain,
        [appId, keys, JSON.stringify(questions)],
      );
      const row = rows[0]!;
      return {
        rows: (row.rows ?? []).map(
          ([actions, allInstances, resourceIds], i): GraphLookupRow => ({ keyValid: row.keys?.[keyOf[i]!] === true, version: row.version, actions, allInstances, resourceIds }),
        ),
        replayed: row.replayed ?? null,
      };
    });
  },
};
