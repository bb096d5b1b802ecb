import { PGlite, types as pgliteTypes } from "@electric-sql/pglite";
import { parseInt8, type Db, type Queryable, type QueryResult, type ReadBatching } from "./db.js";
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

  private constructor(private readonly pg: PGlite) {}

  /** Opens (creating when needed) the database in `dataDir`; in memory when undefined. */
  static async open(dataDir: string | undefined): Promise<PgliteDb> {
    const pg = await PGlite.create({
      ...(dataDir === undefined ? {} : { dataDir }),
      parsers: { [pgliteTypes.INT8]: parseInt8 },
    });
    return new PgliteDb(pg);
  }

  async query<R>(sql: string, params?: readonly unknown[]): Promise<QueryResult<R>> {
    return toResult<R>(await this.pg.query<R>(sql, params as unknown[]));
  }

  async exec(sql: string): Promise<void> {
    await this.pg.exec(sql);
  }

  async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.pg.transaction(async (handle) =>
          fn({ query: async <R>(sql: string, params?: readonly unknown[]) => toResult<R>(await handle.query<R>(sql, params as unknown[])) }),
        );
      } catch (error) {
        if (attempt < MAX_ATTEMPTS && isRetryable(error)) continue;
        throw error;
      }
    }
  }

  async close(): Promise<void> {
    await this.pg.close();
  }
}

function toResult<R>(result: { rows: R[]; affectedRows?: number }): QueryResult<R> {
  return { rows: result.rows, rowCount: result.affectedRows ?? result.rows.length };
}
