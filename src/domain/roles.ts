import type { AbortOptions, Db, Queryable } from "../store/db.js";
import { auditStore } from "../store/audit-store.js";
import { policiesStore } from "../store/policies-store.js";
import { modelStore } from "../store/model-store.js";
import { rolePermissionsStore } from "../store/role-permissions-store.js";
import { rolesStore, type AssignmentRow, type RoleRow } from "../store/roles-store.js";
import { isUniqueViolation } from "../store/sqlstate.js";
import { requireApplication, type Page } from "./applications.js";
import { conditionProblem } from "./conditions.js";
import { alreadyExists, notFound, Violations } from "./errors.js";
import { check, descriptionProblem, ensure, identifierProblem, nameProblem, pageSize } from "./formats.js";
import { newId } from "../lib/ids.js";
import { decodeTimeCursor, page, timeCursor } from "./paging.js";
import { listChange } from "./permissions.js";
import type { Principal } from "./principal.js";

export interface RoleInput {
  name: string;
  description: string;
  policyIds: string[];
  tenantId: string | undefined;
}

export interface RoleChange {
  name?: string;
  description?: string;
  policyIds?: string[];
}

/** Roles, the policies they attach, and their assignments to users. */
export class Roles {
  constructor(private readonly db: Db) {}

  async create(actor: Principal, appId: string, input: RoleInput, options?: AbortOptions): Promise<RoleRow> {
    const v = new Violations();
    check(v, "name", nameProblem(input.name));
    check(v, "description", descriptionProblem(input.description));
    if (input.tenantId !== undefined) check(v, "tenantId", identifierProblem(input.tenantId));
    v.throwIfAny();
    const roleId = newId("rol");
    return this.db.transaction(async (tx) => {
      await requireApplication(tx, appId);
      await rolePermissionsStore.lockModel(tx, appId);
      const policyIds = await resolvePolicies(tx, appId, input.policyIds, input.tenantId ?? null);
      try {
        await rolesStore.insert(tx, appId, { roleId, name: input.name, description: input.description, tenantId: input.tenantId });
      } catch (error) {
        if (isUniqueViolation(error) /* the id is new: only the name can collide */) throw nameTaken(input.name, input.tenantId ?? null);
        throw error;
      }
      await rolesStore.setPolicies(tx, appId, roleId, policyIds);
      await rolePermissionsStore.refresh(tx, appId, [roleId]);
      await auditStore.append(tx, {
        appId,
        type: "role.created",
        actorKeyId: actor.keyId,
        targetType: "role",
        targetId: roleId,
        data: { name: input.name, policyIds, ...(input.tenantId === undefined ? {} : { tenantId: input.tenantId }) },
      });
      return (await rolesStore.get(tx, appId, roleId))!;
    }, options);
  }

  async get(appId: string, roleId: string): Promise<RoleRow> {
    await requireApplication(this.db, appId);
    const row = await rolesStore.get(this.db, appId, roleId);
    if (row === undefined) throw roleNotFound(appId, roleId);
    return row;
  }

  async list(appId: string, tenantId: string | undefined, size: number | undefined, token: string): Promise<Page<RoleRow>> {
    const limit = pageSize(size);
    if (tenantId !== undefined) ensure("tenantId", identifierProblem(tenantId));
    const after = decodeTimeCursor(token);
    await requireApplication(this.db, appId);
    const rows = await rolesStore.list(this.db, appId, tenantId, after, limit + 1);
    return page(rows, limit, (last) => timeCursor(last.createdAt, last.roleId));
  }

  async update(actor: Principal, appId: string, roleId: string, change: RoleChange, options?: AbortOptions): Promise<RoleRow> {
    const v = new Violations();
    if (change.name !== undefined) check(v, "name", nameProblem(change.name));
    if (change.description !== undefined) check(v, "description", descriptionProblem(change.description));
    v.throwIfAny();
    return this.db.transaction(async (tx) => {
      await requireApplication(tx, appId);
      await rolePermissionsStore.lockModel(tx, appId);
      const locked = await rolesStore.lock(tx, appId, roleId);
      if (locked === undefined) throw roleNotFound(appId, roleId);
      const before = (await rolesStore.get(tx, appId, roleId))!;
      const policyIds = change.policyIds === undefined ? undefined : await resolvePolicies(tx, appId, change.policyIds, locked.tenantId);
      const renamed = change.name !== undefined && change.name !== before.name ? change.name : undefined;
      const described = change.description !== undefined && change.description !== before.description ? change.description : undefined;
      const reattached = policyIds !== undefined && policyIds.join("\n") !== before.policyIds.join("\n");
      if (renamed === undefined && described === undefined && !reattached) return before;

      try {
        await rolesStore.update(tx, appId, roleId, { name: renamed, description: described });
      } catch (error) {
        if (isUniqueViolation(error) /* of what changed, only the name is unique */) throw nameTaken(change.name!, locked.tenantId);
        throw error;
      }
      const attachments = reattached ? listChange(before.policyIds, policyIds!) : { added: [], removed: [] };
      if (reattached) {
        await rolesStore.setPolicies(tx, appId, roleId, policyIds!);
        await rolePermissionsStore.refresh(tx, appId, [roleId]);
      }
      await auditStore.append(tx, {
        appId,
        type: "role.updated",
        actorKeyId: actor.keyId,
        targetType: "role",
        targetId: roleId,
        data: {
          ...(renamed === undefined ? {} : { name: { from: before.name, to: renamed } }),
          ...(described === undefined ? {} : { descriptionChanged: true }),
          policiesAttached: attachments.added,
          policiesDetached: attachments.removed,
        },
      });
      return (await rolesStore.get(tx, appId, roleId))!;
    }, options);
  }

  /** Deletes the role with its policy attachments and assignments. */
  async delete(actor: Principal, appId: string, roleId: string, options?: AbortOptions): Promise<void> {
    await this.db.transaction(async (tx) => {
      await requireApplication(tx, appId);
      await rolePermissionsStore.lockModel(tx, appId);
      if ((await rolesStore.lock(tx, appId, roleId)) === undefined) throw roleNotFound(appId, roleId);
      const role = (await rolesStore.get(tx, appId, roleId))!;
      const assignmentsRemoved = await rolesStore.delete(tx, appId, roleId);
      await modelStore.bump(tx, appId); // its permissions went with it (ON DELETE CASCADE)
      await auditStore.append(tx, {
        appId,
        type: "role.deleted",
        actorKeyId: actor.keyId,
        targetType: "role",
        targetId: roleId,
        data: { name: role.name, policyIds: role.policyIds, assignmentsRemoved },
      });
    }, options);
  }

  /**
   * Assigns the role to a user, with a condition or none; `created` is false
   * when it already was (its condition then replaced by the one given, which
   * is logged as an assignment; the same one again changes nothing).
   */
  async assign(
    actor: Principal,
    appId: string,
    roleId: string,
    userId: string,
    options?: AbortOptions,
    condition?: string,
  ): Promise<{ row: AssignmentRow; created: boolean }> {
    ensure("userId", identifierProblem(userId));
    if (condition !== undefined && condition !== "") ensure("condition", conditionProblem(condition));
    const stored = condition === undefined || condition === "" ? null : condition;
    return this.db.transaction(async (tx) => {
      await this.requireRole(tx, appId, roleId);
      const result = await rolesStore.assign(tx, appId, roleId, userId, stored);
      if (result.created || result.replaced) {
        await auditStore.append(tx, {
          appId,
          type: "role.assigned",
          actorKeyId: actor.keyId,
          targetType: "role",
          targetId: roleId,
          data: stored === null ? { userId } : { userId, condition: stored },
        });
      }
      return { row: result.row, created: result.created };
    }, options);
  }

  async unassign(actor: Principal, appId: string, roleId: string, userId: string, options?: AbortOptions): Promise<boolean> {
    ensure("userId", identifierProblem(userId));
    return this.db.transaction(async (tx) => {
      await this.requireRole(tx, appId, roleId);
      const deleted = await rolesStore.unassign(tx, appId, roleId, userId);
      if (deleted) {
        await auditStore.append(tx, {
          appId,
          type: "role.unassigned",
          actorKeyId: actor.keyId,
          targetType: "role",
          targetId: roleId,
          data: { userId },
        });
      }
      return deleted;
    }, options);
  }

  /**
   * Offboarding: removes every role assignment of the user in one
   * transaction, recorded as one event naming the roles (none when the user
   * had no role: nothing changed). Returns the roles removed.
   */
  async unassignUser(actor: Principal, appId: string, userId: string, options?: AbortOptions): Promise<string[]> {
    ensure("userId", identifierProblem(userId));
    return this.db.transaction(async (tx) => {
      await requireApplication(tx, appId);
      const removed = await rolesStore.unassignUser(tx, appId, userId);
      if (removed.length > 0) {
        await auditStore.append(tx, {
          appId,
          type: "user.roles_removed",
          actorKeyId: actor.keyId,
          targetType: "user",
          targetId: userId,
          data: {
            userId,
            roles: removed.map((r) => ({ roleId: r.roleId, name: r.name, ...(r.tenantId === null ? {} : { tenantId: r.tenantId }) })),
          },
        });
      }
      return removed.map((r) => r.roleId);
    }, options);
  }

  async assignments(appId: string, roleId: string, size: number | undefined, token: string): Promise<Page<AssignmentRow>> {
    const limit = pageSize(size);
    const after = decodeTimeCursor(token);
    await this.requireRole(this.db, appId, roleId);
    const rows = await rolesStore.listAssignments(this.db, appId, roleId, after, limit + 1);
    return page(rows, limit, (last) => timeCursor(last.createdAt, last.userId));
  }

  async userRoles(appId: string, userId: string, size: number | undefined, token: string): Promise<Page<RoleRow>> {
    const limit = pageSize(size);
    ensure("userId", identifierProblem(userId));
    const after = decodeTimeCursor(token);
    await requireApplication(this.db, appId);
    const rows = await rolesStore.listByUser(this.db, appId, userId, after, limit + 1);
    return page(rows, limit, (last) => timeCursor(last.createdAt, last.roleId));
  }

  private async requireRole(q: Queryable, appId: string, roleId: string): Promise<void> {
    await requireApplication(q, appId);
    // FOR KEY SHARE: keeps the role from being deleted under this transaction
    // without blocking other assignments to it.
    const { rows } = await q.query("SELECT 1 FROM roles WHERE app_id = $1 AND role_id = $2 FOR KEY SHARE", [appId, roleId]);
    if (rows.length === 0) throw roleNotFound(appId, roleId);
  }
}

/**
 * Checks the policy ids a role will attach: each must exist, and a
 * tenant-scoped policy attaches only to a role of the same tenant. Folds
 * duplicates, keeping first order. Locks the policies (KEY SHARE) so a
 * concurrent delete waits for this transaction and then sees the attachment.
 */
async function resolvePolicies(q: Queryable, appId: string, policyIds: string[], roleTenant: string | null): Promise<string[]> {
  const tenants = await policiesStore.tenants(q, appId, policyIds);
  const v = new Violations();
  const folded: string[] = [];
  policyIds.forEach((policyId, i) => {
    const at = `policyIds[${i}]`;
    if (!tenants.has(policyId)) {
      v.add(at, `policy "${policyId}" does not exist`);
      return;
    }
    const policyTenant = tenants.get(policyId)!;
    if (policyTenant !== null && policyTenant !== roleTenant) {
      v.add(
        at,
        `policy "${policyId}" belongs to tenant "${policyTenant}" and cannot be attached to ${roleTenant === null ? "an application-wide role" : `a role of tenant "${roleTenant}"`}`,
      );
      return;
    }
    if (!folded.includes(policyId)) folded.push(policyId);
  });
  v.throwIfAny();
  return folded;
}

const roleNotFound = (appId: string, roleId: string) => notFound(`role "${roleId}" does not exist in application "${appId}"`);

const nameTaken = (name: string, tenantId: string | null) =>
  alreadyExists(
    `a role named "${name}" already exists ${tenantId === null ? "among the application-wide roles" : `in tenant "${tenantId}"`}`,
    [{ field: "name", value: name }],
  );
