import type { AbortOptions, Db, Queryable, TransactionLock } from "../store/db.js";
import { modelStore } from "../store/model-store.js";
import { applicationLock as storeApplicationLock, applicationsStore, type ApiKeyRow, type ApplicationRow } from "../store/applications-store.js";
import { auditStore } from "../store/audit-store.js";
import { alreadyExists, notFound } from "./errors.js";
import { appIdProblem, ensure, nameProblem, pageSize } from "./formats.js";
import { hashKey, newId, newKeySecret } from "../lib/ids.js";
import { decodePageToken, decodeTimeCursor, page, timeCursor } from "./paging.js";
import type { Principal } from "./principal.js";
import { scopesOfNewKey } from "./scopes.js";

export interface Page<T> {
  items: T[];
  nextPageToken: string;
}

/** Fails with 404 unless the application exists. */
export async function requireApplication(q: Queryable, appId: string): Promise<ApplicationRow> {
  ensure("appId", appIdProblem(appId));
  const app = await applicationsStore.get(q, appId);
  if (app === undefined) throw notFound(`application "${appId}" does not exist`);
  return app;
}

/**
 * Inside a transaction: fails with 404 unless the application exists, and
 * locks its row. Catalog replacement takes it FOR UPDATE; writers whose
 * validity depends on the catalog (policies, grants) take it FOR SHARE, so
 * they never interleave with a catalog change.
 */
export async function lockApplication(q: Queryable, appId: string, mode: "update" | "share"): Promise<void> {
  ensure("appId", appIdProblem(appId));
  if (!(await applicationsStore.lock(q, appId, mode))) throw notFound(`application "${appId}" does not exist`);
}

/**
 * The application's lock for a transaction to take first (Db.transaction's
 * `lock`), the id's form checked before: as lockApplication, but in the
 * round trip of BEGIN; the transaction itself asks whether the application
 * exists (requireApplication) where it needs to.
 */
export function applicationLock(appId: string, mode: "update" | "share"): TransactionLock {
  ensure("appId", appIdProblem(appId));
  return storeApplicationLock(appId, mode);
}

/** Applications and their API keys. */
export class Applications {
  constructor(private readonly db: Db) {}

  async create(actor: Principal, appId: string, name: string | undefined, options?: AbortOptions): Promise<ApplicationRow> {
    ensure("appId", appIdProblem(appId));
    if (name !== undefined) ensure("name", nameProblem(name));
    return this.db.transaction(async (tx) => {
      const app = await applicationsStore.insert(tx, appId, name ?? appId);
      if (app === undefined) throw alreadyExists(`application "${appId}" already exists`);
      await modelStore.create(tx, appId);
      await auditStore.append(tx, {
        appId,
        type: "application.created",
        actorKeyId: actor.keyId,
        targetType: "application",
        targetId: appId,
        data: { name: app.name },
      });
      return app;
    }, options);
  }

  async get(appId: string): Promise<ApplicationRow> {
    return requireApplication(this.db, appId);
  }

  async list(size: number | undefined, pageToken: string): Promise<Page<ApplicationRow>> {
    const limit = pageSize(size);
    const after = decodePageToken(pageToken, { appId: "string" });
    const rows = await applicationsStore.list(this.db, after?.appId as string | undefined, limit + 1);
    return page(rows, limit, (last) => ({ appId: last.appId }));
  }

  /** Creates a key; the secret is in the answer and nowhere else. */
  async createKey(
    actor: Principal,
    appId: string,
    name: string,
    askedScopes: readonly string[],
    options?: AbortOptions,
  ): Promise<{ row: ApiKeyRow; key: string }> {
    ensure("name", nameProblem(name));
    const scopes = scopesOfNewKey(askedScopes, actor.scopes);
    return this.db.transaction(async (tx) => {
      await requireApplication(tx, appId);
      const key = newKeySecret();
      const row = await applicationsStore.insertKey(tx, {
        keyId: newId("key"),
        appId,
        kind: "application",
        name,
        secretHash: hashKey(key),
        scopes,
      });
      if (row === undefined) throw new Error("API key id or secret collided"); // 2^-80: a bug, not bad luck
      await auditStore.append(tx, {
        appId,
        type: "api_key.created",
        actorKeyId: actor.keyId,
        targetType: "api_key",
        targetId: row.keyId,
        data: { name, scopes },
      });
      return { row, key };
    }, options);
  }

  async listKeys(appId: string, size: number | undefined, pageToken: string): Promise<Page<ApiKeyRow>> {
    const limit = pageSize(size);
    const after = decodeTimeCursor(pageToken);
    await requireApplication(this.db, appId);
    const rows = await applicationsStore.listKeys(this.db, appId, after, limit + 1);
    return page(rows, limit, (last) => timeCursor(last.createdAt, last.keyId));
  }

  async revokeKey(actor: Principal, appId: string, keyId: string, options?: AbortOptions): Promise<ApiKeyRow> {
    return this.db.transaction(async (tx) => {
      await requireApplication(tx, appId);
      const row = await applicationsStore.revokeKey(tx, appId, keyId);
      if (row === undefined) throw notFound(`API key "${keyId}" does not exist in application "${appId}"`);
      await auditStore.append(tx, {
        appId,
        type: "api_key.revoked",
        actorKeyId: actor.keyId,
        targetType: "api_key",
        targetId: keyId,
        data: { name: row.name },
      });
      return row;
    }, options);
  }
}
