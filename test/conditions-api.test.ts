/**
 * Conditions on grants through the API, on each engine: written and read
 * back, refused when bad (each a 400 naming the field), honoured by the
 * check, the batch check and permissions with the question's context and
 * properties (REST, and gRPC through a typed Connect client), replaced and
 * removed by writing the grant again, and listed apart by lookup and who
 * can.
 */
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CheckService } from "../gen/authz/v1/check_pb.js";
import { createApp, expectError, expectStatus } from "./helpers/authz.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { GRAPH_CATALOG } from "./support/graph.js";
import { startTestService, type TestService } from "./support/service.js";

const CATALOG = [
  { resource: "todo", description: "", actions: ["read", "update", "delete"], relations: [{ name: "assignee", actions: ["read", "update"] }] },
];

const OWNER_ONLY = "resource.properties.ownerID == subject.id";

describe.each(engines)("conditions on grants, on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    service = await startTestService(database.db);
    key = await createApp(service, "cond", CATALOG);
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  const call = (method: string, path: string, body?: unknown) => service.call(method, path, { key, ...(body === undefined ? {} : { body }) });
  const write = (body: object) => call("POST", "/api/v1/authorization/relationships", body);
  const check = async (body: object): Promise<boolean> => {
    const res = await call("POST", "/api/v1/authorization/check", body);
    expectStatus(res, 200);
    return res.body.allowed as boolean;
  };

  it("a grant written with a condition comes back with it, in the answer and in the list", async () => {
    const res = await write({ userId: "ann", resource: "todo", resourceId: "t1", relation: "assignee", condition: OWNER_ONLY });
    expectStatus(res, 201);
    expect(res.body).toMatchObject({ userId: "ann", resource: "todo", resourceId: "t1", relation: "assignee", condition: OWNER_ONLY });
    const listed = await call("GET", "/api/v1/authorization/relationships?resource=todo&resourceId=t1");
    expect(listed.body.relationships).toEqual([expect.objectContaining({ userId: "ann", condition: OWNER_ONLY })]);
    // A grant with none has no condition field at all.
    const plain = await write({ userId: "bob", resource: "todo", resourceId: "t9", relation: "viewer" });
    expect(Object.keys(plain.body)).not.toContain("condition");
  });

  it("the check allows only where the condition holds with the question's facts; without them it denies", async () => {
    const q = { userId: "ann", resource: "todo", resourceId: "t1", action: "update" };
    expect(await check(q)).toBe(false);
    expect(await check({ ...q, resourceProperties: { ownerID: "ann" } })).toBe(true);
    expect(await check({ ...q, resourceProperties: { ownerID: "bob" } })).toBe(false);
    expect(await check({ ...q, resourceProperties: { ownerID: 7 } })).toBe(false);
    // An action the relation does not imply stays denied, whatever the facts.
    expect(await check({ ...q, action: "delete", resourceProperties: { ownerID: "ann" } })).toBe(false);
  });

  it("each kind of value, with and without the fact it needs (REST)", async () => {
    const cases: { condition: string; holds: object; fails: object }[] = [
      { condition: "context.level >= 3", holds: { context: { level: 3 } }, fails: { context: { level: 2 } } },
      { condition: "context.mfa", holds: { context: { mfa: true } }, fails: { context: { mfa: false } } },
      { condition: "now < timestamp(context.until)", holds: { context: { until: "2999-01-01T00:00:00Z" } }, fails: { context: { until: "2000-01-01T00:00:00Z" } } },
      { condition: "'support' in subject.properties.teams", holds: { subjectProperties: { teams: ["support"] } }, fails: { subjectProperties: { teams: ["sales"] } } },
      { condition: "context.request.headers['x-office'] == 'berlin'", holds: { context: { request: { headers: { "x-office": "berlin" } } } }, fails: { context: { request: { headers: {} } } } },
      { condition: "action.properties.via == 'api' && action.name == 'read'", holds: { actionProperties: { via: "api" } }, fails: { actionProperties: { via: "ui" } } },
      { condition: "context.ip.startsWith('10.')", holds: { context: { ip: "10.1.2.3" } }, fails: { context: { ip: "192.168.0.1" } } },
    ];
    for (const [i, c] of cases.entries()) {
      const resourceId = `kind-${i}`;
      expectStatus(await write({ userId: "cat", resource: "todo", resourceId, relation: "assignee", condition: c.condition }), 201);
      const q = { userId: "cat", resource: "todo", resourceId, action: "read" };
      expect(await check({ ...q, ...c.holds }), c.condition).toBe(true);
      expect(await check({ ...q, ...c.fails }), c.condition).toBe(false);
      expect(await check(q), c.condition).toBe(false);
    }
  });

  it("batch checks and permissions evaluate each question's own facts", async () => {
    const base = { userId: "ann", resource: "todo", resourceId: "t1" };
    const batch = await call("POST", "/api/v1/authorization/check/batch", {
      checks: [
        { ...base, action: "update", resourceProperties: { ownerID: "ann" } },
        { ...base, action: "update" },
        { ...base, action: "read", resourceProperties: { ownerID: "bob" } },
      ],
    });
    expectStatus(batch, 200);
    expect(batch.body.results).toEqual([{ allowed: true }, { allowed: false }, { allowed: false }]);
    const permissions = await call("POST", "/api/v1/authorization/permissions", { ...base, resourceProperties: { ownerID: "ann" } });
    expectStatus(permissions, 200);
    expect(permissions.body.actions).toEqual(["read", "update"]);
    expect((await call("POST", "/api/v1/authorization/permissions", base)).body.actions).toEqual([]);
  });

  it("explain evaluates the conditions it meets, saying what each came to and every value it read", async () => {
    const q = { userId: "ann", resource: "todo", resourceId: "t1", action: "update" };
    const denied = await call("POST", "/api/v1/authorization/check/explain", q);
    expectStatus(denied, 200);
    expect(denied.body.allowed).toBe(false);
    expect(denied.body.reasons).toEqual([]);
    expect(denied.body.conditions).toEqual([
      {
        relation: "assignee",
        condition: OWNER_ONLY,
        holds: false,
        outcome: "error",
        message: expect.stringContaining("ownerID"),
        reads: [
          { path: "resource.properties", found: true, value: {} },
          { path: "resource.properties.ownerID", found: false },
        ],
      },
    ]);
    const allowed = await call("POST", "/api/v1/authorization/check/explain", { ...q, resourceProperties: { ownerID: "ann" } });
    expect(allowed.body.allowed).toBe(true);
    expect(allowed.body.reasons).toEqual([
      expect.objectContaining({ kind: "relation", relation: "assignee", grant: expect.objectContaining({ userId: "ann", condition: OWNER_ONLY }) }),
    ]);
    expect(allowed.body.conditions).toEqual([
      expect.objectContaining({
        holds: true,
        outcome: "true",
        reads: [
          { path: "resource.properties", found: true, value: { ownerID: "ann" } },
          { path: "resource.properties.ownerID", found: true, value: "ann" },
          { path: "subject.id", found: true, value: "ann" },
        ],
      }),
    ]);
    // The same answer as the check, with the same facts, both ways.
    expect(await check(q)).toBe(false);
    expect(await check({ ...q, resourceProperties: { ownerID: "ann" } })).toBe(true);
    // An action the relation does not imply: nothing to evaluate.
    expect((await call("POST", "/api/v1/authorization/check/explain", { ...q, action: "delete" })).body.conditions).toEqual([]);
  });

  it("gRPC (a typed Connect client): the same answers, context as a Struct", async () => {
    const client = createClient(CheckService, createGrpcTransport({ baseUrl: service.url }));
    const headers = { "x-api-key": key };
    const q = { userId: "ann", resource: "todo", resourceId: "t1", action: "update" };
    expect((await client.check(q, { headers })).allowed).toBe(false);
    expect((await client.check({ ...q, resourceProperties: { ownerID: "ann" } }, { headers })).allowed).toBe(true);
  });

  it("writing the grant again replaces its condition, or removes it", async () => {
    const g = { userId: "dan", resource: "todo", resourceId: "t2", relation: "assignee" };
    expectStatus(await write({ ...g, condition: "context.a == 1" }), 201);
    const replaced = await write({ ...g, condition: "context.b == 1" });
    expectStatus(replaced, 200);
    expect(replaced.body.condition).toBe("context.b == 1");
    const q = { userId: "dan", resource: "todo", resourceId: "t2", action: "read" };
    expect(await check({ ...q, context: { a: 1 } })).toBe(false);
    expect(await check({ ...q, context: { b: 1 } })).toBe(true);
    const removed = await write(g);
    expect(Object.keys(removed.body)).not.toContain("condition");
    expect(await check(q)).toBe(true);
    // The same grant and condition again changes nothing.
    const before = await write({ ...g, condition: "context.c" });
    const same = await write({ ...g, condition: "context.c" });
    expect(same.body).toEqual(before.body);
  });

  it("bulk writes take conditions per grant", async () => {
    const res = await call("POST", "/api/v1/authorization/relationships/bulk", {
      writes: [
        { userId: "eve", resource: "todo", resourceId: "b1", relation: "assignee", condition: "context.ok" },
        { userId: "eve", resource: "todo", resourceId: "b2", relation: "assignee" },
      ],
    });
    expectStatus(res, 200);
    const q = { userId: "eve", resource: "todo", action: "read" };
    expect(await check({ ...q, resourceId: "b1" })).toBe(false);
    expect(await check({ ...q, resourceId: "b1", context: { ok: true } })).toBe(true);
    expect(await check({ ...q, resourceId: "b2" })).toBe(true);
  });

  it.each([
    { name: "a syntax error, with its position", body: { condition: "subject.id ==" }, field: "condition", fragments: ["not valid CEL", "at 1:"] },
    { name: "a name a condition cannot read", body: { condition: "user.id == 'x'" }, field: "condition", fragments: ['unknown name "user"'] },
    { name: "a condition that would run away", body: { condition: "context.a.exists(x, context.b.exists(y, x == y))" }, field: "condition", fragments: ["could cost up to"] },
    { name: "a lone surrogate", body: { condition: "subject.id == 'a\ud800'" }, field: "condition", fragments: [] },
  ])("a single write with $name → 400 naming the field, nothing written", async ({ body, field, fragments }) => {
    const g = { userId: "fay", resource: "todo", resourceId: "bad", relation: "assignee" };
    const res = await write({ ...g, ...body });
    expectError(res, 400, "invalid_argument", field, ...fragments);
    expect(res.body.details).toContainEqual(expect.objectContaining({ field }));
    expect((await call("GET", "/api/v1/authorization/relationships?resource=todo&resourceId=bad")).body.relationships).toEqual([]);
  });

  it("bulk: a bad condition and a delete with one are 400s naming the entries; nothing written", async () => {
    const res = await call("POST", "/api/v1/authorization/relationships/bulk", {
      writes: [
        { userId: "gus", resource: "todo", resourceId: "c1", relation: "assignee" },
        { userId: "gus", resource: "todo", resourceId: "c2", relation: "assignee", condition: "nope(" },
        { userId: "gus", resource: "todo", resourceId: "c1", relation: "assignee", condition: "true" },
      ],
      deletes: [{ userId: "gus", resource: "todo", resourceId: "c3", relation: "assignee", condition: "true" }],
    });
    expectError(res, 400, "invalid_argument");
    const fields = (res.body.details as { field: string }[]).map((d) => d.field);
    expect(fields).toEqual(expect.arrayContaining(["writes[1].condition", "writes[2].condition", "deletes[0].condition"]));
    expect((await call("GET", "/api/v1/authorization/relationships?userId=gus&resource=todo")).body.relationships).toEqual([]);
  });

  it.each([
    { name: "a context over 64 KiB", body: { context: { big: "x".repeat(70_000) } }, field: "context" },
    { name: "properties over 64 KiB together", body: { subjectProperties: { a: "x".repeat(40_000) }, resourceProperties: { b: "y".repeat(30_000) } }, field: "subjectProperties" },
    { name: "a context that is not an object", body: { context: "ticket=1" }, field: "context" },
    { name: "a context that is a list", body: { context: [1, 2] }, field: "context" },
    { name: "a lone surrogate in a context value", body: { context: { note: "a\ud800b" } }, field: "context" },
    { name: "a lone surrogate in a property name", body: { resourceProperties: { "k\udc00": 1 } }, field: "resourceProperties" },
  ])("a question with $name → 400 naming the field", async ({ body, field }) => {
    const res = await call("POST", "/api/v1/authorization/check", { userId: "ann", resource: "todo", resourceId: "t1", action: "read", ...body });
    expectError(res, 400, "invalid_argument", field);
  });

  it("lookup and who can list a conditional grant apart, with its condition, never as a plain answer", async () => {
    const res = await call("POST", "/api/v1/authorization/lookup", { userId: "ann", resource: "todo", action: "update" });
    expectStatus(res, 200);
    expect(res.body.resourceIds).not.toContain("t1");
    expect(res.body.conditional).toEqual([{ resourceId: "t1", conditions: [OWNER_ONLY] }]);
    // An action the relation does not imply: no candidate.
    const del = await call("POST", "/api/v1/authorization/lookup", { userId: "ann", resource: "todo", action: "delete" });
    expect(del.body.conditional).toEqual([]);
    const who = await call("POST", "/api/v1/authorization/subjects", { resource: "todo", resourceId: "t1", action: "update" });
    expectStatus(who, 200);
    expect(who.body.userIds).not.toContain("ann");
    expect(who.body.conditional).toEqual([{ userId: "ann", conditions: [OWNER_ONLY] }]);
  });

  it("a model with subject sets and links: a conditional grant on the instance is evaluated, and one on a path", async () => {
    const graphKey = await createApp(service, "cond-graph", GRAPH_CATALOG);
    const g = (body: object) => service.call("POST", "/api/v1/authorization/relationships", { key: graphKey, body });
    const ask = async (body: object) => (await service.call("POST", "/api/v1/authorization/check", { key: graphKey, body })).body.allowed as boolean;
    expectStatus(await g({ userId: "ivy", resource: "document", resourceId: "d1", relation: "viewer", condition: "context.ok" }), 201);
    expectStatus(await g({ userId: "joe", resource: "team", resourceId: "eng", relation: "member", condition: "context.ok" }), 201);
    expectStatus(await g({ subject: { resource: "team", resourceId: "eng", relation: "member" }, resource: "document", resourceId: "d1", relation: "viewer" }), 201);
    const q = { resource: "document", resourceId: "d1", action: "read" };
    expect(await ask({ ...q, userId: "ivy" })).toBe(false);
    expect(await ask({ ...q, userId: "ivy", context: { ok: true } })).toBe(true);
    // joe's membership is conditional: the path counts where it holds (test/graph-conditions-api.test.ts has every kind of edge).
    expect(await ask({ ...q, userId: "joe", context: { ok: true } })).toBe(true);
    expect(await ask({ ...q, userId: "joe" })).toBe(false);
    const explained = await service.call("POST", "/api/v1/authorization/check/explain", { key: graphKey, body: { ...q, userId: "joe", context: { ok: true } } });
    expect(explained.body).toMatchObject({ allowed: true, conditions: [expect.objectContaining({ relation: "member", condition: "context.ok", holds: true })] });
  });

  it("a role assignment with a condition: the role counts where it holds, in the check, permissions and explain", async () => {
    const base = "/api/v1/applications/cond";
    const policy = await service.call("POST", `${base}/policies`, { body: { name: "Deleters", permissions: ["todo:delete"] } });
    expectStatus(policy, 201);
    const role = await service.call("POST", `${base}/roles`, { body: { name: "On call", policyIds: [policy.body.policyId] } });
    expectStatus(role, 201);
    const assignments = `${base}/roles/${role.body.roleId}/assignments`;
    const bad = await service.call("POST", assignments, { body: { userId: "kim", condition: "context.ticket !=" } });
    expectError(bad, 400, "invalid_argument", "condition", "not valid CEL");
    const assigned = await service.call("POST", assignments, { body: { userId: "kim", condition: "has(context.ticket)" } });
    expectStatus(assigned, 201);
    expect(assigned.body).toMatchObject({ userId: "kim", condition: "has(context.ticket)" });
    const q = { userId: "kim", resource: "todo", resourceId: "t5", action: "delete" };
    expect(await check(q)).toBe(false);
    expect(await check({ ...q, context: { ticket: "T-1" } })).toBe(true);
    expect((await call("POST", "/api/v1/authorization/permissions", { userId: "kim", resource: "todo", resourceId: "t5", context: { ticket: "T-1" } })).body.actions).toEqual(["delete"]);
    expect((await call("POST", "/api/v1/authorization/permissions", { userId: "kim", resource: "todo", resourceId: "t5" })).body.actions).toEqual([]);
    const explained = await call("POST", "/api/v1/authorization/check/explain", { ...q, context: { ticket: "T-1" } });
    expect(explained.body.allowed).toBe(true);
    expect(explained.body.reasons).toEqual([expect.objectContaining({ kind: "role", roleName: "On call", policyName: "Deleters" })]);
    expect(explained.body.conditions).toEqual([
      expect.objectContaining({ roleId: role.body.roleId, relation: "", condition: "has(context.ticket)", holds: true, reads: [{ path: "context.ticket", found: true, value: "T-1" }] }),
    ]);
    // Lookup lists it apart: every instance, only where the condition holds; who can lists kim apart.
    const lookedUp = await call("POST", "/api/v1/authorization/lookup", { userId: "kim", resource: "todo", action: "delete" });
    expect(lookedUp.body).toMatchObject({ allInstances: false, allInstancesConditions: ["has(context.ticket)"] });
    const who = await call("POST", "/api/v1/authorization/subjects", { resource: "todo", resourceId: "t5", action: "delete" });
    expect(who.body.conditional).toEqual([{ userId: "kim", conditions: ["has(context.ticket)"] }]);
    // Assigned again with another condition: replaced, and logged as an assignment; the same again changes nothing.
    const replaced = await service.call("POST", assignments, { body: { userId: "kim", condition: "context.ticket == 'T-2'" } });
    expectStatus(replaced, 200);
    expect(replaced.body.condition).toBe("context.ticket == 'T-2'");
    expect(await check({ ...q, context: { ticket: "T-1" } })).toBe(false);
    await service.call("POST", assignments, { body: { userId: "kim", condition: "context.ticket == 'T-2'" } });
    const events = await service.call("GET", `${base}/audit-log?type=role.assigned&pageSize=100`);
    expect((events.body.events as { data: { userId: string; condition?: string } }[]).filter((e) => e.data.userId === "kim").map((e) => e.data.condition)).toEqual([
      "context.ticket == 'T-2'",
      "has(context.ticket)",
    ]);
    // Without one, it always counts.
    await service.call("POST", assignments, { body: { userId: "kim" } });
    expect(await check(q)).toBe(true);
    const listed = await service.call("GET", assignments);
    expect(listed.body.assignments).toEqual([expect.not.objectContaining({ condition: expect.anything() })]);
  });

  it("stored user properties are the subject's properties, the question's laid over them key by key", async () => {
    const put = await service.call("PUT", "/api/v1/applications/cond/users/lou/properties", { body: { email: "lou@example.com", level: 2 } });
    expectStatus(put, 200);
    expectStatus(await write({ userId: "lou", resource: "todo", resourceId: "p1", relation: "assignee", condition: "resource.properties.ownerID == subject.properties.email && subject.properties.level >= 2" }), 201);
    const q = { userId: "lou", resource: "todo", resourceId: "p1", action: "update" };
    expect(await check({ ...q, resourceProperties: { ownerID: "lou@example.com" } })).toBe(true);
    expect(await check({ ...q, resourceProperties: { ownerID: "someone@example.com" } })).toBe(false);
    // The question's own value for a key wins; the stored others stay.
    expect(await check({ ...q, resourceProperties: { ownerID: "lou@example.com" }, subjectProperties: { level: 1 } })).toBe(false);
    expect(await check({ ...q, resourceProperties: { ownerID: "lou@other.org" }, subjectProperties: { email: "lou@other.org" } })).toBe(true);
    const explained = await call("POST", "/api/v1/authorization/check/explain", { ...q, resourceProperties: { ownerID: "lou@example.com" } });
    expect(explained.body.allowed).toBe(true);
    expect(explained.body.conditions[0].reads).toContainEqual({ path: "subject.properties.email", found: true, value: "lou@example.com" });
    // Cleared: the condition no longer holds.
    expectStatus(await service.call("PUT", "/api/v1/applications/cond/users/lou/properties", { body: {} }), 200);
    expect(await check({ ...q, resourceProperties: { ownerID: "lou@example.com" } })).toBe(false);
  });

  it("the change feed carries the grant's condition", async () => {
    const res = await call("GET", "/api/v1/authorization/changes?pageSize=1000");
    expectStatus(res, 200);
    const grants = (res.body.changes as { kind: string; grant?: { userId: string; condition?: string } }[]).filter((c) => c.grant?.userId === "ann");
    expect(grants[0]?.grant?.condition).toBe(OWNER_ONLY);
  });
});

/** A condition's cost is bounded (docs/conditions.md), through the port, on each engine. */
describe.each(engines)("a condition's cost, on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;
  let checkKey: string;

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    service = await startTestService(database.db);
    key = await createApp(service, "bombs", CATALOG);
    const created = await service.call("POST", "/api/v1/applications/bombs/api-keys", { body: { name: "asker", scopes: ["check"] } });
    expectStatus(created, 201);
    checkKey = created.body.key as string;
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  const BOMB = 'context.s.replace("a", context.s) == "x"';

  it("a bomb asked by a check-only key with 2,500 characters of context: denied, and explain gives the budget's message", async () => {
    expectStatus(await service.call("POST", "/api/v1/authorization/relationships", { key, body: { userId: "eve", resource: "todo", resourceId: "b1", relation: "assignee", condition: BOMB } }), 201);
    const q = { userId: "eve", resource: "todo", resourceId: "b1", action: "read", context: { s: "a".repeat(2_500) } };
    const started = Date.now();
    const checked = await service.call("POST", "/api/v1/authorization/check", { key: checkKey, body: q });
    expectStatus(checked, 200);
    expect(checked.body.allowed).toBe(false);
    expect(Date.now() - started).toBeLessThan(5_000);
    const explained = await service.call("POST", "/api/v1/authorization/check/explain", { key, body: q });
    expectStatus(explained, 200);
    expect(explained.body).toMatchObject({
      allowed: false,
      conditions: [expect.objectContaining({ condition: BOMB, holds: false, outcome: "error", message: expect.stringMatching(/would build a value of|exceeded its cost budget/) })],
    });
    // A modest context is evaluated as CEL says: "x" has no "a" to replace, and the grant counts.
    expect((await service.call("POST", "/api/v1/authorization/check", { key: checkKey, body: { ...q, context: { s: "x" } } })).body.allowed).toBe(true);
  });

  it("a condition that cannot fit whatever the facts, or nests 480 deep, is a 400 naming the field and the position", async () => {
    const a = "a".repeat(100);
    const constant = `'${a}'.replace('a','${a}').replace('a','${a}') == ''`;
    const single = await service.call("POST", "/api/v1/authorization/relationships", { key, body: { userId: "eve", resource: "todo", resourceId: "b2", relation: "assignee", condition: constant } });
    expectError(single, 400, "invalid_argument");
    expect(single.body.message).toMatch(/^condition: at 1:\d+: cannot be evaluated within its budget/);
    const deep = "(".repeat(480) + "true" + ")".repeat(480);
    const bulk = await service.call("POST", "/api/v1/authorization/relationships/bulk", {
      key,
      body: { writes: [{ userId: "eve", resource: "todo", resourceId: "b3", relation: "assignee", condition: deep }] },
    });
    expectError(bulk, 400, "invalid_argument");
    expect(JSON.stringify(bulk.body)).toMatch(/writes\[0\]\.condition.*at 1:65: nests more than 64 levels deep/);
  });
});
