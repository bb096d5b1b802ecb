/**
 * Conditions on policies through the API, on each engine: written, read
 * back, replaced and removed (audit-logged), refused when bad; honoured by
 * the check, the batch check, permissions and explain for roles held
 * outright and by conditional assignments, with the tenant's scope; deny-safe
 * in lookup and who can; counted apart in the impact preview and the model
 * plan; round-tripped by models as files; over gRPC too.
 */
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PolicyService } from "../gen/authz/v1/policies_pb.js";
import { createApp, expectError, expectStatus } from "./helpers/authz.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, startTestService, type TestService } from "./support/service.js";

const CATALOG = [
  { resource: "todo", description: "", actions: ["read", "update", "delete"], relations: [] },
  { resource: "doc", description: "", actions: ["read"], relations: [] },
];

const OWNER = "resource.properties.ownerID == subject.properties.email";
const TICKET = "has(context.ticket)";
const APP = "polcond";
const BASE = `/api/v1/applications/${APP}`;

describe.each(engines)("conditions on policies, on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    service = await startTestService(database.db);
    key = await createApp(service, APP, CATALOG);
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  const admin = (method: string, path: string, body?: unknown) => service.call(method, `${BASE}${path}`, body === undefined ? {} : { body });
  const ask = (path: string, body: object) => service.call("POST", `/api/v1/authorization/${path}`, { key, body });
  const check = async (body: object): Promise<boolean> => {
    const res = await ask("check", body);
    expectStatus(res, 200);
    return res.body.allowed as boolean;
  };
  const policy = async (body: object): Promise<string> => {
    const res = await admin("POST", "/policies", body);
    expectStatus(res, 201);
    return res.body.policyId as string;
  };
  const role = async (name: string, policyIds: string[], tenantId?: string): Promise<string> => {
    const res = await admin("POST", "/roles", { name, policyIds, ...(tenantId === undefined ? {} : { tenantId }) });
    expectStatus(res, 201);
    return res.body.roleId as string;
  };
  const assign = async (roleId: string, userId: string, condition?: string) => {
    const res = await admin("POST", `/roles/${roleId}/assignments`, { userId, ...(condition === undefined ? {} : { condition }) });
    expect([200, 201]).toContain(res.status);
  };

  it("a policy written with a condition comes back with it; one without has no condition field", async () => {
    const id = await policy({ name: "Own todos", permissions: ["todo:update"], condition: OWNER });
    const got = await admin("GET", `/policies/${id}`);
    expect(got.body).toMatchObject({ name: "Own todos", permissions: ["todo:update"], condition: OWNER });
    const listed = await admin("GET", "/policies");
    expect(listed.body.policies).toEqual(expect.arrayContaining([expect.objectContaining({ policyId: id, condition: OWNER })]));
    const plain = await admin("POST", "/policies", { name: "Readers", permissions: ["todo:read"], condition: "" });
    expectStatus(plain, 201);
    expect(Object.keys(plain.body)).not.toContain("condition");
    const created = await admin("GET", `/audit-log?type=policy.created&targetId=${id}`);
    expect(created.body.events[0].data).toMatchObject({ condition: OWNER });
  });

  it("a bad condition is a 400 naming the field and the position; nothing is written", async () => {
    const cases: [string, string[]][] = [
      ["resource.properties.ownerID ==", ["condition", "not valid CEL", "1:"]],
      ["secrets.key == 'x'", ["condition", "secrets"]],
      ["sha256(subject.id) == 'x'", ["condition", "sha256"]],
    ];
    for (const [condition, fragments] of cases) {
      expectError(await admin("POST", "/policies", { name: `Bad ${condition}`, permissions: ["todo:read"], condition }), 400, "invalid_argument", ...fragments);
    }
    const listed = await admin("GET", "/policies?pageSize=100");
    expect((listed.body.policies as { name: string }[]).filter((p) => p.name.startsWith("Bad "))).toEqual([]);
    const id = await policy({ name: "To break", permissions: ["todo:read"] });
    expectError(await admin("PATCH", `/policies/${id}`, { condition: "context.x >" }), 400, "invalid_argument", "condition");
    expect((await admin("GET", `/policies/${id}`)).body.condition).toBeUndefined();
  });

  it("a role holding a permission only by a conditional policy allows where it holds, with stored and asked properties", async () => {
    const id = await policy({ name: "Editors own", permissions: ["todo:update", "todo:delete"], condition: OWNER });
    const editor = await role("Editor", [id]);
    await assign(editor, "morty");
    expectStatus(await service.call("PUT", `${BASE}/users/morty/properties`, { body: { email: "morty@example.com" } }), 200);
    const q = { userId: "morty", resource: "todo", resourceId: "t1", action: "update" };
    expect(await check(q)).toBe(false);
    expect(await check({ ...q, resourceProperties: { ownerID: "morty@example.com" } })).toBe(true);
    expect(await check({ ...q, resourceProperties: { ownerID: "rick@example.com" } })).toBe(false);
    // The question's subject properties lay over the stored ones.
    expect(await check({ ...q, resourceProperties: { ownerID: "x@example.com" }, subjectProperties: { email: "x@example.com" } })).toBe(true);
    // An action no policy of the role holds stays denied.
    expect(await check({ ...q, action: "read", resourceProperties: { ownerID: "morty@example.com" } })).toBe(false);

    const batch = await ask("check/batch", {
      checks: [
        { ...q, resourceProperties: { ownerID: "morty@example.com" } },
        q,
        { ...q, action: "delete", resourceProperties: { ownerID: "morty@example.com" } },
      ],
    });
    expect(batch.body.results).toEqual([{ allowed: true }, { allowed: false }, { allowed: true }]);
    const permissions = await ask("permissions", { userId: "morty", resource: "todo", resourceId: "t1", resourceProperties: { ownerID: "morty@example.com" } });
    expect(permissions.body.actions).toEqual(["update", "delete"]);
    expect((await ask("permissions", { userId: "morty", resource: "todo", resourceId: "t1" })).body.actions).toEqual([]);
  });

  it("explain lists each policy condition it evaluated, with its role, policy, outcome and reads", async () => {
    const q = { userId: "morty", resource: "todo", resourceId: "t1", action: "update" };
    const allowed = await ask("check/explain", { ...q, resourceProperties: { ownerID: "morty@example.com" } });
    expectStatus(allowed, 200);
    expect(allowed.body.allowed).toBe(true);
    expect(allowed.body.reasons).toEqual([expect.objectContaining({ kind: "role", roleName: "Editor", policyName: "Editors own" })]);
    expect(allowed.body.conditions).toEqual([
      {
        relation: "",
        roleId: expect.any(String),
        policyId: expect.any(String),
        condition: OWNER,
        holds: true,
        outcome: "true",
        message: "",
        reads: [
          { path: "resource.properties", found: true, value: { ownerID: "morty@example.com" } },
          { path: "resource.properties.ownerID", found: true, value: "morty@example.com" },
          { path: "subject.properties", found: true, value: { email: "morty@example.com" } },
          { path: "subject.properties.email", found: true, value: "morty@example.com" },
        ],
      },
    ]);
    const denied = await ask("check/explain", q);
    expect(denied.body).toMatchObject({ allowed: false, reasons: [] });
    expect(denied.body.conditions).toEqual([expect.objectContaining({ condition: OWNER, holds: false, outcome: "error" })]);
  });

  it("a permission held outright by another policy of the role, or another role, needs no condition", async () => {
    const conditional = await policy({ name: "Read on ticket", permissions: ["doc:read"], condition: TICKET });
    const outright = await policy({ name: "Read docs", permissions: ["doc:read"] });
    const both = await role("Both", [conditional, outright]);
    await assign(both, "beth");
    expect(await check({ userId: "beth", resource: "doc", resourceId: "d1", action: "read" })).toBe(true);
    const onlyConditional = await role("Support", [conditional]);
    await assign(onlyConditional, "jerry");
    const q = { userId: "jerry", resource: "doc", resourceId: "d1", action: "read" };
    expect(await check(q)).toBe(false);
    expect(await check({ ...q, context: { ticket: 1 } })).toBe(true);
    // Two conditional policies: either one suffices.
    const other = await policy({ name: "Read in office", permissions: ["doc:read"], condition: "context.office" });
    expectStatus(await admin("PATCH", `/roles/${onlyConditional}`, { policyIds: [conditional, other] }), 200);
    expect(await check({ ...q, context: { office: true } })).toBe(true);
    expect(await check({ ...q, context: { office: false } })).toBe(false);
    // Jerry also gains the outright role: no condition needed any more.
    await assign(both, "jerry");
    expect(await check(q)).toBe(true);
  });

  it("a conditional assignment of a role whose policy is conditional: both must hold", async () => {
    const id = await policy({ name: "Delete own", permissions: ["todo:delete"], condition: "resource.properties.ownerID == subject.id" });
    const r = await role("On call deleter", [id]);
    await assign(r, "summer", "context.onCall == true");
    const q = { userId: "summer", resource: "todo", resourceId: "t2", action: "delete" };
    expect(await check({ ...q, context: { onCall: true }, resourceProperties: { ownerID: "summer" } })).toBe(true);
    expect(await check({ ...q, context: { onCall: false }, resourceProperties: { ownerID: "summer" } })).toBe(false);
    expect(await check({ ...q, context: { onCall: true }, resourceProperties: { ownerID: "rick" } })).toBe(false);
    const explained = await ask("check/explain", { ...q, context: { onCall: true }, resourceProperties: { ownerID: "rick" } });
    expect(explained.body.allowed).toBe(false);
    expect((explained.body.conditions as { holds: boolean; policyId?: string }[]).map((c) => [c.policyId === undefined ? "assignment" : "policy", c.holds])).toEqual([
      ["assignment", true],
      ["policy", false],
    ]);
  });

  it("a tenant's role holds its conditional permission only in its tenant", async () => {
    const id = await policy({ name: "Tenant read", permissions: ["doc:read"], condition: TICKET, tenantId: "acme" });
    const r = await role("Acme support", [id], "acme");
    await assign(r, "tina");
    const q = { userId: "tina", resource: "doc", resourceId: "d9", action: "read", context: { ticket: 1 } };
    expect(await check({ ...q, tenantId: "acme" })).toBe(true);
    expect(await check({ ...q, tenantId: "other" })).toBe(false);
    expect(await check(q)).toBe(false);
  });

  it("updating the condition replaces it, \"\" removes it, null leaves it be; each change audit-logged; the check follows", async () => {
    const id = await policy({ name: "Switchable", permissions: ["todo:read"], condition: "context.on == true" });
    const r = await role("Switch", [id]);
    await assign(r, "sam");
    const q = { userId: "sam", resource: "todo", resourceId: "t3", action: "read" };
    expect(await check(q)).toBe(false);
    const replaced = await admin("PATCH", `/policies/${id}`, { condition: "context.on == false" });
    expectStatus(replaced, 200);
    expect(replaced.body.condition).toBe("context.on == false");
    expect(await check({ ...q, context: { on: false } })).toBe(true);
    // null is an absent key: the condition stays.
    expect((await admin("PATCH", `/policies/${id}`, { condition: null, description: "d" })).body.condition).toBe("context.on == false");
    const removed = await admin("PATCH", `/policies/${id}`, { condition: "" });
    expectStatus(removed, 200);
    expect(Object.keys(removed.body)).not.toContain("condition");
    expect(await check(q)).toBe(true);
    expectStatus(await admin("PATCH", `/policies/${id}`, { condition: "context.on" }), 200);
    expectStatus(await admin("PATCH", `/policies/${id}`, { condition: "" }), 200);
    expect(await check(q)).toBe(true);
    // The same condition again changes nothing and logs nothing.
    expectStatus(await admin("PATCH", `/policies/${id}`, { condition: "" }), 200);
    const events = await admin("GET", `/audit-log?type=policy.updated&targetId=${id}&pageSize=100`);
    expect((events.body.events as { data: { condition?: unknown } }[]).map((e) => e.data.condition)).toEqual([
      { from: "context.on", to: null },
      { from: null, to: "context.on" },
      { from: "context.on == false", to: null },
      undefined, // the description's change
      { from: "context.on == true", to: "context.on == false" },
    ]);
  });

  it("lookup and who can list a permission held only under a condition apart, never as a plain answer", async () => {
    const lookup = await ask("lookup", { userId: "morty", resource: "todo", action: "update" });
    expectStatus(lookup, 200);
    expect(lookup.body).toMatchObject({ allInstances: false, allInstancesConditions: [OWNER] });
    const who = await ask("subjects", { resource: "todo", resourceId: "t1", action: "update" });
    expectStatus(who, 200);
    expect(who.body.userIds).not.toContain("morty");
    expect(who.body.conditional).toEqual(expect.arrayContaining([{ userId: "morty", conditions: [OWNER] }]));
    // summer's way is an assignment's condition and a policy's, both: one expression joined by &&.
    const deleters = await ask("subjects", { resource: "todo", resourceId: "t2", action: "delete" });
    expect(deleters.body.conditional).toEqual(
      expect.arrayContaining([{ userId: "summer", conditions: ["(context.onCall == true) && (resource.properties.ownerID == subject.id)"] }]),
    );
  });

  it("the impact preview counts a permission under a condition apart from the same permission outright", async () => {
    const id = await policy({ name: "Previewed", permissions: ["doc:read"] });
    const r = await role("Previewed role", [id]);
    await assign(r, "pia");
    const preview = (body: object) => admin("POST", `/policies/${id}/preview`, body);
    const adding = await preview({ condition: TICKET });
    expectStatus(adding, 200);
    expect(adding.body).toMatchObject({
      added: [],
      removed: ["doc:read"],
      conditionalAdded: [{ permission: "doc:read", condition: TICKET }],
      users: { losing: 1, gaining: 1, losingSample: ["pia"], gainingSample: ["pia"] },
    });
    expect(adding.body.conditionalRemoved ?? []).toEqual([]);
    // A user who holds the permission outright elsewhere loses nothing and gains nothing that counts.
    const other = await policy({ name: "Other read", permissions: ["doc:read"] });
    await assign(await role("Other role", [other]), "pia");
    const covered = await preview({ condition: TICKET });
    expect(covered.body.users).toMatchObject({ losing: 0, gaining: 0, reached: 1 });
    // Changing nothing previews nothing.
    const same = await preview({ permissions: ["doc:read"] });
    expect(same.body).toMatchObject({ added: [], removed: [] });
    expect(same.body.conditionalAdded ?? []).toEqual([]);
    expectError(await preview({ condition: "context.(" }), 400, "invalid_argument", "condition");
  });

  it("models as files: the condition round-trips through export and apply, and the plan counts it apart", async () => {
    const exported = await admin("GET", "/model");
    expectStatus(exported, 200);
    const own = (exported.body.policies as { name: string; condition?: string }[]).find((p) => p.name === "Editors own");
    expect(own?.condition).toBe(OWNER);
    const readers = (exported.body.policies as { name: string; condition?: string }[]).find((p) => p.name === "Readers");
    expect(readers).toBeDefined();
    expect(Object.keys(readers!)).not.toContain("condition");
    // Applied as exported: nothing changes.
    const noop = await admin("POST", "/model/plan", exported.body);
    expectStatus(noop, 200);
    expect(noop.body.policies).toEqual({ created: [], changed: [], removed: [] });
    expect(noop.body.impact ?? []).toEqual([]);
    // The plan of a condition's change: the permissions move from one condition to the other, counted apart.
    const changed = {
      ...exported.body,
      policies: (exported.body.policies as { name: string }[]).map((p) => (p.name === "Editors own" ? { ...p, condition: "resource.properties.ownerID == subject.id" } : p)),
    };
    const plan = await admin("POST", "/model/plan", changed);
    expectStatus(plan, 200);
    expect(plan.body.policies.changed).toEqual(["Editors own"]);
    expect(plan.body.impact).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ permission: "todo:update", condition: OWNER, losing: 1, losingSample: ["morty"] }),
        expect.objectContaining({ permission: "todo:update", condition: "resource.properties.ownerID == subject.id", gaining: 1, gainingSample: ["morty"] }),
      ]),
    );
    const bad = { ...exported.body, policies: [{ name: "Bad", permissions: ["doc:read"], condition: "1 +" }] };
    expectError(await admin("POST", "/model/plan", bad), 400, "invalid_argument", "policies[0].condition");
    const applied = await admin("PUT", "/model", changed);
    expectStatus(applied, 200);
    const q = { userId: "morty", resource: "todo", resourceId: "t1", action: "update" };
    expect(await check({ ...q, resourceProperties: { ownerID: "morty@example.com" } })).toBe(false);
    expect(await check({ ...q, resourceProperties: { ownerID: "morty" } })).toBe(true);
    const again = await admin("GET", "/model");
    expect((again.body.policies as { name: string; condition?: string }[]).find((p) => p.name === "Editors own")?.condition).toBe(
      "resource.properties.ownerID == subject.id",
    );
  });

  it("gRPC (a typed Connect client): create and read a policy's condition; a bad one is INVALID_ARGUMENT", async () => {
    const client = createClient(PolicyService, createGrpcTransport({ baseUrl: service.url }));
    const headers = { "x-api-key": ADMIN_KEY };
    const created = await client.createPolicy({ appId: APP, name: "Over gRPC", permissions: ["doc:read"], condition: TICKET }, { headers });
    expect(created.policy?.condition).toBe(TICKET);
    expect((await client.getPolicy({ appId: APP, policyId: created.policy!.policyId }, { headers })).policy?.condition).toBe(TICKET);
    await expect(client.createPolicy({ appId: APP, name: "Bad gRPC", permissions: ["doc:read"], condition: "(" }, { headers })).rejects.toMatchObject({ code: 3 });
  });
});
