import type { Queryable } from "./db.js";
import { modelStore } from "./model-store.js";

/**
 * role_permissions: what each role holds through its policies, derived from
 * role_policies and policy_permissions for the check's sake. Every
 * transaction that changes a role's policies or a policy's permissions calls
 * refresh() for the roles concerned, after lockModel(), so two transactions
 * never derive the same role's rows from different snapshots. Each refresh
 * gives the application's model a new version (see model-store).
 */
export const rolePermissionsStore = {
  /**
   * Serializes changes to one application's policies and roles (a
   * transaction-scoped advisory lock; the two-key form keeps it apart from
   * the migration lock). Catalog changes and grants do not take it.
   */
  async lockModel(q: Queryable, appId: string): Promise<void> {
    await q.query("SELECT pg_advisory_xact_lock(1, hashtext($1))", [appId]);
  },

  /** Derives the rows of `roleIds` again from their current policies. */
  async refresh(q: Queryable, appId: string, roleIds: string[]): Promise<void> {
    if (roleIds.length === 0) return;
    await q.query("DELETE FROM role_permissions WHERE app_id = $1 AND role_id = ANY($2::text[])", [appId, roleIds]);
    await q.query(
      // A permission granted by a policy with no condition holds outright
      // (conditions NULL); otherwise by any of its policies' conditions,
      // sorted so one set of policies always derives the same row.
      `INSERT INTO role_permissions (app_id, role_id, resource, action, tenant_id, conditions)
       SELECT rp.app_id, rp.role_id, pp.resource, pp.action, r.tenant_id,
              CASE WHEN bool_or(p.condition IS NULL) THEN NULL
                   ELSE array_agg(DISTINCT p.condition ORDER BY p.condition) END
       FROM role_policies rp
       JOIN policy_permissions pp ON pp.app_id = rp.app_id AND pp.policy_id = rp.policy_id
       JOIN policies p ON p.app_id = rp.app_id AND p.policy_id = rp.policy_id
       JOIN roles r ON r.app_id = rp.app_id AND r.role_id = rp.role_id
       WHERE rp.app_id = $1 AND rp.role_id = ANY($2::text[])
       GROUP BY rp.app_id, rp.role_id, pp.resource, pp.action, r.tenant_id`,
      [appId, roleIds],
    );
    await modelStore.bump(q, appId);
  },
};
