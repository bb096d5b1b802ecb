import { spawn } from "node:child_process";
import { existsSync, readdirSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { PGlite, types as pgliteTypes, type Results } from "@electric-sql/pglite";
import {
  AtCommit,
  heldSnapshot,
  isStopped,
  lockStatement,
  parseInt8,
  stopReason,
  SNAPSHOT_ATTEMPTS,
  stoppable,
  throwIfStopped,
  writeMark,
  type AbortOptions,
  type Db,
  type Queryable,
  type QueryResult,
  type ReadBatching,
  type Snapshot,
  type Transaction,
  type TransactionOptions,
} from "./db.js";
import { LOCK_FILE, lockDataDir, type DataDirLock } from "./data-dir-lock.js";
import { readTemplate } from "./pglite-template.js";
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
  /** A new data folder is created in a child process of its own (see createInChild). */
  readonly initInChild?: boolean;
  /**
   * A database PGlite dumped (`dump()`) to start from instead of running
   * initdb, which takes seconds: an in-memory one (the command line's starts
   * from the build's, embedded.ts), or a new data folder created in this
   * process. A folder that exists is opened as it is.
   */
  readonly template?: Blob;
  /**
   * The file of a dumped database, gzipped (the build's: pglite-template.ts),
   * that a new data folder is created from, in the child or in this process.
   * A file that is missing means initdb; one that fails (a truncated file, a
   * dump this PGlite cannot read) too, after what it wrote is removed.
   */
  readonly templateFile?: string;
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

/** PGlite started with `settings` on `options`' folder or tarball. */
function start(settings: PgliteSettings, options: { dataDir?: string; loadDataDir?: Blob }): Promise<PGlite> {
  return PGlite.create({ ...options, parsers: { [pgliteTypes.INT8]: parseInt8 }, ...startOptions(settings) });
}

/** How a data folder was created, and what that took. */
export interface DataDirCreation {
  /** Loaded from `templateFile`, or made by PGlite's initdb (no template, or it failed). */
  from: "template" | "initdb";
  /** Why the template could not be used, when there was one and it failed. */
  templateError?: string;
  /** In a child process (`initInChild`), or in this one. */
  inChild: boolean;
  /** From the start of the first attempt to the folder's creation (not its open, in a child). */
  ms: number;
  /** The peak RSS of the child that created it (undefined in this process, or if the child did not say). */
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
    /** Set when this open created the data folder. */
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
      if (dataDir === undefined) return new PgliteDb(await start(settings, settings.template === undefined ? {} : { loadDataDir: settings.template }), undefined, undefined);
      if (existsSync(join(dataDir, "PG_VERSION"))) return new PgliteDb(await start(settings, { dataDir }), lock, undefined);
      return await PgliteDb.createAndOpen(dataDir, settings, lock);
    } catch (error) {
      lock?.release();
      throw error;
    }
  }

  /** A first start on `dataDir`: the folder created (createDataDir), and opened. */
  private static async createAndOpen(dataDir: string, settings: PgliteSettings, lock: DataDirLock | undefined): Promise<PgliteDb> {
    const started = performance.now();
    if (settings.initInChild === true) {
      const { made, ...how } = await createDataDir(dataDir, settings.templateFile, (templateFile) => createInChild(dataDir, settings, templateFile));
      const created: DataDirCreation = { ...how, inChild: true, ms: Math.round(performance.now() - started), peakRssMb: made.peakRssMb };
      return new PgliteDb(await start(settings, { dataDir }), lock, created);
    }
    // In this process, PGlite's start on the new folder creates it, and is the engine from then on.
    const { made, ...how } = await createDataDir(dataDir, settings.template ?? settings.templateFile, async (template) =>
      start(settings, { dataDir, ...(template === undefined ? {} : { loadDataDir: typeof template === "string" ? await readTemplate(template) : template }) }),
    );
    return new PgliteDb(made, lock, { ...how, inChild: false, ms: Math.round(performance.now() - started), peakRssMb: undefined });
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

  readonly snapshotMarks = true;

  /**
   * Db.snapshot without holding the connection: each read on its own, so
   * that the statements of other callers (checks, another application's
   * writes) run between them, and the reads taken as one state when the
   * write mark is the same before and after them. Read again when a write
   * came between; after SNAPSHOT_ATTEMPTS, in a held transaction, as on
   * Postgres (writes back to back could otherwise keep it reading).
   */
  async snapshot<T>(fn: (q: Queryable) => Promise<T>, options?: AbortOptions): Promise<Snapshot<T>> {
    // PGlite answers on this thread, its promises settled as microtasks: a
    // run of statements never lets the event loop read a socket. Each read
    // first waits for the loop's I/O phase (setImmediate runs after it), so
    // that the requests that arrived meanwhile ask their statements first.
    const stopping = stoppable(this, options);
    const q: Queryable = {
      query: async (sql, params) => {
        await new Promise((resolve) => setImmediate(resolve));
        return stopping.query(sql, params);
      },
    };
    for (let attempt = 1; attempt <= SNAPSHOT_ATTEMPTS; attempt++) {
      const before = await writeMark(q);
      const value = await fn(q);
      const mark = await writeMark(q);
      if (mark === before) return { value, mark };
    }
    return heldSnapshot(this, fn, options);
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
 * Creates the new data folder `dataDir` with `make`: from `template` when
 * there is one (a file that is missing counts as none), else by initdb
 * (`make(undefined)`). When the template fails, what that attempt wrote is
 * removed (the entries that were not in the folder before it, never the
 * lock's files) and initdb runs, as it would with no template: the folder is
 * then as initdb alone would have made it.
 */
async function createDataDir<T, Template extends string | Blob>(
  dataDir: string,
  template: Template | undefined,
  make: (template: Template | undefined) => Promise<T>,
): Promise<{ made: T } & Pick<DataDirCreation, "from" | "templateError">> {
  if (template === undefined || (typeof template === "string" && !existsSync(template))) return { made: await make(undefined), from: "initdb" };
  const before = new Set(readdirSync(dataDir));
  try {
    return { made: await make(template), from: "template" };
  } catch (error) {
    for (const name of readdirSync(dataDir)) {
      // The lock, its takeover guard and a taker's temporary files (data-dir-lock.ts).
      if (before.has(name) || name.startsWith(LOCK_FILE)) continue;
      rmSync(join(dataDir, name), { recursive: true, force: true });
    }
    return { made: await make(undefined), from: "initdb", templateError: error instanceof Error ? error.message : String(error) };
  }
}

/**
 * Creates a data folder in a child process of its own, which exits before
 * the service opens the folder: from the template in `templateFile`, or by
 * initdb when undefined. PGlite runs initdb in a second Postgres instance
 * inside the calling process, and copies that instance's whole WebAssembly
 * memory (128 MiB at least) before each of initdb's steps: the process's
 * peak RSS reaches 550-850 MB, once, and part of it stays for a while
 * after. In a child, all of it goes when the child exits, and the service's
 * own peak is what serving takes. Loading the template costs far less, but
 * runs in the child too: detached, it finishes the folder whatever happens
 * to the service meanwhile.
 */
async function createInChild(dataDir: string, settings: PgliteSettings, templateFile: string | undefined): Promise<{ peakRssMb: number | undefined }> {
  // CommonJS, by its resolved path: the child then needs no loader, whether
  // the service runs compiled or from source under tsx or vitest.
  const entry = createRequire(import.meta.url).resolve("@electric-sql/pglite");
  // The template is unzipped here, not by PGlite, as readTemplate does (pglite-template.ts says why).
  const script = `
    const [entry, dataDir, options, templateFile] = process.argv.slice(1);
    new Promise((resolve) => resolve(templateFile === "" ? {} : { loadDataDir: new Blob([require("node:zlib").gunzipSync(require("node:fs").readFileSync(templateFile))]) }))
      .then((load) => require(entry).PGlite.create({ dataDir, ...JSON.parse(options), ...load }))
      .then((pg) => pg.close())
      .then(
        () => process.stdout.write(JSON.stringify({ peakRssMb: process.resourceUsage().maxRSS / 1024 }), () => process.exit(0)),
        (error) => { console.error(error); process.exit(1); },
      );
  `;
  // --liftoff-only: the child runs a few seconds, too short for V8's
  // optimizing recompilation of PGlite's WebAssembly to pay off; without it
  // initdb's child peaked at 725-730 MB and took 5.8-6.6 s, with it 616 MB
  // and 4.3-4.8 s (docs/embedded-memory.md).
  const args = [entry, dataDir, JSON.stringify(startOptions(settings)), templateFile ?? ""];
  const child = spawn(process.execPath, ["--liftoff-only", "-e", script, ...args], {
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
  return { peakRssMb };
}
