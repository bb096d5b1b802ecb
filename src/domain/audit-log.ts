import type { Db } from "../store/db.js";
import { applicationsStore } from "../store/applications-store.js";
import { auditStore, type AuditEventRow } from "../store/audit-store.js";
import { requireApplication, type Page } from "./applications.js";
import { ensure, pageSize } from "./formats.js";
import { decodePageToken, page } from "./paging.js";
import { ENV_OPERATOR_KEY_ID } from "./principal.js";

export interface AuditEventView extends AuditEventRow {
  /** The actor key's name; the key id itself when no key row has it. */
  actorKeyName: string;
}

/** Reading the audit log; events are written by each change's own transaction. */
export class AuditLog {
  constructor(private readonly db: Db) {}

  async list(
    appId: string,
    filter: { type: string | undefined; targetId: string | undefined },
    size: number | undefined,
    pageToken: string,
  ): Promise<Page<AuditEventView>> {
    const limit = pageSize(size);
    if (filter.type !== undefined) ensure("type", filter.type === "" ? "must not be empty" : undefined);
    if (filter.targetId !== undefined) ensure("targetId", filter.targetId === "" ? "must not be empty" : undefined);
    const before = decodePageToken(pageToken, { seq: "number" });
    await requireApplication(this.db, appId);
    const rows = await auditStore.list(this.db, appId, filter, before?.seq as number | undefined, limit + 1);
    const result = page(rows, limit, (last) => ({ seq: last.seq }));
    // A second, small statement rather than a join: api_keys is a reference
    // table, and the environment's operator key has no row at all.
    const ids = [...new Set(result.items.map((e) => e.actorKeyId))].filter((id) => id !== ENV_OPERATOR_KEY_ID);
    const names = ids.length === 0 ? new Map<string, string>() : await applicationsStore.keyNames(this.db, ids);
    return {
      ...result,
      items: result.items.map((e) => ({ ...e, actorKeyName: e.actorKeyId === ENV_OPERATOR_KEY_ID ? ENV_OPERATOR_KEY_ID : (names.get(e.actorKeyId) ?? e.actorKeyId) })),
    };
  }
}
