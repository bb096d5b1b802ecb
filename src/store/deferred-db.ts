import type { AbortOptions, Db, PoolUse, Queryable, QueryResult, ReadBatching, Snapshot, Transaction, TransactionOptions } from "./db.js";
import { DatabaseUnavailableError } from "./sqlstate.js";

/**
 * A Db that is still opening: the service listens at once (so /healthz
 * answers while a fresh embedded database is being created, which takes
 * seconds), and calls that arrive meanwhile wait for the database instead of
 * failing. Once open, it is a thin pass-through.
 *
 * Nothing is opened until start(): the service first binds its port, so a
 * start that cannot serve (the port is taken) never touches the database.
 */
export class DeferredDb implements Db {
  private db: Db | undefined;
  readonly opened: Promise<Db>;
  private begin: (() => void) | undefined;
  private started = false;

  constructor(
    readonly engine: Db["engine"],
    readonly reads: ReadBatching,
    open: () => Promise<Db>,
  ) {
    this.opened = new Promise<void>((resolve) => (this.begin = resolve)).then(open).then((db) => (this.db = db));
    // Callers see the failure through `opened` and through each call.
    this.opened.catch(() => undefined);
  }

  /** Opens the database (once). */
  start(): void {
    this.started = true;
    this.begin?.();
    this.begin = undefined;
  }

  get isOpen(): boolean {
    return this.db !== undefined;
  }

  private async target(): Promise<Db> {
    if (this.db !== undefined) return this.db;
    try {
      return await this.opened;
    } catch (cause) {
      throw new DatabaseUnavailableError({ cause });
    }
  }

  async query<R>(sql: string, params?: readonly unknown[], options?: AbortOptions): Promise<QueryResult<R>> {
    return (this.db ?? (await this.target())).query<R>(sql, params, options);
  }

  async exec(sql: string): Promise<void> {
    return (await this.target()).exec(sql);
  }

  async transaction<T>(fn: (tx: Transaction) => Promise<T>, options?: TransactionOptions): Promise<T> {
    return (this.db ?? (await this.target())).transaction(fn, options);
  }

  async transactionOf<R>(sql: string, params: readonly unknown[], options?: TransactionOptions): Promise<QueryResult<R>> {
    return (this.db ?? (await this.target())).transactionOf<R>(sql, params, options);
  }

  /** As the engine's: PGlite's reads run apart, Postgres's hold a transaction. */
  get snapshotMarks(): boolean {
    return this.engine === "pglite";
  }

  async snapshot<T>(fn: (q: Queryable) => Promise<T>, options?: AbortOptions): Promise<Snapshot<T>> {
    return (this.db ?? (await this.target())).snapshot(fn, options);
  }

  poolUse(): PoolUse | undefined {
    return this.db?.poolUse?.();
  }

  watchConnectWait(observer: (seconds: number) => void): void {
    this.opened.then((db) => db.watchConnectWait?.(observer), () => undefined);
  }

  async close(): Promise<void> {
    if (!this.started) return; // never opened: nothing to close
    const db = await this.opened.catch(() => undefined);
    await db?.close();
  }
}
