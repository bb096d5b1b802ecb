import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { JsonObject } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { AuditService } from "../../gen/authz/v1/audit_pb.js";
import type { AuditLog } from "../domain/audit-log.js";

export function auditService(audit: AuditLog): ServiceImpl<typeof AuditService> {
  return {
    async listAuditEvents(req) {
      const { items, nextPageToken } = await audit.list(req.appId, { type: req.type, targetId: req.targetId }, req.pageSize, req.pageToken);
      return {
        events: items.map((e) => ({
          eventId: e.eventId,
          type: e.type,
          occurredAt: timestampFromDate(e.occurredAt),
          actorKeyId: e.actorKeyId,
          actorKeyName: e.actorKeyName,
          targetType: e.targetType,
          targetId: e.targetId,
          data: e.data as JsonObject,
        })),
        nextPageToken,
      };
    },
  };
}
