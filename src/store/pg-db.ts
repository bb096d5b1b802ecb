import { createHash } from "node:crypto";
import type { Socket } from "node:net";
import pg from "pg";
import {
  AtCommit,
  DeadlinePassedError,
  heldSnapshot,
  isStopped,
  parseInt8,
  stopReason,
  throwIfStopped,
  lockStatement,
  type AbortOptions,
  type Db,
  type PoolUse,
  type Queryable,
  type QueryResult,
  type ReadBatching,
  type Snapshot,
  type Transaction,
  type TransactionOptions,
} from "./db.js";
import { StatementBinding } from "./bound-statements.js";
import { inlineParams } from "./sql-literals.js";
import { DatabaseUnavailableError, isRetryable, isUnavailable, sqlState, SqlState } from "./sqlstate.js";

const INT8_OID = 20;

/**
 * Statements with parameters run as named prepared statements: Postgres then
 * plans each once per connection instead of on every call (the check query
 * takes milliseconds to plan and well under one to run). The name is derived
 * from the text, so the same SQL always maps to the same statement.
 */
const statementNames = new Map<string, string>();
function statement(sql: string, params: readonly unknown[] | undefined, binding?: StatementBinding, client?: pg.ClientBase): pg.QueryConfig {
  if (params === undefined || params.length === 0) return { text: sql };
  const bound = binding === undefined || client === undefined ? undefined : binding.bound(client, sql, params);
  if (bound !== undefined) return bound;
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
  /** Told how long each checkout waited (the metrics), when watched. */
  private connectWait: ((seconds: number) => void) | undefined;
  /** On Citus: the questions' statements sent with their application bound (bound-statements.ts). */
  readonly binding: StatementBinding | undefined;

  constructor(
    connectionString: string,
    options: {
      max: number;
      connectionTimeoutMs?: number;
      onError: (error: Error) => void;
      /** Bound statements a connection may prepare (bound-statements.ts); none when absent or 0. */
      boundStatements?: number;
    },
  ) {
    this.binding = options.boundStatements === undefined || options.boundStatements <= 0 ? undefined : new StatementBinding(options.boundStatements);
    this.pool = new pg.Pool({
      connectionString,
      max: options.max,
      types,
      connectionTimeoutMillis: options.connectionTimeoutMs ?? 5_000,
      idleTimeoutMillis: 30_000,
      application_name: "portcullis",
    });
    // An idle client losing its connection must not crash the process.
    this.pool.on("error", options.onError);
    // Nor may a checked-out one: its "error" event has no other listener.
    // The failed call then answers UNAVAILABLE (see failure()).
    this.pool.on("connect", (client) => {
      client.on("error", (error) => this.lost.set(client as pg.PoolClient, error));
      // No JIT: every statement here is a short read or write, and JIT's
      // compile (150 ms and more) fires on cost estimates alone. The graph's
      // statements, estimated dear from their lateral probes, ran 190 ms with
      // it and 31 ms without (docs/performance.md). Queued ahead of anything
      // the client is handed out for; a server that refuses it (no such
      // setting) answers as before, and a lost connection fails the next query.
      client.query("SET jit = off").catch(() => undefined);
    });
  }

  async query<R>(sql: string, params?: readonly unknown[], options?: AbortOptions): Promise<QueryResult<R>> {
    if (options !== undefined) return this.stoppableQuery<R>(sql, params, options);
    const client = await this.connect();
    try {
      return toResult<R>(await client.query(statement(sql, params, this.binding, client)));
    } catch (error) {
      throw this.failure(client, error);
    } finally {
      client.release(this.lost.get(client));
    }
  }

  /** query() for a caller that may stop waiting: the statement is cancelled when it does. */
  private async stoppableQuery<R>(sql: string, params: readonly unknown[] | undefined, options: AbortOptions): Promise<QueryResult<R>> {
    throwIfStopped(options);
    const client = await this.connect();
    const running = new Running(client, options, this.binding);
    try {
      return await running.statement<R>(sql, params);
    } catch (error) {
      throw running.stopped(error) ?? this.failure(client, error);
    } finally {
      running.close();
      client.release(running.cancelled || this.lost.get(client));
    }
  }

  async exec(sql: string): Promise<void> {
    await this.query(sql);
  }

  async transaction<T>(fn: (tx: Transaction) => Promise<T>, options?: TransactionOptions): Promise<T> {
    if (options?.signal !== undefined || options?.deadline !== undefined) return this.stoppableTransaction(fn, options);
    for (let attempt = 1; ; attempt++) {
      const client = await this.connect();
      let broken: Error | undefined;
      try {
        await client.query(begin(options).join("; "));
        const last = new AtCommit();
        const tx: Transaction = {
          query: async <R>(sql: string, params?: readonly unknown[]) => {
            last.checkOpen();
            return toResult<R>(await client.query(statement(sql, params, this.binding, client)));
          },
          atCommit: (sql, params) => last.add(sql, params),
        };
        const result = await fn(tx);
        for (const { sql, params } of withCommit(last)) await client.query(statement(sql, params, this.binding, client));
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

  /**
   * transaction() for a caller that may stop waiting. A deadline goes to
   * Postgres as the transaction's statement_timeout, in the round trip of
   * BEGIN; the signal cancels the statement in flight. Either way the
   * transaction rolls back, and nothing is retried or committed once the
   * caller stopped.
   */
  private async stoppableTransaction<T>(fn: (tx: Transaction) => Promise<T>, options: TransactionOptions): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      throwIfStopped(options);
      const client = await this.connect();
      const running = new Running(client, options, this.binding);
      let broken: Error | boolean | undefined;
      try {
        throwIfStopped(options); // it may have waited for a connection
        await running.statement(begin(options).join("; "));
        const last = new AtCommit();
        const tx: Transaction = {
          query: (sql, params) => {
            last.checkOpen();
            return running.statement(sql, params);
          },
          atCommit: (sql, params) => last.add(sql, params),
        };
        const result = await fn(tx);
        throwIfStopped(options); // never COMMIT for a caller who gave up
        const sends = withCommit(last);
        for (const { sql, params } of sends.slice(0, -1)) await running.statement(sql, params);
        const commit = sends.at(-1)!.sql;
        // Not cancelled past this point: a COMMIT cut short leaves the
        // caller not knowing whether its change is in. A last statement
        // sent with it may be, as in transactionOf.
        if (commit === "COMMIT") running.close();
        await running.raw(commit);
        return result;
      } catch (error) {
        running.close();
        await client.query("ROLLBACK").catch((rollbackError: Error) => {
          broken = rollbackError; // the connection is gone: do not reuse it
        });
        const stopped = running.stopped(error);
        if (stopped !== undefined) throw stopped;
        if (attempt < MAX_ATTEMPTS && isRetryable(error)) continue;
        throw this.failure(client, error);
      } finally {
        running.close();
        // A cancel request may still be on its way to this backend: it must
        // not land on another caller's statement, so the connection goes.
        client.release(broken ?? (running.cancelled || this.lost.get(client)));
      }
    }
  }

  /**
   * BEGIN, the lock, the statement and COMMIT as one simple query: one round
   * trip. With the caller's signal, a cancel may reach it anywhere in it, COMMIT
   * included; Postgres answers a COMMIT with an error only when it did not
   * commit (past its commit record it raises none), so a failure here is a
   * transaction that rolled back, and a success one that committed.
   */
  readonly snapshotMarks = false;

  /** Db.snapshot: a `REPEATABLE READ, READ ONLY` transaction; one connection held does not keep the others waiting. */
  snapshot<T>(fn: (q: Queryable) => Promise<T>, options?: AbortOptions): Promise<Snapshot<T>> {
    return heldSnapshot(this, fn, options);
  }

  async transactionOf<R>(sql: string, params: readonly unknown[], options?: TransactionOptions): Promise<QueryResult<R>> {
    const inlined = inlineParams(sql, params);
    if (inlined === undefined) return this.transaction((tx) => tx.query<R>(sql, params), options);
    for (let attempt = 1; ; attempt++) {
      throwIfStopped(options);
      const client = await this.connect();
      const running = options === undefined ? undefined : new Running(client, options, this.binding);
      let broken: Error | undefined;
      try {
        throwIfStopped(options); // it may have waited for a connection
        const first = begin(options); // the deadline's timeout as of now
        const text = [...first, inlined, "COMMIT"].join("; ");
        const results = (running === undefined ? await client.query(text) : await running.raw(text)) as unknown as pg.QueryResult[];
        return toResult<R>(results[first.length]!);
      } catch (error) {
        running?.close();
        // After a failure inside the block; after a failed COMMIT, which ended it, a warning only.
        await client.query("ROLLBACK").catch((rollbackError: Error) => {
          broken = rollbackError; // the connection is gone: do not reuse it
        });
        const stopped = running?.stopped(error);
        if (stopped !== undefined) throw stopped;
        if (attempt < MAX_ATTEMPTS && isRetryable(error)) continue;
        throw this.failure(client, error);
      } finally {
        running?.close();
        client.release(broken ?? (running?.cancelled === true || this.lost.get(client)));
      }
    }
  }

  async close(): Promise<void> {
    await this.pool.end();
  }

  poolUse(): PoolUse {
    const { totalCount, idleCount, waitingCount, options } = this.pool;
    return { total: totalCount, idle: idleCount, waiting: waitingCount, max: options.max ?? 10 };
  }

  watchConnectWait(observer: (seconds: number) => void): void {
    this.connectWait = observer;
  }

  /**
   * An error from a client whose connection broke carries no SQLSTATE;
   * known by the client's own error event, it becomes "unavailable".
   */
  private failure(client: pg.PoolClient, error: unknown): unknown {
    return this.lost.has(client) && !isUnavailable(error) ? new DatabaseUnavailableError({ cause: error }) : error;
  }

  private async connect(): Promise<pg.PoolClient> {
    const watch = this.connectWait;
    const started = watch === undefined ? 0 : performance.now();
    try {
      const client = await this.pool.connect();
      watch?.((performance.now() - started) / 1000);
      return client;
    } catch (cause) {
      throw new DatabaseUnavailableError({ cause });
    }
  }
}

/**
 * BEGIN, with the deadline as statement_timeout and the transaction's lock,
 * in the same round trip: a simple query of up to three statements. A
 * simple query takes no parameters, so the lock's key goes as a literal,
 * quoted by pg's escapeLiteral (its keys are application ids, checked
 * against their format before any transaction starts).
 */
function begin(options: TransactionOptions | undefined): string[] {
  const parts = ["BEGIN"];
  if (options?.deadline !== undefined) parts.push(`SET LOCAL statement_timeout = ${Math.max(1, Math.ceil(options.deadline - Date.now()))}`);
  if (options?.lock !== undefined) parts.push(lockStatement(options.lock, pg.escapeLiteral(options.lock.key)));
  return parts;
}

/**
 * What ends a transaction whose last statements are `last`
 * (Transaction.atCommit), in order, each a round trip: "<statements>;
 * COMMIT", one simple query, when their parameters can be written as
 * literals; else each statement, then COMMIT.
 */
function withCommit(last: AtCommit): { sql: string; params?: readonly unknown[] }[] {
  const inlined = last.statements.map((s) => inlineParams(s.sql, s.params));
  if (inlined.every((s) => s !== undefined)) return [{ sql: [...inlined, "COMMIT"].join("; ") }];
  return [...last.statements, { sql: "COMMIT" }];
}

/** What pg keeps of the backend behind a connection: what a cancel request names. */
interface BackendKey {
  processID: number;
  secretKey: number;
}

/**
 * The statements of one caller on one checked-out connection, watched by the
 * caller's signal: when it aborts while a statement runs, Postgres is asked
 * to cancel it (the statement then fails with 57014, query_canceled). Only
 * one statement runs at a time, as the connection allows.
 */
class Running {
  private inFlight = false;
  /** A cancel request was sent for this connection's backend. */
  cancelled = false;
  private readonly onAbort = () => {
    if (this.inFlight && !this.cancelled) {
      this.cancelled = true;
      sendCancel(this.client);
    }
  };

  constructor(
    private readonly client: pg.PoolClient,
    private readonly options: AbortOptions,
    private readonly binding?: StatementBinding,
  ) {
    options.signal?.addEventListener("abort", this.onAbort, { once: true });
  }

  async statement<R>(sql: string, params?: readonly unknown[]): Promise<QueryResult<R>> {
    throwIfStopped(this.options);
    this.inFlight = true;
    try {
      return toResult<R>(await this.client.query(statement(sql, params, this.binding, this.client)));
    } finally {
      this.inFlight = false;
    }
  }

  /** A simple query of one statement or several, as pg answers it (an array of results for several). */
  async raw(sql: string): Promise<unknown> {
    throwIfStopped(this.options);
    this.inFlight = true;
    try {
      return await this.client.query(sql);
    } finally {
      this.inFlight = false;
    }
  }

  /** Stops watching the signal (before COMMIT, and when done). */
  close(): void {
    this.options.signal?.removeEventListener("abort", this.onAbort);
  }

  /**
   * What to throw for a failure when the caller stopped waiting: the
   * signal's reason, or DeadlinePassedError when the statement_timeout the
   * deadline set (or a deadline with no signal) stopped it. Undefined when
   * the failure is the call's own.
   */
  stopped(error: unknown): unknown {
    if (isStopped(this.options)) return stopReason(this.options, error);
    if (sqlState(error) === SqlState.queryCanceled && this.options.deadline !== undefined && !this.cancelled) {
      return new DeadlinePassedError({ cause: error });
    }
    return undefined;
  }
}

/**
 * Asks Postgres to cancel what the connection's backend is running: the
 * protocol's CancelRequest, sent on a connection of its own (the one pg's
 * Client#cancel opens), so it needs no free pool slot and no login. Best
 * effort: when it fails, the statement_timeout of a deadline, or the
 * statement's own end, still stops the transaction.
 */
function sendCancel(client: pg.PoolClient): void {
  const { processID, secretKey } = client as unknown as BackendKey;
  const con = new pg.Connection() as unknown as CancelConnection;
  const socket = con.stream;
  con.on("error", () => socket.destroy());
  socket.setTimeout(5_000, () => socket.destroy());
  con.once("connect", () => {
    con.cancel(processID, secretKey);
    socket.end(); // Postgres reads the request and closes its side
  });
  // pg's own address rule (Client#cancel): a host starting with "/" is a Unix socket directory.
  if (client.host?.startsWith("/")) con.connect(`${client.host}/.s.PGSQL.${client.port}`);
  else con.connect(client.port, client.host);
}

/** The part of pg's Connection a cancel request uses (public in pg, missing from @types/pg). */
interface CancelConnection {
  readonly stream: Socket;
  on(event: "error", listener: (error: Error) => void): void;
  once(event: "connect", listener: () => void): void;
  connect(portOrPath: number | string, host?: string): void;
  cancel(processID: number, secretKey: number): void;
}

function toResult<R>(result: pg.QueryResult): QueryResult<R> {
  return { rows: result.rows as R[] };
}
