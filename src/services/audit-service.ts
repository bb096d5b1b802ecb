import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { JsonObject } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { AuditService } from "../../gen/authz/v1/audit_pb.js";
import type { AuditLog, AuditEventView } from "../domain/audit-log.js";

/** An audit event as the API gives it (the audit log, and the change feed's model_changed). */
export const auditEventMessage = (e: AuditEventView) => ({
  eventId: e.eventId,
  type: e.type,
  occurredAt: timestampFromDate(e.occurredAt),
  actorKeyId: e.actorKeyId,
  actorKeyName: e.actorKeyName,
  targetType: e.targetType,
  targetId: e.targetId,
  data: e.data as JsonObject,
});

export function auditService(audit: AuditLog): ServiceImpl<typeof AuditService> {
  return {
    async listAuditEvents(req) {
      const { items, nextPageToken } = await audit.list(req.appId, { type: req.type, targetId: req.targetId }, req.pageSize, req.pageToken);
      return {
        events: items.map(auditEventMessage),
        nextPageToken,
      };
    },
  };
}
