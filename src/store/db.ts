import type { PoolUse } from "../lib/metrics.js";

export type { PoolUse };

/**
 * The database engine seam. Portcullis speaks one SQL dialect (Postgres), so
 * the SQL of the stores is written once against `Queryable`; what differs per
 * engine (a `pg` pool, or embedded PGlite) is only how statements reach it.
 */

/**
 * A statement's rows. There is deliberately no row count: Citus reports an
 * INSERT ... ON CONFLICT DO NOTHING's count as the rows sent, not the rows
 * inserted, so a write that must count says RETURNING and counts the rows
 * (see docs/scale-out.md).
 */
export interface QueryResult<R> {
  rows: R[];
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

/**
 * What lets a caller stop the work it no longer waits for: the client went
 * away, or its deadline passed. Plain values, so the domain passes them on
 * without knowing the transport.
 */
export interface AbortOptions {
  /** Aborts when the caller gives up; its reason is what the call then throws. */
  readonly signal?: AbortSignal;
  /**
   * When the caller stops waiting (Date.now() milliseconds). Postgres is told
   * too (statement_timeout), so it stops a statement on its own even if the
   * cancel from here never arrives.
   */
  readonly deadline?: number;
}

/**
 * The caller's deadline passed with no signal to say so (or before its
 * timer fired), or Postgres's statement_timeout set from it stopped a
 * statement: nothing was committed.
 */
export class DeadlinePassedError extends Error {
  constructor(options?: { cause: unknown }) {
    super("the call's deadline passed before the database finished; nothing was changed", options);
    this.name = "DeadlinePassedError";
  }
}

/** Whether the caller stopped waiting. */
export function isStopped(options: AbortOptions | undefined): boolean {
  if (options === undefined) return false;
  return options.signal?.aborted === true || (options.deadline !== undefined && Date.now() >= options.deadline);
}

/** Why the caller stopped waiting: the signal's reason, else the passed deadline. */
export function stopReason(options: AbortOptions, cause?: unknown): unknown {
  if (options.signal?.aborted === true) return options.signal.reason;
  return new DeadlinePassedError(cause === undefined ? undefined : { cause });
}

/** Throws why the caller stopped waiting, if it did: checked before every statement and before COMMIT. */
export function throwIfStopped(options: AbortOptions | undefined): void {
  if (options !== undefined && isStopped(options)) throw stopReason(options);
}

/**
 * A transaction-scoped advisory lock (pg_advisory_xact_lock) that a
 * transaction takes before its first statement and holds to its end. Given
 * to transaction() or transactionOf() rather than run by `fn`, so that on
 * Postgres it travels in the round trip of BEGIN: a new grant's write is
 * one round trip (BEGIN, the lock, the write and COMMIT: transactionOf).
 */
export interface TransactionLock {
  /** The lock's first key: which kind of thing it locks. */
  readonly space: number;
  /** Hashed (hashtext) into the lock's second key. */
  readonly key: string;
  /** Shared with other shared holders, or exclusive. */
  readonly shared: boolean;
}

/** The lock's statement, with `key` the SQL of its key (a parameter, or a quoted literal). */
export const lockStatement = (lock: TransactionLock, key: string): string =>
  `SELECT pg_advisory_xact_lock${lock.shared ? "_shared" : ""}(${lock.space}, hashtext(${key}))`;

export interface TransactionOptions extends AbortOptions {
  /** Taken first, held to the end. */
  readonly lock?: TransactionLock;
}

/** An open transaction: its statements, and the one it may end with. */
export interface Transaction extends Queryable {
  /**
   * Runs `sql` among the transaction's last statements, sent with its COMMIT
   * where the engine can (Postgres: one round trip, their parameters written
   * as literals, sql-literals.ts), so that what they lock is held for no
   * round trip and no turn of the service's event loop: the change feed's
   * clock (changes-store.ts, seal). Their rows are not returned; a failure
   * fails the transaction as any statement's would. Several run in the
   * order given; once one is given, query() throws: nothing runs after them.
   */
  atCommit(sql: string, params: readonly unknown[]): void;
}

/** A transaction's statements given to atCommit, for an engine to send with COMMIT. */
export class AtCommit {
  private readonly given: { sql: string; params: readonly unknown[] }[] = [];

  add(sql: string, params: readonly unknown[]): void {
    this.given.push({ sql, params });
  }

  /** Throws when a statement is to run after the last ones. */
  checkOpen(): void {
    if (this.given.length > 0) throw new Error("a statement after the transaction's last ones (atCommit): nothing runs after them");
  }

  get statements(): readonly { sql: string; params: readonly unknown[] }[] {
    return this.given;
  }
}

/**
 * Runs `sql` as `q`'s last statement: at its COMMIT when `q` is a
 * Transaction, now otherwise (a statement on its own, or a wrapper's
 * transaction that passes on only query()).
 */
export async function lastStatement(q: Queryable, sql: string, params: readonly unknown[]): Promise<void> {
  if (typeof (q as Partial<Transaction>).atCommit === "function") (q as Transaction).atCommit(sql, params);
  else await q.query(sql, params);
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
   *
   * With `options`: nothing starts once the caller stopped waiting; when it
   * stops during the transaction, the statement in flight is cancelled (on
   * Postgres; PGlite runs each to its end), the transaction rolls back and
   * the call throws the signal's reason (DeadlinePassedError for a deadline
   * without one). It never commits after that, and is not retried. With
   * `options.lock`, that lock is taken before `fn` runs.
   */
  transaction<T>(fn: (tx: Transaction) => Promise<T>, options?: TransactionOptions): Promise<T>;
  /**
   * One statement in a transaction of its own: `options.lock`, the
   * statement, COMMIT. On Postgres all of it in one round trip (a simple
   * query, its parameters written as literals: sql-literals.ts; when they
   * cannot be, as transaction() would run it), so a lock the statement takes
   * is held only while Postgres runs it and commits. Retried, stopped and
   * failed as transaction() is.
   */
  transactionOf<R = Record<string, unknown>>(sql: string, params: readonly unknown[], options?: TransactionOptions): Promise<QueryResult<R>>;
  /**
   * Reads that see one state of the database, changing nothing (a plan, an
   * export). On Postgres a `REPEATABLE READ, READ ONLY` transaction
   * (heldSnapshot). On PGlite, one connection, a transaction would hold it
   * from the first read to the last, JavaScript between them included, and
   * every other statement would wait: there each read runs on its own, and
   * the reads count as one state when no write came between them
   * (writeMark before and after); else they are read again, and after
   * SNAPSHOT_ATTEMPTS in a held transaction. Stopped as transaction() is.
   */
  snapshot<T>(fn: (q: Queryable) => Promise<T>, options?: AbortOptions): Promise<Snapshot<T>>;
  /** Whether snapshot() runs its reads each on its own and says their write mark (PGlite), rather than holding a transaction. */
  readonly snapshotMarks: boolean;
  /**
   * One statement on its own, stopped like a transaction's when the caller
   * gives up. Not for coalesced reads: they answer many callers at once.
   */
  query<R = Record<string, unknown>>(sql: string, params?: readonly unknown[], options?: AbortOptions): Promise<QueryResult<R>>;
  /** Runs a script of several statements without parameters (migrations). */
  exec(sql: string): Promise<void>;
  close(): Promise<void>;
  /** The pool's connections now, for the metrics (a pg pool; PGlite has none). */
  poolUse?(): PoolUse | undefined;
  /** Tells `observer` the seconds each statement or transaction waited for a connection (a pg pool). */
  watchConnectWait?(observer: (seconds: number) => void): void;
}

/** A page position in (created_at, id) order; createdAt is ISO 8601 with milliseconds. */
export type TimeCursor = { createdAt: string; id: string };

/** int8 comes back as a JS number from both engines (counts and ids stay far below 2^53). */
export const parseInt8 = (value: string): number => Number(value);

/** The database as a Queryable whose every statement is a transaction of its own, after `options.lock` (see Db.transactionOf). */
export function eachATransaction(db: Db, options: TransactionOptions): Queryable {
  return { query: (sql, params) => db.transactionOf(sql, params ?? [], options) };
}

/** The database as a Queryable whose every statement stops when the caller does (see Db.query). */
export function stoppable(db: Db, options: AbortOptions | undefined): Queryable {
  return options === undefined ? db : { query: (sql, params) => db.query(sql, params, options) };
}

/** What Db.snapshot read, and, where its reads ran each on its own (PGlite), the write mark they saw. */
export interface Snapshot<T> {
  readonly value: T;
  /**
   * The write mark all the reads saw (PGlite): a transaction whose first
   * statement reads the same mark (writeMark) starts from the state the
   * reads saw. Undefined where the reads held a transaction of their own.
   */
  readonly mark?: string;
}

/** Reads run again with no write between them, before Db.snapshot holds a transaction instead. */
export const SNAPSHOT_ATTEMPTS = 3;

/**
 * The database's write mark: the first transaction id not yet assigned.
 * Every write takes a transaction id, so the mark moves with each write
 * and with nothing else (a read takes none). On PGlite, one connection, no
 * transaction is open while a statement outside one runs: two equal marks
 * read outside transactions mean that no write committed between them.
 */
export async function writeMark(q: Queryable): Promise<string> {
  const { rows } = await q.query<{ mark: string }>("SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS mark");
  return rows[0]!.mark;
}

/** Db.snapshot as one `REPEATABLE READ, READ ONLY` transaction. */
export async function heldSnapshot<T>(db: Db, fn: (q: Queryable) => Promise<T>, options?: AbortOptions): Promise<Snapshot<T>> {
  const value = await db.transaction(async (tx) => {
    await tx.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY");
    return fn(tx);
  }, options);
  return { value };
}
