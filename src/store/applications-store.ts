import { lockStatement, type Queryable, type TimeCursor, type TransactionLock } from "./db.js";

export interface ApplicationRow {
  appId: string;
  name: string;
  createdAt: Date;
}

export interface ApiKeyRow {
  keyId: string;
  appId: string | null;
  kind: "operator" | "application";
  name: string;
  createdAt: Date;
  scopes: string[];
}

const APP_COLUMNS = "app_id AS \"appId\", name, created_at AS \"createdAt\"";
const KEY_COLUMNS = "key_id AS \"keyId\", app_id AS \"appId\", kind, name, created_at AS \"createdAt\", scopes";

/**
 * An application's lock (see applicationsStore.lock), for transaction() to
 * take in the round trip of its BEGIN; the transaction then asks
 * applicationsStore.get whether the application exists, where it needs to.
 */
export const applicationLock = (appId: string, mode: "update" | "share"): TransactionLock => ({ space: 2, key: appId, shared: mode === "share" });

/** SQL for applications and their API keys. */
export const applicationsStore = {
  /** Inserts the application; false when the id is taken. */
  async insert(q: Queryable, appId: string, name: string): Promise<ApplicationRow | undefined> {
    const { rows } = await q.query<ApplicationRow>(
      `INSERT INTO applications (app_id, name) VALUES ($1, $2)
       ON CONFLICT (app_id) DO NOTHING RETURNING ${APP_COLUMNS}`,
      [appId, name],
    );
    return rows[0];
  },

  async get(q: Queryable, appId: string): Promise<ApplicationRow | undefined> {
    const { rows } = await q.query<ApplicationRow>(`SELECT ${APP_COLUMNS} FROM applications WHERE app_id = $1`, [appId]);
    return rows[0];
  },

  /**
   * Takes the application's lock until the transaction ends (exclusive, or
   * shared with other "share" holders): writers of one application's
   * catalog-dependent data serialize on it. Then says whether the
   * application exists (applications are never deleted, so the order of the
   * two does not matter).
   *
   * An advisory lock, not a row lock on `applications`: on Citus that is a
   * reference table, whose row locks become table locks on every node and
   * deadlocked concurrent writers. The lock's statement names no table, so
   * on Citus it runs on the coordinator, where every writer takes it.
   */
  async lock(q: Queryable, appId: string, mode: "update" | "share"): Promise<boolean> {
    await q.query(lockStatement(applicationLock(appId, mode), "$1"), [appId]);
    const { rows } = await q.query("SELECT 1 FROM applications WHERE app_id = $1", [appId]);
    return rows.length > 0;
  },

  /** Applications after `afterAppId`, in id order. */
  async list(q: Queryable, afterAppId: string | undefined, limit: number): Promise<ApplicationRow[]> {
    const { rows } = await q.query<ApplicationRow>(
      `SELECT ${APP_COLUMNS} FROM applications WHERE app_id > $1 ORDER BY app_id LIMIT $2`,
      [afterAppId ?? "", limit],
    );
    return rows;
  },

  async insertKey(
    q: Queryable,
    key: { keyId: string; appId: string | null; kind: ApiKeyRow["kind"]; name: string; secretHash: string; scopes: readonly string[] },
  ): Promise<ApiKeyRow | undefined> {
    // ON CONFLICT DO NOTHING: only the generated operator key can conflict
    // (one live at a time), when replicas start together.
    const { rows } = await q.query<ApiKeyRow>(
      `INSERT INTO api_keys (key_id, app_id, kind, name, secret_hash, scopes) VALUES ($1, $2, $3, $4, $5, $6)
       ON CONFLICT DO NOTHING RETURNING ${KEY_COLUMNS}`,
      [key.keyId, key.appId, key.kind, key.name, key.secretHash, key.scopes],
    );
    return rows[0];
  },

  /** The live keys with any of these secret hashes, each with its hash. */
  async findKeysByHashes(q: Queryable, secretHashes: string[]): Promise<(ApiKeyRow & { secretHash: string })[]> {
    const { rows } = await q.query<ApiKeyRow & { secretHash: string }>(
      `SELECT ${KEY_COLUMNS}, secret_hash AS "secretHash" FROM api_keys
       WHERE secret_hash = ANY($1::text[]) AND revoked_at IS NULL`,
      [secretHashes],
    );
    return rows;
  },

  /**
   * The names of keys by id, revoked ones included (the audit log names its
   * actors). api_keys is a reference table and is read alone here.
   */
  async keyNames(q: Queryable, keyIds: string[]): Promise<Map<string, string>> {
    const { rows } = await q.query<{ keyId: string; name: string }>(
      `SELECT key_id AS "keyId", name FROM api_keys WHERE key_id = ANY($1::text[])`,
      [keyIds],
    );
    return new Map(rows.map((r) => [r.keyId, r.name]));
  },

  async hasOperatorKey(q: Queryable): Promise<boolean> {
    const { rows } = await q.query("SELECT 1 FROM api_keys WHERE kind = 'operator' AND revoked_at IS NULL");
    return rows.length > 0;
  },

  /** Live keys of the application after the (createdAt, keyId) cursor. */
  async listKeys(
    q: Queryable,
    appId: string,
    after: TimeCursor | undefined,
    limit: number,
  ): Promise<ApiKeyRow[]> {
    const { rows } = await q.query<ApiKeyRow>(
      `SELECT ${KEY_COLUMNS} FROM api_keys
       WHERE app_id = $1 AND revoked_at IS NULL AND ($2::timestamptz IS NULL OR (created_at, key_id) > ($2::timestamptz, $3))
       ORDER BY created_at, key_id LIMIT $4`,
      [appId, after?.createdAt ?? null, after?.id ?? "", limit],
    );
    return rows;
  },

  /** Revokes a live key of the application; the revoked row, or undefined. */
  async revokeKey(q: Queryable, appId: string, keyId: string): Promise<ApiKeyRow | undefined> {
    const { rows } = await q.query<ApiKeyRow>(
      `UPDATE api_keys SET revoked_at = now() WHERE app_id = $1 AND key_id = $2 AND revoked_at IS NULL
       RETURNING ${KEY_COLUMNS}`,
      [appId, keyId],
    );
    return rows[0];
  },
};
