/**
 * Policies over REST and gRPC, on each engine: create (defaults, folding,
 * validation against the catalog), list (paging, tenant filter), get, the
 * policy-roles endpoint and roleCount, PATCH (replace, rename, no-ops, the
 * fixed tenant), delete (blocked while attached, forced as one audit event),
 * the catalog's 409 rule through the API, the effect on checks, and who may
 * call what.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { grpc, grpcCaller, type GrpcCaller } from "./support/grpc-client.js";
import { ADMIN_KEY, startTestService, type TestService } from "./support/service.js";
import {
  allPages,
  byCreation,
  CATALOG,
  expectError,
  expectGrpcError,
  expectPolicyShape,
  grpcFail,
  newApp,
  newKey,
  ok,
  sorted,
  structJson,
  type AppApi,
  type Json,
} from "./helpers/authz-api.js";

/** Bad create bodies: each → 400 invalid_argument whose message starts with `field` and contains the fragments. */
const invalidCreates: { name: string; body: Record<string, unknown>; field: string; fragments?: string[] }[] = [
  { name: "no name", body: { permissions: [] }, field: "name", fragments: ["required"] },
  { name: "an empty name", body: { name: "" }, field: "name", fragments: ["required"] },
  { name: "a blank name", body: { name: "   " }, field: "name", fragments: ["required"] },
  { name: "a name of 201 characters", body: { name: "n".repeat(201) }, field: "name", fragments: ["200", "201"] },
  { name: "a name with a control character", body: { name: "bad\u0007name" }, field: "name", fragments: ["control"] },
  { name: "a description of 2001 characters", body: { name: "p", description: "d".repeat(2001) }, field: "description", fragments: ["2000", "2001"] },
  { name: "a permission without an action", body: { name: "p", permissions: ["document"] }, field: "permissions[0]", fragments: ['"document"', "resource:action"] },
  { name: "a permission in upper case", body: { name: "p", permissions: ["document:read", "Document:read"] }, field: "permissions[1]", fragments: ['"Document:read"'] },
  { name: "a permission with two colons", body: { name: "p", permissions: ["document:read:all"] }, field: "permissions[0]", fragments: ['"document:read:all"'] },
  { name: "an empty permission", body: { name: "p", permissions: [""] }, field: "permissions[0]", fragments: ['""'] },
  { name: "a permission of an unknown resource", body: { name: "p", permissions: ["folder:read"] }, field: "permissions[0]", fragments: ['"folder:read"', '"folder"'] },
  { name: "a permission with an unknown action", body: { name: "p", permissions: ["document:read", "document:send"] }, field: "permissions[1]", fragments: ['"document:send"', '"send"'] },
  { name: "an empty tenantId", body: { name: "p", tenantId: "" }, field: "tenantId", fragments: ["required"] },
  { name: "a tenantId of 257 characters", body: { name: "p", tenantId: "t".repeat(257) }, field: "tenantId", fragments: ["256", "257"] },
  { name: "a tenantId with a control character", body: { name: "p", tenantId: "t\n1" }, field: "tenantId", fragments: ["control"] },
  { name: "name of the wrong type", body: { name: 5 }, field: "name", fragments: ["string", "number"] },
  { name: "permissions as a string", body: { name: "p", permissions: "document:read" }, field: "permissions", fragments: ["array", "string"] },
  { name: "a permission that is a number", body: { name: "p", permissions: ["document:read", 7] }, field: "permissions[1]", fragments: ["string", "number"] },
  { name: "an unknown field", body: { name: "p", colour: "red" }, field: "colour", fragments: [] },
  { name: "roleCount in the body (it is derived)", body: { name: "p", roleCount: 3 }, field: "roleCount", fragments: [] },
  { name: "policyId in the body (it is generated)", body: { name: "p", policyId: "pol_mine" }, field: "policyId", fragments: [] },
  { name: "appId in the body (the path gives it)", body: { name: "p", appId: "shop" }, field: "appId", fragments: ["path"] },
];

/** Bad PATCH bodies on a policy: each → 400 naming `field`, the policy unchanged. */
const invalidPatches: { name: string; body: Record<string, unknown>; field: string; fragments?: string[] }[] = [
  { name: "tenantId (fixed at creation)", body: { tenantId: "t2" }, field: "tenantId" },
  { name: "tenantId together with a valid name", body: { name: "Renamed", tenantId: "t2" }, field: "tenantId" },
  { name: "an unknown permission", body: { permissions: ["document:read", "document:archive"] }, field: "permissions[1]", fragments: ['"document:archive"'] },
  { name: "a malformed permission", body: { permissions: ["read"] }, field: "permissions[0]", fragments: ['"read"'] },
  { name: "an unknown permission with a valid rename", body: { name: "Renamed", permissions: ["folder:read"] }, field: "permissions[0]", fragments: ['"folder:read"'] },
  { name: "an empty name", body: { name: "" }, field: "name", fragments: ["required"] },
  { name: "a name of 201 characters", body: { name: "x".repeat(201) }, field: "name", fragments: ["201"] },
  { name: "a description of 2001 characters", body: { description: "x".repeat(2001) }, field: "description", fragments: ["2001"] },
  { name: "roleCount", body: { roleCount: 0 }, field: "roleCount" },
  { name: "policyId (the path gives it)", body: { policyId: "pol_other" }, field: "policyId", fragments: ["path"] },
  { name: "permissions of the wrong type", body: { permissions: { "document:read": true } }, field: "permissions", fragments: ["array"] },
];

describe.each(oneEngine(import.meta.url))("policies API on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let rpc: GrpcCaller;
  let shop: AppApi;
  let shopKey: { keyId: string; key: string };
  let otherKey: { keyId: string; key: string };
  let counter = 0;
  /** A fresh application with the standard catalog, so counts and events are this test's own. */
  const fresh = (label: string) => newApp(service.call, `${label}-${++counter}`);

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    rpc = grpcCaller(service.url);
    shop = await newApp(service.call, "shop");
    shopKey = await newKey(service.call, "shop");
    await newApp(service.call, "other");
    otherKey = await newKey(service.call, "other");
  });
  afterAll(async () => {
    rpc?.close();
    await service?.close();
    await database?.dispose();
  });

  describe("create", () => {
    it("with only a name: 201 with the defaults, no tenantId, roleCount 0, and one policy.created event", async () => {
      const api = await fresh("defaults");
      const res = await api.createPolicy({ name: "Readers" });
      const policy = ok(res, 201);
      expectPolicyShape(policy, false);
      expect(policy).toMatchObject({ name: "Readers", description: "", permissions: [], roleCount: 0 });
      expect(policy.createdAt).toBe(policy.updatedAt);
      expect(Date.parse(policy.createdAt)).toBeGreaterThan(Date.now() - 60_000);
      expect(ok(await api.getPolicy(policy.policyId))).toEqual(policy);

      const events = await api.events({ type: "policy.created" });
      expect(events).toHaveLength(1);
      expect(events[0]).toMatchObject({ type: "policy.created", targetType: "policy", targetId: policy.policyId, actorKeyId: "operator" });
      expect(events[0]!.data).toEqual({ name: "Readers", permissions: [] });
    });

    it("with every field: duplicate permissions folded in first order, tenantId kept", async () => {
      const api = await fresh("full");
      const policy = await api.policy({
        name: "Billing",
        description: "Invoices and their documents",
        permissions: ["invoice:send", "document:read", "invoice:send", "invoice:approve", "document:read"],
        tenantId: "tenant-1",
      });
      expectPolicyShape(policy, true);
      expect(policy).toMatchObject({
        name: "Billing",
        description: "Invoices and their documents",
        permissions: ["invoice:send", "document:read", "invoice:approve"],
        tenantId: "tenant-1",
        roleCount: 0,
      });
      expect(ok(await api.getPolicy(policy.policyId))).toEqual(policy);
      const [event] = await api.events({ targetId: policy.policyId });
      expect(event!.data).toEqual({ name: "Billing", permissions: ["invoice:send", "document:read", "invoice:approve"], tenantId: "tenant-1" });
    });

    it("the limits themselves are accepted: a 200-character name, a 2000-character description, a 256-character tenantId", async () => {
      const api = await fresh("limits");
      const emoji = "\u{1F510}";
      const policy = await api.policy({ name: emoji.repeat(200), description: "d".repeat(2000), tenantId: "t".repeat(256) });
      expect([...policy.name]).toHaveLength(200);
      expect(policy.description).toHaveLength(2000);
      expect(policy.tenantId).toHaveLength(256);
    });

    it("each policy gets its own opaque, URL-safe id", async () => {
      const api = await fresh("ids");
      const ids = await Promise.all(["a", "b", "c", "d"].map(async (name) => (await api.policy({ name })).policyId as string));
      expect(new Set(ids).size).toBe(4);
      for (const id of ids) expect(encodeURIComponent(id)).toBe(id);
    });

    it("a taken name → 409 already_exists naming it; nothing is created and no event written", async () => {
      const api = await fresh("dup");
      const first = await api.policy({ name: "Editors", permissions: ["document:update"] });
      const res = await api.createPolicy({ name: "Editors", permissions: ["document:read"] });
      expectError(res, 409, "already_exists", '"Editors"');
      expect(res.body.details).toEqual([{ field: "name", value: "Editors" }]);
      const list = ok(await api.listPolicies());
      expect(list.policies).toEqual([first]);
      expect(await api.events({ type: "policy.created" })).toHaveLength(1);
    });

    it("names are unique per application: another application may use the same name", async () => {
      const a = await fresh("same-name-a");
      const b = await fresh("same-name-b");
      await a.policy({ name: "Admins" });
      const other = await b.policy({ name: "Admins" });
      expect(other.name).toBe("Admins");
    });

    it("names are compared exactly: a name differing in case or spacing is another name", async () => {
      const api = await fresh("exact");
      await api.policy({ name: "Admins" });
      expect((await api.createPolicy({ name: "admins" })).status).toBe(201);
      expect((await api.createPolicy({ name: "Admins " })).status).toBe(201);
    });

    it.each(invalidCreates)("$name → 400 naming $field; nothing is created", async ({ body, field, fragments }) => {
      const before = ok(await shop.listPolicies("?pageSize=1000")).policies;
      const eventsBefore = (await shop.events()).length;
      const res = await shop.createPolicy(body);
      expectError(res, 400, "invalid_argument", field, ...(fragments ?? []));
      expect(res.body.message.startsWith(field)).toBe(true);
      expect(res.body.details).toContainEqual(expect.objectContaining({ field }));
      expect(ok(await shop.listPolicies("?pageSize=1000")).policies).toEqual(before);
      expect(await shop.events()).toHaveLength(eventsBefore);
    });

    it("every bad permission is listed in the details, not just the first", async () => {
      const res = await shop.createPolicy({ name: "p", permissions: ["document:read", "nope", "folder:read", "invoice:fly"] });
      expectError(res, 400, "invalid_argument", "permissions[1]", "(and 2 more)");
      expect((res.body.details as { field: string }[]).map((d) => d.field)).toEqual(["permissions[1]", "permissions[2]", "permissions[3]"]);
    });

    it("in an unknown application → 404 naming it", async () => {
      expectError(await service.call("POST", "/api/v1/applications/ghost/policies", { body: { name: "p" } }), 404, "not_found", '"ghost"');
    });

    it("an application with no catalog accepts only policies without permissions", async () => {
      const api = await newApp(service.call, "no-catalog", null);
      expect((await api.createPolicy({ name: "Empty" })).status).toBe(201);
      expectError(await api.createPolicy({ name: "Reader", permissions: ["document:read"] }), 400, "invalid_argument", "permissions[0]", '"document"');
    });
  });

  describe("get and list", () => {
    it("an unknown policy → 404 naming it; a policy of another application is unknown here", async () => {
      expectError(await shop.getPolicy("pol_doesnotexist"), 404, "not_found", '"pol_doesnotexist"', '"shop"');
      const api = await fresh("elsewhere");
      const foreign = await api.policy({ name: "Foreign" });
      expectError(await shop.getPolicy(foreign.policyId), 404, "not_found", foreign.policyId);
      expectError(await shop.policyRoles(foreign.policyId), 404, "not_found", foreign.policyId);
      expectError(await shop.patchPolicy(foreign.policyId, { name: "Stolen" }), 404, "not_found", foreign.policyId);
      expectError(await shop.deletePolicy(foreign.policyId, "?force=true"), 404, "not_found", foreign.policyId);
      expect(ok(await api.getPolicy(foreign.policyId))).toEqual(foreign);
    });

    it("lists in creation order, page by page, each policy once, the last page without a token", async () => {
      const api = await fresh("paging");
      const created: Json[] = [];
      for (let i = 0; i < 7; i++) created.push(await api.policy({ name: `p${i}`, permissions: i % 2 ? ["document:read"] : [] }));
      created.splice(0, created.length, ...byCreation(created, "policyId"));
      const all = ok(await api.listPolicies());
      expect(all.policies).toEqual(created);
      expect(all.nextPageToken ?? "").toBe("");

      const { items, pages } = await allPages((q) => api.listPolicies(q), "policies", 3);
      expect(pages).toBe(3);
      expect(items).toEqual(created);
      const exact = await allPages((q) => api.listPolicies(q), "policies", 7);
      expect(exact.items).toEqual(created);
      expect(exact.pages).toBeLessThanOrEqual(2);
    });

    it("?tenantId= lists only that tenant's policies", async () => {
      const api = await fresh("tenants");
      const wide = await api.policy({ name: "Wide" });
      const t1a = await api.policy({ name: "T1 a", tenantId: "t1" });
      const t2 = await api.policy({ name: "T2", tenantId: "t2" });
      const t1b = await api.policy({ name: "T1 b", tenantId: "t1" });
      expect(ok(await api.listPolicies("?tenantId=t1")).policies).toEqual(byCreation([t1a, t1b], "policyId"));
      expect(ok(await api.listPolicies("?tenantId=t2")).policies).toEqual([t2]);
      expect(ok(await api.listPolicies("?tenantId=t3")).policies).toEqual([]);
      expect(ok(await api.listPolicies()).policies).toEqual(byCreation([wide, t1a, t2, t1b], "policyId"));
      const paged = await allPages((q) => api.listPolicies(`${q}&tenantId=t1`), "policies", 1);
      expect(paged.items).toEqual(byCreation([t1a, t1b], "policyId"));
    });

    it.each([
      ["?pageSize=0", "pageSize", ["1000", "0"]],
      ["?pageSize=1001", "pageSize", ["1001"]],
      ["?pageSize=-1", "pageSize", []],
      ["?pageSize=ten", "pageSize", ["whole number"]],
      ["?pageToken=not-a-token", "pageToken", []],
      ["?tenantId=", "tenantId", []],
      ["?colour=red", "colour", ["tenantId", "pageSize", "pageToken"]],
      ["?tenantId=a&tenantId=b", "tenantId", ["more than once"]],
    ])("list %s → 400 naming %s", async (query, field, fragments) => {
      const res = await shop.listPolicies(query);
      expectError(res, 400, "invalid_argument", field, ...fragments);
    });

    it("a page token of another list is refused", async () => {
      const api = await fresh("tokens");
      for (const name of ["a", "b"]) await api.policy({ name });
      const audit = ok(await api.auditLog("?pageSize=1"));
      expect(audit.nextPageToken).not.toBe("");
      expectError(await api.listPolicies(`?pageToken=${audit.nextPageToken}`), 400, "invalid_argument", "pageToken");
    });

    it("list and get of an unknown application → 404", async () => {
      expectError(await service.call("GET", "/api/v1/applications/ghost/policies"), 404, "not_found", '"ghost"');
      expectError(await service.call("GET", "/api/v1/applications/ghost/policies/pol_x"), 404, "not_found", '"ghost"');
      expectError(await service.call("GET", "/api/v1/applications/ghost/policies/pol_x/roles"), 404, "not_found", '"ghost"');
    });
  });

  describe("update (PATCH)", () => {
    /** A fresh application with one policy; returns both. */
    async function withPolicy(label: string, body: Record<string, unknown> = {}) {
      const api = await fresh(label);
      const policy = await api.policy({ name: "Docs", description: "documents", permissions: ["document:read", "document:update"], ...body });
      return { api, policy };
    }

    it("permissions replace the list; the event says what was added and removed", async () => {
      const { api, policy } = await withPolicy("replace");
      const res = await api.patchPolicy(policy.policyId, { permissions: ["invoice:read", "document:read", "invoice:read"] });
      const updated = ok(res);
      expectPolicyShape(updated, false);
      expect(updated).toMatchObject({ policyId: policy.policyId, name: "Docs", description: "documents", permissions: ["invoice:read", "document:read"], roleCount: 0 });
      expect(updated.createdAt).toBe(policy.createdAt);
      expect(Date.parse(updated.updatedAt)).toBeGreaterThanOrEqual(Date.parse(policy.updatedAt));
      expect(ok(await api.getPolicy(policy.policyId))).toEqual(updated);

      const events = await api.events({ type: "policy.updated" });
      expect(events).toHaveLength(1);
      expect(events[0]).toMatchObject({ targetType: "policy", targetId: policy.policyId, actorKeyId: "operator" });
      expect(events[0]!.data).toEqual({ permissionsAdded: ["invoice:read"], permissionsRemoved: ["document:update"] });
    });

    it("an empty list clears the permissions", async () => {
      const { api, policy } = await withPolicy("clear");
      expect(ok(await api.patchPolicy(policy.policyId, { permissions: [] })).permissions).toEqual([]);
      expect(ok(await api.getPolicy(policy.policyId)).permissions).toEqual([]);
      const [event] = await api.events({ type: "policy.updated" });
      expect(event!.data).toEqual({ permissionsAdded: [], permissionsRemoved: ["document:read", "document:update"] });
    });

    it("name and description change alone, leaving the permissions; the event names the rename", async () => {
      const { api, policy } = await withPolicy("rename");
      const renamed = ok(await api.patchPolicy(policy.policyId, { name: "Documents" }));
      expect(renamed).toMatchObject({ name: "Documents", description: "documents", permissions: ["document:read", "document:update"] });
      const described = ok(await api.patchPolicy(policy.policyId, { description: "" }));
      expect(described).toMatchObject({ name: "Documents", description: "", permissions: ["document:read", "document:update"] });

      const events = await api.events({ type: "policy.updated" });
      expect(events.map((e) => e.data)).toEqual([
        { descriptionChanged: true, permissionsAdded: [], permissionsRemoved: [] },
        { name: { from: "Docs", to: "Documents" }, permissionsAdded: [], permissionsRemoved: [] },
      ]);
      // The old name is free again.
      expect((await api.createPolicy({ name: "Docs" })).status).toBe(201);
    });

    it("all three at once", async () => {
      const { api, policy } = await withPolicy("all-three");
      const updated = ok(await api.patchPolicy(policy.policyId, { name: "Invoices", description: "money", permissions: ["invoice:approve"] }));
      expect(updated).toMatchObject({ name: "Invoices", description: "money", permissions: ["invoice:approve"] });
      const [event] = await api.events({ type: "policy.updated" });
      expect(event!.data).toEqual({
        name: { from: "Docs", to: "Invoices" },
        descriptionChanged: true,
        permissionsAdded: ["invoice:approve"],
        permissionsRemoved: ["document:read", "document:update"],
      });
    });

    it.each([
      ["an empty body", {}],
      ["the same permissions", { permissions: ["document:read", "document:update"] }],
      ["the same permissions with duplicates", { permissions: ["document:read", "document:read", "document:update"] }],
      ["the same name and description", { name: "Docs", description: "documents" }],
      ["null fields (not set)", { name: null, permissions: null }],
    ])("a no-op PATCH (%s) → 200 with the policy as it was, and no event", async (_label, body) => {
      const { api, policy } = await withPolicy("noop");
      const res = await api.patchPolicy(policy.policyId, body);
      expect(ok(res)).toEqual(policy);
      expect(ok(await api.getPolicy(policy.policyId))).toEqual(policy);
      expect(await api.events({ type: "policy.updated" })).toEqual([]);
    });

    it.each(invalidPatches)("$name → 400 naming $field; the policy is unchanged and no event written", async ({ body, field, fragments }) => {
      const { api, policy } = await withPolicy("bad-patch", { tenantId: "t1" });
      const res = await api.patchPolicy(policy.policyId, body);
      expectError(res, 400, "invalid_argument", field, ...(fragments ?? []));
      expect(res.body.details).toContainEqual(expect.objectContaining({ field }));
      expect(ok(await api.getPolicy(policy.policyId))).toEqual(policy);
      expect(await api.events({ type: "policy.updated" })).toEqual([]);
    });

    it("renaming to a taken name → 409 already_exists; nothing changes", async () => {
      const { api, policy } = await withPolicy("rename-taken");
      await api.policy({ name: "Invoices" });
      const res = await api.patchPolicy(policy.policyId, { name: "Invoices", permissions: ["invoice:read"] });
      expectError(res, 409, "already_exists", '"Invoices"');
      expect(ok(await api.getPolicy(policy.policyId))).toEqual(policy);
      expect(await api.events({ type: "policy.updated" })).toEqual([]);
    });

    it("an unknown policy → 404; an unknown application → 404", async () => {
      expectError(await shop.patchPolicy("pol_nope", { name: "x" }), 404, "not_found", '"pol_nope"');
      expectError(await service.call("PATCH", "/api/v1/applications/ghost/policies/pol_nope", { body: { name: "x" } }), 404, "not_found", '"ghost"');
    });
  });

  describe("roleCount and the policy-roles endpoint", () => {
    it("follow attach, detach, role deletion and forced delete", async () => {
      const api = await fresh("rolecount");
      const p = await api.policy({ name: "P", permissions: ["document:read"] });
      const q = await api.policy({ name: "Q", permissions: ["invoice:read"] });
      const roleIdsOf = async (policyId: string) => (ok(await api.policyRoles(policyId)).roles as Json[]).map((r) => r.roleId);
      const countOf = async (policyId: string) => ok(await api.getPolicy(policyId)).roleCount as number;

      expect(ok(await api.policyRoles(p.policyId))).toEqual({ roles: [], nextPageToken: "" });

      // Attach at creation and by PATCH.
      const r1 = await api.role({ name: "R1", policyIds: [p.policyId] });
      const r2 = await api.role({ name: "R2" });
      ok(await api.patchRole(r2.roleId, { policyIds: [q.policyId, p.policyId] }));
      const r3 = await api.role({ name: "R3", policyIds: [q.policyId] });
      expect(await countOf(p.policyId)).toBe(2);
      expect(await countOf(q.policyId)).toBe(2);
      const listed = ok(await api.policyRoles(p.policyId)).roles as Json[];
      expect(listed.map((r) => r.roleId)).toEqual(byCreation([r1, r2], "roleId").map((r) => r.roleId));
      expect(listed.find((r) => r.roleId === r2.roleId)).toEqual(ok(await api.getRole(r2.roleId)));
      // A PATCH of the policy answers with its count too.
      expect(ok(await api.patchPolicy(p.policyId, { description: "attached twice" })).roleCount).toBe(2);
      // The list of policies carries the counts too.
      const counts = Object.fromEntries((ok(await api.listPolicies()).policies as Json[]).map((x) => [x.name, x.roleCount]));
      expect(counts).toEqual({ P: 2, Q: 2 });

      // Paging over the roles of a policy.
      const paged = await allPages((query) => api.policyRoles(q.policyId, query), "roles", 1);
      expect(paged.items.map((r) => r.roleId)).toEqual(byCreation([r2, r3], "roleId").map((r) => r.roleId));

      // Detach from R1.
      ok(await api.patchRole(r1.roleId, { policyIds: [] }));
      expect(await countOf(p.policyId)).toBe(1);
      expect(await roleIdsOf(p.policyId)).toEqual([r2.roleId]);

      // Delete R3: Q loses it.
      ok(await api.deleteRole(r3.roleId));
      expect(await countOf(q.policyId)).toBe(1);
      expect(await roleIdsOf(q.policyId)).toEqual([r2.roleId]);

      // Forced delete of P: R2 keeps Q only; Q's count is untouched.
      const del = ok(await api.deletePolicy(p.policyId, "?force=true"));
      expect(del).toEqual({ policyId: p.policyId, deleted: true, detachedRoleIds: [r2.roleId] });
      expect(ok(await api.getRole(r2.roleId)).policyIds).toEqual([q.policyId]);
      expect(await countOf(q.policyId)).toBe(1);
      expectError(await api.policyRoles(p.policyId), 404, "not_found", p.policyId);
    });
  });

  describe("delete", () => {
    /** A fresh application with policy P attached to `attached` roles and policy Q on the first of them. */
    async function attachedPolicy(label: string, attached: number) {
      const api = await fresh(label);
      const p = await api.policy({ name: "P", permissions: ["document:read", "invoice:send"] });
      const q = await api.policy({ name: "Q", permissions: ["invoice:read"] });
      const roles: Json[] = [];
      for (let i = 0; i < attached; i++) roles.push(await api.role({ name: `R${i}`, policyIds: i === 0 ? [q.policyId, p.policyId] : [p.policyId] }));
      const unrelated = await api.role({ name: "Unrelated", policyIds: [q.policyId] });
      return { api, p, q, roles, unrelated, roleIds: roles.map((r) => r.roleId as string) };
    }

    it("an unattached policy → 200 {policyId, deleted, detachedRoleIds: []}; then 404; one policy.deleted event", async () => {
      const api = await fresh("delete-plain");
      const p = await api.policy({ name: "Lonely", permissions: ["document:read"] });
      const res = await api.deletePolicy(p.policyId);
      expect(ok(res)).toEqual({ policyId: p.policyId, deleted: true, detachedRoleIds: [] });
      expectError(await api.getPolicy(p.policyId), 404, "not_found", p.policyId);
      expectError(await api.deletePolicy(p.policyId), 404, "not_found", p.policyId);
      expect(ok(await api.listPolicies()).policies).toEqual([]);

      const events = await api.events({ targetId: p.policyId });
      expect(events.map((e) => e.type)).toEqual(["policy.deleted", "policy.created"]);
      expect(events[0]).toMatchObject({ targetType: "policy", actorKeyId: "operator" });
      expect(events[0]!.data).toEqual({ name: "Lonely", permissions: ["document:read"], force: false, detachedRoleIds: [] });
      // The name is free again.
      expect((await api.createPolicy({ name: "Lonely" })).status).toBe(201);
    });

    it("force=true on an unattached policy deletes it with detachedRoleIds []", async () => {
      const api = await fresh("delete-force-plain");
      const p = await api.policy({ name: "Lonely" });
      expect(ok(await api.deletePolicy(p.policyId, "?force=true"))).toEqual({ policyId: p.policyId, deleted: true, detachedRoleIds: [] });
    });

    it.each([
      ["no force", "", 2, "2 roles"],
      ["force=false", "?force=false", 2, "2 roles"],
      ["no force, one role", "", 1, "1 role;"],
    ])("an attached policy with %s → 409 failed_precondition giving the count and the role ids; nothing changes", async (_label, query, attached, fragment) => {
      const { api, p, q, roles, roleIds } = await attachedPolicy("delete-blocked", attached);
      const eventsBefore = await api.events();
      const res = await api.deletePolicy(p.policyId, query);
      expectError(res, 409, "failed_precondition", fragment, '"P"', "force=true");
      expect(sorted((res.body.details as { roleId: string }[]).map((d) => d.roleId))).toEqual(sorted(roleIds));
      expect(res.body.details).toHaveLength(attached);
      for (const detail of res.body.details) expect(Object.keys(detail)).toEqual(["roleId"]);

      const after = ok(await api.getPolicy(p.policyId));
      expect(after).toEqual({ ...p, roleCount: attached });
      expect((ok(await api.policyRoles(p.policyId)).roles as Json[]).map((r) => r.roleId)).toEqual(roleIds);
      for (const role of roles) expect(ok(await api.getRole(role.roleId))).toEqual(role);
      expect(ok(await api.getPolicy(q.policyId)).roleCount).toBe(2);
      expect(await api.events()).toEqual(eventsBefore);
    });

    it("force=true detaches from every role and deletes, in one policy.deleted event naming the detached roles", async () => {
      const { api, p, q, roles, unrelated, roleIds } = await attachedPolicy("delete-force", 3);
      const eventsBefore = await api.events();
      const res = await api.deletePolicy(p.policyId, "?force=true");
      const body = ok(res);
      expect(Object.keys(body).sort()).toEqual(["deleted", "detachedRoleIds", "policyId"]);
      expect(body.policyId).toBe(p.policyId);
      expect(body.deleted).toBe(true);
      expect(sorted(body.detachedRoleIds)).toEqual(sorted(roleIds));

      // The policy is gone, every attachment with it; the rest is as it was.
      expectError(await api.getPolicy(p.policyId), 404, "not_found");
      expect(ok(await api.getRole(roles[0].roleId)).policyIds).toEqual([q.policyId]);
      for (const role of roles.slice(1)) expect(ok(await api.getRole(role.roleId)).policyIds).toEqual([]);
      expect(ok(await api.getRole(unrelated.roleId))).toEqual(unrelated);
      expect(ok(await api.getPolicy(q.policyId))).toMatchObject({ roleCount: 2, permissions: ["invoice:read"] });

      // Exactly one new event.
      const events = await api.events();
      expect(events).toHaveLength(eventsBefore.length + 1);
      expect(events.slice(1)).toEqual(eventsBefore);
      const [event] = events;
      expect(event).toMatchObject({ type: "policy.deleted", targetType: "policy", targetId: p.policyId, actorKeyId: "operator" });
      expect(event!.data).toMatchObject({ name: "P", permissions: ["document:read", "invoice:send"], force: true });
      expect(sorted(event!.data.detachedRoleIds)).toEqual(sorted(roleIds));
      expect(await api.events({ type: "role.updated" })).toEqual([]);
    });

    it.each([
      ["force=yes", "?force=yes"],
      ["force=1", "?force=1"],
      ["force=TRUE", "?force=TRUE"],
      ["force= (empty)", "?force="],
      ["force given twice", "?force=true&force=true"],
      ["an unknown parameter", "?cascade=true"],
    ])("%s → 400 naming it; nothing is deleted", async (_label, query) => {
      const { api, p } = await attachedPolicy("delete-bad-force", 1);
      const eventsBefore = await api.events();
      const res = await api.deletePolicy(p.policyId, query);
      expectError(res, 400, "invalid_argument", query.includes("cascade") ? "cascade" : "force");
      expect(ok(await api.getPolicy(p.policyId)).roleCount).toBe(1);
      expect(await api.events()).toEqual(eventsBefore);
    });

    it("an unknown policy → 404 with or without force; an unknown application → 404", async () => {
      expectError(await shop.deletePolicy("pol_nope"), 404, "not_found", '"pol_nope"');
      expectError(await shop.deletePolicy("pol_nope", "?force=true"), 404, "not_found", '"pol_nope"');
      expectError(await service.call("DELETE", "/api/v1/applications/ghost/policies/pol_nope"), 404, "not_found", '"ghost"');
    });

    it("after a forced delete the roles no longer grant its permissions", async () => {
      const api = await fresh("delete-effect");
      const { key } = await newKey(service.call, api.appId);
      const p = await api.policy({ name: "Readers", permissions: ["document:read"] });
      const role = await api.role({ name: "Reader", policyIds: [p.policyId] });
      ok(await api.assign(role.roleId, { userId: "alice" }), 201);
      const check = async () =>
        ok(await service.call("POST", "/api/v1/authorization/check", { key, body: { userId: "alice", resource: "document", resourceId: "d1", action: "read" } }));
      expect(await check()).toEqual({ allowed: true });
      ok(await api.deletePolicy(p.policyId, "?force=true"));
      expect(await check()).toEqual({ allowed: false });
      // The assignment itself stays.
      expect((ok(await api.userRoles("alice")).roles as Json[]).map((r) => r.roleId)).toEqual([role.roleId]);
    });
  });

  describe("effect on checks (spec §3)", () => {
    it("adding a permission takes effect at once for every role with the policy; removing it revokes it at the next check", async () => {
      const api = await fresh("effect");
      const { key } = await newKey(service.call, api.appId);
      const p = await api.policy({ name: "Docs", permissions: ["document:read"] });
      const r1 = await api.role({ name: "R1", policyIds: [p.policyId] });
      const r2 = await api.role({ name: "R2", policyIds: [p.policyId] });
      ok(await api.assign(r1.roleId, { userId: "alice" }), 201);
      ok(await api.assign(r2.roleId, { userId: "bob" }), 201);
      const may = async (userId: string, action: string) =>
        ok(await service.call("POST", "/api/v1/authorization/check", { key, body: { userId, resource: "document", resourceId: "x", action } })).allowed;

      expect([await may("alice", "update"), await may("bob", "update")]).toEqual([false, false]);
      ok(await api.patchPolicy(p.policyId, { permissions: ["document:read", "document:update"] }));
      expect([await may("alice", "update"), await may("bob", "update")]).toEqual([true, true]);
      ok(await api.patchPolicy(p.policyId, { permissions: ["document:update"] }));
      expect([await may("alice", "read"), await may("bob", "read"), await may("alice", "update")]).toEqual([false, false, true]);
      ok(await api.patchPolicy(p.policyId, { permissions: [] }));
      expect([await may("alice", "update"), await may("bob", "update")]).toEqual([false, false]);
    });
  });

  describe("the catalog's 409 rule through the API", () => {
    it("a catalog dropping a permission a policy holds → 409 naming the policy and permission; nothing changes", async () => {
      const api = await fresh("orphan");
      const approvers = await api.policy({ name: "Approvers", permissions: ["invoice:approve", "document:read"] });
      await api.policy({ name: "Readers", permissions: ["document:read"] });
      const before = ok(await api.getCatalog());
      const eventsBefore = await api.events();

      const dropApprove = { resources: [CATALOG.resources[0], { ...CATALOG.resources[1], actions: ["read", "send"] }] };
      const res = await api.putCatalog(dropApprove);
      expectError(res, 409, "failed_precondition", "invoice:approve", '"Approvers"');
      expect(res.body.message).not.toContain("Readers");
      expect(res.body.details).toEqual([{ policyId: approvers.policyId, policyName: "Approvers", permission: "invoice:approve" }]);
      expect(ok(await api.getCatalog())).toEqual(before);
      expect(await api.events()).toEqual(eventsBefore);

      // Dropping the whole document resource names both policies.
      const dropDocument = await api.putCatalog({ resources: [CATALOG.resources[1]] });
      expectError(dropDocument, 409, "failed_precondition", "document:read", '"Approvers"', '"Readers"');

      // Once the policy lets go of it, the same catalog is accepted.
      ok(await api.patchPolicy(approvers.policyId, { permissions: ["document:read"] }));
      ok(await api.putCatalog(dropApprove));
      expect(ok(await api.getCatalog()).resources[1].actions).toEqual(["read", "send"]);
      // And the dropped permission is now refused for policies.
      expectError(await api.patchPolicy(approvers.policyId, { permissions: ["invoice:approve"] }), 400, "invalid_argument", '"invoice:approve"');
    });

    it("a deleted policy no longer blocks the catalog", async () => {
      const api = await fresh("orphan-deleted");
      const p = await api.policy({ name: "Senders", permissions: ["invoice:send"] });
      const dropSend = { resources: [CATALOG.resources[0], { ...CATALOG.resources[1], actions: ["read", "approve"] }] };
      expectError(await api.putCatalog(dropSend), 409, "failed_precondition", "invoice:send");
      ok(await api.deletePolicy(p.policyId));
      ok(await api.putCatalog(dropSend));
    });
  });

  describe("keys", () => {
    it("an application key manages its own policies, recorded under its key id", async () => {
      const p = ok(await shop.createPolicy({ name: "By app key", permissions: ["document:read"] }, shopKey.key), 201);
      ok(await shop.patchPolicy(p.policyId, { permissions: ["document:list"] }, shopKey.key));
      expect(ok(await shop.getPolicy(p.policyId, shopKey.key)).permissions).toEqual(["document:list"]);
      ok(await shop.deletePolicy(p.policyId, "", shopKey.key));
      const events = await shop.events({ targetId: p.policyId });
      expect(events.map((e) => [e.type, e.actorKeyId])).toEqual([
        ["policy.deleted", shopKey.keyId],
        ["policy.updated", shopKey.keyId],
        ["policy.created", shopKey.keyId],
      ]);
    });

    it("another application's key → 403 on every policy route, and nothing changes", async () => {
      const p = await shop.policy({ name: "Guarded", permissions: ["document:read"] });
      const key = otherKey.key;
      const id = p.policyId as string;
      const answers = [
        await shop.createPolicy({ name: "Intruder" }, key),
        await shop.listPolicies("", key),
        await shop.getPolicy(id, key),
        await shop.policyRoles(id, "", key),
        await shop.patchPolicy(id, { permissions: [] }, key),
        await shop.deletePolicy(id, "?force=true", key),
        // Refused before the request is read: an unknown policy or a bad body is still a 403.
        await shop.getPolicy("pol_nope", key),
        await shop.patchPolicy(id, { tenantId: "x" }, key),
      ];
      for (const res of answers) expectError(res, 403, "permission_denied", '"other"', '"shop"');
      expect(ok(await shop.getPolicy(id))).toEqual(p);
      expect((ok(await shop.listPolicies("?pageSize=1000")).policies as Json[]).map((x) => x.name)).not.toContain("Intruder");
    });

    it("no key → 401; an unknown key → 401", async () => {
      expectError(await shop.listPolicies("", null), 401, "unauthenticated");
      expectError(await shop.createPolicy({ name: "x" }, "pcl_unknown"), 401, "unauthenticated");
    });
  });

  describe("over gRPC", () => {
    const S = "PolicyService";

    it("create, get, list, update with and without a mask, list roles, delete", async () => {
      const api = await fresh("grpc");
      const appId = api.appId;
      const created = await rpc.call(S, "CreatePolicy", { appId, name: "G", permissions: ["document:read", "document:read", "invoice:send"] }, ADMIN_KEY);
      const policy = created.policy;
      expect(policy).toMatchObject({ name: "G", description: "", permissions: ["document:read", "invoice:send"], roleCount: 0 });
      expect(policy.policyId).toMatch(/^\S+$/);
      // REST sees the same record.
      const rest = ok(await api.getPolicy(policy.policyId));
      expect(rest).toMatchObject({ policyId: policy.policyId, name: "G", permissions: policy.permissions });
      expect(Date.parse(rest.createdAt)).toBe(Number(policy.createdAt.seconds) * 1000 + Math.floor(policy.createdAt.nanos / 1e6));

      const got = await rpc.call(S, "GetPolicy", { appId, policyId: policy.policyId }, ADMIN_KEY);
      expect(got.policy).toEqual(policy);
      const list = await rpc.call(S, "ListPolicies", { appId }, ADMIN_KEY);
      expect(list.policies.map((p: Json) => p.policyId)).toEqual([policy.policyId]);

      // Without a mask an empty list is "not set": nothing changes.
      const unmasked = await rpc.call(S, "UpdatePolicy", { appId, policyId: policy.policyId, permissions: [] }, ADMIN_KEY);
      expect(unmasked.policy.permissions).toEqual(["document:read", "invoice:send"]);
      // Naming the field in the mask clears it.
      const masked = await rpc.call(S, "UpdatePolicy", { appId, policyId: policy.policyId, permissions: [], updateMask: { paths: ["permissions"] } }, ADMIN_KEY);
      expect(masked.policy.permissions).toEqual([]);
      // Without a mask a set name changes.
      const renamed = await rpc.call(S, "UpdatePolicy", { appId, policyId: policy.policyId, name: "G2", permissions: ["invoice:read"] }, ADMIN_KEY);
      expect(renamed.policy).toMatchObject({ name: "G2", permissions: ["invoice:read"] });

      const role = await api.role({ name: "R", policyIds: [policy.policyId] });
      const roles = await rpc.call(S, "ListPolicyRoles", { appId, policyId: policy.policyId }, ADMIN_KEY);
      expect(roles.roles.map((r: Json) => r.roleId)).toEqual([role.roleId]);

      const blocked = await grpcFail(rpc, S, "DeletePolicy", { appId, policyId: policy.policyId }, ADMIN_KEY);
      expectGrpcError(blocked, grpc.status.FAILED_PRECONDITION, "1 role");
      const deleted = await rpc.call(S, "DeletePolicy", { appId, policyId: policy.policyId, force: true }, ADMIN_KEY);
      expect(deleted).toEqual({ policyId: policy.policyId, deleted: true, detachedRoleIds: [role.roleId] });

      // One policy.deleted event, the same over gRPC as over REST.
      const events = await rpc.call("AuditService", "ListAuditEvents", { appId, type: "policy.deleted" }, ADMIN_KEY);
      expect(events.events).toHaveLength(1);
      expect(events.events[0]).toMatchObject({ type: "policy.deleted", targetId: policy.policyId, actorKeyId: "operator" });
      expect(structJson(events.events[0].data)).toEqual({ name: "G2", permissions: ["invoice:read"], force: true, detachedRoleIds: [role.roleId] });
    });

    it("maps each error to its status", async () => {
      const api = await fresh("grpc-errors");
      const appId = api.appId;
      const p = await api.policy({ name: "Taken" });
      expectGrpcError(await grpcFail(rpc, S, "CreatePolicy", { appId, name: "Taken" }, ADMIN_KEY), grpc.status.ALREADY_EXISTS, '"Taken"');
      expectGrpcError(
        await grpcFail(rpc, S, "CreatePolicy", { appId, name: "x", permissions: ["document:fly"] }, ADMIN_KEY),
        grpc.status.INVALID_ARGUMENT,
        "permissions[0]",
        '"document:fly"',
      );
      expectGrpcError(await grpcFail(rpc, S, "GetPolicy", { appId, policyId: "pol_nope" }, ADMIN_KEY), grpc.status.NOT_FOUND, '"pol_nope"');
      expectGrpcError(await grpcFail(rpc, S, "GetPolicy", { appId: "ghost", policyId: "pol_nope" }, ADMIN_KEY), grpc.status.NOT_FOUND, '"ghost"');
      expectGrpcError(await grpcFail(rpc, S, "ListPolicies", { appId }, otherKey.key), grpc.status.PERMISSION_DENIED, '"other"');
      expectGrpcError(await grpcFail(rpc, S, "ListPolicies", { appId }), grpc.status.UNAUTHENTICATED);
      expectGrpcError(
        await grpcFail(rpc, S, "UpdatePolicy", { appId, policyId: p.policyId, updateMask: { paths: ["tenant_id"] } }, ADMIN_KEY),
        grpc.status.INVALID_ARGUMENT,
        "updateMask[0]",
        "tenant_id",
      );
      expectGrpcError(
        await grpcFail(rpc, S, "UpdatePolicy", { appId, policyId: p.policyId, permissions: ["nope"] }, ADMIN_KEY),
        grpc.status.INVALID_ARGUMENT,
        "permissions[0]",
      );
      expectGrpcError(await grpcFail(rpc, S, "ListPolicies", { appId, pageSize: 0 }, ADMIN_KEY), grpc.status.INVALID_ARGUMENT, "pageSize");
      expect(ok(await api.getPolicy(p.policyId))).toEqual(p);
    });
  });
});
