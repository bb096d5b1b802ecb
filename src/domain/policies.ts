import type { AbortOptions, Db } from "../store/db.js";
import { auditStore } from "../store/audit-store.js";
import { impactStore, type ImpactRole } from "../store/impact-store.js";
import { userImpact, type UserImpact } from "./impact.js";
import { policiesStore, type PolicyRow } from "../store/policies-store.js";
import { rolePermissionsStore } from "../store/role-permissions-store.js";
import { rolesStore, type RoleRow } from "../store/roles-store.js";
import { isUniqueViolation } from "../store/sqlstate.js";
import { lockApplication, requireApplication, type Page } from "./applications.js";
import { alreadyExists, failedPrecondition, notFound, Violations } from "./errors.js";
import { check, descriptionProblem, ensure, identifierProblem, nameProblem, pageSize } from "./formats.js";
import { newId } from "../lib/ids.js";
import { storedCondition } from "./conditions.js";
import { conditionalKey } from "./models.js";
import { decodeTimeCursor, page, timeCursor } from "./paging.js";
import { listChange, resolvePermissions } from "./permissions.js";
import type { Principal } from "./principal.js";

export interface PolicyInput {
  name: string;
  description: string;
  permissions: string[];
  tenantId: string | undefined;
  /** A CEL condition (conditions.ts) under which the permissions hold; absent or "": none. */
  condition?: string | undefined;
}

/** A partial update: only the fields present change. */
export interface PolicyChange {
  name?: string;
  description?: string;
  permissions?: string[];
  /** The new condition; "" removes it. */
  condition?: string;
}

/** What an update of a policy would change (see Policies.preview). */
export interface PolicyImpact {
  /** Permissions gained and lost outright. */
  added: string[];
  removed: string[];
  /** Permissions gained and lost under a condition. */
  conditionalAdded: { permission: string; condition: string }[];
  conditionalRemoved: { permission: string; condition: string }[];
  roles: ImpactRole[];
  users: UserImpact;
}

/** Policies: named bundles of catalog permissions. */
export class Policies {
  constructor(private readonly db: Db) {}

  async create(actor: Principal, appId: string, input: PolicyInput, options?: AbortOptions): Promise<PolicyRow> {
    const v = new Violations();
    check(v, "name", nameProblem(input.name));
    check(v, "description", descriptionProblem(input.description));
    if (input.tenantId !== undefined) check(v, "tenantId", identifierProblem(input.tenantId));
    const condition = storedCondition(v, "condition", input.condition);
    v.throwIfAny();
    const policyId = newId("pol");
    return this.db.transaction(async (tx) => {
      await lockApplication(tx, appId, "share");
      const permissions = await resolvePermissions(tx, appId, input.permissions);
      try {
        await policiesStore.insert(tx, appId, { policyId, name: input.name, description: input.description, tenantId: input.tenantId, condition });
      } catch (error) {
        if (isUniqueViolation(error) /* the id is new: only the name can collide */) throw nameTaken(appId, input.name);
        throw error;
      }
      await policiesStore.setPermissions(tx, appId, policyId, permissions);
      await auditStore.append(tx, {
        appId,
        type: "policy.created",
        actorKeyId: actor.keyId,
        targetType: "policy",
        targetId: policyId,
        data: {
          name: input.name,
          permissions,
          ...(input.tenantId === undefined ? {} : { tenantId: input.tenantId }),
          ...(condition === null ? {} : { condition }),
        },
      });
      return (await policiesStore.get(tx, appId, policyId))!;
    }, options);
  }

  async get(appId: string, policyId: string): Promise<PolicyRow> {
    await requireApplication(this.db, appId);
    return requirePolicy(await policiesStore.get(this.db, appId, policyId), appId, policyId);
  }

  async list(appId: string, tenantId: string | undefined, size: number | undefined, token: string): Promise<Page<PolicyRow>> {
    const limit = pageSize(size);
    if (tenantId !== undefined) ensure("tenantId", identifierProblem(tenantId));
    const after = decodeTimeCursor(token);
    await requireApplication(this.db, appId);
    const rows = await policiesStore.list(this.db, appId, tenantId, after, limit + 1);
    return page(rows, limit, (last) => timeCursor(last.createdAt, last.policyId));
  }

  /** The roles the policy is attached to. */
  async roles(appId: string, policyId: string, size: number | undefined, token: string): Promise<Page<RoleRow>> {
    const limit = pageSize(size);
    const after = decodeTimeCursor(token);
    await this.get(appId, policyId);
    const rows = await rolesStore.listByPolicy(this.db, appId, policyId, after, limit + 1);
    return page(rows, limit, (last) => timeCursor(last.createdAt, last.roleId));
  }

  async update(actor: Principal, appId: string, policyId: string, change: PolicyChange, options?: AbortOptions): Promise<PolicyRow> {
    const v = new Violations();
    if (change.name !== undefined) check(v, "name", nameProblem(change.name));
    if (change.description !== undefined) check(v, "description", descriptionProblem(change.description));
    const condition = change.condition === undefined ? undefined : storedCondition(v, "condition", change.condition);
    v.throwIfAny();
    return this.db.transaction(async (tx) => {
      await lockApplication(tx, appId, "share");
      await rolePermissionsStore.lockModel(tx, appId);
      if (!(await policiesStore.lock(tx, appId, policyId))) throw policyNotFound(appId, policyId);
      const before = (await policiesStore.get(tx, appId, policyId))!;
      const permissions = change.permissions === undefined ? undefined : await resolvePermissions(tx, appId, change.permissions);
      const renamed = change.name !== undefined && change.name !== before.name ? change.name : undefined;
      const described = change.description !== undefined && change.description !== before.description ? change.description : undefined;
      const permissionChange = permissions === undefined ? { added: [], removed: [] } : listChange(before.permissions, permissions);
      const reordered = permissions !== undefined && permissions.join("\n") !== before.permissions.join("\n");
      const conditioned = condition !== undefined && condition !== before.condition;
      if (renamed === undefined && described === undefined && !reordered && !conditioned) return before; // nothing changes: no event

      try {
        await policiesStore.update(tx, appId, policyId, { name: renamed, description: described, ...(conditioned ? { condition } : {}) });
      } catch (error) {
        if (isUniqueViolation(error) /* of what changed, only the name is unique */) throw nameTaken(appId, change.name!);
        throw error;
      }
      if (reordered) await policiesStore.setPermissions(tx, appId, policyId, permissions!);
      if (reordered || conditioned) await rolePermissionsStore.refresh(tx, appId, await policiesStore.attachedRoleIds(tx, appId, policyId));
      await auditStore.append(tx, {
        appId,
        type: "policy.updated",
        actorKeyId: actor.keyId,
        targetType: "policy",
        targetId: policyId,
        data: {
          ...(renamed === undefined ? {} : { name: { from: before.name, to: renamed } }),
          ...(described === undefined ? {} : { descriptionChanged: true }),
          permissionsAdded: permissionChange.added,
          permissionsRemoved: permissionChange.removed,
          ...(conditioned ? { condition: { from: before.condition, to: condition } } : {}),
        },
      });
      return (await policiesStore.get(tx, appId, policyId))!;
    }, options);
  }

  /**
   * What `update` with the same change would do to access, changing nothing
   * and logging nothing: the permissions added and removed, the roles the
   * policy is attached to, and the users who would gain or lose an effective
   * permission (impact.ts). The same refusals as the update (a bad field,
   * an unknown permission, no such policy), but for a name another policy
   * holds, which only the write can know for sure. One snapshot
   * (Db.snapshot), so the counts match one state of the model even while
   * it changes.
   */
  async preview(appId: string, policyId: string, change: PolicyChange, options?: AbortOptions): Promise<PolicyImpact> {
    const v = new Violations();
    if (change.name !== undefined) check(v, "name", nameProblem(change.name));
    if (change.description !== undefined) check(v, "description", descriptionProblem(change.description));
    const condition = change.condition === undefined ? undefined : storedCondition(v, "condition", change.condition);
    v.throwIfAny();
    const { value } = await this.db.snapshot(async (q) => {
      await requireApplication(q, appId);
      const before = requirePolicy(await policiesStore.get(q, appId, policyId), appId, policyId);
      const permissions = change.permissions === undefined ? before.permissions : await resolvePermissions(q, appId, change.permissions);
      // Each permission keyed with the condition it holds under: a
      // condition's change removes every permission under the old one and
      // adds it under the new.
      const keysBefore = before.permissions.map((p) => conditionalKey(p, before.condition));
      const keysAfter = permissions.map((p) => conditionalKey(p, condition === undefined ? before.condition : condition));
      const { added, removed } = listChange(keysBefore, keysAfter);
      const roles = await impactStore.roles(q, appId, policyId);
      const groups = await impactStore.roleSets(q, appId, policyId);
      const sources = added.length === 0 && removed.length === 0 ? [] : await impactStore.sources(q, appId, policyId, [...added, ...removed].map(baseOf));
      return {
        added: added.filter(isOutright),
        removed: removed.filter(isOutright),
        conditionalAdded: added.filter((k) => !isOutright(k)).map(splitKey),
        conditionalRemoved: removed.filter((k) => !isOutright(k)).map(splitKey),
        roles,
        users: userImpact(groups, sources, roles, added, removed),
      };
    }, options);
    return value;
  }

  /**
   * Deletes the policy. While roles use it, only with `force`: then every
   * attachment goes too, in the same transaction, recorded as one event.
   */
  async delete(actor: Principal, appId: string, policyId: string, force: boolean, options?: AbortOptions): Promise<{ detachedRoleIds: string[] }> {
    return this.db.transaction(async (tx) => {
      await requireApplication(tx, appId);
      await rolePermissionsStore.lockModel(tx, appId);
      if (!(await policiesStore.lock(tx, appId, policyId))) throw policyNotFound(appId, policyId);
      const policy = (await policiesStore.get(tx, appId, policyId))!;
      const roleIds = await policiesStore.attachedRoleIds(tx, appId, policyId);
      if (roleIds.length > 0 && !force) {
        throw failedPrecondition(
          `policy "${policy.name}" is attached to ${roleIds.length} role${roleIds.length === 1 ? "" : "s"}; detach it first, or delete with force=true`,
          roleIds.map((roleId) => ({ roleId })),
        );
      }
      await policiesStore.delete(tx, appId, policyId);
      await rolePermissionsStore.refresh(tx, appId, roleIds);
      await auditStore.append(tx, {
        appId,
        type: "policy.deleted",
        actorKeyId: actor.keyId,
        targetType: "policy",
        targetId: policyId,
        data: { name: policy.name, permissions: policy.permissions, force, detachedRoleIds: roleIds },
      });
      return { detachedRoleIds: roleIds };
    }, options);
  }
}

const isOutright = (key: string) => !key.includes("\n");
const baseOf = (key: string) => key.split("\n", 1)[0]!;
const splitKey = (key: string) => {
  const newline = key.indexOf("\n");
  return { permission: key.slice(0, newline), condition: key.slice(newline + 1) };
};

function requirePolicy(row: PolicyRow | undefined, appId: string, policyId: string): PolicyRow {
  if (row === undefined) throw policyNotFound(appId, policyId);
  return row;
}

const policyNotFound = (appId: string, policyId: string) =>
  notFound(`policy "${policyId}" does not exist in application "${appId}"`);

const nameTaken = (appId: string, name: string) =>
  alreadyExists(`a policy named "${name}" already exists in application "${appId}"`, [{ field: "name", value: name }]);
