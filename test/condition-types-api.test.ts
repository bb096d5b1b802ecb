/**
 * Conditions type-checked when written (docs/conditions.md), on each
 * engine: a condition that can never hold for its types (a call with no
 * overload for its operands, a wrong number of arguments, a result that is
 * not a bool) is a 400 naming the field and the position on a grant (single
 * and bulk), a role assignment, a policy (created and patched) and a model
 * applied or planned; nothing is written. What a question carries stays
 * dyn and is accepted.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApp, expectError, expectStatus } from "./helpers/authz.js";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";

const CATALOG = [{ resource: "todo", description: "", actions: ["read", "update"], relations: [{ name: "assignee", actions: ["read", "update"] }] }];
const APP = "condtypes";
const BASE = `/api/v1/applications/${APP}`;

/** Four conditions that can never hold, each with the position and a part of the message. */
const ILL_TYPED = [
  { condition: "subject.id > 5", at: "at 1:12", fragment: "found no matching overload for '_>_' applied to '(string, int)'" },
  { condition: 'subject.id + 1 == "x1"', at: "at 1:12", fragment: "'_+_' applied to '(string, int)'" },
  { condition: "subject.id", at: "at 1:8", fragment: "evaluates to a string, never a bool" },
  { condition: "now.getHours(1, 2) > 9", at: "at 1:4", fragment: "'getHours' applied to 'timestamp.(int, int)'" },
];

describe.each(oneEngine(import.meta.url))("conditions type-checked when written, on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    key = await createApp(service, APP, CATALOG);
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  const admin = (method: string, path: string, body?: unknown) => service.call(method, `${BASE}${path}`, body === undefined ? {} : { body });
  const call = (method: string, path: string, body?: unknown) => service.call(method, path, { key, ...(body === undefined ? {} : { body }) });

  it.each(ILL_TYPED)("a grant with $condition → 400 naming the field and the position; nothing written", async ({ condition, at, fragment }) => {
    const single = await call("POST", "/api/v1/authorization/relationships", { userId: "ann", resource: "todo", resourceId: "t1", relation: "assignee", condition });
    expectError(single, 400, "invalid_argument", "condition", at, fragment);
    expect(single.body.details).toContainEqual(expect.objectContaining({ field: "condition" }));
    const bulk = await call("POST", "/api/v1/authorization/relationships/bulk", {
      writes: [
        { userId: "ann", resource: "todo", resourceId: "t2", relation: "assignee", condition: "context.x > 5" },
        { userId: "ann", resource: "todo", resourceId: "t3", relation: "assignee", condition },
      ],
    });
    expectError(bulk, 400, "invalid_argument", "writes[1].condition", at);
    expect((await call("GET", "/api/v1/authorization/relationships?userId=ann&resource=todo")).body.relationships).toEqual([]);
  });

  it.each(ILL_TYPED)("an assignment and a policy with $condition → 400 naming the field and the position", async ({ condition, at, fragment }) => {
    const policy = await admin("POST", "/policies", { name: `P ${condition}`, permissions: ["todo:read"], condition });
    expectError(policy, 400, "invalid_argument", "condition", at, fragment);
    const plain = await admin("POST", "/policies", { name: `Plain ${condition}`, permissions: ["todo:read"] });
    expectStatus(plain, 201);
    expectError(await admin("PATCH", `/policies/${plain.body.policyId}`, { condition }), 400, "invalid_argument", "condition", at);
    expect((await admin("GET", `/policies/${plain.body.policyId}`)).body.condition).toBeUndefined();
    const role = await admin("POST", "/roles", { name: `R ${condition}`, policyIds: [plain.body.policyId] });
    expectStatus(role, 201);
    const assigned = await admin("POST", `/roles/${role.body.roleId}/assignments`, { userId: "bob", condition });
    expectError(assigned, 400, "invalid_argument", "condition", at, fragment);
    expect((await admin("GET", `/roles/${role.body.roleId}/assignments`)).body.assignments ?? []).toEqual([]);
  });

  it("a model applied or planned with an ill-typed policy condition → 400 naming policies[i].condition and the position", async () => {
    const exported = await admin("GET", "/model");
    expectStatus(exported, 200);
    const model = { ...exported.body, policies: [{ name: "Typed", permissions: ["todo:read"], condition: "now.getHours(1, 2) > 9" }] };
    for (const [method, path] of [
      ["POST", "/model/plan"],
      ["PUT", "/model"],
    ] as const) {
      const res = await admin(method, path, model);
      expectError(res, 400, "invalid_argument", "policies[0].condition", "at 1:4", "'getHours'");
    }
    expect(((await admin("GET", "/model")).body.policies as { name: string }[]).map((p) => p.name)).not.toContain("Typed");
  });

  it("explain shows the clock a condition that reads now was evaluated with, and none for one that does not", async () => {
    const grant = (resourceId: string, condition: string) =>
      call("POST", "/api/v1/authorization/relationships", { userId: "tim", resource: "todo", resourceId, relation: "assignee", condition });
    expectStatus(await grant("n1", "now.getFullYear() >= 2000"), 201);
    expectStatus(await grant("n2", "context.ok == true"), 201);
    const before = Date.now();
    const explain = async (resourceId: string) => {
      const res = await call("POST", "/api/v1/authorization/check/explain", { userId: "tim", resource: "todo", resourceId, action: "read" });
      expectStatus(res, 200);
      return res.body as { allowed: boolean; conditions: { condition: string; holds: boolean; now?: string }[] };
    };
    const withNow = await explain("n1");
    expect(withNow.allowed).toBe(true);
    expect(withNow.conditions).toEqual([expect.objectContaining({ condition: "now.getFullYear() >= 2000", holds: true, now: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/) })]);
    // The database's clock, read by the question's statement: close to this one's.
    expect(Math.abs(Date.parse(withNow.conditions[0]!.now!) - before)).toBeLessThan(60_000);
    const without = await explain("n2");
    expect(without.conditions).toHaveLength(1);
    expect(Object.keys(without.conditions[0]!)).not.toContain("now");
  });

  it("what a question carries is dyn: such conditions are written, and evaluated with the facts", async () => {
    // Each write replaces the grant's condition: the last one counts.
    for (const condition of ["context.x > 5", "now.getHours() >= 0", 'subject.id.startsWith("a")', "resource.properties.level >= 2"]) {
      const res = await call("POST", "/api/v1/authorization/relationships", { userId: "amy", resource: "todo", resourceId: "d1", relation: "assignee", condition });
      expect([200, 201]).toContain(res.status);
    }
    const ask = async (body: object) => (await call("POST", "/api/v1/authorization/check", { userId: "amy", resource: "todo", resourceId: "d1", action: "read", ...body })).body.allowed;
    expect(await ask({})).toBe(false);
    expect(await ask({ resourceProperties: { level: 3 } })).toBe(true);
  });
});
