/**
 * The audit log over REST and gRPC, on each engine: one event per change to
 * applications' keys, the catalog, policies, roles and role assignments, with
 * the actor's key id and what changed; newest first; filters and paging; no
 * secret ever; and nothing written by a failed change or a no-op.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { grpc, grpcCaller, type GrpcCaller } from "./support/grpc-client.js";
import { ADMIN_KEY, startTestService, type RestAnswer, type TestService } from "./support/service.js";
import {
  allPages,
  appApi,
  CATALOG,
  expectError,
  expectGrpcError,
  grpcFail,
  newApp,
  newKey,
  ok,
  RFC3339,
  structJson,
  timestampMs,
  type AppApi,
  type AuditEvent,
  type Json,
} from "./helpers/authz-api.js";

/** Every event type of the contract. */
const EVENT_TYPES = [
  "application.created",
  "api_key.created",
  "api_key.revoked",
  "catalog.replaced",
  "policy.created",
  "policy.updated",
  "policy.deleted",
  "role.created",
  "role.updated",
  "role.deleted",
  "role.assigned",
  "role.unassigned",
];

describe.each(oneEngine(import.meta.url))("audit log API on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let rpc: GrpcCaller;
  let otherKey: string;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    rpc = grpcCaller(service.url);
    await newApp(service.call, "other");
    otherKey = (await newKey(service.call, "other")).key;
  });
  afterAll(async () => {
    rpc?.close();
    await service?.close();
    await database?.dispose();
  });

  describe("a whole lifecycle", () => {
    const appId = "journal";
    let api: AppApi;
    let appKey: { keyId: string; key: string };
    let spareKey: { keyId: string; key: string };
    let ids: { policy: string; spare: string; role: string };
    let events: AuditEvent[];

    /** The expected events, oldest first: [type, targetType, targetId, actor, data]. */
    let expected: [string, string, string, string, Json][];

    beforeAll(async () => {
      // Operator: the application and two keys. The application key does the rest.
      ok(await service.call("POST", "/api/v1/applications", { body: { appId, name: "The Journal" } }), 201);
      api = appApi(service.call, appId);
      appKey = await newKey(service.call, appId, "app");
      spareKey = await newKey(service.call, appId, "spare");
      const k = appKey.key;
      ok(await api.putCatalog(CATALOG, k));
      const policy = ok(await api.createPolicy({ name: "Docs", permissions: ["document:read"] }, k), 201);
      ok(await api.patchPolicy(policy.policyId, { permissions: ["document:read", "document:update"] }, k));
      const spare = ok(await api.createPolicy({ name: "Spare", tenantId: "t1" }, k), 201);
      const role = ok(await api.createRole({ name: "Editors", policyIds: [policy.policyId] }, k), 201);
      ok(await api.patchRole(role.roleId, { policyIds: [] }, k));
      ok(await api.patchRole(role.roleId, { name: "Writers", policyIds: [policy.policyId] }, k));
      ok(await api.assign(role.roleId, { userId: "alice" }, k), 201);
      ok(await api.assign(role.roleId, { userId: "bob" }, k), 201);
      ok(await api.unassign(role.roleId, "alice", k));
      ok(await api.deletePolicy(policy.policyId, "?force=true", k));
      ok(await api.deleteRole(role.roleId, k));
      ok(await api.deletePolicy(spare.policyId, "", k));
      ok(await service.call("DELETE", `/api/v1/applications/${appId}/api-keys/${spareKey.keyId}`, { key: k }));
      ids = { policy: policy.policyId, spare: spare.policyId, role: role.roleId };

      const a = appKey.keyId;
      expected = [
        ["application.created", "application", appId, "operator", { name: "The Journal" }],
        ["api_key.created", "api_key", appKey.keyId, "operator", { name: "app", scopes: ["check", "read", "write"] }],
        ["api_key.created", "api_key", spareKey.keyId, "operator", { name: "spare", scopes: ["check", "read", "write"] }],
        ["catalog.replaced", "catalog", appId, a, expect.objectContaining({ permissionsRemoved: [], resourcesAdded: ["document", "invoice"] })],
        ["policy.created", "policy", ids.policy, a, { name: "Docs", permissions: ["document:read"] }],
        ["policy.updated", "policy", ids.policy, a, { permissionsAdded: ["document:update"], permissionsRemoved: [] }],
        ["policy.created", "policy", ids.spare, a, { name: "Spare", permissions: [], tenantId: "t1" }],
        ["role.created", "role", ids.role, a, { name: "Editors", policyIds: [ids.policy] }],
        ["role.updated", "role", ids.role, a, { policiesAttached: [], policiesDetached: [ids.policy] }],
        ["role.updated", "role", ids.role, a, { name: { from: "Editors", to: "Writers" }, policiesAttached: [ids.policy], policiesDetached: [] }],
        ["role.assigned", "role", ids.role, a, { userId: "alice" }],
        ["role.assigned", "role", ids.role, a, { userId: "bob" }],
        ["role.unassigned", "role", ids.role, a, { userId: "alice" }],
        [
          "policy.deleted",
          "policy",
          ids.policy,
          a,
          { name: "Docs", permissions: ["document:read", "document:update"], force: true, detachedRoleIds: [ids.role] },
        ],
        ["role.deleted", "role", ids.role, a, { name: "Writers", policyIds: [], assignmentsRemoved: 1 }],
        ["policy.deleted", "policy", ids.spare, a, { name: "Spare", permissions: [], force: false, detachedRoleIds: [] }],
        ["api_key.revoked", "api_key", spareKey.keyId, a, { name: "spare" }],
      ];
      events = await api.events();
    });

    it("records one event per change, newest first, with type, target, actor and data", async () => {
      const shape = events.map((e) => [e.type, e.targetType, e.targetId, e.actorKeyId, e.data]);
      expect(shape).toEqual([...expected].reverse());
      // Each actor also by its key's name: the environment's operator key is "operator".
      const names = new Map([["operator", "operator"], [appKey.keyId, "app"]]);
      expect(events.map((e) => e.actorKeyName)).toEqual(events.map((e) => names.get(e.actorKeyId)));
    });

    it("every event has exactly the contract's fields, a unique id and a timestamp in order", async () => {
      for (const event of events) {
        expect(Object.keys(event).sort()).toEqual(["actorKeyId", "actorKeyName", "data", "eventId", "occurredAt", "targetId", "targetType", "type"]);
        expect(event.eventId).toMatch(/^[A-Za-z0-9_-]+$/);
        expect(event.occurredAt).toMatch(RFC3339);
        expect(EVENT_TYPES).toContain(event.type);
      }
      expect(new Set(events.map((e) => e.eventId)).size).toBe(events.length);
      const times = events.map((e) => Date.parse(e.occurredAt));
      for (let i = 1; i < times.length; i++) expect(times[i - 1]).toBeGreaterThanOrEqual(times[i]!);
      // The lifecycle covers all twelve event types of the contract.
      expect(new Set(events.map((e) => e.type))).toEqual(new Set(EVENT_TYPES));
    });

    it("no secret ever appears in an event", async () => {
      const text = JSON.stringify(events);
      for (const secret of [appKey.key, spareKey.key, ADMIN_KEY, otherKey]) expect(text).not.toContain(secret);
      expect(text).not.toMatch(/pcl_[a-z2-7]{20,}/);
      expect(text).not.toMatch(/[0-9a-f]{64}/); // nor a secret's hash
    });

    it.each(EVENT_TYPES)("?type=%s lists exactly the events of that type, newest first", async (type) => {
      const filtered = ok(await api.auditLog(`?type=${type}`)).events as AuditEvent[];
      expect(filtered).toEqual(events.filter((e) => e.type === type));
      expect(filtered.length).toBeGreaterThan(0);
    });

    it("?targetId= lists the events about one target; combined with ?type= both apply", async () => {
      const aboutRole = ok(await api.auditLog(`?targetId=${ids.role}`)).events as AuditEvent[];
      expect(aboutRole.map((e) => e.type)).toEqual(["role.deleted", "role.unassigned", "role.assigned", "role.assigned", "role.updated", "role.updated", "role.created"]);
      expect(aboutRole).toEqual(events.filter((e) => e.targetId === ids.role));
      // The forced delete names the role in its data, but it is an event about the policy.
      const aboutPolicy = ok(await api.auditLog(`?targetId=${ids.policy}`)).events as AuditEvent[];
      expect(aboutPolicy.map((e) => e.type)).toEqual(["policy.deleted", "policy.updated", "policy.created"]);

      const both = ok(await api.auditLog(`?targetId=${ids.role}&type=role.assigned`)).events as AuditEvent[];
      expect(both.map((e) => e.data.userId)).toEqual(["bob", "alice"]);
      expect(ok(await api.auditLog(`?targetId=${ids.policy}&type=role.assigned`)).events).toEqual([]);
      expect(ok(await api.auditLog("?type=policy.exploded")).events).toEqual([]);
      expect(ok(await api.auditLog("?targetId=nothing-here")).events).toEqual([]);
    });

    it.each([1, 2, 5, 16, 17, 1000])("pages of %i give every event once, in order", async (size) => {
      const { items, pages } = await allPages((q) => api.auditLog(q), "events", size);
      expect(items).toEqual(events);
      // A page that ends exactly at the last event carries no token: no empty trailing page.
      expect(pages).toBe(Math.ceil(events.length / size));
    });

    it("pages with a filter", async () => {
      const { items } = await allPages((q) => api.auditLog(`${q}&type=role.updated`), "events", 1);
      expect(items).toEqual(events.filter((e) => e.type === "role.updated"));
    });

    it("the default page is 100 events at most and the last page carries no token", async () => {
      const body = ok(await api.auditLog());
      expect(body.events).toEqual(events);
      expect(body.nextPageToken ?? "").toBe("");
    });

    it("the application key reads its own log; the operator sees the same", async () => {
      expect(ok(await api.auditLog("", appKey.key)).events).toEqual(events);
    });

    it("over gRPC: the same events, data as a Struct", async () => {
      const answer = await rpc.call("AuditService", "ListAuditEvents", { appId }, appKey.key);
      expect(answer.events).toHaveLength(events.length);
      answer.events.forEach((e: Json, i: number) => {
        const rest = events[i]!;
        expect({ eventId: e.eventId, type: e.type, actorKeyId: e.actorKeyId, actorKeyName: e.actorKeyName, targetType: e.targetType, targetId: e.targetId }).toEqual({
          eventId: rest.eventId,
          type: rest.type,
          actorKeyId: rest.actorKeyId,
          actorKeyName: rest.actorKeyName,
          targetType: rest.targetType,
          targetId: rest.targetId,
        });
        expect(structJson(e.data)).toEqual(rest.data);
        expect(timestampMs(e.occurredAt)).toBe(Math.floor(Date.parse(rest.occurredAt)));
      });
      const filtered = await rpc.call("AuditService", "ListAuditEvents", { appId, type: "role.assigned", targetId: ids.role, pageSize: 1 }, appKey.key);
      expect(filtered.events.map((e: Json) => e.eventId)).toEqual([events.find((e) => e.type === "role.assigned")!.eventId]);
      expect(filtered.nextPageToken).not.toBe("");
    });

    it("a revoked key's events keep its name", async () => {
      const temp = await newKey(service.call, appId, "temporary helper");
      const made = ok(await api.createPolicy({ name: "Made by a temporary key" }, temp.key), 201);
      ok(await service.call("DELETE", `/api/v1/applications/${appId}/api-keys/${temp.keyId}`));
      const [event] = ok(await api.auditLog(`?targetId=${made.policyId}`, appKey.key)).events;
      expect(event).toMatchObject({ type: "policy.created", actorKeyId: temp.keyId, actorKeyName: "temporary helper" });
    });
  });

  describe("catalog.replaced names every relation added and removed", () => {
    // Each step replaces the catalog; the event must list, as "resource#relation",
    // every relation that exists after and not before and the reverse, the
    // built-in and custom relations of added and removed resources included.
    const BUILT_INS = ["owner", "editor", "viewer", "commenter"];
    const steps: { name: string; catalog: Json; data: Json }[] = [
      {
        name: "the first catalog, from an empty one",
        catalog: {
          resources: [
            { resource: "document", actions: ["read", "update", "comment"], relations: [{ name: "reviewer", actions: ["read", "comment"] }] },
            { resource: "folder", actions: ["read", "list"] },
          ],
        },
        data: {
          resourcesAdded: ["document", "folder"],
          resourcesRemoved: [],
          relationsAdded: [...BUILT_INS.map((r) => `document#${r}`), "document#reviewer", ...BUILT_INS.map((r) => `folder#${r}`)],
          relationsRemoved: [],
        },
      },
      {
        name: "a resource removed, one added, a custom relation swapped for another",
        catalog: {
          resources: [
            { resource: "document", actions: ["read", "update", "comment"], relations: [{ name: "auditor", actions: ["read"] }] },
            { resource: "invoice", actions: ["read", "approve"], relations: [{ name: "approver", actions: ["approve"] }] },
          ],
        },
        data: {
          resourcesAdded: ["invoice"],
          resourcesRemoved: ["folder"],
          relationsAdded: ["document#auditor", ...BUILT_INS.map((r) => `invoice#${r}`), "invoice#approver"],
          relationsRemoved: ["document#reviewer", ...BUILT_INS.map((r) => `folder#${r}`)],
        },
      },
      {
        name: "a built-in redefined (still there: neither added nor removed), every resource removed",
        catalog: { resources: [{ resource: "page", actions: ["read"], relations: [{ name: "viewer", actions: ["read"] }] }] },
        data: {
          resourcesAdded: ["page"],
          resourcesRemoved: ["document", "invoice"],
          relationsAdded: BUILT_INS.map((r) => `page#${r}`),
          relationsRemoved: [
            ...BUILT_INS.map((r) => `document#${r}`),
            "document#auditor",
            ...BUILT_INS.map((r) => `invoice#${r}`),
            "invoice#approver",
          ],
        },
      },
      {
        name: "back to an empty catalog",
        catalog: { resources: [] },
        data: { resourcesAdded: [], resourcesRemoved: ["page"], relationsAdded: [], relationsRemoved: BUILT_INS.map((r) => `page#${r}`) },
      },
    ];
    let api: AppApi;
    beforeAll(async () => {
      api = await newApp(service.call, "relations", null);
    });

    it.each(steps)("$name", async ({ catalog, data }) => {
      ok(await api.putCatalog(catalog));
      const [newest] = await api.events({ type: "catalog.replaced" });
      expect(newest!.data).toMatchObject(data);
    });
  });

  describe("bad requests", () => {
    let api: AppApi;
    beforeAll(async () => {
      api = await newApp(service.call, "bad-requests");
    });

    it.each([
      ["?type=", "type", "empty"],
      ["?targetId=", "targetId", "empty"],
      ["?pageSize=0", "pageSize", "1000"],
      ["?pageSize=1001", "pageSize", "1001"],
      ["?pageSize=x", "pageSize", "whole number"],
      ["?pageToken=garbage", "pageToken", "page token"],
      ["?actor=operator", "actor", "accepted"],
      ["?type=a&type=b", "type", "more than once"],
    ])("%s → 400 naming %s", async (query, field, fragment) => {
      const res = await api.auditLog(query);
      expectError(res, 400, "invalid_argument", field, fragment);
    });

    it("a page token of another list → 400", async () => {
      const other = await newApp(service.call, "tokens-src");
      for (const name of ["a", "b"]) await other.policy({ name });
      const token = ok(await other.listPolicies("?pageSize=1")).nextPageToken as string;
      expect(token).not.toBe("");
      expectError(await api.auditLog(`?pageToken=${token}`), 400, "invalid_argument", "pageToken");
    });

    it("an unknown application → 404; another application's key → 403; no key → 401", async () => {
      expectError(await service.call("GET", "/api/v1/applications/ghost/audit-log"), 404, "not_found", '"ghost"');
      expectError(await api.auditLog("", otherKey), 403, "permission_denied", '"other"', '"bad-requests"');
      expectError(await api.auditLog("", null), 401, "unauthenticated");
      expectGrpcError(await grpcFail(rpc, "AuditService", "ListAuditEvents", { appId: "bad-requests" }, otherKey), grpc.status.PERMISSION_DENIED);
      expectGrpcError(await grpcFail(rpc, "AuditService", "ListAuditEvents", { appId: "ghost" }, ADMIN_KEY), grpc.status.NOT_FOUND, '"ghost"');
    });
  });

  describe("failed changes and no-ops write nothing", () => {
    let api: AppApi;
    let policyId: string;
    let roleId: string;
    let tenantPolicyId: string;

    beforeAll(async () => {
      api = await newApp(service.call, "quiet");
      policyId = (await api.policy({ name: "Docs", description: "d", permissions: ["document:read", "invoice:approve"] })).policyId;
      tenantPolicyId = (await api.policy({ name: "Tenant", tenantId: "t1" })).policyId;
      roleId = (await api.role({ name: "Readers", description: "r", policyIds: [policyId] })).roleId;
      ok(await api.assign(roleId, { userId: "alice" }), 201);
    });

    /** Each request must get `status` and leave the log as it was. */
    const quiet: { name: string; status: number; send: () => Promise<RestAnswer> }[] = [
      { name: "policy create with an unknown permission (400)", status: 400, send: () => api.createPolicy({ name: "New", permissions: ["folder:read"] }) },
      { name: "policy create with a taken name (409)", status: 409, send: () => api.createPolicy({ name: "Docs" }) },
      { name: "policy PATCH with an unknown permission (400)", status: 400, send: () => api.patchPolicy(policyId, { name: "Renamed", permissions: ["document:fly"] }) },
      { name: "policy PATCH of the tenant (400)", status: 400, send: () => api.patchPolicy(policyId, { tenantId: "t9" }) },
      { name: "policy PATCH of an unknown policy (404)", status: 404, send: () => api.patchPolicy("pol_nope", { name: "x" }) },
      { name: "policy PATCH to a taken name (409)", status: 409, send: () => api.patchPolicy(tenantPolicyId, { name: "Docs" }) },
      { name: "policy delete while attached (409)", status: 409, send: () => api.deletePolicy(policyId) },
      { name: "policy delete with force=maybe (400)", status: 400, send: () => api.deletePolicy(policyId, "?force=maybe") },
      { name: "policy delete of an unknown policy (404)", status: 404, send: () => api.deletePolicy("pol_nope", "?force=true") },
      { name: "role create with an unknown policy (400)", status: 400, send: () => api.createRole({ name: "New", policyIds: ["pol_nope"] }) },
      { name: "role create with a tenant's policy on an application-wide role (400)", status: 400, send: () => api.createRole({ name: "New", policyIds: [tenantPolicyId] }) },
      { name: "role create with a taken name (409)", status: 409, send: () => api.createRole({ name: "Readers" }) },
      { name: "role PATCH with an unknown policy (400)", status: 400, send: () => api.patchRole(roleId, { name: "Renamed", policyIds: ["pol_nope"] }) },
      { name: "role delete of an unknown role (404)", status: 404, send: () => api.deleteRole("rol_nope") },
      { name: "assign with a bad userId (400)", status: 400, send: () => api.assign(roleId, { userId: "" }) },
      { name: "assign to an unknown role (404)", status: 404, send: () => api.assign("rol_nope", { userId: "bob" }) },
      { name: "catalog dropping a held permission (409)", status: 409, send: () => api.putCatalog({ resources: [CATALOG.resources[0]] }) },
      { name: "catalog with a bad resource name (400)", status: 400, send: () => api.putCatalog({ resources: [{ resource: "Bad", actions: [] }] }) },
      { name: "policy create by another application's key (403)", status: 403, send: () => api.createPolicy({ name: "Intruder" }, otherKey) },
      { name: "role delete by another application's key (403)", status: 403, send: () => api.deleteRole(roleId, otherKey) },
      { name: "api key create with an empty name (400)", status: 400, send: () => service.call("POST", "/api/v1/applications/quiet/api-keys", { body: { name: "" } }) },
      { name: "api key revoke of an unknown key (404)", status: 404, send: () => service.call("DELETE", "/api/v1/applications/quiet/api-keys/key_nope") },
      // No-ops: nothing changes, so nothing is recorded.
      { name: "policy PATCH with the same values (no-op)", status: 200, send: () => api.patchPolicy(policyId, { name: "Docs", description: "d", permissions: ["document:read", "invoice:approve"] }) },
      { name: "policy PATCH with an empty body (no-op)", status: 200, send: () => api.patchPolicy(policyId, {}) },
      { name: "role PATCH with the same values (no-op)", status: 200, send: () => api.patchRole(roleId, { name: "Readers", description: "r", policyIds: [policyId, policyId] }) },
      { name: "assigning an existing assignment (no-op, 200)", status: 200, send: () => api.assign(roleId, { userId: "alice" }) },
      { name: "unassigning a user without the role (no-op)", status: 200, send: () => api.unassign(roleId, "zed") },
    ];

    it.each(quiet)("$name", async ({ status, send }) => {
      const before = await api.events();
      const res = await send();
      expect(res.status, JSON.stringify(res.body)).toBe(status);
      expect(await api.events()).toEqual(before);
    });

    it("and the state is as it was", async () => {
      expect(ok(await api.getPolicy(policyId))).toMatchObject({ name: "Docs", description: "d", permissions: ["document:read", "invoice:approve"], roleCount: 1 });
      expect(ok(await api.getRole(roleId))).toMatchObject({ name: "Readers", policyIds: [policyId] });
      expect((ok(await api.assignments(roleId)).assignments as Json[]).map((a) => a.userId)).toEqual(["alice"]);
      expect((ok(await api.listPolicies()).policies as Json[]).map((p) => p.name).sort()).toEqual(["Docs", "Tenant"]);
      expect((ok(await api.listRoles()).roles as Json[]).map((r) => r.name)).toEqual(["Readers"]);
    });
  });

  describe("concurrent changes", () => {
    it("every change answered 2xx has exactly one event, and no other events appear", async () => {
      const api = await newApp(service.call, "busy");
      const before = (await api.events()).length;
      const creates = await Promise.all(
        Array.from({ length: 12 }, (_, i) => api.createPolicy({ name: `p${i % 8}`, permissions: ["document:read"] })),
      );
      const created = creates.filter((r) => r.status === 201);
      expect(created).toHaveLength(8);
      for (const r of creates.filter((r) => r.status !== 201)) expectError(r, 409, "already_exists");
      const patches = await Promise.all(
        created.map((r, i) => api.patchPolicy(r.body.policyId, { permissions: i % 2 ? ["document:read"] : ["invoice:read"] })),
      );
      for (const p of patches) expect(p.status).toBe(200);

      const events = (await api.events()).slice(0, -before);
      const createdIds = created.map((r) => r.body.policyId as string).sort();
      expect(events.filter((e) => e.type === "policy.created").map((e) => e.targetId).sort()).toEqual(createdIds);
      // Only the even ones changed (the odd ones were PATCHed to what they had).
      const updated = events.filter((e) => e.type === "policy.updated").map((e) => e.targetId).sort();
      expect(updated).toEqual(created.filter((_, i) => i % 2 === 0).map((r) => r.body.policyId as string).sort());
      expect(events).toHaveLength(8 + 4);
    });
  });
});
