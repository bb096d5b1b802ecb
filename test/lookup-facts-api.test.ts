/**
 * Lookup and who can with the question's facts (docs/conditions.md), on
 * each engine: `context` and the properties objects, taken and validated
 * as the check takes them, decide the conditional answers they can decide
 * (listed plainly where a way holds, left out where every way is decided
 * against) and leave the others apart with the ways still undecided (a
 * value they read is missing); without facts nothing is evaluated, as
 * before. Direct grants, a conditional role assignment, and a conditional
 * membership on a path of a model with subject sets.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApp, expectError, expectStatus } from "./helpers/authz.js";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { GRAPH_CATALOG } from "./support/graph.js";
import { startTestService, type TestService } from "./support/service.js";

const CATALOG = [{ resource: "todo", description: "", actions: ["read", "update"], relations: [{ name: "assignee", actions: ["read", "update"] }] }];

describe.each(oneEngine(import.meta.url))("lookup and who can with facts, on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    key = await createApp(service, "lkfacts", CATALOG);
    const grants = [
      { resourceId: "t1", condition: "context.ok == true" },
      { resourceId: "t2", condition: "resource.properties.level >= 2" },
      { resourceId: "t3" },
      { resourceId: "t4", condition: "has(context.ticket)" },
      { resourceId: "t5", condition: "subject.properties.team == 'blue'" },
    ];
    for (const g of grants) expectStatus(await call("POST", "/api/v1/authorization/relationships", { userId: "ann", resource: "todo", relation: "assignee", ...g }), 201);
    expectStatus(await call("PUT", "/api/v1/applications/lkfacts/users/ann/properties", { team: "blue" }), 200);
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  const call = (method: string, path: string, body?: unknown, as = key) => service.call(method, path, { key: as, ...(body === undefined ? {} : { body }) });
  const lookup = async (body: object = {}) => {
    const res = await call("POST", "/api/v1/authorization/lookup", { userId: "ann", resource: "todo", action: "read", ...body });
    expectStatus(res, 200);
    return { plain: res.body.resourceIds as string[], conditional: res.body.conditional as { resourceId: string; conditions: string[] }[] };
  };
  const whoCan = async (resourceId: string, body: object = {}) => {
    const res = await call("POST", "/api/v1/authorization/subjects", { resource: "todo", resourceId, action: "read", ...body });
    expectStatus(res, 200);
    return { plain: res.body.userIds as string[], conditional: res.body.conditional as { userId: string; conditions: string[] }[] };
  };

  it("without facts nothing is evaluated: every conditional answer is listed apart", async () => {
    expect(await lookup()).toEqual({
      plain: ["t3"],
      conditional: [
        { resourceId: "t1", conditions: ["context.ok == true"] },
        { resourceId: "t2", conditions: ["resource.properties.level >= 2"] },
        { resourceId: "t4", conditions: ["has(context.ticket)"] },
        { resourceId: "t5", conditions: ["subject.properties.team == 'blue'"] },
      ],
    });
  });

  it("with facts: what they decide is plain or left out, what they leave undecided stays apart", async () => {
    // t1 holds; t2 reads a property not given (undecided); t4 has no ticket (false: decided);
    // t5 reads the user's stored properties, as the check does (holds).
    expect(await lookup({ context: { ok: true } })).toEqual({
      plain: ["t1", "t3", "t5"],
      conditional: [{ resourceId: "t2", conditions: ["resource.properties.level >= 2"] }],
    });
    expect(await lookup({ context: { ok: false, ticket: "T-1" }, resourceProperties: { level: 1 } })).toEqual({ plain: ["t3", "t4", "t5"], conditional: [] });
    // The question's subjectProperties lie over the stored ones, key by key.
    expect((await lookup({ subjectProperties: { team: "red" } })).plain).toEqual(["t3"]);
    // Who can: the same, for the users of one instance.
    expect(await whoCan("t1", { context: { ok: true } })).toEqual({ plain: ["ann"], conditional: [] });
    expect(await whoCan("t1", { context: { ok: false } })).toEqual({ plain: [], conditional: [] });
    expect(await whoCan("t2", { context: {} })).toEqual({ plain: [], conditional: [{ userId: "ann", conditions: ["resource.properties.level >= 2"] }] });
    expect(await whoCan("t2", { resourceProperties: { level: 3 } })).toEqual({ plain: ["ann"], conditional: [] });
  });

  it("a conditional role assignment: who can decides it with the facts", async () => {
    const base = "/api/v1/applications/lkfacts";
    const policy = await service.call("POST", `${base}/policies`, { body: { name: "Readers", permissions: ["todo:read"] } });
    const role = await service.call("POST", `${base}/roles`, { body: { name: "On call", policyIds: [policy.body.policyId] } });
    expectStatus(await service.call("POST", `${base}/roles/${role.body.roleId}/assignments`, { body: { userId: "kim", condition: "has(context.ticket)" } }), 201);
    expect((await whoCan("t9")).conditional).toEqual([{ userId: "kim", conditions: ["has(context.ticket)"] }]);
    expect(await whoCan("t9", { context: { ticket: "T-2" } })).toEqual({ plain: ["kim"], conditional: [] });
    expect(await whoCan("t9", { context: { other: 1 } })).toEqual({ plain: [], conditional: [] });
  });

  it.each([
    { name: "a context that is not an object", body: { context: "ok" }, field: "context" },
    { name: "a context that is a list", body: { context: [1] }, field: "context" },
    { name: "properties over 64 KiB together", body: { subjectProperties: { a: "x".repeat(40_000) }, resourceProperties: { b: "y".repeat(30_000) } }, field: "subjectProperties" },
    { name: "a lone surrogate in a property name", body: { actionProperties: { "k\udc00": 1 } }, field: "actionProperties" },
  ])("$name → 400 naming the field, on lookup and on who can", async ({ body, field }) => {
    expectError(await call("POST", "/api/v1/authorization/lookup", { userId: "ann", resource: "todo", action: "read", ...body }), 400, "invalid_argument", field);
    expectError(await call("POST", "/api/v1/authorization/subjects", { resource: "todo", resourceId: "t1", action: "read", ...body }), 400, "invalid_argument", field);
  });

  it("a model with subject sets: a conditional membership on a path is decided by the facts", async () => {
    const graphKey = await createApp(service, "lkfacts-graph", GRAPH_CATALOG);
    const g = async (body: object) => expectStatus(await call("POST", "/api/v1/authorization/relationships", body, graphKey), 201);
    await g({ userId: "joe", resource: "team", resourceId: "eng", relation: "member", condition: "context.ok == true" });
    await g({ subject: { resource: "team", resourceId: "eng", relation: "member" }, resource: "document", resourceId: "d1", relation: "viewer" });
    const ask = async (path: string, body: object) => {
      const res = await call("POST", `/api/v1/authorization/${path}`, body, graphKey);
      expectStatus(res, 200);
      return res.body;
    };
    const who = { resource: "document", resourceId: "d1", action: "read" };
    expect((await ask("subjects", who)).conditional).toEqual([{ userId: "joe", conditions: ["context.ok == true"] }]);
    expect(await ask("subjects", { ...who, context: { ok: true } })).toMatchObject({ userIds: ["joe"], conditional: [] });
    expect(await ask("subjects", { ...who, context: { ok: false } })).toMatchObject({ userIds: [], conditional: [] });
    const mine = { userId: "joe", resource: "document", action: "read" };
    expect(await ask("lookup", { ...mine, context: { ok: true } })).toMatchObject({ resourceIds: ["d1"], conditional: [] });
    expect(await ask("lookup", { ...mine, context: {} })).toMatchObject({ resourceIds: [], conditional: [{ resourceId: "d1", conditions: ["context.ok == true"] }] });
  });
});
