/**
 * The database engines every storage-touching test runs against: embedded
 * PGlite (in memory) and the real Postgres, each test file on a database of
 * its own so files run in parallel.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import type { Db } from "../../src/store/db.js";
import { PgDb } from "../../src/store/pg-db.js";
import { PgliteDb } from "../../src/store/pglite-db.js";

export type EngineName = "pglite" | "postgres";

/** PORTCULLIS_TEST_ENGINES=pglite (or postgres) narrows a local run; CI runs both. */
export const engines: EngineName[] = (process.env.PORTCULLIS_TEST_ENGINES ?? "pglite,postgres")
  .split(",")
  .map((e) => e.trim())
  .filter((e): e is EngineName => e === "pglite" || e === "postgres");

/** The server the per-file Postgres databases are created on. */
export const POSTGRES_ADMIN_URL = process.env.TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

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

export async function createTestDatabase(engine: EngineName): Promise<TestDatabase> {
  if (engine === "pglite") {
    const db = await PgliteDb.open(undefined);
    return {
      engine,
      db,
      url: undefined,
      openAnother: () => Promise.reject(new Error("PGlite is one in-process connection; use Postgres for replicas")),
      dispose: () => db.close(),
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

async function adminQuery(sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: POSTGRES_ADMIN_URL });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}
