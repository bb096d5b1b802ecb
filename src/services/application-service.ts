import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import { ApplicationService } from "../../gen/authz/v1/applications_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ApplicationSchema } from "../../gen/authz/v1/applications_pb.js";
import type { Applications } from "../domain/applications.js";
import type { ApplicationRow } from "../store/applications-store.js";
import { markCreated, principalOf } from "./call-values.js";
import { callLimits } from "./call-limits.js";

const application = (row: ApplicationRow): MessageInitShape<typeof ApplicationSchema> => ({
  appId: row.appId,
  name: row.name,
  createdAt: timestampFromDate(row.createdAt),
});

export function applicationService(apps: Applications): ServiceImpl<typeof ApplicationService> {
  return {
    async createApplication(req, ctx) {
      const row = await apps.create(principalOf(ctx), req.appId, req.name, callLimits(ctx));
      markCreated(ctx);
      return { application: application(row) };
    },
    async listApplications(req) {
      const { items, nextPageToken } = await apps.list(req.pageSize, req.pageToken);
      return { applications: items.map(application), nextPageToken };
    },
    async getApplication(req) {
      return { application: application(await apps.get(req.appId)) };
    },
    async createApiKey(req, ctx) {
      const { row, key } = await apps.createKey(principalOf(ctx), req.appId, req.name, req.scopes, callLimits(ctx));
      markCreated(ctx);
      return { keyId: row.keyId, name: row.name, key, createdAt: timestampFromDate(row.createdAt), scopes: row.scopes };
    },
    async listApiKeys(req) {
      const { items, nextPageToken } = await apps.listKeys(req.appId, req.pageSize, req.pageToken);
      return {
        apiKeys: items.map((k) => ({ keyId: k.keyId, name: k.name, createdAt: timestampFromDate(k.createdAt), scopes: k.scopes })),
        nextPageToken,
      };
    },
    getCurrentKey(_req, ctx) {
      const caller = principalOf(ctx);
      return {
        keyId: caller.keyId,
        kind: caller.kind,
        ...(caller.kind === "application" ? { appId: caller.appId } : {}),
        scopes: [...caller.scopes],
      };
    },
    async deleteApiKey(req, ctx) {
      const row = await apps.revokeKey(principalOf(ctx), req.appId, req.keyId, callLimits(ctx));
      return { keyId: row.keyId, deleted: true };
    },
  };
}

