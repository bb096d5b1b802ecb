import type { Queryable } from "./db.js";
import { SAMPLE_SIZE } from "./impact-store.js";
import { rolesStore } from "./roles-store.js";

/** A policy as the model document names it, with its id for the writes. */
export interface StoredPolicy {
  policyId: string;
  name: string;
  description: string;
  tenantId: string | null;
  /** "resource:action", in order. */
  permissions: string[];
  /** A CEL condition's source; null: none. */
  condition: string | null;
}

/** A role, its policies by id in order. */
export interface StoredRole {
  roleId: string;
  name: string;
  description: string;
  tenantId: string | null;
  policyIds: string[];
}

/** Users holding exactly the same roles (all of theirs), who therefore gain and lose alike. */
export interface UserRoleSet {
  roleIds: string[];
  users: number;
  /** The first user ids, in code point order. */
  sample: string[];
}

/**
 * SQL for the model as one document (domain/models.ts): every policy and
 * role of an application in one statement each, and the users a change of
 * roles reaches. Every statement names one application.
 */
export const modelDocumentStore = {
  /** The model's version, as GET .../model reports it. */
  async version(q: Queryable, appId: string): Promise<string> {
    const { rows } = await q.query<{ version: string }>("SELECT version::text AS version FROM model_versions WHERE app_id = $1", [appId]);
    return rows[0]?.version ?? "0";
  },

  async policies(q: Queryable, appId: string): Promise<StoredPolicy[]> {
    const { rows } = await q.query<StoredPolicy>(
      `SELECT p.policy_id AS "policyId", p.name, p.description, p.tenant_id AS "tenantId", p.condition,
              COALESCE((SELECT array_agg(pp.resource || ':' || pp.action ORDER BY pp.position)
                        FROM policy_permissions pp WHERE pp.app_id = $1 AND pp.policy_id = p.policy_id),
                       '{}'::text[]) AS permissions
       FROM policies p WHERE p.app_id = $1
       ORDER BY p.name COLLATE "C"`,
      [appId],
    );
    return rows;
  },

  async roles(q: Queryable, appId: string): Promise<StoredRole[]> {
    const { rows } = await q.query<StoredRole>(
      `SELECT r.role_id AS "roleId", r.name, r.description, r.tenant_id AS "tenantId",
              COALESCE((SELECT array_agg(rp.policy_id ORDER BY rp.position)
                        FROM role_policies rp WHERE rp.app_id = $1 AND rp.role_id = r.role_id),
                       '{}'::text[]) AS "policyIds"
       FROM roles r WHERE r.app_id = $1
       ORDER BY r.tenant_id COLLATE "C" NULLS FIRST, r.name COLLATE "C"`,
      [appId],
    );
    return rows;
  },

  /**
   * The users assigned one of `roleIds`, grouped by the whole set of roles
   * each holds, as impact-store's roleSets groups a policy's: an index
   * lookup per row, linear in the users reached.
   */
  async roleSets(q: Queryable, appId: string, roleIds: string[]): Promise<UserRoleSet[]> {
    if (roleIds.length === 0) return [];
    const { rows } = await q.query<UserRoleSet>(
      `WITH reached AS MATERIALIZED (
         SELECT DISTINCT a.user_id FROM role_assignments a
         WHERE a.app_id = $1 AND a.role_id = ANY ($2::text[])
       ),
       holding AS (
         SELECT u.user_id,
                ARRAY(SELECT a.role_id FROM role_assignments a WHERE a.app_id = $1 AND a.user_id = u.user_id ORDER BY a.role_id) AS role_ids
         FROM reached u
       )
       SELECT role_ids AS "roleIds", count(*)::int AS users, (array_agg(user_id ORDER BY user_id COLLATE "C"))[1:${SAMPLE_SIZE}] AS sample
       FROM holding
       GROUP BY role_ids`,
      [appId, roleIds],
    );
    return rows;
  },

  async updatePolicy(q: Queryable, appId: string, p: StoredPolicy): Promise<void> {
    await q.query(
      "UPDATE policies SET description = $3, tenant_id = $4, condition = $5, updated_at = now() WHERE app_id = $1 AND policy_id = $2",
      [appId, p.policyId, p.description, p.tenantId, p.condition],
    );
  },

  /** Deletes policies, detaching them from every role first. */
  async deletePolicies(q: Queryable, appId: string, policyIds: string[]): Promise<void> {
    if (policyIds.length === 0) return;
    await q.query("DELETE FROM role_policies WHERE app_id = $1 AND policy_id = ANY ($2::text[])", [appId, policyIds]);
    await q.query("DELETE FROM policies WHERE app_id = $1 AND policy_id = ANY ($2::text[])", [appId, policyIds]);
  },

  async updateRole(q: Queryable, appId: string, r: StoredRole): Promise<void> {
    await q.query("UPDATE roles SET description = $3, updated_at = now() WHERE app_id = $1 AND role_id = $2", [appId, r.roleId, r.description]);
  },

  /** Deletes roles with their assignments, attachments and derived permissions, as rolesStore.delete does one. */
  async deleteRoles(q: Queryable, appId: string, roleIds: string[]): Promise<void> {
    if (roleIds.length === 0) return;
    // The assignments first, each recorded in the change feed as removed.
    await rolesStore.unassignAll(q, appId, roleIds);
    for (const table of ["role_permissions", "role_policies", "roles"]) {
      await q.query(`DELETE FROM ${table} WHERE app_id = $1 AND role_id = ANY ($2::text[])`, [appId, roleIds]);
    }
  },
};
