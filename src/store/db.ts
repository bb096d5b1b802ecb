/**
 * The database engine seam. Portcullis speaks one SQL dialect (Postgres), so
 * the SQL of the stores is written once against `Queryable`; what differs per
 * engine (a `pg` pool, or embedded PGlite) is only how statements reach it.
 */

export interface QueryResult<R> {
  rows: R[];
  rowCount: number;
}

/** Something statements can run on: the database, or one open transaction. */
export interface Queryable {
  query<R = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<QueryResult<R>>;
}

/** How coalesced reads are batched on an engine (the Coalescer's options, but for the batch size). */
export interface ReadBatching {
  /**
   * How many statements it is worth running at once: coalesced reads keep
   * at most this many batches in flight and leave the rest of the pool to
   * writes.
   */
  readonly concurrency: number;
  /** The same once `at` reads wait: statements that full are worth running side by side. */
  readonly burst?: { readonly at: number; readonly concurrency: number };
  /**
   * Statements run on this very thread (PGlite): no request is read while
   * one runs, so a batch waits for the current I/O phase to end before it
   * starts (see Coalescer).
   */
  readonly gather?: boolean;
}

export interface Db extends Queryable {
  /** "postgres" or "pglite", for logs and readiness answers. */
  readonly engine: "postgres" | "pglite";
  /** How coalesced reads (key lookups, checks) are best batched on this engine. */
  readonly reads: ReadBatching;
  /**
   * Runs `fn` in one transaction: it commits when `fn` resolves and rolls back
   * when it throws. Inside, use only `tx` (PGlite is one connection: a query on
   * the outer handle would wait for this very transaction). A transaction that
   * fails with a serialization failure or deadlock is retried from the start,
   * so `fn` must have no effects outside the database.
   */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
  /** Runs a script of several statements without parameters (migrations). */
  exec(sql: string): Promise<void>;
  close(): Promise<void>;
}

/** A page position in (created_at, id) order; createdAt is ISO 8601 with milliseconds. */
export type TimeCursor = { createdAt: string; id: string };

/** int8 comes back as a JS number from both engines (counts and ids stay far below 2^53). */
export const parseInt8 = (value: string): number => Number(value);
