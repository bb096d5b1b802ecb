import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { PGlite, types as pgliteTypes, type Results } from "@electric-sql/pglite";
import {
  AtCommit,
  isStopped,
  lockStatement,
  parseInt8,
  stopReason,
  throwIfStopped,
  type AbortOptions,
  type Db,
  type QueryResult,
  type ReadBatching,
  type Transaction,
  type TransactionOptions,
} from "./db.js";
import { lockDataDir, type DataDirLock } from "./data-dir-lock.js";
import { isRetryable } from "./sqlstate.js";
import { PreparedStatements } from "./pglite-prepared.js";

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

/**
 * How PGlite is started (docs/embedded-memory.md has what each costs and
 * saves). What is not set is PGlite's own.
 */
export interface PgliteSettings {
  /**
   * Postgres's shared_buffers, in MB (PGlite's own: 128). Postgres touches
   * the whole pool when it starts, so it is resident from the first second.
   */
  readonly sharedBuffersMb?: number;
  /** A new data folder is created in a child process of its own (see createDataDir). */
  readonly initInChild?: boolean;
  /**
   * A data folder PGlite dumped (`dump()`) to start from instead of running
   * initdb, which takes seconds: the command line's in-memory instance
   * starts from one made at build time (embedded.ts).
   */
  readonly template?: Blob;
}

/** PGlite's start options for `settings`. */
function startOptions(settings: PgliteSettings): { startParams?: string[]; initDbStartParams?: string[] } {
  if (settings.sharedBuffersMb === undefined) return {};
  const value = `shared_buffers=${settings.sharedBuffersMb}MB`;
  return {
    // startParams replace PGlite's own, hence these first.
    startParams: [...PGlite.defaultStartParams, "-c", value],
    // initdb then starts Postgres with it too, and writes it to postgresql.conf.
    initDbStartParams: ["--set", value],
  };
}

/** What creating a data folder in a child process took. */
export interface DataDirCreation {
  ms: number;
  /** The child's peak RSS (undefined if it did not say). */
  peakRssMb: number | undefined;
}

export class PgliteDb implements Db {
  readonly engine = "pglite" as const;
  readonly reads = PGLITE_READS;
  /** Planned once, run by name (pglite-prepared.ts). */
  private readonly statements = new PreparedStatements();
  /** Set once `emptied()` handed the engine on: every call is refused from then on. */
  private handedOn = false;

  private constructor(
    private readonly pg: PGlite,
    private readonly lock: DataDirLock | undefined,
    /** Set when this open created the data folder in a child process. */
    readonly created: DataDirCreation | undefined,
  ) {}

  /**
   * Opens (creating when needed) the database in `dataDir`, whose lock it
   * takes first (data-dir-lock.ts: a folder held by a live process is
   * refused, before a byte of it is read or created); in memory when
   * undefined.
   */
  static async open(dataDir: string | undefined, settings: PgliteSettings = {}): Promise<PgliteDb> {
    const lock = dataDir === undefined ? undefined : lockDataDir(dataDir);
    try {
      const created =
        dataDir !== undefined && settings.initInChild === true && !existsSync(join(dataDir, "PG_VERSION"))
          ? await createDataDir(dataDir, settings)
          : undefined;
      const pg = await PGlite.create({
        ...(dataDir === undefined ? {} : { dataDir }),
        parsers: { [pgliteTypes.INT8]: parseInt8 },
        ...startOptions(settings),
        ...(settings.template === undefined ? {} : { loadDataDir: settings.template }),
      });
      return new PgliteDb(pg, lock, created);
    } catch (error) {
      lock?.release();
      throw error;
    }
  }

  /**
   * The same in-memory engine with its database emptied, as a new PgliteDb:
   * the session's state discarded (prepared statements, settings, advisory
   * locks), the public schema dropped and made again, the write-ahead log
   * checkpointed. Opening an in-memory PGlite takes about a second, this
   * about a twentieth of that: the tests give each file an empty database
   * this way (test/support/engines.ts). This PgliteDb refuses every call
   * from then on, as a closed one does, so whoever still holds it cannot
   * reach the next user's database.
   */
  async emptied(): Promise<PgliteDb> {
    this.throwIfHandedOn();
    if (this.lock !== undefined) throw new Error("only an in-memory PGlite is emptied; a data folder is kept");
    this.handedOn = true;
    try {
      // DISCARD ALL refuses to run inside a transaction block, so on its own.
      await this.pg.exec("DISCARD ALL");
      await this.pg.exec("DROP SCHEMA public CASCADE; CREATE SCHEMA public AUTHORIZATION pg_database_owner; GRANT USAGE ON SCHEMA public TO PUBLIC");
      await this.pg.exec("CHECKPOINT");
    } catch (error) {
      // Still this handle's, to close.
      this.handedOn = false;
      throw error;
    }
    return new PgliteDb(this.pg, undefined, undefined);
  }

  private throwIfHandedOn(): void {
    if (this.handedOn) throw new Error("PGlite is closed: this handle's engine was emptied and handed on");
  }

  async query<R>(sql: string, params?: readonly unknown[], options?: AbortOptions): Promise<QueryResult<R>> {
    this.throwIfHandedOn();
    throwIfStopped(options);
    return toResult<R>((await this.statements.run(this.pg, sql, params)) as Results<R>);
  }

  /** The whole database as a gzipped tarball, what `template` takes back. */
  async dump(): Promise<Blob> {
    this.throwIfHandedOn();
    return await this.pg.dumpDataDir("gzip");
  }

  async exec(sql: string): Promise<void> {
    this.throwIfHandedOn();
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
  async transaction<T>(fn: (tx: Transaction) => Promise<T>, options?: TransactionOptions): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      this.throwIfHandedOn();
      throwIfStopped(options);
      try {
        return await this.pg.transaction(async (handle) => {
          throwIfStopped(options); // it may have waited for the connection
          // One connection: nothing else holds the lock, but the statement keeps the SQL the same on both engines.
          if (options?.lock !== undefined) await handle.query(lockStatement(options.lock, "$1"), [options.lock.key]);
          // Statements here cost no round trip: the last ones (atCommit) run before COMMIT, each on its own.
          const last = new AtCommit();
          const result = await fn({
            query: async <R>(sql: string, params?: readonly unknown[]) => {
              last.checkOpen();
              throwIfStopped(options);
              return toResult<R>((await this.statements.run(handle, sql, params)) as Results<R>);
            },
            atCommit: (sql, params) => last.add(sql, params),
          });
          for (const { sql, params } of last.statements) {
            throwIfStopped(options);
            await handle.query(sql, params as unknown[]);
          }
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

  /** transaction() of the one statement: PGlite's round trips are calls on this thread. */
  async transactionOf<R>(sql: string, params: readonly unknown[], options?: TransactionOptions): Promise<QueryResult<R>> {
    return this.transaction((tx) => tx.query<R>(sql, params), options);
  }

  async close(): Promise<void> {
    // The engine is the next holder's now.
    if (this.handedOn) return;
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

/**
 * Creates a data folder in a child process of its own, which exits before
 * the service opens the folder. PGlite runs initdb in a second Postgres
 * instance inside the calling process, and copies that instance's whole
 * WebAssembly memory (128 MiB at least) before each of initdb's steps: the
 * process's peak RSS reaches 550-850 MB, once, and part of it stays for a
 * while after. In a child, all of it goes when the child exits, and the
 * service's own peak is what serving takes.
 */
async function createDataDir(dataDir: string, settings: PgliteSettings): Promise<DataDirCreation> {
  const started = performance.now();
  // CommonJS, by its resolved path: the child then needs no loader, whether
  // the service runs compiled or from source under tsx or vitest.
  const entry = createRequire(import.meta.url).resolve("@electric-sql/pglite");
  const script = `
    const [entry, dataDir, options] = process.argv.slice(1);
    require(entry).PGlite.create({ dataDir, ...JSON.parse(options) })
      .then((pg) => pg.close())
      .then(
        () => process.stdout.write(JSON.stringify({ peakRssMb: process.resourceUsage().maxRSS / 1024 }), () => process.exit(0)),
        (error) => { console.error(error); process.exit(1); },
      );
  `;
  // --liftoff-only: the child runs a few seconds, too short for V8's
  // optimizing recompilation of PGlite's WebAssembly to pay off; without it
  // the child peaked at 725-730 MB and took 5.8-6.6 s, with it 616 MB and
  // 4.3-4.8 s (docs/embedded-memory.md).
  const child = spawn(process.execPath, ["--liftoff-only", "-e", script, entry, dataDir, JSON.stringify(startOptions(settings))], {
    stdio: ["ignore", "pipe", "pipe"],
    // A process group of its own: a terminal's Ctrl-C, which reaches the
    // whole foreground group, must not stop it halfway through the folder;
    // the service, stopping, waits for it as it waits for an open.
    detached: true,
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on("data", (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-4000)));
  const exit = await new Promise<number | string | null>((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code, signal) => resolve(code ?? signal));
  });
  if (exit !== 0) throw new Error(`creating the PGlite data folder ${dataDir} failed (exit ${exit}): ${stderr.trim().slice(-2000)}`);
  let peakRssMb: number | undefined;
  try {
    peakRssMb = Math.round((JSON.parse(stdout) as { peakRssMb: number }).peakRssMb);
  } catch {
    peakRssMb = undefined;
  }
  return { ms: Math.round(performance.now() - started), peakRssMb };
}
