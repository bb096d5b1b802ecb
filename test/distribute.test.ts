/**
 * The Citus layout (src/store/distribute.ts) against the schema the
 * migrations build, on each engine: what Citus requires of a schema before
 * create_distributed_table succeeds, checked on the catalogs of the migrated
 * database, so a migration that breaks it fails on any machine, Citus or not
 * (test/citus.test.ts distributes the schema on a real Citus cluster where
 * Citus is installed, and always in CI). And AUTHZ_DISTRIBUTE=citus on a
 * database without Citus stops the start with a message saying what to do.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { COORDINATOR_TABLES, DISTRIBUTED_TABLES, distributeOnCitus, DistributionError, REFERENCE_TABLES } from "../src/store/distribute.js";
import { migrate } from "../src/store/migrate.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";

describe.each(engines)("the Citus layout on %s", (engine) => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase(engine);
    await migrate(database.db);
  }, 60_000);
  afterAll(async () => {
    await database?.dispose();
  });

  const layout = new Set<string>([...REFERENCE_TABLES, ...DISTRIBUTED_TABLES]);

  it("names every table of the schema once (schema_migrations and check_functions stay on the coordinator)", async () => {
    const { rows } = await database.db.query<{ name: string }>(
      "SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public' AND tablename <> ALL ($1::text[]) ORDER BY 1",
      [COORDINATOR_TABLES],
    );
    expect(rows.map((r) => r.name).sort()).toEqual([...layout].sort());
    expect(layout.size).toBe(REFERENCE_TABLES.length + DISTRIBUTED_TABLES.length);
  });

  it("every distributed table has app_id, and every unique index of one includes it", async () => {
    const { rows } = await database.db.query<{ table: string; index: string; columns: string[] }>(
      `SELECT t.relname AS table, i.relname AS index,
              ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = t.oid AND a.attnum = ANY(x.indkey)) AS columns
       FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid
       JOIN pg_namespace n ON n.oid = t.relnamespace
       WHERE n.nspname = 'public' AND x.indisunique`,
    );
    const distributed = rows.filter((r) => (DISTRIBUTED_TABLES as readonly string[]).includes(r.table));
    expect(new Set(distributed.map((r) => r.table)).size).toBe(DISTRIBUTED_TABLES.length); // each has a primary key
    expect(distributed.filter((r) => !r.columns.includes("app_id")).map((r) => r.index)).toEqual([]);
  });

  it("every foreign key of a distributed table points at a reference table, or at an earlier distributed table through app_id", async () => {
    const { rows } = await database.db.query<{ from: string; to: string; columns: string[]; refColumns: string[] }>(
      `SELECT c.conrelid::regclass::text AS from, c.confrelid::regclass::text AS to,
              ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = c.conrelid AND a.attnum = ANY(c.conkey)) AS columns,
              ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = c.confrelid AND a.attnum = ANY(c.confkey)) AS "refColumns"
       FROM pg_constraint c WHERE c.contype = 'f' AND c.connamespace = 'public'::regnamespace`,
    );
    expect(rows.length).toBeGreaterThan(5);
    const order = (t: string) => (DISTRIBUTED_TABLES as readonly string[]).indexOf(t);
    const wrong = rows.filter((fk) => {
      if ((REFERENCE_TABLES as readonly string[]).includes(fk.to)) return false;
      if ((REFERENCE_TABLES as readonly string[]).includes(fk.from)) return true; // a reference table may not point at a distributed one
      return !(order(fk.to) >= 0 && order(fk.to) < order(fk.from) && fk.columns.includes("app_id") && fk.refColumns.includes("app_id"));
    });
    expect(wrong).toEqual([]);
  });

  it.runIf(engine === "postgres")("AUTHZ_DISTRIBUTE=citus without the citus extension stops, saying what to do, and changes nothing", async () => {
    const error = await distributeOnCitus(database.db).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(DistributionError);
    expect((error as Error).message).toMatch(/no citus extension: run CREATE EXTENSION citus and add the workers/);
  });
});
