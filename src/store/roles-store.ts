import { ASSIGNMENT_RETURNING, CHANGE_BODY, recordChanges } from "./changes-store.js";
import type { Queryable, TimeCursor } from "./db.js";

export interface RoleRow {
  roleId: string;
  name: string;
  description: string;
  policyIds: string[];
  tenantId: string | null;
  createdAt: Date;
  updatedAt: Date;
}

export interface AssignmentRow {
  roleId: string;
  userId: string;
  createdAt: Date;
  /** A CEL condition's source (domain/conditions.ts); null: the assignment always counts. */
  condition: string | null;
}

/** Followed by `WHERE r.app_id = $1 ...`; the subquery names $1 itself, as POLICY_SELECT's do (for Citus). */
const ROLE_SELECT = `
  SELECT r.role_id AS "roleId", r.name, r.description, r.tenant_id AS "tenantId",
         r.created_at AS "createdAt", r.updated_at AS "updatedAt",
         COALESCE((SELECT array_agg(rp.policy_id ORDER BY rp.position)
                   FROM role_policies rp WHERE rp.app_id = $1 AND rp.role_id = r.role_id),
                  '{}'::text[]) AS "policyIds"
  FROM roles r`;

const ASSIGNMENT_COLUMNS = `role_id AS "roleId", user_id AS "userId", created_at AS "createdAt", condition`;

type Cursor = TimeCursor | undefined;

/** SQL for roles, their policies and their assignments. */
export const rolesStore = {
  async get(q: Queryable, appId: string, roleId: string): Promise<RoleRow | undefined> {
    const { rows } = await q.query<RoleRow>(`${ROLE_SELECT} WHERE r.app_id = $1 AND r.role_id = $2`, [appId, roleId]);
    return rows[0];
  },

  async lock(q: Queryable, appId: string, roleId: string): Promise<{ tenantId: string | null } | undefined> {
    const { rows } = await q.query<{ tenantId: string | null }>(
      `SELECT tenant_id AS "tenantId" FROM roles WHERE app_id = $1 AND role_id = $2 FOR UPDATE`,
      [appId, roleId],
    );
    return rows[0];
  },

  async list(q: Queryable, appId: string, tenantId: string | undefined, after: Cursor, limit: number): Promise<RoleRow[]> {
    const { rows } = await q.query<RoleRow>(
      `${ROLE_SELECT}
       WHERE r.app_id = $1 AND ($2::text IS NULL OR r.tenant_id = $2)
         AND ($3::timestamptz IS NULL OR (r.created_at, r.role_id) > ($3::timestamptz, $4))
       ORDER BY r.created_at, r.role_id LIMIT $5`,
      [appId, tenantId ?? null, after?.createdAt ?? null, after?.id ?? "", limit],
    );
    return rows;
  },

  /** Roles with the policy attached, in creation order. */
  async listByPolicy(q: Queryable, appId: string, policyId: string, after: Cursor, limit: number): Promise<RoleRow[]> {
    const { rows } = await q.query<RoleRow>(
      `${ROLE_SELECT}
       WHERE r.app_id = $1
         AND EXISTS (SELECT 1 FROM role_policies x WHERE x.app_id = r.app_id AND x.role_id = r.role_id AND x.policy_id = $2)
         AND ($3::timestamptz IS NULL OR (r.created_at, r.role_id) > ($3::timestamptz, $4))
       ORDER BY r.created_at, r.role_id LIMIT $5`,
      [appId, policyId, after?.createdAt ?? null, after?.id ?? "", limit],
    );
    return rows;
  },

  /** Roles assigned to the user, in creation order of the roles. */
  async listByUser(q: Queryable, appId: string, userId: string, after: Cursor, limit: number): Promise<RoleRow[]> {
    const { rows } = await q.query<RoleRow>(
      `${ROLE_SELECT}
       WHERE r.app_id = $1
         AND EXISTS (SELECT 1 FROM role_assignments a WHERE a.app_id = r.app_id AND a.role_id = r.role_id AND a.user_id = $2)
         AND ($3::timestamptz IS NULL OR (r.created_at, r.role_id) > ($3::timestamptz, $4))
       ORDER BY r.created_at, r.role_id LIMIT $5`,
      [appId, userId, after?.createdAt ?? null, after?.id ?? "", limit],
    );
    return rows;
  },

  async insert(
    q: Queryable,
    appId: string,
    role: { roleId: string; name: string; description: string; tenantId: string | undefined },
  ): Promise<void> {
    await q.query(
      "INSERT INTO roles (app_id, role_id, name, description, tenant_id) VALUES ($1, $2, $3, $4, $5)",
      [appId, role.roleId, role.name, role.description, role.tenantId ?? null],
    );
  },

  async update(q: Queryable, appId: string, roleId: string, change: { name?: string; description?: string }): Promise<void> {
    await q.query(
      `UPDATE roles SET name = COALESCE($3, name), description = COALESCE($4, description), updated_at = now()
       WHERE app_id = $1 AND role_id = $2`,
      [appId, roleId, change.name ?? null, change.description ?? null],
    );
  },

  /** Replaces the role's policies, one statement. */
  async setPolicies(q: Queryable, appId: string, roleId: string, policyIds: string[]): Promise<void> {
    await q.query("DELETE FROM role_policies WHERE app_id = $1 AND role_id = $2", [appId, roleId]);
    if (policyIds.length === 0) return;
    await q.query(
      `INSERT INTO role_policies (app_id, role_id, policy_id, position)
       SELECT $1, $2, x, (n - 1)::int FROM unnest($3::text[]) WITH ORDINALITY AS t(x, n)`,
      [appId, roleId, policyIds],
    );
  },

  /** Deletes the role with its policies and assignments; how many assignments went. */
  async delete(q: Queryable, appId: string, roleId: string): Promise<number> {
    const removed = await rolesStore.unassignAll(q, appId, [roleId]);
    await q.query("DELETE FROM roles WHERE app_id = $1 AND role_id = $2", [appId, roleId]);
    return removed;
  },

  /** Removes every assignment of the roles (they are going), each an assignment_removed change; how many went. */
  async unassignAll(q: Queryable, appId: string, roleIds: string[]): Promise<number> {
    const { rows } = await q.query<{ n: number }>(
      `WITH d AS (DELETE FROM role_assignments WHERE app_id = $1 AND role_id = ANY ($2::text[]) RETURNING ${ASSIGNMENT_RETURNING}),
            ${recordChanges("c", "assignment_removed", "d", CHANGE_BODY.assignment)}
       SELECT count(*)::int AS n FROM d`,
      [appId, roleIds],
    );
    return rows[0]!.n;
  },

  /**
   * Assigns the role. When the assignment exists, its condition becomes the
   * one given: `replaced` when that changed it, and either way `created` is
   * false and the stored one returned. Inside a transaction: an assignment
   * removed between the statements is inserted again on the next turn.
   */
  async assign(
    q: Queryable,
    appId: string,
    roleId: string,
    userId: string,
    condition: string | null = null,
  ): Promise<{ row: AssignmentRow; created: boolean; replaced: boolean }> {
    const params = [appId, roleId, userId, condition];
    for (let turn = 1; ; turn++) {
      if (turn > 10) throw new Error("an assignment kept vanishing between its insert and its read");
      const inserted = await q.query<AssignmentRow>(
        `WITH w AS (
           INSERT INTO role_assignments (app_id, role_id, user_id, condition) VALUES ($1, $2, $3, $4::text)
           ON CONFLICT DO NOTHING RETURNING ${ASSIGNMENT_RETURNING}
         ), ${recordChanges("c", "assignment_added", "w", CHANGE_BODY.assignment)}
         SELECT ${ASSIGNMENT_COLUMNS} FROM w`,
        params,
      );
      if (inserted.rows[0] !== undefined) return { row: inserted.rows[0], created: true, replaced: false };
      // Another condition is a new assignment as the feed sees it: the one it replaces is gone.
      const replaced = await q.query<AssignmentRow>(
        `WITH w AS (
           UPDATE role_assignments SET condition = $4::text
           WHERE app_id = $1 AND role_id = $2 AND user_id = $3 AND condition IS DISTINCT FROM $4::text
           RETURNING ${ASSIGNMENT_RETURNING}
         ), ${recordChanges("c", "assignment_added", "w", CHANGE_BODY.assignment)}
         SELECT ${ASSIGNMENT_COLUMNS} FROM w`,
        params,
      );
      if (replaced.rows[0] !== undefined) return { row: replaced.rows[0], created: false, replaced: true };
      const existing = await q.query<AssignmentRow>(
        `SELECT ${ASSIGNMENT_COLUMNS} FROM role_assignments WHERE app_id = $1 AND role_id = $2 AND user_id = $3`,
        params.slice(0, 3),
      );
      if (existing.rows[0] !== undefined) return { row: existing.rows[0], created: false, replaced: false };
    }
  },

  /**
   * Removes every assignment of the user; returns the roles they had, each
   * with its name and tenant, in creation order of the roles (counted by
   * RETURNING).
   */
  async unassignUser(q: Queryable, appId: string, userId: string): Promise<{ roleId: string; name: string; tenantId: string | null }[]> {
    const { rows } = await q.query<{ roleId: string }>(
      `WITH d AS (DELETE FROM role_assignments WHERE app_id = $1 AND user_id = $2 RETURNING ${ASSIGNMENT_RETURNING}),
            ${recordChanges("c", "assignment_removed", "d", CHANGE_BODY.assignment)}
       SELECT role_id AS "roleId" FROM d`,
      [appId, userId],
    );
    if (rows.length === 0) return [];
    const named = await q.query<{ roleId: string; name: string; tenantId: string | null }>(
      `SELECT role_id AS "roleId", name, tenant_id AS "tenantId" FROM roles
       WHERE app_id = $1 AND role_id = ANY($2::text[]) ORDER BY created_at, role_id`,
      [appId, rows.map((r) => r.roleId)],
    );
    return named.rows;
  },

  async unassign(q: Queryable, appId: string, roleId: string, userId: string): Promise<boolean> {
    const { rows } = await q.query<{ n: number }>(
      `WITH d AS (DELETE FROM role_assignments WHERE app_id = $1 AND role_id = $2 AND user_id = $3 RETURNING ${ASSIGNMENT_RETURNING}),
            ${recordChanges("c", "assignment_removed", "d", CHANGE_BODY.assignment)}
       SELECT count(*)::int AS n FROM d`,
      [appId, roleId, userId],
    );
    return rows[0]!.n > 0;
  },

  async listAssignments(q: Queryable, appId: string, roleId: string, after: Cursor, limit: number): Promise<AssignmentRow[]> {
    const { rows } = await q.query<AssignmentRow>(
      `SELECT ${ASSIGNMENT_COLUMNS} FROM role_assignments
       WHERE app_id = $1 AND role_id = $2 AND ($3::timestamptz IS NULL OR (created_at, user_id) > ($3::timestamptz, $4))
       ORDER BY created_at, user_id LIMIT $5`,
      [appId, roleId, after?.createdAt ?? null, after?.id ?? "", limit],
    );
    return rows;
  },
};
