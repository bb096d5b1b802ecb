/**
 * Lookup's and who can's conditional candidates (API.md, "Conditions and
 * AuthZEN": conditional results listed apart, never as plain answers): the
 * ids a condition could allow, read in the same statement as the plain page
 * and merged with it into one page in id order, each id marked plain (0) or
 * candidate (1). One keyset cursor pages both, so a page never skips an id
 * of either kind; an id that is both is plain. Which candidates a condition
 * could allow, and by which conditions, the domain asks the check's own
 * statement (Checker.ways): these statements only find them.
 *
 * Candidates are read through partial indexes of the rows with a condition
 * (migration 017), so a user or a role with none costs one probe of an
 * empty range. Every table is named with `app_id = $1` (docs/scale-out.md).
 */
import { ALL_USERS_SQL } from "./all-users.js";
import type { Queryable } from "./db.js";
import { distinctKeys, distinctQuestions } from "./per-application.js";
import { LIVE_GRANT } from "./relationships-store.js";

/** Marks an id of a merged page: a candidate (ids hold no control characters). */
export const CANDIDATE_MARK = "\n";

/**
 * The merged page: `plain` (an array expression of ids in order, `q.lim` at
 * most, after `q.after`) and `candidates` (a query of ids, `q.lim` at most
 * in order), the first `q.lim` distinct ids of both, each candidate id
 * suffixed with CANDIDATE_MARK.
 */
const merged = (plain: string, candidates: string) => `
        ARRAY(SELECT CASE WHEN m.k = 0 THEN m.id ELSE m.id || chr(10) END FROM (
                SELECT DISTINCT ON (u.id) u.id, u.k FROM (
                  SELECT x.id, 0 AS k FROM unnest(${plain}) AS x(id)
                  UNION ALL
                  SELECT c.id, 1 FROM (${candidates}) c(id)
                ) u ORDER BY u.id, u.k) m
              ORDER BY m.id LIMIT q.lim)`;

/**
 * Lookup: the instances where the user's own grant, or an allUsers grant,
 * of a relation implying the action has a condition.
 */
export const lookupPage = (plain: string) =>
  merged(
    plain,
    `SELECT DISTINCT g.resource_id FROM relationships g
     WHERE g.app_id = $1 AND g.user_id IN (q.user_id, ${ALL_USERS_SQL}) AND g.resource = q.resource
       AND g.condition IS NOT NULL AND g.resource_id > q.after AND ${LIVE_GRANT("g")}
       AND g.relation IN (SELECT cr.relation FROM catalog_relations cr
                          WHERE cr.app_id = $1 AND cr.resource = q.resource AND q.action = ANY (cr.actions))
     ORDER BY g.resource_id LIMIT q.lim`,
  );

/**
 * Whether a role could give the user the action on every instance under a
 * condition: an assignment of the user with a condition, of a role holding
 * resource:action in scope; or any assignment of a role holding it only
 * under its policies' conditions.
 */
export const CONDITIONAL_ROLE = `EXISTS (SELECT 1 FROM role_assignments a
                JOIN role_permissions p ON p.app_id = a.app_id AND p.role_id = a.role_id
                WHERE a.app_id = $1 AND a.user_id = q.user_id AND p.resource = q.resource AND p.action = q.action
                  AND (a.condition IS NOT NULL OR p.conditions IS NOT NULL)
                  AND (p.tenant_id IS NULL OR p.tenant_id = q.tenant_id))`;

/**
 * Who can: the users whose grant on the instance of a relation implying the
 * action has a condition; whose assignment with a condition is of a role
 * holding resource:action in scope; and every user assigned a role holding
 * it only under its policies' conditions. Each source its next `q.lim` in
 * order. A conditional allUsers grant is not a candidate (every user would
 * be): who can does not count it.
 */
export const whoCanPage = (plain: string) =>
  merged(
    plain,
    `SELECT DISTINCT s.user_id FROM (
       (SELECT g.user_id FROM relationships g
        WHERE g.app_id = $1 AND g.resource = q.resource AND g.resource_id = q.resource_id
          AND g.condition IS NOT NULL AND g.user_id > q.after AND g.user_id <> ${ALL_USERS_SQL} AND ${LIVE_GRANT("g")}
          AND g.relation IN (SELECT cr.relation FROM catalog_relations cr
                             WHERE cr.app_id = $1 AND cr.resource = q.resource AND q.action = ANY (cr.actions))
        ORDER BY g.user_id LIMIT q.lim)
       UNION ALL
       SELECT x.user_id FROM role_permissions p
       CROSS JOIN LATERAL (SELECT a.user_id FROM role_assignments a
                           WHERE a.app_id = $1 AND a.role_id = p.role_id AND a.condition IS NOT NULL AND a.user_id > q.after
                           ORDER BY a.user_id LIMIT q.lim) x
       WHERE p.app_id = $1 AND p.resource = q.resource AND p.action = q.action AND p.conditions IS NULL
         AND (p.tenant_id IS NULL OR p.tenant_id = q.tenant_id)
       UNION ALL
       SELECT x.user_id FROM role_permissions p
       CROSS JOIN LATERAL (SELECT a.user_id FROM role_assignments a
                           WHERE a.app_id = $1 AND a.role_id = p.role_id AND a.user_id > q.after
                           ORDER BY a.user_id LIMIT q.lim) x
       WHERE p.app_id = $1 AND p.resource = q.resource AND p.action = q.action AND p.conditions IS NOT NULL
         AND (p.tenant_id IS NULL OR p.tenant_id = q.tenant_id)
     ) s ORDER BY s.user_id LIMIT q.lim`,
  );

/**
 * In a hierarchical model, the candidates behind conditional rows on paths
 * (a membership, a subject set, a link, a grant on a node on the way), which
 * the plain page's walk does not follow: `live` is the page (an array
 * expression, `q.lim` ids at most after `q.after`, in order) of the ids
 * reachable through paths of live rows with or without a condition, read by
 * a second statement (graph-store.ts) only when the plain one said such a
 * row could lie on a path. Merged with that plain statement's page
 * (`q.prior`, marked as above): the first `q.lim` distinct ids of both, an
 * id plain there stays plain, every other one is a candidate. Exact under
 * the one cursor: an id below the merged page's last is within the first
 * `q.lim` of the list that gives it, and an id plain in the plain page's
 * whole set is in that page whenever it is in the merged one. Merged here
 * rather than in the domain so that the order is the database's, the one
 * both pages and the cursor were read in.
 */
export const withPathCandidates = (live: string) =>
  merged(
    `ARRAY(SELECT pr.id FROM unnest(q.prior) AS pr(id) WHERE right(pr.id, 1) <> chr(10))`,
    `SELECT left(pr.id, -1) FROM unnest(q.prior) AS pr(id) WHERE right(pr.id, 1) = chr(10)
     UNION ALL
     SELECT lv.id FROM unnest(${live}) AS lv(id)`,
  );

/** A page read through conditional paths, merged with the plain page read before (`prior`, marked). */
export interface ThroughPaths {
  prior: string[];
}

/** A statement's page through conditional paths, for one question. */
export interface ThroughPathsRow {
  keyValid: boolean;
  /** The merged page, each id not plain in the prior page marked a candidate (CANDIDATE_MARK). */
  ids: string[];
}

/**
 * Runs a statement through conditional paths (graph-store.ts) for one
 * application's questions (each with its `p`, the prior page): each one's
 * merged page and whether its key still holds, in input order.
 */
export async function readThroughPaths(
  q: Queryable,
  sql: string,
  appId: string,
  inputs: readonly { keyHash: string }[],
  questions: readonly unknown[],
): Promise<{ rows: ThroughPathsRow[]; replayed: string | null }> {
  const { keys, keyOf } = distinctKeys(inputs);
  const { json, at } = distinctQuestions(questions);
  const { rows } = await q.query<{ keys: boolean[] | null; rows: string[][] | null } & { replayed?: string | null }>(sql, [appId, keys, json]);
  const row = rows[0]!;
  const pages = row.rows ?? [];
  return {
    rows: inputs.map((_, i) => ({ keyValid: row.keys?.[keyOf[i]!] === true, ids: pages[at[i]!]! })),
    replayed: row.replayed ?? null,
  };
}

/** A merged page's ids, each with whether it is a candidate. */
export function splitPage(ids: readonly string[]): { id: string; candidate: boolean }[] {
  return ids.map((id) => (id.endsWith(CANDIDATE_MARK) ? { id: id.slice(0, -1), candidate: true } : { id, candidate: false }));
}
