import type { Db } from "../store/db.js";
import { auditStore, type AuditEventRow } from "../store/audit-store.js";
import { requireApplication, type Page } from "./applications.js";
import { ensure, pageSize } from "./formats.js";
import { decodePageToken, page } from "./paging.js";

/** Reading the audit log; events are written by each change's own transaction. */
export class AuditLog {
  constructor(private readonly db: Db) {}

  async list(
    appId: string,
    filter: { type: string | undefined; targetId: string | undefined },
    size: number | undefined,
    pageToken: string,
  ): Promise<Page<AuditEventRow>> {
    const limit = pageSize(size);
    if (filter.type !== undefined) ensure("type", filter.type === "" ? "must not be empty" : undefined);
    if (filter.targetId !== undefined) ensure("targetId", filter.targetId === "" ? "must not be empty" : undefined);
    const before = decodePageToken(pageToken, { seq: "number" });
    await requireApplication(this.db, appId);
    const rows = await auditStore.list(this.db, appId, filter, before?.seq as number | undefined, limit + 1);
    return page(rows, limit, (last) => ({ seq: last.seq }));
  }
}
