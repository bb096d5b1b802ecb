/**
 * The storage layer, one suite run against each engine (embedded PGlite and a
 * real Postgres): migrations, transactions, SQLSTATE classification, type
 * mapping, and the SQL of the applications, catalog, audit and user
 * properties stores.
 * A few Postgres-only cases cover what needs several connections.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { JsonObject } from "../src/domain/errors.js";
import { timeCursor } from "../src/domain/paging.js";
import { effectiveCatalog, type CatalogEntryInput } from "../src/domain/catalog-rules.js";
import { applicationsStore } from "../src/store/applications-store.js";
import { auditStore } from "../src/store/audit-store.js";
import { catalogStore } from "../src/store/catalog-store.js";
import { CHECK_FUNCTIONS, CheckStatements, type CheckInput } from "../src/store/check-store.js";
import { modelStore } from "../src/store/model-store.js";
import { REPLAY_POSITION } from "../src/store/per-application.js";
import { relationshipsStore } from "../src/store/relationships-store.js";
import { expiredGrantsStore } from "../src/store/expired-grants-store.js";
import { rolesStore } from "../src/store/roles-store.js";
import { userPropertiesStore } from "../src/store/user-properties-store.js";
import { DeadlinePassedError, type Db, type Queryable, type TimeCursor } from "../src/store/db.js";
import { loadMigrations, migrate } from "../src/store/migrate.js";
import { PgDb } from "../src/store/pg-db.js";
import {
  DatabaseUnavailableError,
  isRetryable,
  isUnavailable,
  isUniqueViolation,
  sqlState,
  SqlState,
} from "../src/store/sqlstate.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { startTcpProxy, type TcpProxy } from "./support/tcp-proxy.js";

const checkStore = new CheckStatements();

/** The live key with this hash, through the batched lookup the service uses. */
async function findKeyByHash(db: Queryable, secretHash: string) {
  const [row] = await applicationsStore.findKeysByHashes(db, [secretHash]);
  if (row === undefined) return undefined;
  const { secretHash: _, ...key } = row;
  return key;
}

/** The migrations this build has. */
const VERSIONS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23];
const ALL = ["check", "read", "write"];
const POSTGRES_ONLY = "Postgres only (PGlite is a single in-process connection: no second pool, no concurrent transactions)";

/** The error `promise` rejects with; fails the test when it resolves. */
async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error("expected the promise to reject, but it resolved");
}

/** A real error raised by the engine itself with the given SQLSTATE. */
const raiseSql = (state: string) => `DO $body$ BEGIN RAISE EXCEPTION 'raised on purpose' USING ERRCODE = '${state}'; END $body$`;

let counter = 0;
/** A fresh application id, so cases sharing one database never collide. */
const freshAppId = (prefix: string) => `${prefix}-${++counter}-${Date.now().toString(36)}`;

async function newApp(q: Queryable, prefix: string): Promise<string> {
  const appId = freshAppId(prefix);
  const row = await applicationsStore.insert(q, appId, `name of ${appId}`);
  if (row === undefined) throw new Error(`could not create ${appId}`);
  return appId;
}

async function insertPolicy(q: Queryable, appId: string, policyId: string, name: string, permissions: string[]): Promise<void> {
  await q.query("INSERT INTO policies (app_id, policy_id, name) VALUES ($1, $2, $3)", [appId, policyId, name]);
  for (const [position, permission] of permissions.entries()) {
    const [resource, action] = permission.split(":");
    await q.query(
      "INSERT INTO policy_permissions (app_id, policy_id, resource, action, position) VALUES ($1, $2, $3, $4, $5)",
      [appId, policyId, resource, action, position],
    );
  }
}

async function insertGrant(q: Queryable, appId: string, g: { resource: string; resourceId: string; relation: string; userId: string }) {
  await q.query(
    "INSERT INTO relationships (app_id, resource, resource_id, relation, user_id) VALUES ($1, $2, $3, $4, $5)",
    [appId, g.resource, g.resourceId, g.relation, g.userId],
  );
}

async function count(q: Queryable, sql: string, params: unknown[] = []): Promise<number> {
  const { rows } = await q.query<{ n: number }>(`SELECT count(*) AS n FROM (${sql}) AS t`, params);
  return rows[0]!.n;
}

describe.each(engines)("store on %s", (engine) => {
  let database: TestDatabase;
  let db: Db;
  let firstMigration: number[];

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    db = database.db;
    firstMigration = await migrate(db);
    await db.exec("CREATE TABLE scratch (id integer PRIMARY KEY, note text NOT NULL)");
  });
  afterAll(async () => {
    await database?.dispose();
  });

  describe("migrate", () => {
    it("applies every version on a fresh database and nothing on a second run", async () => {
      const all = await loadMigrations();
      expect(all.map((m) => m.version)).toEqual(VERSIONS);
      expect(firstMigration).toEqual(VERSIONS);
      expect(await migrate(db)).toEqual([]);
      expect(await migrate(db)).toEqual([]);
    });

    it("records each applied version once in schema_migrations", async () => {
      const { rows } = await db.query<{ version: number; name: string; applied_at: Date }>(
        "SELECT version, name, applied_at FROM schema_migrations ORDER BY version",
      );
      expect(rows.map(({ version, name }) => ({ version, name }))).toEqual([
        { version: 1, name: "initial" },
        { version: 2, name: "model_versions" },
        { version: 3, name: "scale_out" },
        { version: 4, name: "scopes_and_lookup" },
        { version: 5, name: "expiring_grants" },
        { version: 6, name: "check_plan" },
        { version: 7, name: "hierarchy" },
        { version: 8, name: "graph_check_plan" },
        { version: 9, name: "graph_check_batch" },
        { version: 10, name: "graph_check_groups" },
        { version: 11, name: "changes" },
        { version: 12, name: "change_ord" },
        { version: 13, name: "grant_conditions" },
        { version: 14, name: "user_properties" },
        { version: 15, name: "policy_conditions" },
        { version: 16, name: "all_users" },
        { version: 17, name: "conditional_indexes" },
        { version: 18, name: "conditional_paths" },
        { version: 19, name: "graph_check_holders" },
        { version: 20, name: "check_functions_v2" },
        { version: 21, name: "change_commits" },
        { version: 22, name: "check_functions" },
        { version: 23, name: "relation_operators" },
      ]);
      expect(rows[0]!.applied_at).toBeInstanceOf(Date);
      expect(Math.abs(Date.now() - rows[0]!.applied_at.getTime())).toBeLessThan(10 * 60_000);
    });

    it("upgrading a version-1 database gives every existing application a model version", async () => {
      const fresh = await createTestDatabase(engine);
      try {
        const all = await loadMigrations();
        expect(await migrate(fresh.db, all.slice(0, 1))).toEqual([1]);
        await applicationsStore.insert(fresh.db, "before-upgrade", "Before upgrade");
        expect(await migrate(fresh.db, all)).toEqual(VERSIONS.slice(1));
        expect(await count(fresh.db, "SELECT 1 FROM model_versions WHERE app_id = 'before-upgrade'")).toBe(1);
      } finally {
        await fresh.dispose();
      }
    });

    it("upgrading a version-4 database: its grants get no expiry and keep counting; the sweep finds nothing", async () => {
      const fresh = await createTestDatabase(engine);
      try {
        const all = await loadMigrations();
        expect(await migrate(fresh.db, all.slice(0, 4))).toEqual([1, 2, 3, 4]);
        await applicationsStore.insert(fresh.db, "old-grants", "Old grants");
        await fresh.db.query(
          "INSERT INTO relationships (app_id, resource, resource_id, relation, user_id) VALUES ('old-grants', 'doc', 'd1', 'viewer', 'u1')",
        );
        expect(await migrate(fresh.db, all)).toEqual(VERSIONS.slice(4));
        const { rows } = await fresh.db.query<{ expiresAt: Date | null }>("SELECT expires_at AS \"expiresAt\" FROM relationships WHERE app_id = 'old-grants'");
        expect(rows).toEqual([{ expiresAt: null }]);
        // The check's function reads the upgraded table.
        const statements = new CheckStatements();
        const asked = await statements.check(fresh.db, [{ appId: "old-grants", keyHash: "none", userId: "u1", resource: "doc", resourceId: "d1" }]);
        expect(asked.rows.map((r) => r.relations)).toEqual([["viewer"]]);
        // Citus refuses the function (its tables distributed once migrated): the inline statement answered.
        expect(statements.plannedOnce).toBe(engine !== "citus");
        expect(await expiredGrantsStore.sweep(fresh.db, "old-grants", 100)).toBe(0);
        expect(await count(fresh.db, "SELECT 1 FROM relationships WHERE app_id = 'old-grants'")).toBe(1);
      } finally {
        await fresh.dispose();
      }
    });

    it("a database without the check's function (a standby still replaying its migration) is asked the inline statement, and the function is tried again next time", async () => {
      const fresh = await createTestDatabase(engine);
      try {
        const all = await loadMigrations();
        expect(await migrate(fresh.db, all)).toEqual(VERSIONS);
        await applicationsStore.insert(fresh.db, "no-function", "No function");
        await fresh.db.query("INSERT INTO relationships (app_id, resource, resource_id, relation, user_id) VALUES ('no-function', 'doc', 'd1', 'viewer', 'u1')");
        await fresh.db.exec(`DROP FUNCTION ${CHECK_FUNCTIONS[0]!.name}`);
        const statements = new CheckStatements();
        const ask = () => statements.check(fresh.db, [{ appId: "no-function", keyHash: "none", userId: "u1", resource: "doc", resourceId: "d1" }]);
        expect((await ask()).rows.map((r) => r.relations)).toEqual([["viewer"]]);
        expect(statements.plannedOnce).toBe(true);
        // The function back: migrate() makes this build's functions where they are missing.
        expect(await migrate(fresh.db, all)).toEqual([]);
        expect((await ask()).rows.map((r) => r.relations)).toEqual([["viewer"]]);
        // Tried again: Postgres and PGlite take it; Citus refuses the function for good.
        expect(statements.plannedOnce).toBe(engine !== "citus");
      } finally {
        await fresh.dispose();
      }
    });

    it("refuses a database migrated by a newer build", async () => {
      const future = VERSIONS.length + 1;
      await db.query("INSERT INTO schema_migrations (version, name) VALUES ($1, 'from_the_future')", [future]);
      try {
        const error = await rejectionOf(migrate(db));
        expect(String((error as Error).message)).toMatch(/newer/);
      } finally {
        await db.query("DELETE FROM schema_migrations WHERE version = $1", [future]);
      }
      expect(await migrate(db)).toEqual([]);
    });
  });

  describe("transaction", () => {
    it("commits when the closure resolves, and returns its value", async () => {
      const result = await db.transaction(async (tx) => {
        await tx.query("INSERT INTO scratch (id, note) VALUES (1, 'committed')");
        return "done";
      });
      expect(result).toBe("done");
      const { rows } = await db.query("SELECT note FROM scratch WHERE id = 1");
      expect(rows).toEqual([{ note: "committed" }]);
    });

    it("rolls back when the closure throws, rethrows the same error, and does not retry it", async () => {
      const boom = new Error("boom");
      let runs = 0;
      const error = await rejectionOf(
        db.transaction(async (tx) => {
          runs++;
          await tx.query("INSERT INTO scratch (id, note) VALUES (2, 'rolled back')");
          const inside = await tx.query("SELECT note FROM scratch WHERE id = 2");
          expect(inside.rows).toHaveLength(1); // visible inside the transaction
          throw boom;
        }),
      );
      expect(error).toBe(boom);
      expect(runs).toBe(1);
      expect((await db.query("SELECT 1 FROM scratch WHERE id = 2")).rows).toEqual([]);
    });

    it("rolls back every statement when a later one fails in the database", async () => {
      const error = await rejectionOf(
        db.transaction(async (tx) => {
          await tx.query("INSERT INTO scratch (id, note) VALUES (3, 'first')");
          await tx.query("INSERT INTO scratch (id, note) VALUES (1, 'duplicate of a committed row')");
        }),
      );
      expect(sqlState(error)).toBe(SqlState.uniqueViolation);
      expect((await db.query("SELECT 1 FROM scratch WHERE id = 3")).rows).toEqual([]);
      // The engine is still usable afterwards.
      expect((await db.query<{ one: number }>("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
    });

    it.each([
      { name: "serialization failure", state: SqlState.serializationFailure },
      { name: "deadlock", state: SqlState.deadlockDetected },
    ])("retries the closure after a $name raised by the database, then commits", async ({ state }) => {
      const id = state === SqlState.serializationFailure ? 10 : 11;
      let runs = 0;
      const result = await db.transaction(async (tx) => {
        runs++;
        await tx.query("INSERT INTO scratch (id, note) VALUES ($1, $2)", [id, `run ${runs}`]);
        if (runs === 1) await tx.query(raiseSql(state));
        return runs;
      });
      expect(result).toBe(2);
      expect(runs).toBe(2);
      const { rows } = await db.query("SELECT note FROM scratch WHERE id = $1", [id]);
      expect(rows).toEqual([{ note: "run 2" }]); // the first run's insert was rolled back
    });

    it("gives up after a bounded number of retries and rethrows the serialization failure", async () => {
      let runs = 0;
      const error = await rejectionOf(
        db.transaction(async (tx) => {
          runs++;
          await tx.query(raiseSql(SqlState.serializationFailure));
        }),
      );
      expect(sqlState(error)).toBe(SqlState.serializationFailure);
      expect(isRetryable(error)).toBe(true);
      expect(runs).toBeGreaterThan(1);
      expect(runs).toBeLessThanOrEqual(10);
    });

    it("does not retry an error that is not a lost race", async () => {
      let runs = 0;
      const error = await rejectionOf(
        db.transaction(async (tx) => {
          runs++;
          await tx.query(raiseSql(SqlState.checkViolation));
        }),
      );
      expect(sqlState(error)).toBe(SqlState.checkViolation);
      expect(isRetryable(error)).toBe(false);
      expect(runs).toBe(1);
    });
  });

  // A caller that stops waiting (its client went away, its deadline passed):
  // the transaction rolls back, throws why, and never commits or retries.
  describe("transaction for a caller that stops waiting", () => {
    const stopped = new Error("the caller stopped waiting");
    const idsOf = async (from: number, to: number) =>
      (await db.query<{ id: number }>("SELECT id FROM scratch WHERE id BETWEEN $1 AND $2 ORDER BY id", [from, to])).rows.map((r) => r.id);

    it.each([
      { name: "an aborted signal", options: () => ({ signal: AbortSignal.abort(stopped) }), expected: stopped },
      { name: "a passed deadline", options: () => ({ deadline: Date.now() - 1 }), expected: expect.any(DeadlinePassedError) },
    ])("does not start for $name: the closure never runs", async ({ options, expected }) => {
      let runs = 0;
      const error = await rejectionOf(
        db.transaction(async (tx) => {
          runs++;
          await tx.query("INSERT INTO scratch (id, note) VALUES (100, 'never')");
        }, options()),
      );
      expect(error).toEqual(expected);
      expect(runs).toBe(0);
      expect(await idsOf(100, 100)).toEqual([]);
    });

    it("an abort between two statements: the next one is not run, the first is rolled back, the reason is thrown", async () => {
      const controller = new AbortController();
      const statements: string[] = [];
      let runs = 0;
      const error = await rejectionOf(
        db.transaction(
          async (tx) => {
            runs++;
            await tx.query("INSERT INTO scratch (id, note) VALUES (101, 'first')");
            statements.push("first");
            controller.abort(stopped);
            await tx.query("INSERT INTO scratch (id, note) VALUES (102, 'second')");
            statements.push("second");
          },
          { signal: controller.signal },
        ),
      );
      expect(error).toBe(stopped);
      expect({ runs, statements }).toEqual({ runs: 1, statements: ["first"] });
      expect(await idsOf(101, 102)).toEqual([]);
    });

    it("an abort after the last statement: no COMMIT, everything rolled back", async () => {
      const controller = new AbortController();
      const error = await rejectionOf(
        db.transaction(
          async (tx) => {
            await tx.query("INSERT INTO scratch (id, note) VALUES (103, 'written, never committed')");
            controller.abort(stopped);
            return "finished";
          },
          { signal: controller.signal },
        ),
      );
      expect(error).toBe(stopped);
      expect(await idsOf(103, 103)).toEqual([]);
    });

    it("the closure's own error after an abort still throws the reason, and a lost race is not retried", async () => {
      const controller = new AbortController();
      let runs = 0;
      const error = await rejectionOf(
        db.transaction(
          async (tx) => {
            runs++;
            await tx.query("INSERT INTO scratch (id, note) VALUES (104, 'rolled back')");
            controller.abort(stopped);
            // Raised by hand: the check before each statement is what this test does not want to hit.
            throw Object.assign(new Error("lost a race"), { code: SqlState.serializationFailure });
          },
          { signal: controller.signal },
        ),
      );
      expect(error).toBe(stopped);
      expect(runs).toBe(1);
      expect(await idsOf(104, 104)).toEqual([]);
    });

    it("a deadline that passes between statements stops the transaction with DeadlinePassedError", async () => {
      const error = await rejectionOf(
        db.transaction(
          async (tx) => {
            await tx.query("INSERT INTO scratch (id, note) VALUES (105, 'first')");
            await new Promise((resolve) => setTimeout(resolve, 120));
            await tx.query("INSERT INTO scratch (id, note) VALUES (106, 'second')");
          },
          { deadline: Date.now() + 60 },
        ),
      );
      expect(error).toBeInstanceOf(DeadlinePassedError);
      expect(await idsOf(105, 106)).toEqual([]);
    });

    it("a signal that never aborts and a deadline far off change nothing: it commits", async () => {
      const controller = new AbortController();
      const result = await db.transaction(
        async (tx) => {
          await tx.query("INSERT INTO scratch (id, note) VALUES (107, 'committed')");
          return "done";
        },
        { signal: controller.signal, deadline: Date.now() + 60_000 },
      );
      expect(result).toBe("done");
      expect(await idsOf(107, 107)).toEqual([107]);
      controller.abort(stopped); // after the commit: nothing to undo, nothing thrown
      expect(await idsOf(107, 107)).toEqual([107]);
    });

    it("a single statement is not run for a caller that stopped", async () => {
      const error = await rejectionOf(db.query("INSERT INTO scratch (id, note) VALUES (108, 'never')", [], { signal: AbortSignal.abort(stopped) }));
      expect(error).toBe(stopped);
      expect(await idsOf(108, 108)).toEqual([]);
    });
  });

  describe("SQLSTATE classification", () => {
    const cases: {
      name: string;
      setup: string[];
      failing: string;
      state: string;
      unique: boolean;
      constraint?: string;
    }[] = [
      {
        name: "duplicate primary key",
        setup: ["INSERT INTO applications (app_id, name) VALUES ('dup-pk', 'x')"],
        failing: "INSERT INTO applications (app_id, name) VALUES ('dup-pk', 'y')",
        state: "23505",
        unique: true,
        constraint: "applications_pkey",
      },
      {
        name: "duplicate secret hash (named constraint)",
        setup: [
          "INSERT INTO applications (app_id, name) VALUES ('dup-hash', 'x')",
          "INSERT INTO api_keys (key_id, app_id, kind, name, secret_hash) VALUES ('key_a', 'dup-hash', 'application', 'a', 'h-dup')",
        ],
        failing: "INSERT INTO api_keys (key_id, app_id, kind, name, secret_hash) VALUES ('key_b', 'dup-hash', 'application', 'b', 'h-dup')",
        state: "23505",
        unique: true,
        constraint: "api_keys_secret_hash_key",
      },
      {
        name: "second live operator key (partial unique index)",
        setup: [
          "INSERT INTO api_keys (key_id, app_id, kind, name, secret_hash) VALUES ('key_op1', NULL, 'operator', 'op', 'h-op1')",
        ],
        failing: "INSERT INTO api_keys (key_id, app_id, kind, name, secret_hash) VALUES ('key_op2', NULL, 'operator', 'op', 'h-op2')",
        state: "23505",
        unique: true,
        constraint: "api_keys_one_operator_idx",
      },
      {
        name: "foreign key violation",
        setup: [],
        failing: "INSERT INTO api_keys (key_id, app_id, kind, name, secret_hash) VALUES ('key_fk', 'no-such-app', 'application', 'a', 'h-fk')",
        state: "23503",
        unique: false,
      },
      {
        name: "check violation",
        setup: ["INSERT INTO applications (app_id, name) VALUES ('chk', 'x')"],
        failing: "INSERT INTO api_keys (key_id, app_id, kind, name, secret_hash) VALUES ('key_chk', 'chk', 'operator', 'a', 'h-chk')",
        state: "23514",
        unique: false,
      },
    ];

    // Each case runs in a transaction that is always rolled back, so cases do not leak rows.
    async function errorOf(c: (typeof cases)[number]): Promise<unknown> {
      const rollback = new Error("rollback");
      let captured: unknown;
      const outcome = await rejectionOf(
        db.transaction(async (tx) => {
          for (const sql of c.setup) await tx.query(sql);
          captured = await rejectionOf(tx.query(c.failing));
          throw rollback;
        }),
      );
      expect(outcome).toBe(rollback);
      return captured;
    }

    it.each(cases)("$name is $state", async (c) => {
      const error = await errorOf(c);
      expect(sqlState(error)).toBe(c.state);
      expect(isUniqueViolation(error)).toBe(c.unique);
      expect(isRetryable(error)).toBe(false);
      expect(isUnavailable(error)).toBe(false);
    });

    it("classifies a unique violation raised on the engine handle (outside a transaction) the same way", async () => {
      await db.query("INSERT INTO applications (app_id, name) VALUES ('dup-outside', 'x')");
      const error = await rejectionOf(db.query("INSERT INTO applications (app_id, name) VALUES ('dup-outside', 'y')"));
      expect(sqlState(error)).toBe("23505");
      expect(isUniqueViolation(error)).toBe(true);
    });

    it.each([
      { value: undefined, expected: undefined },
      { value: null, expected: undefined },
      { value: "23505", expected: undefined },
      { value: new Error("plain"), expected: undefined },
      { value: { code: "ECONNREFUSED" }, expected: undefined },
      { value: { code: "23505" }, expected: "23505" },
      { value: { code: "40P01" }, expected: "40P01" },
    ])("sqlState($value) is $expected", ({ value, expected }) => {
      expect(sqlState(value)).toBe(expected);
    });
  });

  describe("type mapping", () => {
    it.each([
      { sql: "SELECT 1::int8 AS v", expected: 1 },
      { sql: "SELECT (-42)::int8 AS v", expected: -42 },
      { sql: "SELECT 9007199254740991::int8 AS v", expected: Number.MAX_SAFE_INTEGER },
      { sql: "SELECT count(*) AS v FROM (VALUES (1), (2), (3)) AS t(x)", expected: 3 },
      { sql: "SELECT 7::int4 AS v", expected: 7 },
      { sql: "SELECT NULL::int8 AS v", expected: null },
    ])("$sql gives $expected as a JS number", async ({ sql, expected }) => {
      const { rows } = await db.query<{ v: unknown }>(sql);
      expect(rows).toEqual([{ v: expected }]);
      if (expected !== null) expect(typeof rows[0]!.v).toBe("number");
    });

    it("an int8 parameter round-trips as a number", async () => {
      const { rows } = await db.query<{ v: unknown }>("SELECT $1::int8 AS v", [123456789012]);
      expect(rows).toEqual([{ v: 123456789012 }]);
    });

    it.each([
      { name: "text[] literal", sql: `SELECT ARRAY['a', 'b,c', 'd"e', 'f g', '']::text[] AS v`, params: [], expected: ["a", "b,c", 'd"e', "f g", ""] },
      { name: "empty text[]", sql: "SELECT '{}'::text[] AS v", params: [], expected: [] },
      { name: "text[] with unicode", sql: "SELECT ARRAY['é', '😀']::text[] AS v", params: [], expected: ["é", "😀"] },
      { name: "text[] parameter", sql: "SELECT $1::text[] AS v", params: [["x", "y,z", "{}", "NULL"]], expected: ["x", "y,z", "{}", "NULL"] },
      {
        name: "jsonb literal",
        sql: `SELECT '{"a": [1, "two", null, true], "b": {"c": 1.5}, "d": ""}'::jsonb AS v`,
        params: [],
        expected: { a: [1, "two", null, true], b: { c: 1.5 }, d: "" },
      },
      { name: "jsonb array", sql: `SELECT '[1, {"x": "y"}]'::jsonb AS v`, params: [], expected: [1, { x: "y" }] },
      { name: "jsonb parameter", sql: "SELECT $1::jsonb AS v", params: [JSON.stringify({ k: ["v", 2] })], expected: { k: ["v", 2] } },
      { name: "boolean", sql: "SELECT true AS v", params: [], expected: true },
      { name: "null text", sql: "SELECT NULL::text AS v", params: [], expected: null },
    ])("$name comes back the same", async ({ sql, params, expected }) => {
      const { rows } = await db.query<{ v: unknown }>(sql, params);
      expect(rows).toEqual([{ v: expected }]);
    });

    it.each([
      { name: "literal", sql: "SELECT '2024-02-29T23:59:58.123Z'::timestamptz AS v", params: [] as unknown[] },
      { name: "literal with offset", sql: "SELECT '2024-03-01T01:59:58.123+02:00'::timestamptz AS v", params: [] as unknown[] },
      { name: "Date parameter", sql: "SELECT $1::timestamptz AS v", params: [new Date("2024-02-29T23:59:58.123Z")] },
      { name: "ISO string parameter", sql: "SELECT $1::timestamptz AS v", params: ["2024-02-29T23:59:58.123Z"] },
    ])("timestamptz $name comes back as the same Date", async ({ sql, params }) => {
      const { rows } = await db.query<{ v: Date }>(sql, params);
      expect(rows[0]!.v).toBeInstanceOf(Date);
      expect(rows[0]!.v.toISOString()).toBe("2024-02-29T23:59:58.123Z");
    });

    it("a write counts by RETURNING: one row per row it touched, none when it touched none", async () => {
      await db.query("INSERT INTO scratch (id, note) VALUES (100, 'a'), (101, 'b'), (102, 'c')");
      const update = await db.query("UPDATE scratch SET note = 'z' WHERE id >= 100 AND id <= 101 RETURNING 1");
      expect(update.rows).toHaveLength(2);
      const none = await db.query("DELETE FROM scratch WHERE id = -1 RETURNING 1");
      expect(none.rows).toHaveLength(0);
      const conflicting = await db.query("INSERT INTO scratch (id, note) VALUES (100, 'x'), (103, 'y') ON CONFLICT DO NOTHING RETURNING 1");
      expect(conflicting.rows).toHaveLength(1);
    });
  });

  describe("applicationsStore", () => {
    it("insert returns the row, and undefined when the id is taken (the first name stays)", async () => {
      const appId = freshAppId("app");
      const row = await applicationsStore.insert(db, appId, "First");
      expect(row).toEqual({ appId, name: "First", createdAt: expect.any(Date) });
      expect(await applicationsStore.insert(db, appId, "Second")).toBeUndefined();
      expect(await applicationsStore.get(db, appId)).toEqual(row);
    });

    it("get of an unknown application is undefined", async () => {
      expect(await applicationsStore.get(db, "no-such-application")).toBeUndefined();
    });

    it("list pages in id order after the cursor", async () => {
      expect(await insertApps(db, ["list-c", "list-a", "list-b", "list-d"])).toHaveLength(4);
      const all = (await applicationsStore.list(db, undefined, 1000)).map((r) => r.appId).filter((id) => id.startsWith("list-"));
      expect(all).toEqual(["list-a", "list-b", "list-c", "list-d"]);
      expect((await applicationsStore.list(db, "list-a", 2)).map((r) => r.appId)).toEqual(["list-b", "list-c"]);
      expect((await applicationsStore.list(db, "list-d", 1000)).map((r) => r.appId).filter((id) => id.startsWith("list-"))).toEqual([]);
    });

    it("an application key is found by hash until it is revoked, then never again", async () => {
      const appId = await newApp(db, "keys");
      const key = { keyId: `key_${appId}`, appId, kind: "application" as const, name: "ci", secretHash: `hash-${appId}`, scopes: ALL };
      const inserted = await applicationsStore.insertKey(db, key);
      expect(inserted).toEqual({ keyId: key.keyId, appId, kind: "application", name: "ci", createdAt: expect.any(Date), scopes: ["check", "read", "write"] });
      expect(await findKeyByHash(db, key.secretHash)).toEqual(inserted);
      expect(await findKeyByHash(db, "unknown-hash")).toBeUndefined();
      expect((await applicationsStore.listKeys(db, appId, undefined, 10)).map((k) => k.keyId)).toEqual([key.keyId]);

      // Revoking through another application does nothing.
      const other = await newApp(db, "keys-other");
      expect(await applicationsStore.revokeKey(db, other, key.keyId)).toBeUndefined();
      expect(await findKeyByHash(db, key.secretHash)).toBeDefined();

      expect(await applicationsStore.revokeKey(db, appId, key.keyId)).toEqual(inserted);
      expect(await findKeyByHash(db, key.secretHash)).toBeUndefined();
      expect(await applicationsStore.revokeKey(db, appId, key.keyId)).toBeUndefined(); // already revoked
      expect(await applicationsStore.listKeys(db, appId, undefined, 10)).toEqual([]);
    });

    it("listKeys pages with the cursor the service builds (timeCursor of the last row) without repeating or skipping a key", async () => {
      const appId = await newApp(db, "keypages");
      const keyIds: string[] = [];
      for (let i = 0; i < 5; i++) {
        const row = await applicationsStore.insertKey(db, { keyId: `key_${i}_${appId}`, appId, kind: "application", name: `k${i}`, secretHash: `pages-${i}-${appId}`, scopes: ALL });
        keyIds.push(row!.keyId);
      }
      const seen: string[] = [];
      let after: TimeCursor | undefined;
      for (let pageNo = 0; pageNo < 10; pageNo++) {
        const rows = await applicationsStore.listKeys(db, appId, after, 2);
        if (rows.length === 0) break;
        seen.push(...rows.map((r) => r.keyId));
        const last = rows[rows.length - 1]!;
        // Exactly as Applications.listKeys builds its page token.
        after = timeCursor(last.createdAt, last.keyId);
      }
      expect(seen).toEqual(keyIds);
    });

    it("a secret hash can be stored only once", async () => {
      const appId = await newApp(db, "hash");
      const base = { appId, kind: "application" as const, name: "k", secretHash: `same-${appId}`, scopes: ALL };
      expect(await applicationsStore.insertKey(db, { ...base, keyId: `key_1_${appId}` })).toBeDefined();
      expect(await applicationsStore.insertKey(db, { ...base, keyId: `key_2_${appId}` })).toBeUndefined();
    });

    it("only one live operator key can be inserted", async () => {
      // The classification cases above always roll back, so no operator key exists yet.
      expect(await applicationsStore.hasOperatorKey(db)).toBe(false);
      const op = (n: number) => ({ keyId: `key_op_${n}`, appId: null, kind: "operator" as const, name: "operator", secretHash: `op-hash-${n}`, scopes: ALL });
      const first = await applicationsStore.insertKey(db, op(1));
      expect(first).toEqual({ keyId: "key_op_1", appId: null, kind: "operator", name: "operator", createdAt: expect.any(Date), scopes: ["check", "read", "write"] });
      expect(await applicationsStore.hasOperatorKey(db)).toBe(true);
      expect(await applicationsStore.insertKey(db, op(2))).toBeUndefined();
      expect(await findKeyByHash(db, "op-hash-2")).toBeUndefined();
      expect(await findKeyByHash(db, "op-hash-1")).toEqual(first);

      // Once the live one is revoked, a new one may be inserted.
      await db.query("UPDATE api_keys SET revoked_at = now() WHERE key_id = 'key_op_1'");
      expect(await applicationsStore.hasOperatorKey(db)).toBe(false);
      expect(await applicationsStore.insertKey(db, op(3))).toBeDefined();
      expect(await applicationsStore.insertKey(db, op(4))).toBeUndefined();
      expect(await count(db, "SELECT 1 FROM api_keys WHERE kind = 'operator' AND revoked_at IS NULL")).toBe(1);
    });
  });

  describe("catalogStore", () => {
    // Deliberately not alphabetical anywhere, so only the stored positions can give this order back.
    const input: CatalogEntryInput[] = [
      {
        resource: "zeta",
        description: "Last letter, first place — ünïcode",
        actions: ["update", "read", "create", "delete", "comment"],
        relations: [
          { name: "zreviewer", actions: ["read", "comment"], builtIn: false },
          { name: "approver", actions: ["update"], builtIn: false },
          { name: "viewer", actions: ["read"], builtIn: false },
        ],
      },
      { resource: "alpha", description: "", actions: ["send", "approve"], relations: [] },
      { resource: "mid", description: "no actions at all", actions: [], relations: [] },
    ];
    const catalog = effectiveCatalog(input);

    it("replace then load gives the catalog back with the order of resources, actions and relations", async () => {
      const appId = await newApp(db, "cat");
      await catalogStore.replace(db, appId, catalog);
      const loaded = await catalogStore.load(db, appId);
      expect(loaded).toEqual(catalog);
      expect(loaded.map((e) => e.resource)).toEqual(["zeta", "alpha", "mid"]);
      expect(loaded[0]!.actions).toEqual(["update", "read", "create", "delete", "comment"]);
      expect(loaded[0]!.relations.map((r) => r.name)).toEqual(["owner", "editor", "viewer", "commenter", "zreviewer", "approver"]);
      // Empty action lists stay empty lists (not null).
      expect(loaded[1]!.relations.find((r) => r.name === "editor")).toEqual({ name: "editor", actions: [], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] });
      expect(loaded[2]!.actions).toEqual([]);
    });

    it("a second replace overwrites the first, and [] empties it; other applications are untouched", async () => {
      const appId = await newApp(db, "cat2");
      const neighbour = await newApp(db, "cat2-n");
      await catalogStore.replace(db, neighbour, catalog);
      await catalogStore.replace(db, appId, catalog);
      const second = effectiveCatalog([
        { resource: "mid", description: "moved first", actions: ["b", "a"], relations: [] },
        { resource: "zeta", description: "", actions: ["read"], relations: [{ name: "approver", actions: ["read"], builtIn: false }] },
      ]);
      await catalogStore.replace(db, appId, second);
      expect(await catalogStore.load(db, appId)).toEqual(second);
      await catalogStore.replace(db, appId, []);
      expect(await catalogStore.load(db, appId)).toEqual([]);
      expect(await count(db, "SELECT 1 FROM catalog_relations WHERE app_id = $1", [appId])).toBe(0);
      expect(await catalogStore.load(db, neighbour)).toEqual(catalog);
    });

    it("replace inside a transaction that rolls back leaves the old catalog", async () => {
      const appId = await newApp(db, "cat3");
      await catalogStore.replace(db, appId, catalog);
      const rollback = new Error("rollback");
      const error = await rejectionOf(
        db.transaction(async (tx) => {
          await catalogStore.replace(tx, appId, []);
          expect(await catalogStore.load(tx, appId)).toEqual([]);
          throw rollback;
        }),
      );
      expect(error).toBe(rollback);
      expect(await catalogStore.load(db, appId)).toEqual(catalog);
    });

    describe("orphan queries read exactly what the rows say", () => {
      let appId: string;
      beforeAll(async () => {
        appId = await newApp(db, "orphans");
        const other = await newApp(db, "orphans-other");
        await insertPolicy(db, appId, "pol_b", "beta", ["doc:read", "invoice:send"]);
        await insertPolicy(db, appId, "pol_a", "alpha", ["doc:write", "doc:read"]);
        await insertPolicy(db, appId, "pol_c", "gamma", []);
        await insertPolicy(db, other, "pol_x", "alpha", ["doc:delete", "folder:read"]);
        await insertGrant(db, appId, { resource: "doc", resourceId: "d1", relation: "viewer", userId: "u1" });
        await insertGrant(db, appId, { resource: "doc", resourceId: "d2", relation: "viewer", userId: "u2" });
        await insertGrant(db, appId, { resource: "invoice", resourceId: "i1", relation: "owner", userId: "u1" });
        await insertGrant(db, other, { resource: "folder", resourceId: "f1", relation: "editor", userId: "u1" });
        await insertGrant(db, other, { resource: "doc", resourceId: "d1", relation: "owner", userId: "u1" });
        // Expired and not swept: still a row that blocks, reported as expired only.
        await db.query(
          "INSERT INTO relationships (app_id, resource, resource_id, relation, user_id, expires_at) VALUES ($1, 'report', 'r1', 'viewer', 'u1', now() - interval '1 hour')",
          [appId],
        );
        // One expired and one live on the same relation: not expired only.
        await db.query(
          "INSERT INTO relationships (app_id, resource, resource_id, relation, user_id, expires_at) VALUES ($1, 'doc', 'd3', 'viewer', 'u3', now() - interval '1 hour')",
          [appId],
        );
      });

      it.each([
        { permissions: [], expected: [] },
        { permissions: ["doc:delete"], expected: [] }, // held only in another application
        { permissions: ["folder:read"], expected: [] },
        {
          permissions: ["doc:read"],
          expected: [
            { policyId: "pol_a", name: "alpha", permission: "doc:read" },
            { policyId: "pol_b", name: "beta", permission: "doc:read" },
          ],
        },
        {
          permissions: ["invoice:send", "doc:write"],
          expected: [
            { policyId: "pol_a", name: "alpha", permission: "doc:write" },
            { policyId: "pol_b", name: "beta", permission: "invoice:send" },
          ],
        },
        {
          permissions: ["doc:read", "doc:write", "invoice:send", "invoice:read"],
          expected: [
            { policyId: "pol_a", name: "alpha", permission: "doc:write" },
            { policyId: "pol_a", name: "alpha", permission: "doc:read" },
            { policyId: "pol_b", name: "beta", permission: "doc:read" },
            { policyId: "pol_b", name: "beta", permission: "invoice:send" },
          ],
        },
      ])("policiesHolding($permissions)", async ({ permissions, expected }) => {
        expect(await catalogStore.policiesHolding(db, appId, permissions)).toEqual(expected);
      });

      it.each([
        { resources: [], expected: [] },
        { resources: ["folder"], expected: [] }, // granted only in another application
        {
          resources: ["invoice", "zzz", "doc", "report"],
          expected: [
            { resource: "doc", expiredOnly: false },
            { resource: "invoice", expiredOnly: false },
            { resource: "report", expiredOnly: true },
          ],
        },
        { resources: ["nothing"], expected: [] },
      ])("resourcesWithGrants($resources)", async ({ resources, expected }) => {
        expect(await catalogStore.resourcesWithGrants(db, appId, resources)).toEqual(expected);
      });

      it.each([
        { pairs: [], expected: [] },
        { pairs: [{ resource: "doc", relation: "owner" }], expected: [] }, // owner on doc only in another application
        {
          pairs: [
            { resource: "invoice", relation: "owner" },
            { resource: "doc", relation: "owner" },
            { resource: "doc", relation: "viewer" },
            { resource: "folder", relation: "editor" },
            { resource: "invoice", relation: "viewer" },
            { resource: "report", relation: "viewer" },
          ],
          expected: [
            { resource: "doc", relation: "viewer", expiredOnly: false },
            { resource: "invoice", relation: "owner", expiredOnly: false },
            { resource: "report", relation: "viewer", expiredOnly: true },
          ],
        },
      ])("relationsWithGrants($pairs)", async ({ pairs, expected }) => {
        expect(await catalogStore.relationsWithGrants(db, appId, pairs)).toEqual(expected);
      });

      it("follows the rows: a deleted grant or permission is no longer reported", async () => {
        await db.query("DELETE FROM relationships WHERE app_id = $1 AND resource = 'invoice'", [appId]);
        await db.query("DELETE FROM policy_permissions WHERE app_id = $1 AND policy_id = 'pol_b' AND resource = 'invoice'", [appId]);
        expect(await catalogStore.resourcesWithGrants(db, appId, ["doc", "invoice"])).toEqual([{ resource: "doc", expiredOnly: false }]);
        // The live doc grants go: what is left of doc is expired only.
        await db.query("DELETE FROM relationships WHERE app_id = $1 AND resource = 'doc' AND expires_at IS NULL", [appId]);
        expect(await catalogStore.resourcesWithGrants(db, appId, ["doc"])).toEqual([{ resource: "doc", expiredOnly: true }]);
        expect(await catalogStore.relationsWithGrants(db, appId, [{ resource: "invoice", relation: "owner" }])).toEqual([]);
        expect(await catalogStore.policiesHolding(db, appId, ["invoice:send"])).toEqual([]);
      });
    });
  });

  describe("relationshipsStore: expiries", () => {
    const g = (userId: string, resourceId = "e1") => ({ userId, resource: "doc", resourceId, relation: "viewer" });
    const relationsOf = async (q: Queryable, appId: string, userId: string, resourceId = "e1") =>
      (await checkStore.check(q, [{ appId, keyHash: "none", userId, resource: "doc", resourceId }])).rows[0]!.relations;

    // Not on Citus: the rows' now() is the coordinator's, the check's that of the worker's own
    // transaction, which began later (the line is the worker's clock: docs/scale-out.md), so no
    // one instant can be hit exactly. The expiry itself is checked on Citus by test/citus.test.ts.
    it.skipIf(engine === "citus")("the check's statement draws the line at its own now(): an expiry equal to it has passed, one microsecond later has not", async () => {
      const appId = await newApp(db, "edge");
      await db.transaction(async (tx) => {
        // Inside one transaction now() stands still: the edge can be hit exactly.
        await tx.query(
          `INSERT INTO relationships (app_id, resource, resource_id, relation, user_id, expires_at) VALUES
             ($1, 'doc', 'e1', 'viewer', 'at-now', now()),
             ($1, 'doc', 'e1', 'viewer', 'after-now', now() + interval '1 microsecond'),
             ($1, 'doc', 'e1', 'viewer', 'before-now', now() - interval '1 microsecond'),
             ($1, 'doc', 'e1', 'viewer', 'never', NULL)`,
          [appId],
        );
        expect(await relationsOf(tx, appId, "at-now")).toEqual([]);
        expect(await relationsOf(tx, appId, "before-now")).toEqual([]);
        expect(await relationsOf(tx, appId, "after-now")).toEqual(["viewer"]);
        expect(await relationsOf(tx, appId, "never")).toEqual(["viewer"]);
      });
    });

    it("writeMany counts new grants and changed expiries, not the same expiry again", async () => {
      const appId = await newApp(db, "wm");
      const at = (ms: number) => new Date(Date.UTC(2099, 0, 1) + ms);
      expect(await relationshipsStore.writeMany(db, appId, [{ ...g("a"), expiresAt: at(0) }, { ...g("b"), expiresAt: null }])).toBe(2);
      expect(await relationshipsStore.writeMany(db, appId, [{ ...g("a"), expiresAt: at(0) }, { ...g("b"), expiresAt: null }])).toBe(0);
      expect(await relationshipsStore.writeMany(db, appId, [{ ...g("a"), expiresAt: at(1) }, { ...g("b"), expiresAt: at(0) }])).toBe(2);
      expect(await relationshipsStore.writeMany(db, appId, [{ ...g("a"), expiresAt: null }, { ...g("c"), expiresAt: null }])).toBe(2);
      const { rows } = await db.query<{ u: string; e: Date | null }>("SELECT user_id AS u, expires_at AS e FROM relationships WHERE app_id = $1 ORDER BY 1", [appId]);
      expect(rows).toEqual([{ u: "a", e: null }, { u: "b", e: at(0) }, { u: "c", e: null }]);
    });

    it("write: created, replaced, unchanged, each returning the stored grant", async () => {
      const appId = await newApp(db, "w1");
      const later = new Date(Date.UTC(2099, 5, 1));
      const first = await relationshipsStore.write(db, appId, { ...g("a"), expiresAt: null });
      expect(first).toMatchObject({ created: true, row: { userId: "a", expiresAt: null } });
      expect(await relationshipsStore.write(db, appId, { ...g("a"), expiresAt: later })).toMatchObject({ created: false, row: { expiresAt: later } });
      const same = await relationshipsStore.write(db, appId, { ...g("a"), expiresAt: later });
      expect(same).toMatchObject({ created: false, row: { expiresAt: later, createdAt: first.row.createdAt } });
    });

    it("deleteMatching removes exactly the rows matching every given field, and counts them", async () => {
      const appId = await newApp(db, "dm");
      const other = await newApp(db, "dm-other");
      for (const app of [appId, other]) {
        for (const grant of [g("a", "1"), g("a", "2"), g("b", "1"), { ...g("a", "1"), relation: "owner" }]) await insertGrant(db, app, grant);
      }
      expect(await relationshipsStore.deleteMatching(db, appId, { userId: "a", relation: "viewer" })).toBe(2);
      expect(await relationshipsStore.deleteMatching(db, appId, { resource: "doc", resourceId: "1" })).toBe(2);
      expect(await relationshipsStore.deleteMatching(db, appId, { userId: "a" })).toBe(0);
      expect(await count(db, "SELECT 1 FROM relationships WHERE app_id = $1", [appId])).toBe(0);
      expect(await count(db, "SELECT 1 FROM relationships WHERE app_id = $1", [other])).toBe(4);
      await expect(relationshipsStore.deleteMatching(db, appId, {})).rejects.toThrow(/needs a filter/);
    });

    it("the expiry sweep deletes at most `limit` expired rows of one application, oldest expiry first", async () => {
      const appId = await newApp(db, "sw");
      const other = await newApp(db, "sw-other");
      for (const app of [appId, other]) {
        await db.query(
          `INSERT INTO relationships (app_id, resource, resource_id, relation, user_id, expires_at)
           SELECT $1, 'doc', 'x' || i, 'viewer', 'u', now() - (i || ' minutes')::interval FROM generate_series(1, 7) AS i`,
          [app],
        );
        await db.query("INSERT INTO relationships (app_id, resource, resource_id, relation, user_id, expires_at) VALUES ($1, 'doc', 'live', 'viewer', 'u', now() + interval '1 hour')", [app]);
      }
      expect(await expiredGrantsStore.sweep(db, appId, 3)).toBe(3);
      // The three longest expired went first.
      const { rows } = await db.query<{ id: string }>("SELECT resource_id AS id FROM relationships WHERE app_id = $1 ORDER BY expires_at", [appId]);
      expect(rows.map((r) => r.id)).toEqual(["x4", "x3", "x2", "x1", "live"]);
      expect(await expiredGrantsStore.sweep(db, appId, 100)).toBe(4);
      expect(await expiredGrantsStore.sweep(db, appId, 100)).toBe(0);
      expect(await count(db, "SELECT 1 FROM relationships WHERE app_id = $1", [other])).toBe(8);
    });
  });

  describe("checkStore", () => {
    it("answers questions of several keys and applications in request order, each key once", async () => {
      const [a, b] = [await newApp(db, "chk-a"), await newApp(db, "chk-b")];
      for (const app of [a, b]) await modelStore.create(db, app);
      const key = (app: string, name: string) =>
        applicationsStore.insertKey(db, { keyId: `key_${name}_${app}`, appId: app, kind: "application", name, secretHash: `hash-${name}-${app}`, scopes: ALL });
      await key(a, "live");
      await key(b, "live");
      const revoked = await key(a, "revoked");
      await applicationsStore.revokeKey(db, a, revoked!.keyId);
      await insertGrant(db, a, { resource: "doc", resourceId: "d1", relation: "viewer", userId: "ann" });
      await insertGrant(db, a, { resource: "doc", resourceId: "d1", relation: "editor", userId: "ann" });
      await insertGrant(db, b, { resource: "doc", resourceId: "d1", relation: "owner", userId: "ann" });
      // A grant with a condition comes back apart, with its source (multi-line: only the first newline parts it).
      await db.query(
        "INSERT INTO relationships (app_id, resource, resource_id, relation, user_id, condition) VALUES ($1, 'doc', 'd1', 'commenter', 'ann', $2)",
        [a, "context.ticket != ''\n  && now < timestamp(context.until)"],
      );
      await rolesStore.insert(db, b, { roleId: "r1", name: "r1", description: "", tenantId: undefined });
      await rolesStore.assign(db, b, "r1", "bob");
      await rolesStore.assign(db, b, "r1", "ann", "has(context.shift)");
      await modelStore.bump(db, b);
      const { rows } = await db.query<{ app_id: string; version: string }>(
        "SELECT app_id, version::text FROM model_versions WHERE app_id = ANY($1::text[])",
        [[a, b]],
      );
      const version = new Map(rows.map((r) => [r.app_id, r.version]));

      const ask = (appId: string, keyHash: string, userId: string): CheckInput => ({
        appId, keyHash, userId, resource: "doc", resourceId: "d1",
      });
      const { rows: answers, replayed } = await checkStore.check(db, [
        ask(a, `hash-live-${a}`, "ann"),
        ask(b, `hash-live-${b}`, "bob"),
        ask(a, `hash-revoked-${a}`, "ann"),
        ask(a, `hash-live-${b}`, "ann"), // b's key, asking about a
        ask(b, `hash-live-${b}`, "ann"),
        ask(a, "hash-unknown", "ann"),
        ask(a, `hash-live-${a}`, "bob"),
      ]);
      const before = Date.now();
      // The statement's clock rides along (a condition's `now`), read by the database.
      for (const r of answers) expect(Math.abs(r.nowMs! - before)).toBeLessThan(60_000);
      const conditional = [{ relation: "commenter", condition: "context.ticket != ''\n  && now < timestamp(context.until)" }];
      expect(answers.map(({ nowMs: _, ...r }) => ({ ...r, relations: [...r.relations].sort() }))).toEqual([
        { keyValid: true, version: version.get(a), relations: ["editor", "viewer"], conditional, pathsPossible: false, roles: [], conditionalRoles: [] },
        { keyValid: true, version: version.get(b), relations: [], conditional: [], pathsPossible: false, roles: ["r1"], conditionalRoles: [] },
        { keyValid: false, version: version.get(a), relations: ["editor", "viewer"], conditional, pathsPossible: false, roles: [], conditionalRoles: [] },
        { keyValid: false, version: version.get(a), relations: ["editor", "viewer"], conditional, pathsPossible: false, roles: [], conditionalRoles: [] },
        { keyValid: true, version: version.get(b), relations: ["owner"], conditional: [], pathsPossible: false, roles: [], conditionalRoles: [{ roleId: "r1", condition: "has(context.shift)" }] },
        { keyValid: false, version: version.get(a), relations: ["editor", "viewer"], conditional, pathsPossible: false, roles: [], conditionalRoles: [] },
        { keyValid: true, version: version.get(a), relations: [], conditional: [], pathsPossible: false, roles: [], conditionalRoles: [] },
      ]);
      expect(version.get(a)).not.toBe(version.get(b));
      // A question asked again in a batch (here with other keys) goes to the statement once, and each asker gets its answer.
      const sent: string[] = [];
      const recording: Queryable = { query: (sql, params) => (sent.push(String(params?.[2])), db.query(sql, params)) };
      const again = await new CheckStatements().check(recording, [
        ask(a, `hash-live-${a}`, "ann"),
        ask(a, `hash-revoked-${a}`, "ann"),
        ask(a, `hash-live-${a}`, "bob"),
        ask(a, `hash-live-${a}`, "ann"),
      ]);
      expect(JSON.parse(sent.at(-1)!)).toHaveLength(2);
      expect(again.rows.map((r) => [r.keyValid, [...r.relations].sort()])).toEqual([
        [true, ["editor", "viewer"]],
        [false, ["editor", "viewer"]],
        [true, []],
        [true, ["editor", "viewer"]],
      ]);
      expect(replayed).toBeNull(); // not asked for
      expect(await checkStore.check(db, [])).toEqual({ rows: [], replayed: null });
      // Asked for, the server's own replay position and incarnation: none on a primary that never
      // recovered (a PGlite started from a dumped data folder, as the tests' are, went through crash
      // recovery).
      const { rows: [position] } = await db.query<{ lsn: string | null }>(`SELECT ${REPLAY_POSITION} AS lsn`);
      expect((await checkStore.check(db, [ask(a, `hash-live-${a}`, "ann")], { replayed: true })).replayed).toBe(position!.lsn);
      if (engine !== "pglite") expect(position!.lsn).toBeNull();
      else expect(position!.lsn).toMatch(/^[0-9A-F]+\/[0-9A-F]+ \d+(\.\d+)?$/);
      // Postgres and PGlite take the statement planned once; Citus refuses it, and the inline one answered.
      expect(checkStore.plannedOnce).toBe(engine !== "citus");
    });
  });

  describe("userPropertiesStore", () => {
    it("put answers the object as stored, get reads it, a second put replaces it whole; other users and applications are untouched", async () => {
      const appId = await newApp(db, "props");
      const other = await newApp(db, "props-other");
      const first = { plan: "pro", tags: ["a", 1, null, true, { x: [] }], nested: { deep: { deeper: "ü 😀" } } };
      expect(await userPropertiesStore.put(db, appId, "ann", JSON.stringify(first))).toEqual(first);
      await userPropertiesStore.put(db, appId, "bob", JSON.stringify({ bob: true }));
      await userPropertiesStore.put(db, other, "ann", JSON.stringify({ other: true }));
      expect(await userPropertiesStore.get(db, appId, "ann")).toEqual(first);
      expect(await userPropertiesStore.put(db, appId, "ann", JSON.stringify({ only: 1 }))).toEqual({ only: 1 });
      expect(await userPropertiesStore.get(db, appId, "ann")).toEqual({ only: 1 });
      expect(await userPropertiesStore.get(db, appId, "bob")).toEqual({ bob: true });
      expect(await userPropertiesStore.get(db, other, "ann")).toEqual({ other: true });
      expect(await userPropertiesStore.get(db, appId, "nobody")).toBeUndefined();
    });

    it("numbers come back as the same doubles (jsonb keeps them as exact decimals), keys in jsonb's order", async () => {
      const appId = await newApp(db, "props-numbers");
      const numbers = { huge: 1.7976931348623157e308, tiny: 5e-324, big: 1e21, sum: 0.1 + 0.2, negative: -1.5e-7, zero: 0, beyond: 2 ** 53 + 2 };
      const stored = await userPropertiesStore.put(db, appId, "n", JSON.stringify(numbers));
      expect(stored).toEqual(numbers);
      // Shorter keys first, then by bytes: the order every engine answers.
      expect(Object.keys(stored)).toEqual(["big", "sum", "huge", "tiny", "zero", "beyond", "negative"]);
      expect(await userPropertiesStore.get(db, appId, "n")).toEqual(numbers);
    });

    it("delete removes the row and says whether there was one", async () => {
      const appId = await newApp(db, "props-delete");
      await userPropertiesStore.put(db, appId, "ann", JSON.stringify({ a: 1 }));
      expect(await userPropertiesStore.delete(db, appId, "ann")).toBe(true);
      expect(await userPropertiesStore.get(db, appId, "ann")).toBeUndefined();
      expect(await userPropertiesStore.delete(db, appId, "ann")).toBe(false);
    });

    it("the table refuses anything but an object, and an application that does not exist", async () => {
      const appId = await newApp(db, "props-refused");
      for (const json of ["[]", '"text"', "1", "null"]) {
        expect(sqlState(await rejectionOf(userPropertiesStore.put(db, appId, "ann", json))), json).toBe(SqlState.checkViolation);
      }
      expect(sqlState(await rejectionOf(userPropertiesStore.put(db, "no-such-app", "ann", "{}")))).toBe(SqlState.foreignKeyViolation);
      expect(await userPropertiesStore.get(db, appId, "ann")).toBeUndefined();
    });

    it("a put inside a rolled-back transaction leaves nothing", async () => {
      const appId = await newApp(db, "props-rollback");
      await rejectionOf(
        db.transaction(async (tx) => {
          await userPropertiesStore.put(tx, appId, "ann", JSON.stringify({ a: 1 }));
          throw new Error("roll back");
        }),
      );
      expect(await userPropertiesStore.get(db, appId, "ann")).toBeUndefined();
    });
  });

  describe("auditStore", () => {
    let appId: string;
    const written: { eventId: string; type: string; targetId: string; data: JsonObject }[] = [];

    beforeAll(async () => {
      appId = await newApp(db, "audit");
      const other = await newApp(db, "audit-other");
      const events: { type: string; targetId: string; data: JsonObject }[] = [
        { type: "policy.created", targetId: "pol_1", data: { name: "p1", permissions: ["doc:read"] } },
        { type: "role.created", targetId: "rol_1", data: { policyIds: [] } },
        { type: "policy.updated", targetId: "pol_1", data: { nested: { deep: [1, { x: null }] } } },
        { type: "policy.created", targetId: "pol_2", data: {} },
        { type: "policy.deleted", targetId: "pol_1", data: { detachedRoleIds: ["rol_1"], forced: true } },
      ];
      for (const e of events) {
        const eventId = await auditStore.append(db, { appId, actorKeyId: "key_actor", targetType: e.type.split(".")[0]!, ...e });
        written.push({ eventId, ...e });
      }
      await auditStore.append(db, { appId: other, type: "policy.created", actorKeyId: "x", targetType: "policy", targetId: "pol_1", data: {} });
    });

    const listIds = async (filter: { type?: string; targetId?: string }, beforeSeq?: number, limit = 100) =>
      (await auditStore.list(db, appId, { type: filter.type, targetId: filter.targetId }, beforeSeq, limit)).map((e) => e.eventId);
    const idsOf = (indexes: number[]) => indexes.map((i) => written[i]!.eventId);

    it("lists newest first, with every field and a numeric seq", async () => {
      const events = await auditStore.list(db, appId, { type: undefined, targetId: undefined }, undefined, 100);
      expect(events.map((e) => e.eventId)).toEqual(idsOf([4, 3, 2, 1, 0]));
      for (const e of events) {
        expect(typeof e.seq).toBe("number");
        expect(e.occurredAt).toBeInstanceOf(Date);
      }
      expect(events.map((e) => e.seq)).toEqual([...events.map((e) => e.seq)].sort((a, b) => b - a));
      expect(new Set(events.map((e) => e.seq)).size).toBe(events.length);
      expect(events[0]).toEqual({
        seq: expect.any(Number),
        eventId: written[4]!.eventId,
        type: "policy.deleted",
        occurredAt: expect.any(Date),
        actorKeyId: "key_actor",
        targetType: "policy",
        targetId: "pol_1",
        data: { detachedRoleIds: ["rol_1"], forced: true },
      });
      expect(events[2]!.data).toEqual({ nested: { deep: [1, { x: null }] } });
      const { rows } = await db.query<{ seq: unknown }>("SELECT seq FROM audit_events WHERE event_id = $1", [written[0]!.eventId]);
      expect(typeof rows[0]!.seq).toBe("number");
    });

    it.each([
      { filter: { type: "policy.created" }, expected: [3, 0] },
      { filter: { targetId: "pol_1" }, expected: [4, 2, 0] },
      { filter: { type: "policy.created", targetId: "pol_1" }, expected: [0] },
      { filter: { type: "role.created", targetId: "pol_1" }, expected: [] },
      { filter: { type: "no.such.type" }, expected: [] },
    ])("filter $filter", async ({ filter, expected }) => {
      expect(await listIds(filter)).toEqual(idsOf(expected));
    });

    it("pages with the beforeSeq cursor without gaps or repeats", async () => {
      const pages: string[][] = [];
      let before: number | undefined;
      for (;;) {
        const rows = await auditStore.list(db, appId, { type: undefined, targetId: undefined }, before, 2);
        if (rows.length === 0) break;
        pages.push(rows.map((r) => r.eventId));
        before = rows[rows.length - 1]!.seq;
        if (pages.length > 10) throw new Error("paging does not end");
      }
      expect(pages).toEqual([idsOf([4, 3]), idsOf([2, 1]), idsOf([0])]);
    });

    it("the cursor combines with a filter", async () => {
      const [newest] = await auditStore.list(db, appId, { type: undefined, targetId: "pol_1" }, undefined, 1);
      expect(newest!.eventId).toBe(written[4]!.eventId);
      expect(await listIds({ targetId: "pol_1" }, newest!.seq)).toEqual(idsOf([2, 0]));
    });

    it("an append inside a rolled-back transaction leaves no event", async () => {
      const rollback = new Error("rollback");
      let eventId = "";
      await rejectionOf(
        db.transaction(async (tx) => {
          eventId = await auditStore.append(tx, { appId, type: "x.y", actorKeyId: "k", targetType: "x", targetId: "gone", data: {} });
          throw rollback;
        }),
      );
      expect(eventId).not.toBe("");
      expect(await listIds({ targetId: "gone" })).toEqual([]);
    });
  });

  describe.skipIf(engine !== "postgres")(POSTGRES_ONLY, () => {
    it("two migrate() calls on two pools at the same time both succeed and apply each version once", async () => {
      const fresh = await createTestDatabase("postgres");
      try {
        const pools = [fresh.db, await fresh.openAnother(), await fresh.openAnother(), await fresh.openAnother()];
        const results = await Promise.all(pools.map((pool) => migrate(pool)));
        expect(results.filter((r) => r.length > 0)).toEqual([VERSIONS]);
        expect(results.filter((r) => r.length === 0)).toHaveLength(pools.length - 1);
        expect(await count(fresh.db, "SELECT 1 FROM schema_migrations WHERE version = 1")).toBe(1);
        expect(await count(fresh.db, "SELECT 1 FROM schema_migrations")).toBe(VERSIONS.length);
      } finally {
        await fresh.dispose();
      }
    });

    it("a real serialization failure between two concurrent transactions is retried until both commit", async () => {
      await db.exec("CREATE TABLE counters (id integer PRIMARY KEY, n integer NOT NULL)");
      await db.query("INSERT INTO counters (id, n) VALUES (1, 0)");
      // Both first attempts read before either writes: one of them must lose.
      let reads = 0;
      let releaseBarrier: () => void = () => undefined;
      const barrier = new Promise<void>((resolve) => (releaseBarrier = resolve));
      const runs = [0, 0];
      const failures: unknown[] = [];
      const increment = (who: 0 | 1) =>
        db.transaction(async (tx) => {
          runs[who]!++;
          const attempt = runs[who]!;
          await tx.query("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE");
          const { rows } = await tx.query<{ n: number }>("SELECT n FROM counters WHERE id = 1");
          if (attempt === 1) {
            if (++reads === 2) releaseBarrier();
            await barrier;
          }
          try {
            await tx.query("UPDATE counters SET n = $1 WHERE id = 1", [rows[0]!.n + 1]);
          } catch (error) {
            failures.push(error);
            throw error;
          }
          return attempt;
        });
      const timeout = new Promise<never>((_, reject) => setTimeout(() => reject(new Error("transactions did not finish")), 20_000));
      const attempts = await Promise.race([Promise.all([increment(0), increment(1)]), timeout]);
      expect(attempts.sort()).toEqual([1, 2]);
      expect(runs[0]! + runs[1]!).toBeGreaterThan(2);
      expect(failures.map(sqlState)).toContain(SqlState.serializationFailure);
      // No lost update: both increments are in.
      expect((await db.query("SELECT n FROM counters WHERE id = 1")).rows).toEqual([{ n: 2 }]);
    });

    describe("a caller that stops waiting while a statement runs", () => {
      const stopped = new Error("the caller stopped waiting");
      let single: PgDb; // one connection: which backend ran what is known
      beforeAll(() => {
        single = new PgDb(database.url!, { max: 1, onError: () => undefined });
      });
      afterAll(async () => {
        await single?.close();
      });
      /** Backends of this database running a statement that contains `marker`. */
      const running = (marker: string) =>
        count(db, "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND query LIKE $1 AND pid <> pg_backend_pid()", [
          `%${marker}%`,
        ]);
      async function untilRunning(marker: string): Promise<void> {
        for (let i = 0; i < 100 && (await running(marker)) === 0; i++) await new Promise((resolve) => setTimeout(resolve, 20));
        expect(await running(marker)).toBe(1);
      }
      /** The cancel request travels on its own connection: the caller's promise may settle a moment before the server stops the statement. */
      async function untilGone(marker: string): Promise<number> {
        for (let i = 0; i < 100 && (await running(marker)) > 0; i++) await new Promise((resolve) => setTimeout(resolve, 20));
        return running(marker);
      }
      const backendPid = async (d: Db) => (await d.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;

      it("an abort cancels the statement on the server at once, rolls back, and the connection is not reused", async () => {
        const before = await backendPid(single);
        const controller = new AbortController();
        const started = Date.now();
        const call = rejectionOf(
          single.transaction(
            async (tx) => {
              await tx.query("INSERT INTO scratch (id, note) VALUES (120, 'rolled back')");
              await tx.query("SELECT pg_sleep(30) /* cancel-in-transaction */");
            },
            { signal: controller.signal },
          ),
        );
        await untilRunning("cancel-in-transaction");
        controller.abort(stopped);
        expect(await call).toBe(stopped);
        expect(Date.now() - started).toBeLessThan(5_000);
        expect(await running("cancel-in-transaction")).toBe(0);
        expect((await db.query("SELECT 1 FROM scratch WHERE id = 120")).rows).toEqual([]);
        // A cancel request still on its way must not reach the next caller's statement.
        expect(await backendPid(single)).not.toBe(before);
      });

      it("an abort cancels a single statement too", async () => {
        const controller = new AbortController();
        const call = rejectionOf(single.query("SELECT pg_sleep(30) /* cancel-single */", [], { signal: controller.signal }));
        await untilRunning("cancel-single");
        controller.abort(stopped);
        expect(await call).toBe(stopped);
        expect(await untilGone("cancel-single")).toBe(0); // within 2 s, not the 30 s of the sleep
        expect((await single.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
      });

      it("a deadline is the transaction's statement_timeout: Postgres stops the statement with no signal, DeadlinePassedError", async () => {
        const deadline = Date.now() + 400;
        const error = await rejectionOf(
          single.transaction(
            async (tx) => {
              const { rows } = await tx.query<{ ms: number }>("SELECT current_setting('statement_timeout', true)::interval::text AS ms");
              expect(rows[0]!.ms).toMatch(/^00:00:00\.[0-4]\d*$/); // at most the 400 ms left
              await tx.query("INSERT INTO scratch (id, note) VALUES (121, 'rolled back')");
              await tx.query("SELECT pg_sleep(30) /* statement-timeout */");
            },
            { deadline },
          ),
        );
        expect(error).toBeInstanceOf(DeadlinePassedError);
        expect(sqlState((error as Error).cause)).toBe(SqlState.queryCanceled);
        expect(Date.now() - deadline).toBeLessThan(3_000);
        expect((await db.query("SELECT 1 FROM scratch WHERE id = 121")).rows).toEqual([]);
        // SET LOCAL: the setting ended with the transaction.
        expect((await single.query<{ statement_timeout: string }>("SHOW statement_timeout")).rows).toEqual([{ statement_timeout: "0" }]);
      });
    });

    it("a PgDb on a closed port fails with DatabaseUnavailableError, classified as unavailable", async () => {
      const dead = new PgDb("postgres://postgres@127.0.0.1:1/x", { max: 1, onError: () => undefined });
      try {
        for (const attempt of [() => dead.query("SELECT 1"), () => dead.transaction(async (tx) => tx.query("SELECT 1"))]) {
          const error = await rejectionOf(attempt());
          expect(error).toBeInstanceOf(DatabaseUnavailableError);
          expect(isUnavailable(error)).toBe(true);
          expect(isRetryable(error)).toBe(false);
          expect(isUniqueViolation(error)).toBe(false);
          expect((error as Error).cause).toMatchObject({ code: "ECONNREFUSED" });
        }
      } finally {
        await dead.close();
      }
    });

    // A connection lost in the middle of a call (the network drops, the server restarts or is failed over)
    // must surface as "unavailable" (503) on that call, must not escape as an uncaught error (which would
    // end the process), and the pool must serve the next call on a new connection.
    describe("a connection lost during a call", () => {
      let proxy: TcpProxy;
      let viaProxy: PgDb;
      beforeAll(async () => {
        const target = new URL(database.url!);
        proxy = await startTcpProxy(Number(target.port || 5432), target.hostname);
        target.host = `127.0.0.1:${proxy.port}`;
        viaProxy = new PgDb(target.toString(), { max: 2, onError: () => undefined });
      });
      afterAll(async () => {
        await viaProxy?.close().catch(() => undefined);
        await proxy?.close();
      });

      const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
      it.each([
        {
          name: "the network drops while a query runs",
          run: async (d: Db) => {
            const call = d.query("SELECT pg_sleep(5)");
            await pause(200);
            proxy.dropAll();
            await call;
          },
        },
        {
          name: "the network drops while a transaction's statement runs",
          run: async (d: Db) => {
            const call = d.transaction((tx) => tx.query("SELECT pg_sleep(5)"));
            await pause(200);
            proxy.dropAll();
            await call;
          },
        },
        {
          name: "the network drops between two statements of a transaction",
          run: (d: Db) =>
            d.transaction(async (tx) => {
              await tx.query("SELECT 1");
              proxy.dropAll();
              await pause(200);
              await tx.query("SELECT 2");
            }),
        },
        {
          name: "the server terminates the connection between two statements of a transaction",
          run: (d: Db) =>
            d.transaction(async (tx) => {
              const { rows } = await tx.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
              await db.query("SELECT pg_terminate_backend($1)", [rows[0]!.pid]);
              await pause(200);
              await tx.query("SELECT 2");
            }),
        },
      ])("$name", async ({ run }) => {
        const { error, uncaught } = await capturingUncaught(() => rejectionOf(run(viaProxy)));
        expect({
          escapedAsUncaught: uncaught.map((e) => String((e as Error)?.message ?? e)),
          error: String(error),
          unavailable: isUnavailable(error),
        }).toEqual({ escapedAsUncaught: [], error: expect.any(String), unavailable: true });
        for (let i = 0; i < 3; i++) expect((await viaProxy.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
      });
    });
  });
});

/**
 * Runs `fn` with the process's uncaught-exception listeners swapped for a
 * recorder (restored afterwards), so an error escaping the engine fails the
 * test that caused it, by name, instead of the whole run.
 */
async function capturingUncaught<T>(fn: () => Promise<T>, settleMs = 300): Promise<{ error: T; uncaught: unknown[] }> {
  const uncaught: unknown[] = [];
  const record = (e: unknown) => uncaught.push(e);
  const saved = process.listeners("uncaughtException");
  process.removeAllListeners("uncaughtException");
  process.on("uncaughtException", record);
  try {
    const error = await fn();
    await new Promise((resolve) => setTimeout(resolve, settleMs));
    return { error, uncaught };
  } finally {
    process.removeListener("uncaughtException", record);
    for (const listener of saved) process.on("uncaughtException", listener);
  }
}

/** Inserts applications with exactly these ids; the ids it could create. */
async function insertApps(q: Queryable, ids: string[]): Promise<string[]> {
  const created: string[] = [];
  for (const id of ids) {
    const row = await applicationsStore.insert(q, id, id);
    if (row !== undefined) created.push(row.appId);
  }
  return created;
}
