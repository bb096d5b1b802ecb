import { createHash } from "node:crypto";
import pg from "pg";
import { parseInt8, type Db, type Queryable, type QueryResult, type ReadBatching } from "./db.js";
import { DatabaseUnavailableError, isRetryable, isUnavailable } from "./sqlstate.js";

const INT8_OID = 20;

/**
 * Statements with parameters run as named prepared statements: Postgres then
 * plans each once per connection instead of on every call (the check query
 * takes milliseconds to plan and well under one to run). The name is derived
 * from the text, so the same SQL always maps to the same statement.
 */
const statementNames = new Map<string, string>();
function statement(sql: string, params: readonly unknown[] | undefined): pg.QueryConfig {
  if (params === undefined || params.length === 0) return { text: sql };
  let name = statementNames.get(sql);
  if (name === undefined) {
    name = `pcs_${createHash("sha1").update(sql).digest("hex").slice(0, 16)}`;
    statementNames.set(sql, name);
  }
  return { name, text: sql, values: params as unknown[] };
}
const MAX_ATTEMPTS = 5;

// Per-pool type parsers, so the process-wide pg.types stay untouched.
const types = {
  getTypeParser(oid: number, format?: "text" | "binary") {
    if (oid === INT8_OID && format !== "binary") return parseInt8;
    return pg.types.getTypeParser(oid, format);
  },
} as unknown as pg.CustomTypesConfig;

/**
 * Coalesced-read batches in flight: one. While it runs, the checks that
 * arrive queue up and go together in the next statement, so under load each
 * statement answers dozens of checks. Measured on 2 cores with the service,
 * Postgres and the load generator together (`npm run bench`): one
 * batch in flight served 16k checks/s at 18 µs of Postgres CPU per check,
 * two served 10k at 45 µs, four 7k at 95 µs: more, smaller statements cost
 * Postgres more per check and leave the service less CPU. Writes use the
 * rest of the pool.
 *
 * ...unless 20 or more wait: then up to four run at once. A statement of 20
 * questions is worth a round trip of its own, and with batch checks of
 * hundreds Postgres's parallelism counts most. Measured (checks at 50 in
 * flight, three runs of each kind alternated): 21.5k checks/s against 16.8k
 * with one statement at a time; batch checks of 100: 115-128k checks/s
 * against 73-76k.
 */
export const PG_READS: ReadBatching = { concurrency: 1, burst: { at: 20, concurrency: 4 } };

/** The `pg` engine: a connection pool on a real Postgres (or a compatible distributed database). */
export class PgDb implements Db {
  readonly engine = "postgres" as const;
  readonly reads = PG_READS;
  private readonly pool: pg.Pool;
  /** Clients whose connection failed while checked out, with the error. */
  private readonly lost = new WeakMap<pg.PoolClient, Error>();

  constructor(connectionString: string, options: { max: number; onError: (error: Error) => void }) {
    this.pool = new pg.Pool({
      connectionString,
      max: options.max,
      types,
      connectionTimeoutMillis: 5_000,
      idleTimeoutMillis: 30_000,
      application_name: "portcullis",
    });
    // An idle client losing its connection must not crash the process.
    this.pool.on("error", options.onError);
    // Nor may a checked-out one: its "error" event has no other listener.
    // The failed call then answers UNAVAILABLE (see failure()).
    this.pool.on("connect", (client) => {
      client.on("error", (error) => this.lost.set(client as pg.PoolClient, error));
    });
  }

  async query<R>(sql: string, params?: readonly unknown[]): Promise<QueryResult<R>> {
    const client = await this.connect();
    try {
      return toResult<R>(await client.query(statement(sql, params)));
    } catch (error) {
      throw this.failure(client, error);
    } finally {
      client.release(this.lost.get(client));
    }
  }

  async exec(sql: string): Promise<void> {
    await this.query(sql);
  }

  async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const client = await this.connect();
      let broken: Error | undefined;
      try {
        await client.query("BEGIN");
        const tx: Queryable = {
          query: async <R>(sql: string, params?: readonly unknown[]) => toResult<R>(await client.query(statement(sql, params))),
        };
        const result = await fn(tx);
        await client.query("COMMIT");
        return result;
      } catch (error) {
        await client.query("ROLLBACK").catch((rollbackError: Error) => {
          broken = rollbackError; // the connection is gone: do not reuse it
        });
        if (attempt < MAX_ATTEMPTS && isRetryable(error)) continue;
        throw this.failure(client, error);
      } finally {
        client.release(broken ?? this.lost.get(client));
      }
    }
  }

  async close(): Promise<void> {
    await this.pool.end();
  }

  /**
   * An error from a client whose connection broke carries no SQLSTATE;
   * known by the client's own error event, it becomes "unavailable".
   */
  private failure(client: pg.PoolClient, error: unknown): unknown {
    return this.lost.has(client) && !isUnavailable(error) ? new DatabaseUnavailableError({ cause: error }) : error;
  }

  private async connect(): Promise<pg.PoolClient> {
    try {
      return await this.pool.connect();
    } catch (cause) {
      throw new DatabaseUnavailableError({ cause });
    }
  }
}

function toResult<R>(result: pg.QueryResult): QueryResult<R> {
  return { rows: result.rows as R[], rowCount: result.rowCount ?? 0 };
}
