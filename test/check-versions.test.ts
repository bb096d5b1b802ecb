/**
 * The check keeps each application's catalog and role permissions in memory
 * by model version (see domain/access-model). These cases change the model
 * at the worst moments: right after the check statement read the version,
 * and right after the model was read again, and check that the answer is
 * that of one consistent, fresh state, and that the statements stay few.
 * Also: every kind of model change gives a new version, and a change that
 * does not touch the model (an assignment, a grant) gives none.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CHECK_FUNCTIONS } from "../src/store/check-store.js";
import type { Db, Queryable, QueryResult } from "../src/store/db.js";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";
import { admin, authz, createApp, expectStatus, grant, question, type Admin, type Authz } from "./helpers/authz.js";

// The check's statement: the function planned once (check-functions.ts), or its inline text.
const isCheckStatement = (sql: string) => sql.includes(`${CHECK_FUNCTIONS[0]!.name}(`) || sql.includes("WITH ORDINALITY AS c(key_hash, n)");
const isModelRead = (sql: string) => sql.includes("AS permissions") && sql.includes("FROM model_versions v WHERE v.app_id = $1");

/** A real Db that runs `after(sql)` once a statement has returned (outside transactions). */
function hookedDb(inner: Db, after: (sql: string) => Promise<void>): Db {
  return Object.create(inner, {
    query: {
      value: async <R>(sql: string, params?: readonly unknown[]): Promise<QueryResult<R>> => {
        const result = await inner.query<R>(sql, params);
        await after(sql);
        return result;
      },
    },
    transaction: { value: <T>(fn: (tx: Queryable) => Promise<T>): Promise<T> => inner.transaction(fn) },
    exec: { value: (sql: string) => inner.exec(sql) },
    close: { value: () => inner.close() },
  }) as Db;
}

const catalog = (reviewerActions: string[]) => [
  { resource: "document", description: "", actions: ["read", "update"], relations: [{ name: "reviewer", actions: reviewerActions }] },
];

describe.each(oneEngine(import.meta.url))("model versions on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  /** What runs after each statement of the check path; none by default. */
  let hook: ((sql: string) => Promise<void>) | undefined;
  const seen: string[] = [];
  let counter = 0;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(
      hookedDb(database.db, async (sql) => {
        if (isCheckStatement(sql) || isModelRead(sql)) seen.push(isCheckStatement(sql) ? "check" : "model");
        await hook?.(sql);
      }),
    );
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  async function app(): Promise<{ ops: Admin; x: Authz; appId: string }> {
    const appId = `ver-${counter++}`;
    const key = await createApp(service, appId, catalog(["read"]));
    const x = authz(service, key);
    expectStatus(await x.write(grant("rita", "document", "d1", "reviewer")), 201);
    return { ops: admin(service, appId), x, appId };
  }

  const version = async (appId: string) =>
    (await database.db.query<{ v: string }>("SELECT version::text AS v FROM model_versions WHERE app_id = $1", [appId])).rows[0]?.v;

  it("a model changed between the check statement and the model read: the check is read again, and answers from one state", async () => {
    const { ops, x } = await app();
    const read = question("rita", "document", "d1", "read");
    const update = question("rita", "document", "d1", "update");
    expect(await x.allowed(read)).toBe(true); // the model is in memory now
    await ops.setCatalog(catalog(["update"])); // the copy in memory is stale now
    let fired = false;
    hook = async (sql) => {
      if (fired || !isCheckStatement(sql)) return;
      fired = true;
      await ops.setCatalog(catalog(["read", "update"]));
    };
    seen.length = 0;
    const answers = await x.batch([read, update]);
    hook = undefined;
    expectStatus(answers, 200);
    // The statement read a version newer than the copy; the model read found
    // a newer one still; a second statement then matched it.
    expect(seen).toEqual(["check", "model", "check"]);
    expect(answers.body).toStrictEqual({ results: [{ allowed: true }, { allowed: true }] });
  });

  it("a model that keeps changing: three statements at most, then the newest model answers", async () => {
    const { ops, x } = await app();
    const read = question("rita", "document", "d1", "read");
    expect(await x.allowed(read)).toBe(true);
    await ops.setCatalog(catalog(["update"])); // the copy in memory is stale now
    // A change after each of the first five statements: every model read is
    // already out of date when the next statement runs, up to the last one.
    let flips = 0;
    hook = async (sql) => {
      if (flips >= 5 || !(isCheckStatement(sql) || isModelRead(sql))) return;
      flips++;
      await ops.setCatalog(catalog(flips % 2 === 1 ? ["read"] : ["update"]));
    };
    seen.length = 0;
    const answer = await x.allowed(read);
    const flipsDuringCheck = flips;
    hook = undefined;
    expect(seen.filter((s) => s === "check")).toHaveLength(3);
    // The answer is that of the model read last, which is current.
    const current = (await ops.getCatalog()) as { relations: { name: string; actions: string[] }[] }[];
    const reviewer = current[0]!.relations.find((r) => r.name === "reviewer")!;
    expect(flipsDuringCheck).toBe(5);
    expect(reviewer.actions).toEqual(["read"]);
    expect(answer).toBe(true);
  });

  it("an unchanged model is read once, however many checks follow", async () => {
    const { x } = await app();
    await x.allowed(question("rita", "document", "d1", "read"));
    seen.length = 0;
    for (let i = 0; i < 5; i++) await x.allowed(question("rita", "document", "d1", i % 2 ? "read" : "update"));
    expect(seen).toEqual(["check", "check", "check", "check", "check"]);
  });

  it.each([
    ["the catalog replaced", async (c: { ops: Admin }) => void (await c.ops.setCatalog(catalog(["read", "update"])))],
    [
      "a role created with a policy",
      async (c: { ops: Admin }) => void (await c.ops.createRole("R", [await c.ops.createPolicy("P", ["document:read"])])),
    ],
  ])("a new version when %s", async (_name, change) => {
    const c = await app();
    const before = await version(c.appId);
    await change(c);
    expect(await version(c.appId)).not.toBe(before);
  });

  it("each change to what roles hold moves the version; assignments and grants do not", async () => {
    const c = await app();
    const policy = await c.ops.createPolicy("P", ["document:read"]);
    const steps: [string, () => Promise<unknown>, boolean][] = [];
    let role = "";
    steps.push(["role created", async () => (role = await c.ops.createRole("R", [policy])), true]);
    steps.push(["role assigned", () => c.ops.assign(role, "ulla"), false]);
    steps.push(["grant written", () => c.x.write(grant("ulla", "document", "d2", "viewer")), false]);
    steps.push(["policy permissions changed", () => c.ops.setPermissions(policy, ["document:read", "document:update"]), true]);
    steps.push(["role's policies changed", () => c.ops.setRolePolicies(role, []), true]);
    steps.push(["role's policies restored", () => c.ops.setRolePolicies(role, [policy]), true]);
    steps.push(["policy force-deleted", () => c.ops.deletePolicy(policy, true), true]);
    steps.push(["role deleted", () => c.ops.deleteRole(role), true]);
    for (const [name, step, moves] of steps) {
      const before = await version(c.appId);
      await step();
      const after = await version(c.appId);
      expect(after !== before, `${name}: version ${before} → ${after}`).toBe(moves);
    }
  });
});
