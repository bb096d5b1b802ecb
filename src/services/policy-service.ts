import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  PolicyService,
  type PolicySchema,
  type PreviewPolicyUpdateRequest,
  type UpdatePolicyRequest,
} from "../../gen/authz/v1/policies_pb.js";
import type { Policies, PolicyChange } from "../domain/policies.js";
import type { PolicyRow } from "../store/policies-store.js";
import { markCreated, principalOf } from "./call-values.js";
import { roleMessage } from "./role-service.js";
import { maskedFields } from "./update-mask.js";
import { callLimits } from "./call-limits.js";

export const policyMessage = (row: PolicyRow): MessageInitShape<typeof PolicySchema> => ({
  policyId: row.policyId,
  name: row.name,
  description: row.description,
  permissions: row.permissions,
  ...(row.tenantId === null ? {} : { tenantId: row.tenantId }),
  ...(row.condition === null ? {} : { condition: row.condition }),
  roleCount: row.roleCount,
  createdAt: timestampFromDate(row.createdAt),
  updatedAt: timestampFromDate(row.updatedAt),
});

/** The fields an update (or its preview) changes: those of its mask, or the ones set (see maskedFields). */
function policyChangeOf(req: UpdatePolicyRequest | PreviewPolicyUpdateRequest): PolicyChange {
  const fields = maskedFields(req.updateMask, { name: req.name, description: req.description, permissions: req.permissions, condition: req.condition });
  return {
    ...(fields.has("name") ? { name: req.name ?? "" } : {}),
    ...(fields.has("description") ? { description: req.description ?? "" } : {}),
    ...(fields.has("permissions") ? { permissions: req.permissions } : {}),
    ...(fields.has("condition") ? { condition: req.condition ?? "" } : {}),
  };
}

export function policyService(policies: Policies): ServiceImpl<typeof PolicyService> {
  return {
    async createPolicy(req, ctx) {
      const row = await policies.create(principalOf(ctx), req.appId, {
        name: req.name,
        description: req.description,
        permissions: req.permissions,
        tenantId: req.tenantId,
        condition: req.condition,
      }, callLimits(ctx));
      markCreated(ctx);
      return { policy: policyMessage(row) };
    },
    async listPolicies(req) {
      const { items, nextPageToken } = await policies.list(req.appId, req.tenantId, req.pageSize, req.pageToken);
      return { policies: items.map(policyMessage), nextPageToken };
    },
    async getPolicy(req) {
      return { policy: policyMessage(await policies.get(req.appId, req.policyId)) };
    },
    async listPolicyRoles(req) {
      const { items, nextPageToken } = await policies.roles(req.appId, req.policyId, req.pageSize, req.pageToken);
      return { roles: items.map(roleMessage), nextPageToken };
    },
    async updatePolicy(req, ctx) {
      const row = await policies.update(principalOf(ctx), req.appId, req.policyId, policyChangeOf(req), callLimits(ctx));
      return { policy: policyMessage(row) };
    },
    async previewPolicyUpdate(req, ctx) {
      const impact = await policies.preview(req.appId, req.policyId, policyChangeOf(req), callLimits(ctx));
      return {
        added: impact.added,
        removed: impact.removed,
        roles: impact.roles.map((r) => ({
          roleId: r.roleId,
          name: r.name,
          ...(r.tenantId === null ? {} : { tenantId: r.tenantId }),
          assignmentCount: r.assignmentCount,
        })),
        users: impact.users,
        conditionalAdded: impact.conditionalAdded,
        conditionalRemoved: impact.conditionalRemoved,
      };
    },
    async deletePolicy(req, ctx) {
      const { detachedRoleIds } = await policies.delete(principalOf(ctx), req.appId, req.policyId, req.force, callLimits(ctx));
      return { policyId: req.policyId, deleted: true, detachedRoleIds };
    },
  };
}
