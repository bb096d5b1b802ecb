import type { Tracing } from "../lib/tracing.js";
import type { AbortOptions, Db, PoolUse, Queryable, QueryResult, ReadBatching, Snapshot, Transaction, TransactionOptions } from "./db.js";

/**
 * A Db whose statements and transactions each run in a span, a child of the
 * current span (the RPC's, or a coalesced statement's): the database time a
 * call waited for, in its trace. Used only when tracing is on (app.ts wraps
 * the database in it then), so with tracing off no statement pays for it.
 */
export class TracedDb implements Db {
  constructor(
    private readonly inner: Db,
    private readonly tracing: Tracing,
  ) {}

  get engine(): Db["engine"] {
    return this.inner.engine;
  }

  get reads(): ReadBatching {
    return this.inner.reads;
  }

  query<R>(sql: string, params?: readonly unknown[], options?: AbortOptions): Promise<QueryResult<R>> {
    return this.tracing.database(sql, () => this.inner.query<R>(sql, params, options));
  }

  transaction<T>(fn: (tx: Transaction) => Promise<T>, options?: TransactionOptions): Promise<T> {
    return this.tracing.database(undefined, () =>
      this.inner.transaction(
        (tx) =>
          fn({
            query: <R>(sql: string, params?: readonly unknown[]) => this.tracing.database(sql, () => tx.query<R>(sql, params)),
            atCommit: (sql, params) => tx.atCommit(sql, params),
          }),
        options,
      ),
    );
  }

  transactionOf<R>(sql: string, params: readonly unknown[], options?: TransactionOptions): Promise<QueryResult<R>> {
    return this.tracing.database(sql, () => this.inner.transactionOf<R>(sql, params, options));
  }

  get snapshotMarks(): boolean {
    return this.inner.snapshotMarks;
  }

  snapshot<T>(fn: (q: Queryable) => Promise<T>, options?: AbortOptions): Promise<Snapshot<T>> {
    return this.tracing.database(undefined, () =>
      this.inner.snapshot((q) => fn({ query: <R>(sql: string, params?: readonly unknown[]) => this.tracing.database(sql, () => q.query<R>(sql, params)) }), options),
    );
  }

  exec(sql: string): Promise<void> {
    return this.inner.exec(sql);
  }

  close(): Promise<void> {
    return this.inner.close();
  }

  poolUse(): PoolUse | undefined {
    return this.inner.poolUse?.();
  }

  watchConnectWait(observer: (seconds: number) => void): void {
    this.inner.watchConnectWait?.(observer);
  }
}
