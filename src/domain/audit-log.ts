import type { Db, Queryable } from "../store/db.js";
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
    const nameOf = await actorNames(this.db, result.items.map((e) => e.actorKeyId));
    return { ...result, items: result.items.map((e) => ({ ...e, actorKeyName: nameOf(e.actorKeyId) })) };
  }
}

/**
 * The names of the keys that made audit events (the audit log's, and the
 * change feed's model events): the key's name, "operator" for the
 * environment's operator key, the id itself when no key row has it. A
 * second, small statement rather than a join: api_keys is a reference
 * table, and the environment's operator key has no row at all.
 */
export async function actorNames(q: Queryable, keyIds: string[]): Promise<(keyId: string) => string> {
  const ids = [...new Set(keyIds)].filter((id) => id !== ENV_OPERATOR_KEY_ID);
  const names = ids.length === 0 ? new Map<string, string>() : await applicationsStore.keyNames(q, ids);
  return (keyId) => (keyId === ENV_OPERATOR_KEY_ID ? ENV_OPERATOR_KEY_ID : (names.get(keyId) ?? keyId));
}
