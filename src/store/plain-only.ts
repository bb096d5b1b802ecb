/**
 * Lookup's and who can's lean statements (graph-store.ts: whoCanSql's and
 * graphLookupSql's `lean`): which applications they answer for
 * (plainOnly, read by both statements), and which applications the store
 * asks the full statement first (LeanOrFull). docs/conditions.md, "The
 * lean statements".
 */
import { ALL_USERS_SQL } from "./all-users.js";

/**
 * Whether the application holds nothing who can's or lookup's answer
 * could depend on beyond its plain page: no grant, subject set or link
 * with a condition (live or not), no role assignment with a condition, no
 * policy condition on a role's hold of a question's resource:action, and
 * for who can (`allUsers`) no allUsers grant either (lookup's plain page
 * holds those). Then who can's candidates (whoCanPage) are none and
 * graph-store.ts's ALL_USERS_HELD, WHO_CAN_PATHS_POSSIBLE and
 * ALL_USERS_PATHS_POSSIBLE are false; lookup's candidates (lookupPage) are
 * none and CONDITIONAL_ROLE and LOOKUP_PATHS_POSSIBLE are false. The lean
 * statements (whoCanSql's and graphLookupSql's `lean`), which leave them
 * out, answer as the full ones.
 * A probe of a partial index of the conditional rows each (migrations 017
 * and 018), one of relationships_user_idx for the allUsers id, and the
 * questions' holds: an application with none of them probes empty ranges.
 * Both statements answer it, from their own snapshot, so that a lean
 * answer counts only when it holds and the store learns which statement an
 * application needs (graphStore.whoCan and lookup). Rows, not a flag kept
 * by the writes: every build that writes, an older one in a rolling
 * upgrade too, keeps it true.
 */
export const plainOnly = (allUsers: boolean) => `NOT (EXISTS (SELECT 1 FROM relationships g WHERE g.app_id = $1 AND g.condition IS NOT NULL)${
  allUsers
    ? `
         OR EXISTS (SELECT 1 FROM relationships g WHERE g.app_id = $1 AND g.user_id = ${ALL_USERS_SQL})`
    : ""
}
         OR EXISTS (SELECT 1 FROM subject_relationships s WHERE s.app_id = $1 AND s.condition IS NOT NULL)
         OR EXISTS (SELECT 1 FROM role_assignments a WHERE a.app_id = $1 AND a.condition IS NOT NULL)
         OR EXISTS (SELECT 1 FROM q JOIN role_permissions p ON p.app_id = $1 AND p.resource = q.resource AND p.action = q.action
                    WHERE p.conditions IS NOT NULL))`;

/**
 * Which statement answers an application's question, lean or full, by the
 * applications whose last answer found them not plain only (plainOnly):
 * those are asked the full statement first. Only a guess, so bounded (the
 * oldest entry goes first) and shared by every service in the process: a
 * lean answer counts only when its own statement found the application
 * plain only, and the full one is exact always.
 */
export class LeanOrFull {
  private readonly notPlainOnly = new Set<string>();

  /** The lean statement's answer where it found the application plain only, else the full one's. */
  async answer<R extends { plain_only: boolean }>(appId: string, ask: (lean: boolean) => Promise<R>): Promise<R> {
    if (!this.notPlainOnly.has(appId)) {
      const lean = await ask(true);
      if (lean.plain_only) return lean;
    }
    const full = await ask(false);
    this.remember(appId, full.plain_only);
    return full;
  }

  private remember(appId: string, plainOnly: boolean): void {
    if (plainOnly) this.notPlainOnly.delete(appId);
    else if (!this.notPlainOnly.has(appId)) {
      if (this.notPlainOnly.size >= 10_000) this.notPlainOnly.delete(this.notPlainOnly.values().next().value!);
      this.notPlainOnly.add(appId);
    }
  }
}
