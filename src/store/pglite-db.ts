import { PGlite, types as pgliteTypes } from "@electric-sql/pglite";
import {
  isStopped,
  parseInt8,
  stopReason,
  throwIfStopped,
  type AbortOptions,
  type Db,
  type Queryable,
  type QueryResult,
  type ReadBatching,
} from "./db.js";
import { lockDataDir, type DataDirLock } from "./data-dir-lock.js";
import { isRetryable } from "./sqlstate.js";

const MAX_ATTEMPTS = 5;

/**
 * The embedded engine: PGlite, Postgres compiled to WebAssembly, in-process,
 * keeping its files in a data folder (or in memory when no folder is given,
 * as the tests do). It is a single connection, so statements are serialized.
 */
/**
 * One connection: one batch at a time, everything else queues into the
 * next; and a batch gathers the requests of one I/O phase, since none is
 * read while a statement runs.
 */
export const PGLITE_READS: ReadBatching = { concurrency: 1, gather: true };

export class PgliteDb implements Db {
  readonly engine = "pglite" as const;
  readonly reads = PGLITE_READS;

  private constructor(
    private readonly pg: PGlite,
    private readonly lock: DataDirLock | undefined,
  ) {}

  /**
   * Opens (creating when needed) the database in `dataDir`, whose lock it
   * takes first (data-dir-lock.ts: a folder held by a live process is
   * refused, before a byte of it is read); in memory when undefined.
   */
  static async open(dataDir: string | undefined): Promise<PgliteDb> {
    const lock = dataDir === undefined ? undefined : lockDataDir(dataDir);
    try {
      const pg = await PGlite.create({
        ...(dataDir === undefined ? {} : { dataDir }),
        parsers: { [pgliteTypes.INT8]: parseInt8 },
      });
      return new PgliteDb(pg, lock);
    } catch (error) {
      lock?.release();
      throw error;
    }
  }

  async query<R>(sql: string, params?: readonly unknown[], options?: AbortOptions): Promise<QueryResult<R>> {
    throwIfStopped(options);
    return toResult<R>(await this.pg.query<R>(sql, params as unknown[]));
  }

  async exec(sql: string): Promise<void> {
    await this.pg.exec(sql);
  }

  /**
   * With `options`: PGlite runs on this very thread, so a statement cannot
   * be cancelled while it runs (nothing here runs until it ends); the
   * caller's signal and deadline are checked when the transaction gets the
   * connection, before every statement and before COMMIT, and a throw there
   * rolls back. Before COMMIT the event loop reads what arrived while the
   * statements ran, so a caller who gave up during them is seen. What cannot
   * be honoured: a cancel that reaches the socket after that read, while
   * COMMIT itself runs (on Postgres, likewise, once COMMIT is sent).
   */
  async transaction<T>(fn: (tx: Queryable) => Promise<T>, options?: AbortOptions): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      throwIfStopped(options);
      try {
        return await this.pg.transaction(async (handle) => {
          throwIfStopped(options); // it may have waited for the connection
          const result = await fn({
            query: async <R>(sql: string, params?: readonly unknown[]) => {
              throwIfStopped(options);
              return toResult<R>(await handle.query<R>(sql, params as unknown[]));
            },
          });
          if (options?.signal !== undefined) {
            // The statements ran on this thread, so a cancel that arrived
            // meanwhile is still unread on its socket: let the event loop's
            // I/O phase read it (setImmediate runs after it) before deciding.
            await new Promise((resolve) => setImmediate(resolve));
          }
          throwIfStopped(options); // never COMMIT for a caller who gave up
          return result;
        });
      } catch (error) {
        if (options !== undefined && isStopped(options)) throw stopReason(options, error);
        if (attempt < MAX_ATTEMPTS && isRetryable(error)) continue;
        throw error;
      }
    }
  }

  async close(): Promise<void> {
    try {
      await this.pg.close();
    } finally {
      this.lock?.release();
    }
  }
}

function toResult<R>(result: { rows: R[]; affectedRows?: number }): QueryResult<R> {
  return { rows: result.rows };
}
