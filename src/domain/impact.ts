import type { ImpactRole, RoleSetGroup, RoleSource } from "../store/impact-store.js";
import { SAMPLE_SIZE } from "../store/impact-store.js";

/** Distinct users whose effective permissions a change of one policy would change, with the first ids of each. */
export interface UserImpact {
  gaining: number;
  losing: number;
  gainingSample: string[];
  losingSample: string[];
  /** Distinct users assigned a role the policy is attached to. */
  reached: number;
}

/** Code point order (what Postgres's "C" collation gives), the order of the samples. */
const byCodePoint = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));

/**
 * Who gains and who loses when a policy gains `added` and loses `removed`.
 *
 * A check of tenant t counts the user's application-wide roles and t's; a
 * check without a tenant, the application-wide ones. So a user reached by
 * the policy through an application-wide role gains (or loses) a permission
 * unless another application-wide role of theirs holds it through another
 * policy; one reached through a role of tenant t, unless another role of
 * theirs, application-wide or of t, does. A user is counted once however
 * many permissions or scopes change, and may be both gaining and losing.
 *
 * Users holding the same roles change alike, so this works on groups of
 * them (impact-store's roleSets) and the roles' other sources.
 */
export function userImpact(
  groups: readonly RoleSetGroup[],
  sources: readonly RoleSource[],
  policyRoles: readonly Pick<ImpactRole, "roleId" | "tenantId">[],
  added: readonly string[],
  removed: readonly string[],
): UserImpact {
  const byRole = new Map(sources.map((s) => [s.roleId, s]));
  const policyScopes = new Map(policyRoles.map((r) => [r.roleId, r.tenantId]));
  const gaining: RoleSetGroup[] = [];
  const losing: RoleSetGroup[] = [];
  for (const group of groups) {
    // The scopes the policy reaches this group in: null is application-wide.
    const scopes = new Set(group.roleIds.filter((id) => policyScopes.has(id)).map((id) => policyScopes.get(id)!));
    const elsewhere = (permission: string, scope: string | null) =>
      group.roleIds.some((id) => {
        const source = byRole.get(id);
        // Held elsewhere as it is, or outright (which a conditional one adds nothing to).
        return (
          source !== undefined &&
          (source.tenantId === null || source.tenantId === scope) &&
          (source.otherPermissions.includes(permission) || source.otherPermissions.includes(permission.split("\n", 1)[0]!))
        );
      });
    const changes = (permissions: readonly string[]) => permissions.some((p) => [...scopes].some((scope) => !elsewhere(p, scope)));
    if (changes(added)) gaining.push(group);
    if (changes(removed)) losing.push(group);
  }
  const sample = (of: RoleSetGroup[]) => of.flatMap((g) => g.sample).sort(byCodePoint).slice(0, SAMPLE_SIZE);
  const count = (of: RoleSetGroup[]) => of.reduce((n, g) => n + g.users, 0);
  return { gaining: count(gaining), losing: count(losing), gainingSample: sample(gaining), losingSample: sample(losing), reached: count([...groups]) };
}
