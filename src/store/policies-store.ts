import type { Queryable, TimeCursor } from "./db.js";

export interface PolicyRow {
  policyId: string;
  name: string;
  description: string;
  permissions: string[];
  tenantId: string | null;
  /** A CEL condition's source; null: the permissions hold outright. */
  condition: string | null;
  roleCount: number;
  createdAt: Date;
  updatedAt: Date;
}

/**
 * Followed by `WHERE p.app_id = $1 ...`. The subqueries name $1 themselves,
 * not `p.app_id`: Citus prunes a scalar subquery by its own filters, not
 * through its correlation, and would run these on every shard (docs/scale-out.md).
 */
const POLICY_SELECT = `
  SELECT p.policy_id AS "policyId", p.name, p.description, p.tenant_id AS "tenantId", p.condition,
         p.created_at AS "createdAt", p.updated_at AS "updatedAt",
         COALESCE((SELECT array_agg(pp.resource || ':' || pp.action ORDER BY pp.position)
                   FROM policy_permissions pp WHERE pp.app_id = $1 AND pp.policy_id = p.policy_id),
                  '{}'::text[]) AS permissions,
         (SELECT count(*) FROM role_policies rp WHERE rp.app_id = $1 AND rp.policy_id = p.policy_id)::int
           AS "roleCount"
  FROM policies p`;

/** SQL for policies and their permissions. */
export const policiesStore = {
  async get(q: Queryable, appId: string, policyId: string): Promise<PolicyRow | undefined> {
    const { rows } = await q.query<PolicyRow>(`${POLICY_SELECT} WHERE p.app_id = $1 AND p.policy_id = $2`, [appId, policyId]);
    return rows[0];
  },

  /** Locks the policy row for a change; false when it does not exist. */
  async lock(q: Queryable, appId: string, policyId: string): Promise<boolean> {
    const { rows } = await q.query("SELECT 1 FROM policies WHERE app_id = $1 AND policy_id = $2 FOR UPDATE", [appId, policyId]);
    return rows.length > 0;
  },

  /** Policies in creation order after the cursor, optionally of one tenant. */
  async list(
    q: Queryable,
    appId: string,
    tenantId: string | undefined,
    after: TimeCursor | undefined,
    limit: number,
  ): Promise<PolicyRow[]> {
    const { rows } = await q.query<PolicyRow>(
      `${POLICY_SELECT}
       WHERE p.app_id = $1 AND ($2::text IS NULL OR p.tenant_id = $2)
         AND ($3::timestamptz IS NULL OR (p.created_at, p.policy_id) > ($3::timestamptz, $4))
       ORDER BY p.created_at, p.policy_id LIMIT $5`,
      [appId, tenantId ?? null, after?.createdAt ?? null, after?.id ?? "", limit],
    );
    return rows;
  },

  /** Inserts a policy; the constraint name tells a taken name apart. */
  async insert(
    q: Queryable,
    appId: string,
    policy: { policyId: string; name: string; description: string; tenantId: string | undefined; condition: string | null },
  ): Promise<void> {
    await q.query(
      "INSERT INTO policies (app_id, policy_id, name, description, tenant_id, condition) VALUES ($1, $2, $3, $4, $5, $6)",
      [appId, policy.policyId, policy.name, policy.description, policy.tenantId ?? null, policy.condition],
    );
  },

  /** Changes what is given; `condition: null` removes the condition. */
  async update(
    q: Queryable,
    appId: string,
    policyId: string,
    change: { name?: string | undefined; description?: string | undefined; condition?: string | null },
  ): Promise<void> {
    await q.query(
      `UPDATE policies SET name = COALESCE($3, name), description = COALESCE($4, description),
         condition = CASE WHEN $5::boolean THEN $6::text ELSE condition END, updated_at = now()
       WHERE app_id = $1 AND policy_id = $2`,
      [appId, policyId, change.name ?? null, change.description ?? null, change.condition !== undefined, change.condition ?? null],
    );
  },

  /** Replaces the permission list ("resource:action", already validated), one statement. */
  async setPermissions(q: Queryable, appId: string, policyId: string, permissions: string[]): Promise<void> {
    await q.query("DELETE FROM policy_permissions WHERE app_id = $1 AND policy_id = $2", [appId, policyId]);
    if (permissions.length === 0) return;
    await q.query(
      `INSERT INTO policy_permissions (app_id, policy_id, resource, action, position)
       SELECT $1, $2, split_part(x, ':', 1), split_part(x, ':', 2), (n - 1)::int
       FROM unnest($3::text[]) WITH ORDINALITY AS t(x, n)`,
      [appId, policyId, permissions],
    );
  },

  /** The roles the policy is attached to, locked against concurrent change. */
  async attachedRoleIds(q: Queryable, appId: string, policyId: string): Promise<string[]> {
    const { rows } = await q.query<{ roleId: string }>(
      `SELECT role_id AS "roleId" FROM role_policies WHERE app_id = $1 AND policy_id = $2 ORDER BY role_id FOR UPDATE`,
      [appId, policyId],
    );
    return rows.map((r) => r.roleId);
  },

  /** Detaches the policy from every role and deletes it. */
  async delete(q: Queryable, appId: string, policyId: string): Promise<void> {
    await q.query("DELETE FROM role_policies WHERE app_id = $1 AND policy_id = $2", [appId, policyId]);
    await q.query("DELETE FROM policies WHERE app_id = $1 AND policy_id = $2", [appId, policyId]);
  },

  /** Tenants of the given policies (null: application-wide); absent ids are missing from the map. */
  async tenants(q: Queryable, appId: string, policyIds: string[]): Promise<Map<string, string | null>> {
    if (policyIds.length === 0) return new Map();
    const { rows } = await q.query<{ policyId: string; tenantId: string | null }>(
      `SELECT policy_id AS "policyId", tenant_id AS "tenantId" FROM policies
       WHERE app_id = $1 AND policy_id = ANY($2::text[]) FOR KEY SHARE`,
      [appId, policyIds],
    );
    return new Map(rows.map((r) => [r.policyId, r.tenantId]));
  },
};
