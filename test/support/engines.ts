/**
 * The database engines every storage-touching test runs against: embedded
 * PGlite (in memory) and the real Postgres, each test file on a database of
 * its own so files run in parallel. A third, Citus, only when asked for
 * (PORTCULLIS_TEST_ENGINES=citus; `npm run test:citus` runs the storage
 * tests on it): a database of its own on a running coordinator with two
 * workers, whose tables are distributed as soon as it is migrated.
 */
import { randomBytes } from "node:crypto";
import { writeFile } from "node:fs/promises";
import pg from "pg";
import type { Db, Transaction, TransactionOptions } from "../../src/store/db.js";
import { distributeOnCitus } from "../../src/store/distribute.js";
import { loadMigrations, migrate } from "../../src/store/migrate.js";
import { PgDb } from "../../src/store/pg-db.js";
import { PgliteDb } from "../../src/store/pglite-db.js";
import { readTemplate } from "../../src/store/pglite-template.js";
import { createCitusDatabase, dropCitusDatabase } from "./citus.js";
import { citusTemplates, copyCitusDatabase, TEST_SHARD_COUNT } from "./citus-templates.js";

export type EngineName = "pglite" | "postgres" | "citus";

const ENGINE_NAMES: readonly string[] = ["pglite", "postgres", "citus"] satisfies EngineName[];

/**
 * PORTCULLIS_TEST_ENGINES=pglite (or postgres) narrows a local run; CI runs
 * both, and then the storage tests again with `citus` (not in the default list).
 */
export const engines: EngineName[] = (process.env.PORTCULLIS_TEST_ENGINES ?? "pglite,postgres")
  .split(",")
  .map((e) => e.trim())
  .filter((e): e is EngineName => ENGINE_NAMES.includes(e));

/**
 * The engine of a file whose answers the engine cannot change (a route's
 * API, a protocol's framing): one of the run's engines, chosen by a hash of
 * the file's name, so such files run once and the run still drives the
 * service's wiring on both PGlite and Postgres. The store suite, the SQL
 * rules, the index reads, the differential tests and the files that test an
 * engine's own behaviour (cancellation, pools, races, replicas) run on every
 * engine instead (`engines`). docs/development.md lists which is which.
 */
export function oneEngine(fileUrl: string): EngineName[] {
  const local = engines.filter((e) => e !== "citus");
  if (local.length < 2) return engines;
  const name = fileUrl.slice(fileUrl.lastIndexOf("/") + 1);
  let hash = 0;
  for (const c of name) hash = (hash * 31 + c.codePointAt(0)!) >>> 0;
  return [local[hash % local.length]!];
}

/** The server the per-file Postgres databases are created on. */
export const POSTGRES_ADMIN_URL = process.env.TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

/**
 * The Citus cluster the per-file Citus databases are created on: an admin
 * database on the coordinator, and one on each worker (comma-separated).
 * When the engines include citus and these are unset, the global setup
 * (global-setup.ts) starts a cluster for the run and sets them.
 */
export const CITUS_URL_VAR = "PORTCULLIS_TEST_CITUS_URL";
export const CITUS_WORKERS_VAR = "PORTCULLIS_TEST_CITUS_WORKERS";

export interface TestDatabase {
  engine: EngineName;
  db: Db;
  /** The connection string of the Postgres database (undefined for PGlite). */
  url: string | undefined;
  /** Opens another pool on the same database (a second replica). */
  openAnother(): Promise<Db>;
  /** Closes the engine and drops the database. */
  dispose(): Promise<void>;
}

/**
 * Where the global setup left a fresh PGlite data folder, dumped
 * (PGLITE_TEMPLATE_VAR): each file's PGlite starts from it instead of
 * running initdb, about 2 s instead of 5 to 7 on the development machine,
 * for the same empty, unmigrated database.
 */
export const PGLITE_TEMPLATE_VAR = "PORTCULLIS_TEST_PGLITE_TEMPLATE";

let template: Promise<Blob | undefined> | undefined;
/** The run's PGlite template (PGLITE_TEMPLATE_VAR), undefined when none was made. */
export function pgliteTemplate(): Promise<Blob | undefined> {
  const file = process.env[PGLITE_TEMPLATE_VAR];
  if (file === undefined || file === "") return Promise.resolve(undefined);
  return (template ??= readTemplate(file));
}

/** Writes what PGLITE_TEMPLATE_VAR names: PGlite's initdb, once for the run. */
export async function writePgliteTemplate(file: string): Promise<void> {
  const db = await PgliteDb.open(undefined);
  try {
    await writeFile(file, Buffer.from(await (await db.dump()).arrayBuffer()));
  } finally {
    await db.close();
  }
}

/**
 * In-memory PGlite engines whose files are done with them, emptied
 * (`PgliteDb.emptied`: the session discarded, the schema dropped): the next
 * file of the same process starts on one in about 50 ms instead of opening
 * a PGlite, about a second of a core. `together` and the Citus leg run a
 * worker's files in one process, one after another. A file that closed its
 * database itself gives nothing back.
 */
const emptiedPglites: PgliteDb[] = [];
const KEPT_PGLITES = 2;

async function openPglite(): Promise<PgliteDb> {
  const kept = emptiedPglites.pop();
  if (kept !== undefined) return kept;
  const template = await pgliteTemplate();
  return PgliteDb.open(undefined, template === undefined ? {} : { template });
}

async function givePgliteBack(db: PgliteDb): Promise<void> {
  if (emptiedPglites.length >= KEPT_PGLITES) return db.close();
  let emptied: PgliteDb;
  try {
    emptied = await db.emptied();
  } catch {
    // Closed already, or its session would not reset: it is not reused.
    return db.close().catch(() => undefined);
  }
  emptiedPglites.push(emptied);
}

/**
 * What a file asks of its database: `migrated` when what it tests starts
 * after the migrations (a service it starts migrates anyway, and finds
 * nothing to do); otherwise the database is empty and the file migrates it.
 */
export interface TestDatabaseOptions {
  migrated?: boolean;
}

export async function createTestDatabase(engine: EngineName, options: TestDatabaseOptions = {}): Promise<TestDatabase> {
  const migrated = options.migrated === true;
  if (engine === "citus") return createCitusTestDatabase(migrated);
  const database = await createLocalTestDatabase(engine);
  if (migrated) await migrate(database.db);
  return database;
}

async function createLocalTestDatabase(engine: "pglite" | "postgres"): Promise<TestDatabase> {
  if (engine === "pglite") {
    const db = await openPglite();
    return {
      engine,
      db,
      url: undefined,
      openAnother: () => Promise.reject(new Error("PGlite is one in-process connection; use Postgres for replicas")),
      dispose: () => givePgliteBack(db),
    };
  }
  const name = `portcullis_test_${randomBytes(6).toString("hex")}`;
  await adminQuery(`CREATE DATABASE ${name}`);
  const url = new URL(POSTGRES_ADMIN_URL);
  url.pathname = `/${name}`;
  const others: Db[] = [];
  const open = () => new PgDb(url.toString(), { max: 10, onError: () => undefined });
  const db = open();
  return {
    engine,
    db,
    url: url.toString(),
    async openAnother() {
      const other = open();
      others.push(other);
      return other;
    },
    async dispose() {
      await Promise.allSettled([db.close(), ...others.map((o) => o.close())]);
      await adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    },
  };
}

async function adminQuery(sql: string, adminUrl = POSTGRES_ADMIN_URL): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/**
 * A PgDb on a Citus coordinator that, like a service started with
 * AUTHZ_DISTRIBUTE=citus, distributes the schema (distributeOnCitus) once it
 * is migrated: after a transaction that recorded a migration commits with the
 * database at this build's newest version. The tests call migrate() as they
 * do on the other engines (or the service does), and what they do next runs
 * on reference and distributed tables. A database migrated only part of the
 * way (the upgrade tests) stays plain until its last migration. When Citus
 * refuses the layout, that migrate() call fails with its error.
 */
class DistributingPgDb extends PgDb {
  override async transaction<T>(fn: (tx: Transaction) => Promise<T>, options?: TransactionOptions): Promise<T> {
    let migrated = false;
    const result = await super.transaction((tx) => {
      migrated = false; // a retried transaction starts over
      return fn({
        query: (sql, params) => {
          if (/^\s*INSERT\s+INTO\s+schema_migrations\b/i.test(sql)) migrated = true;
          return tx.query(sql, params);
        },
        atCommit: (sql, params) => tx.atCommit(sql, params),
      });
    }, options);
    if (migrated) await this.distributeWhenMigrated();
    return result;
  }

  private async distributeWhenMigrated(): Promise<void> {
    const newest = (await loadMigrations()).length;
    const { rows } = await this.query<{ version: number | null }>("SELECT max(version) AS version FROM schema_migrations");
    if (rows[0]?.version === newest) await distributeOnCitus(this);
  }
}

/** The run's Citus cluster (CITUS_URL_VAR and CITUS_WORKERS_VAR): the URLs of an admin database on its coordinator and on each worker. */
export function citusUrls(): { coordinator: string; workers: string[] } {
  const coordinator = process.env[CITUS_URL_VAR];
  if (coordinator === undefined || coordinator === "") {
    throw new Error(`the citus engine needs ${CITUS_URL_VAR} (and ${CITUS_WORKERS_VAR}): run it with \`npm run test:citus\`, or PORTCULLIS_TEST_ENGINES=citus, whose global setup starts a cluster`);
  }
  const workers = (process.env[CITUS_WORKERS_VAR] ?? "")
    .split(",")
    .map((w) => w.trim())
    .filter((w) => w !== "");
  return { coordinator, workers };
}

/**
 * A database of the file's own on the run's cluster: a copy of one of the
 * run's templates (citus-templates.ts), or, with none (a cluster named by
 * CITUS_URL_VAR to a run whose global setup made none), made from nothing
 * and migrated here when asked.
 */
async function createCitusTestDatabase(migrated: boolean): Promise<TestDatabase> {
  const { coordinator, workers } = citusUrls();
  const name = `portcullis_test_${randomBytes(6).toString("hex")}`;
  const templates = citusTemplates();
  let url: string;
  if (templates !== undefined) url = await copyCitusDatabase(coordinator, workers, migrated ? templates.migrated : templates.empty, name);
  else {
    url = await createCitusDatabase(coordinator, workers, name);
    // Four shards a table, not Citus's 32: distributing the schema takes a third of the time, and
    // every application still lives on one shard of one of the two workers (test/citus.test.ts
    // keeps the default).
    await adminQuery(`ALTER DATABASE ${name} SET citus.shard_count = ${TEST_SHARD_COUNT}`, coordinator);
  }
  const others: Db[] = [];
  const open = () => new DistributingPgDb(url, { max: 10, boundStatements: 8, onError: () => undefined });
  const db = open();
  const database: TestDatabase = {
    engine: "citus",
    db,
    url,
    async openAnother() {
      const other = open();
      others.push(other);
      return other;
    },
    async dispose() {
      await Promise.allSettled([db.close(), ...others.map((o) => o.close())]);
      await dropCitusDatabase(coordinator, workers, name);
    },
  };
  if (migrated && templates === undefined) await migrate(database.db);
  return database;
}
