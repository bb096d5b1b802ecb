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
export const subjectsPage = (plain: string) =>
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

/** A merged page's ids, each with whether it is a candidate. */
export function splitPage(ids: readonly string[]): { id: string; candidate: boolean }[] {
  return ids.map((id) => (id.endsWith(CANDIDATE_MARK) ? { id: id.slice(0, -1), candidate: true } : { id, candidate: false }));
}
