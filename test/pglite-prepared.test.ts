/**
 * The statements PGlite plans once (src/store/pglite-prepared.ts): the same
 * rows and the same errors as the statement run unprepared, whatever the
 * values, past the five custom plans; prepared on the second run, at most
 * `capacity` kept, once each when asked at once, and kept across a
 * transaction that rolls back.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PGlite } from "@electric-sql/pglite";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PreparedStatements } from "../src/store/pglite-prepared.js";
import { loadMigrations, migrate } from "../src/store/migrate.js";
import { PgliteDb } from "../src/store/pglite-db.js";
import { sqlState } from "../src/store/sqlstate.js";
import { pgliteTemplate } from "./support/engines.js";

let pg: PGlite;

beforeAll(async () => {
  pg = await PGlite.create();
  await pg.exec(`CREATE TABLE t (id int PRIMARY KEY, name text, doc jsonb);
    INSERT INTO t SELECT g, 'n' || g, jsonb_build_object('k', g) FROM generate_series(1, 200) g;`);
});
afterAll(async () => {
  await pg?.close();
});

const preparedNames = async () => (await pg.query<{ name: string }>("SELECT name FROM pg_prepared_statements ORDER BY name")).rows.map((r) => r.name);
const deallocateAll = () => pg.exec("DEALLOCATE ALL");

/** Runs `sql` with `params` through `statements` `times` times; each run's rows. */
async function runs(statements: PreparedStatements, sql: string, params: unknown[], times = 8): Promise<unknown[][]> {
  const out: unknown[][] = [];
  for (let i = 0; i < times; i++) out.push((await statements.run(pg, sql, params)).rows);
  return out;
}

describe("statements PGlite plans once", () => {
  const VALUES: [string, string, unknown[]][] = [
    ["a string with quotes, a backslash and a newline", "SELECT $1::text AS v", ["it's a \\ \"test\"\n"]],
    ["a string with astral characters", "SELECT $1::text AS v, length($1::text) AS n", ["ärger 🙂 𝔘"]],
    ["a string that looks like a statement", "SELECT $1::text AS v", ["'); DROP TABLE t; --"]],
    ["an integer and a bigint", "SELECT id, name FROM t WHERE id = $1 OR id = $2 ORDER BY id", [7, 123n]],
    ["a negative and a fractional number", "SELECT $1::numeric + $2::float8 AS v", [-3, 0.25]],
    ["booleans", "SELECT count(*)::int AS n FROM t WHERE (id < 10) = $1 OR $2", [true, false]],
    ["a null", "SELECT $1::text IS NULL AS v, coalesce($2::int, 5) AS w", [null, null]],
    ["JSON as text, untyped in the statement", "SELECT x.id FROM jsonb_to_recordset($1::jsonb) AS x(id int) JOIN t USING (id) ORDER BY 1", [JSON.stringify([{ id: 3 }, { id: 9 }])]],
    ["an array of numbers (no literal carries it: run unprepared)", "SELECT id FROM t WHERE id = ANY ($1::int[]) ORDER BY id", [[4, 5, 6]]],
    ["an array of strings and a null, hostile ones among them", "SELECT n, v FROM unnest($1::text[]) WITH ORDINALITY AS x(v, n) ORDER BY n", [["n1", null, 'a "quoted" \\ one', "{braces, and a comma}", "NULL", "", "'); DROP TABLE t; --"]]],
    ["an array of strings, typed by where it stands", "SELECT id FROM t WHERE name = ANY ($1) ORDER BY id", [["n4", "n40", "none"]]],
    ["an empty array of strings", "SELECT cardinality($1::text[]) AS n", [[]]],
    ["a string with a NUL is refused either way", "SELECT length($1::text) AS n", ["a\0b"]],
  ];

  it.each(VALUES)("%s: the rows (or the error) of the unprepared statement, on every run", async (_name, sql, params) => {
    await deallocateAll();
    const statements = new PreparedStatements();
    const plain = await pg.query(sql, params).then(
      (r) => ({ rows: r.rows }),
      (e: unknown) => ({ error: sqlState(e) ?? String(e) }),
    );
    for (let i = 0; i < 8; i++) {
      const got = await statements.run(pg, sql, params).then(
        (r) => ({ rows: r.rows }),
        (e: unknown) => ({ error: sqlState(e) ?? String(e) }),
      );
      expect(got, `run ${i + 1}`).toEqual(plain);
    }
  });

  it("prepares a statement whose parameter is an array of strings (the graph's statements take their keys so)", async () => {
    await deallocateAll();
    const statements = new PreparedStatements();
    const sql = "SELECT id FROM t WHERE name = ANY ($1::text[]) ORDER BY id";
    for (let i = 0; i < 3; i++) expect((await statements.run(pg, sql, [["n2", "n3"]])).rows).toEqual([{ id: 2 }, { id: 3 }]);
    expect(await preparedNames()).toHaveLength(1);
  });

  it("prepares a statement on its second run, not its first; one of many values is prepared once", async () => {
    await deallocateAll();
    const statements = new PreparedStatements();
    await statements.run(pg, "SELECT name FROM t WHERE id = $1", [1]);
    expect(await preparedNames()).toEqual([]);
    const rows = await Promise.all(Array.from({ length: 20 }, (_, i) => statements.run(pg, "SELECT name FROM t WHERE id = $1", [i + 1])));
    expect(rows.map((r) => r.rows)).toEqual(Array.from({ length: 20 }, (_, i) => [{ name: `n${i + 1}` }]));
    expect(await preparedNames()).toHaveLength(1);
    expect(statements.size).toBe(1);
  });

  it("keeps at most its capacity, deallocating the one run longest ago", async () => {
    await deallocateAll();
    const statements = new PreparedStatements(3);
    const sqlOf = (k: number) => `SELECT id + ${k} AS v FROM t WHERE id = $1`;
    for (const k of [1, 2, 3, 1, 2, 3]) await statements.run(pg, sqlOf(k), [1]);
    expect(await preparedNames()).toHaveLength(3);
    await statements.run(pg, sqlOf(1), [1]); // 1 is now the most recent: 2 goes first
    for (const k of [4, 4]) await statements.run(pg, sqlOf(k), [1]);
    expect(statements.size).toBe(3);
    const names = await preparedNames();
    expect(names).toHaveLength(3);
    const texts = (await pg.query<{ statement: string }>("SELECT statement FROM pg_prepared_statements")).rows.map((r) => r.statement);
    expect(texts.some((t) => t.includes("id + 2"))).toBe(false);
    for (const k of [1, 3, 4]) expect(texts.some((t) => t.includes(`id + ${k}`))).toBe(true);
    for (const k of [1, 2, 3, 4]) expect((await statements.run(pg, sqlOf(k), [5])).rows).toEqual([{ v: 5 + k }]);
  });

  it("a statement PREPARE refuses fails with its own SQLSTATE, and is not remembered", async () => {
    await deallocateAll();
    const statements = new PreparedStatements();
    const bad = "SELECT nope FROM t WHERE id = $1";
    for (let i = 0; i < 3; i++) {
      const error = await statements.run(pg, bad, [1]).then(() => undefined, (e: unknown) => e);
      expect(sqlState(error)).toBe("42703");
    }
    expect(statements.size).toBe(0);
    const division = "SELECT 1 / ($1::int - 1) AS v";
    for (let i = 0; i < 7; i++) {
      const error = await statements.run(pg, division, [1]).then(() => undefined, (e: unknown) => e);
      expect(sqlState(error)).toBe("22012");
    }
    expect((await statements.run(pg, division, [2])).rows).toEqual([{ v: 1 }]);
  });

  it("a statement prepared in a transaction that rolls back still runs after it", async () => {
    await deallocateAll();
    const db = await PgliteDb.open(undefined);
    try {
      await db.exec("CREATE TABLE u (id int PRIMARY KEY)");
      const sql = "INSERT INTO u (id) VALUES ($1) RETURNING id";
      await expect(
        db.transaction(async (tx) => {
          await tx.query(sql, [1]);
          await tx.query(sql, [2]); // prepared here
          throw new Error("roll back");
        }),
      ).rejects.toThrow("roll back");
      expect((await db.query("SELECT count(*)::int AS n FROM u")).rows).toEqual([{ n: 0 }]);
      expect((await db.query<{ id: number }>(sql, [3])).rows).toEqual([{ id: 3 }]);
      expect((await db.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_prepared_statements")).rows[0]!.n).toBeGreaterThanOrEqual(1);
    } finally {
      await db.close();
    }
  });

  it("the plan stays right past the five custom plans, for values the first runs did not see", async () => {
    await deallocateAll();
    const statements = new PreparedStatements();
    const sql = "SELECT count(*)::int AS n FROM t WHERE id <= $1";
    const got = [];
    for (const limit of [1, 2, 3, 4, 5, 6, 7, 150, 0, 200, 10_000]) got.push((await statements.run(pg, sql, [limit])).rows[0]);
    expect(got).toEqual([1, 2, 3, 4, 5, 6, 7, 150, 0, 200, 200].map((n) => ({ n })));
    expect(await runs(statements, "SELECT doc->>'k' AS k FROM t WHERE id = $1", [42], 3)).toEqual([[{ k: "42" }], [{ k: "42" }], [{ k: "42" }]]);
  });
});

describe("an in-memory PGlite emptied for its next user (PgliteDb.emptied)", () => {
  /** Opened from the run's template, as the test files' are: initdb takes seconds. */
  const openFromTemplate = async (dataDir?: string) => {
    const template = await pgliteTemplate();
    return PgliteDb.open(dataDir, template === undefined ? {} : { template });
  };

  it("gives a new handle on an empty database whose session kept nothing; the old handle refuses every call and closes nothing", async () => {
    const first = await openFromTemplate();
    let next: PgliteDb | undefined;
    try {
      await migrate(first);
      await first.exec("SET statement_timeout = 1234");
      await first.query("SELECT pg_advisory_lock(42)");
      const sql = "SELECT count(*)::int AS n FROM schema_migrations WHERE version > $1";
      for (let i = 0; i < 3; i++) await first.query(sql, [0]); // prepared from the second run
      next = await first.emptied();
      // Nothing of the first user's: no table, no function, no prepared statement, no setting, no lock.
      expect((await next.query("SELECT count(*)::int AS n FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = 'public'")).rows).toEqual([{ n: 0 }]);
      expect((await next.query("SELECT count(*)::int AS n FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace WHERE s.nspname = 'public'")).rows).toEqual([{ n: 0 }]);
      expect((await next.query("SELECT count(*)::int AS n FROM pg_prepared_statements")).rows).toEqual([{ n: 0 }]);
      expect((await next.query("SELECT current_setting('statement_timeout') AS v")).rows).toEqual([{ v: "0" }]);
      expect((await next.query("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory'")).rows).toEqual([{ n: 0 }]);
      // Migrated again from nothing, it is what a fresh one is, and its statements are prepared anew.
      await migrate(next);
      for (let i = 0; i < 3; i++) expect((await next.query(sql, [0])).rows[0]).toEqual({ n: (await loadMigrations()).length });
      // The old handle reaches nothing, and closing it leaves the new one open.
      await expect(first.query("SELECT 1")).rejects.toThrow("emptied and handed on");
      await expect(first.transaction((tx) => tx.query("SELECT 1"))).rejects.toThrow("emptied and handed on");
      await expect(first.exec("SELECT 1")).rejects.toThrow("emptied and handed on");
      await expect(first.emptied()).rejects.toThrow("emptied and handed on");
      await first.close();
      expect((await next.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
    } finally {
      await (next ?? first).close();
    }
  });

  it("is refused for one that keeps a data folder, which stays open, and for one already closed", async () => {
    const dir = mkdtempSync(join(tmpdir(), "portcullis-emptied-"));
    try {
      const kept = await openFromTemplate(join(dir, "data"));
      try {
        await expect(kept.emptied()).rejects.toThrow("a data folder is kept");
        expect((await kept.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
      } finally {
        await kept.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    const closed = await openFromTemplate();
    await closed.close();
    await expect(closed.emptied()).rejects.toThrow("PGlite is closed");
  });
});
