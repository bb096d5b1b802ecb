import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import { ChangeService } from "../../gen/authz/v1/changes_pb.js";
import type { ChangeFeed, ChangeView } from "../domain/change-feed.js";
import { auditEventMessage } from "./audit-service.js";
import { callerKeyOf } from "./call-values.js";
import { relationshipMessage } from "./relationship-service.js";
import { assignmentMessage } from "./role-service.js";

/** A change as the API gives it: kind, token, when, and the one part its kind has. */
const changeMessage = (c: ChangeView) => ({
  kind: c.kind,
  token: c.token,
  changedAt: timestampFromDate(c.changedAt),
  change:
    c.grant !== undefined
      ? { case: "grant" as const, value: relationshipMessage(c.grant) }
      : c.assignment !== undefined
        ? { case: "assignment" as const, value: assignmentMessage(c.assignment) }
        : { case: "modelEvent" as const, value: auditEventMessage(c.modelEvent!) },
});

export function changeService(feed: ChangeFeed): ServiceImpl<typeof ChangeService> {
  return {
    async listChanges(req, ctx) {
      const page = await feed.page(callerKeyOf(ctx), req.after, req.pageSize, req.waitMs, ctx.signal);
      return { changes: page.changes.map(changeMessage), nextToken: page.nextToken };
    },

    async *watch(req, ctx) {
      for await (const change of feed.watch(callerKeyOf(ctx), req.after, ctx.signal)) yield { change: changeMessage(change) };
    },
  };
}
