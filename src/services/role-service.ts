import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import { RoleService, type RoleAssignmentSchema, type RoleSchema } from "../../gen/authz/v1/roles_pb.js";
import type { Roles } from "../domain/roles.js";
import type { AssignmentRow, RoleRow } from "../store/roles-store.js";
import { markCreated, principalOf } from "./call-values.js";
import { maskedFields } from "./update-mask.js";
import { callLimits } from "./call-limits.js";

export const roleMessage = (row: RoleRow): MessageInitShape<typeof RoleSchema> => ({
  roleId: row.roleId,
  name: row.name,
  description: row.description,
  policyIds: row.policyIds,
  ...(row.tenantId === null ? {} : { tenantId: row.tenantId }),
  createdAt: timestampFromDate(row.createdAt),
  updatedAt: timestampFromDate(row.updatedAt),
});

export const assignmentMessage = (row: AssignmentRow): MessageInitShape<typeof RoleAssignmentSchema> => ({
  roleId: row.roleId,
  userId: row.userId,
  createdAt: timestampFromDate(row.createdAt),
  ...(row.condition === null ? {} : { condition: row.condition }),
});

export function roleService(roles: Roles): ServiceImpl<typeof RoleService> {
  return {
    async createRole(req, ctx) {
      const row = await roles.create(principalOf(ctx), req.appId, {
        name: req.name,
        description: req.description,
        policyIds: req.policyIds,
        tenantId: req.tenantId,
      }, callLimits(ctx));
      markCreated(ctx);
      return { role: roleMessage(row) };
    },
    async listRoles(req) {
      const { items, nextPageToken } = await roles.list(req.appId, req.tenantId, req.pageSize, req.pageToken);
      return { roles: items.map(roleMessage), nextPageToken };
    },
    async getRole(req) {
      return { role: roleMessage(await roles.get(req.appId, req.roleId)) };
    },
    async updateRole(req, ctx) {
      const fields = maskedFields(req.updateMask, { name: req.name, description: req.description, policy_ids: req.policyIds });
      const row = await roles.update(principalOf(ctx), req.appId, req.roleId, {
        ...(fields.has("name") ? { name: req.name ?? "" } : {}),
        ...(fields.has("description") ? { description: req.description ?? "" } : {}),
        ...(fields.has("policy_ids") ? { policyIds: req.policyIds } : {}),
      }, callLimits(ctx));
      return { role: roleMessage(row) };
    },
    async deleteRole(req, ctx) {
      await roles.delete(principalOf(ctx), req.appId, req.roleId, callLimits(ctx));
      return { roleId: req.roleId, deleted: true };
    },
    async assignRole(req, ctx) {
      const { row, created } = await roles.assign(principalOf(ctx), req.appId, req.roleId, req.userId, callLimits(ctx), req.condition);
      if (created) markCreated(ctx);
      return { assignment: assignmentMessage(row) };
    },
    async unassignRole(req, ctx) {
      return { deleted: await roles.unassign(principalOf(ctx), req.appId, req.roleId, req.userId, callLimits(ctx)) };
    },
    async listRoleAssignments(req) {
      const { items, nextPageToken } = await roles.assignments(req.appId, req.roleId, req.pageSize, req.pageToken);
      return { assignments: items.map(assignmentMessage), nextPageToken };
    },
    async listUserRoles(req) {
      const { items, nextPageToken } = await roles.userRoles(req.appId, req.userId, req.pageSize, req.pageToken);
      return { roles: items.map(roleMessage), nextPageToken };
    },
    async deleteUserRoles(req, ctx) {
      const roleIds = await roles.unassignUser(principalOf(ctx), req.appId, req.userId, callLimits(ctx));
      return { deleted: roleIds.length, roleIds };
    },
  };
}
