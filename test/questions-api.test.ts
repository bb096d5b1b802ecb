/**
 * Explain, permissions and lookup (docs/decisions.md) through the public API
 * on each engine, over REST and gRPC: the exact answer shapes, the order of
 * reasons and actions, tenants (a role of another tenant never counts, in
 * reasons, actions or allInstances), validation that names the field, the
 * catalog's 400s, revoked keys, the operator key, batch limits and lookup
 * paging.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { grpcCaller, type GrpcCaller } from "./support/grpc-client.js";
import { startTestService, type TestService } from "./support/service.js";
import { admin, authz, createApp, expectError, expectGrpcError, expectStatus, grant, GRPC, type Admin, type Authz } from "./helpers/authz.js";

const CATALOG = [
  {
    resource: "document",
    description: "Documents",
    actions: ["read", "update", "delete", "comment", "share"],
    relations: [{ name: "reviewer", actions: ["read", "comment"] }],
  },
  { resource: "folder", description: "", actions: ["read", "list"] },
];

const EXPLAIN = "/api/v1/authorization/check/explain";
const PERMISSIONS = "/api/v1/authorization/permissions";
const PERMISSIONS_BATCH = "/api/v1/authorization/permissions/batch";
const LOOKUP = "/api/v1/authorization/lookup";

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;

describe.each(oneEngine(import.meta.url))("explain, permissions and lookup on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let grpc: GrpcCaller;
  let key: string;
  let x: Authz;
  let ops: Admin;
  const ids: Record<string, string> = {};

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    grpc = grpcCaller(service.url);
    key = await createApp(service, "q", CATALOG);
    x = authz(service, key);
    ops = admin(service, "q");
    // Roles: "Editors" application-wide; "Admins" of tenant acme and of tenant globex.
    ids.edit = await ops.createPolicy("Edit documents", ["document:read", "document:update"]);
    ids.read = await ops.createPolicy("Read documents", ["document:read"]);
    ids.acmeDelete = await ops.createPolicy("Acme delete", ["document:delete", "document:read"], "acme");
    ids.globexShare = await ops.createPolicy("Globex share", ["document:share"], "globex");
    ids.editors = await ops.createRole("Editors", [ids.edit, ids.read]);
    ids.acmeAdmins = await ops.createRole("Admins", [ids.acmeDelete], "acme");
    ids.globexAdmins = await ops.createRole("Admins", [ids.globexShare], "globex");
    ids.auditors = await ops.createRole("Auditors", []);
    for (const role of [ids.editors, ids.acmeAdmins, ids.globexAdmins, ids.auditors]) await ops.assign(role!, "ann");
    await ops.assign(ids.acmeAdmins!, "bea");
    expectStatus(await x.bulk([
      grant("ann", "document", "d1", "viewer"),
      grant("ann", "document", "d1", "reviewer"),
      grant("cal", "document", "d1", "owner"),
      grant("cal", "document", "d2", "commenter"),
      grant("cal", "document", "d3", "viewer"),
      grant("cal", "folder", "f1", "viewer"),
    ]), 200);
  });
  afterAll(async () => {
    grpc?.close();
    await service?.close();
    await database?.dispose();
  });

  describe("explain", () => {
    it("every way the action is allowed: grants by relation, then roles by name, a reason per policy", async () => {
      const res = await service.call("POST", EXPLAIN, { key, body: { userId: "ann", resource: "document", resourceId: "d1", action: "read", tenantId: "acme" } });
      expectStatus(res, 200);
      expect(Object.keys(res.body).sort()).toEqual(["allowed", "blocked", "conditions", "considered", "reasons"]);
      expect(res.body.allowed).toBe(true);
      const grantOf = (relation: string) => {
        const grant = { userId: "ann", allUsers: false, resource: "document", resourceId: "d1", relation, createdAt: expect.stringMatching(ISO) };
        // The user's own grant on the instance: a path of one grant.
        return { kind: "relation", relation, grant, path: [grant], requires: [] };
      };
      expect(res.body.reasons).toEqual([
        grantOf("reviewer"),
        grantOf("viewer"),
        // "Admins" < "Editors"; the acme one counts (tenant acme), the globex one does not.
        // A role's reason has no path nor requires (REST writes every repeated field, so `path: []`).
        { kind: "role", roleId: ids.acmeAdmins, roleName: "Admins", tenantId: "acme", policyId: ids.acmeDelete, policyName: "Acme delete", permission: "document:read", path: [], requires: [] },
        { kind: "role", roleId: ids.editors, roleName: "Editors", policyId: ids.edit, policyName: "Edit documents", permission: "document:read", path: [], requires: [] },
        { kind: "role", roleId: ids.editors, roleName: "Editors", policyId: ids.read, policyName: "Read documents", permission: "document:read", path: [], requires: [] },
      ]);
      expect(res.body.considered).toEqual({
        relations: [
          { relation: "reviewer", actions: ["read", "comment"] },
          { relation: "viewer", actions: ["read"] },
        ],
        roles: [
          { roleId: ids.acmeAdmins, roleName: "Admins", tenantId: "acme" },
          { roleId: ids.auditors, roleName: "Auditors" },
          { roleId: ids.editors, roleName: "Editors" },
        ],
      });
    });

    it("denied: no reasons, and what the user holds that could have counted", async () => {
      const res = await service.call("POST", EXPLAIN, { key, body: { userId: "ann", resource: "document", resourceId: "d1", action: "delete" } });
      expectStatus(res, 200);
      expect(res.body).toEqual({
        allowed: false,
        reasons: [],
        considered: {
          relations: [
            { relation: "reviewer", actions: ["read", "comment"] },
            { relation: "viewer", actions: ["read"] },
          ],
          // No tenant asked: only application-wide roles apply.
          roles: [
            { roleId: ids.auditors, roleName: "Auditors" },
            { roleId: ids.editors, roleName: "Editors" },
          ],
        },
        // No grant or assignment here has a condition: none was evaluated.
        conditions: [],
        blocked: [],
      });
    });

    it("a user with nothing: allowed false, empty lists, every field present", async () => {
      const res = await service.call("POST", EXPLAIN, { key, body: { userId: "nobody", resource: "folder", resourceId: "f1", action: "read" } });
      expect(res.body).toEqual({ allowed: false, reasons: [], considered: { relations: [], roles: [] }, conditions: [], blocked: [] });
    });

    it("tenants: a role of another tenant never counts, as a reason or as considered", async () => {
      for (const tenantId of [undefined, "globex", "initech"]) {
        const res = await service.call("POST", EXPLAIN, {
          key,
          body: { userId: "bea", resource: "document", resourceId: "d9", action: "delete", ...(tenantId ? { tenantId } : {}) },
        });
        expect(res.body, String(tenantId)).toEqual({ allowed: false, reasons: [], considered: { relations: [], roles: [] }, conditions: [], blocked: [] });
      }
      const acme = await service.call("POST", EXPLAIN, { key, body: { userId: "bea", resource: "document", resourceId: "d9", action: "delete", tenantId: "acme" } });
      expect(acme.body.allowed).toBe(true);
      expect(acme.body.reasons.map((r: { roleId: string }) => r.roleId)).toEqual([ids.acmeAdmins]);
    });

    it("owner implies every action; a custom relation only its own", async () => {
      const owner = await service.call("POST", EXPLAIN, { key, body: { userId: "cal", resource: "document", resourceId: "d1", action: "share" } });
      expect(owner.body.allowed).toBe(true);
      expect(owner.body.considered.relations).toEqual([{ relation: "owner", actions: ["read", "update", "delete", "comment", "share"] }]);
      const commenter = await service.call("POST", EXPLAIN, { key, body: { userId: "cal", resource: "document", resourceId: "d2", action: "update" } });
      expect(commenter.body).toMatchObject({ allowed: false, reasons: [], considered: { relations: [{ relation: "commenter", actions: ["read", "comment"] }] } });
    });

    it("over gRPC: the same answer", async () => {
      const answer = await grpc.call("CheckService", "Explain", { userId: "ann", resource: "document", resourceId: "d1", action: "update" }, key);
      expect(answer.allowed).toBe(true);
      expect(answer.reasons.map((r: { kind: string; policyName: string }) => [r.kind, r.policyName])).toEqual([["role", "Edit documents"]]);
      expect(answer.considered.roles.map((r: { roleName: string }) => r.roleName)).toEqual(["Auditors", "Editors"]);
    });
  });

  describe("permissions", () => {
    const cases = [
      { name: "grants and roles together, in catalog order", body: { userId: "ann", resource: "document", resourceId: "d1" }, actions: ["read", "update", "comment"] },
      { name: "a tenant's role adds its actions", body: { userId: "ann", resource: "document", resourceId: "d1", tenantId: "acme" }, actions: ["read", "update", "delete", "comment"] },
      { name: "another tenant's role adds its own only", body: { userId: "ann", resource: "document", resourceId: "d7", tenantId: "globex" }, actions: ["read", "update", "share"] },
      { name: "a tenant role without its tenant counts for nothing", body: { userId: "bea", resource: "document", resourceId: "d1" }, actions: [] },
      { name: "owner: every action", body: { userId: "cal", resource: "document", resourceId: "d1" }, actions: ["read", "update", "delete", "comment", "share"] },
      { name: "commenter", body: { userId: "cal", resource: "document", resourceId: "d2" }, actions: ["read", "comment"] },
      { name: "another resource type", body: { userId: "cal", resource: "folder", resourceId: "f1" }, actions: ["read", "list"] },
      { name: "nothing at all", body: { userId: "nobody", resource: "folder", resourceId: "f1" }, actions: [] },
    ];

    it.each(cases)("$name", async ({ body, actions }) => {
      const res = await service.call("POST", PERMISSIONS, { key, body });
      expectStatus(res, 200);
      expect(res.body).toEqual({ actions });
      expect((await grpc.call("CheckService", "Permissions", body, key)).actions).toEqual(actions);
    });

    it("batch: every answer in request order, over REST and gRPC", async () => {
      const res = await service.call("POST", PERMISSIONS_BATCH, { key, body: { requests: cases.map((c) => c.body) } });
      expectStatus(res, 200);
      expect(res.body).toEqual({ results: cases.map((c) => ({ actions: c.actions })) });
      const viaGrpc = await grpc.call("CheckService", "BatchPermissions", { requests: cases.map((c) => c.body) }, key);
      expect(viaGrpc.results.map((r: { actions: string[] }) => r.actions)).toEqual(cases.map((c) => c.actions));
      expect((await service.call("POST", PERMISSIONS_BATCH, { key, body: { requests: [] } })).body).toEqual({ results: [] });
    });

    it("every action permissions lists, the check allows, and no other", async () => {
      for (const { body, actions } of cases) {
        const all = CATALOG.find((r) => r.resource === body.resource)!.actions;
        const checks = await x.batch(all.map((action) => ({ ...body, action })));
        expect(all.filter((_, i) => checks.body.results[i].allowed), JSON.stringify(body)).toEqual(actions);
      }
    });
  });

  describe("lookup", () => {
    it("grants give instances in ascending order; roles give allInstances", async () => {
      expectStatus(await x.bulk(["d5", "d10", "d2", "d1"].map((id) => grant("dan", "document", id, "viewer"))), 200);
      expectStatus(await x.write(grant("dan", "document", "d2", "reviewer")), 201); // a second relation on d2: listed once
      expectStatus(await x.write(grant("dan", "document", "d8", "commenter")), 201);
      const res = await service.call("POST", LOOKUP, { key, body: { userId: "dan", resource: "document", action: "read" } });
      expectStatus(res, 200);
      expect(res.body).toEqual({ allInstances: false, resourceIds: ["d1", "d10", "d2", "d5", "d8"], nextPageToken: "", conditional: [], allInstancesConditions: [] });
      const comment = await service.call("POST", LOOKUP, { key, body: { userId: "dan", resource: "document", action: "comment" } });
      expect(comment.body).toEqual({ allInstances: false, resourceIds: ["d2", "d8"], nextPageToken: "", conditional: [], allInstancesConditions: [] });

      // ann: an application-wide role allows read on every instance; her grants are listed whatever allInstances says.
      const ann = await service.call("POST", LOOKUP, { key, body: { userId: "ann", resource: "document", action: "read" } });
      expect(ann.body).toEqual({ allInstances: true, resourceIds: ["d1"], nextPageToken: "", conditional: [], allInstancesConditions: [] });
    });

    it("tenants: allInstances only through roles of the asked tenant or application-wide", async () => {
      const ask = async (tenantId?: string) =>
        (await service.call("POST", LOOKUP, { key, body: { userId: "bea", resource: "document", action: "delete", ...(tenantId ? { tenantId } : {}) } })).body;
      expect(await ask()).toEqual({ allInstances: false, resourceIds: [], nextPageToken: "", conditional: [], allInstancesConditions: [] });
      expect(await ask("globex")).toEqual({ allInstances: false, resourceIds: [], nextPageToken: "", conditional: [], allInstancesConditions: [] });
      expect(await ask("acme")).toEqual({ allInstances: true, resourceIds: [], nextPageToken: "", conditional: [], allInstancesConditions: [] });
    });

    it.each([1, 2, 3, 7])("pageSize=%i walks every instance exactly once, in order", async (pageSize) => {
      const ids = Array.from({ length: 20 }, (_, i) => `p-${String(i).padStart(2, "0")}`);
      expectStatus(await x.bulk(ids.map((id, i) => grant(`pager-${pageSize}`, "document", id, i % 3 === 0 ? "owner" : i % 3 === 1 ? "viewer" : "reviewer"))), 200);
      const seen: string[] = [];
      let pageToken = "";
      for (let pages = 0; pages < 100; pages++) {
        const res = await service.call("POST", LOOKUP, { key, body: { userId: `pager-${pageSize}`, resource: "document", action: "read", pageSize, pageToken } });
        expectStatus(res, 200);
        expect(res.body.resourceIds.length).toBeLessThanOrEqual(pageSize);
        seen.push(...res.body.resourceIds);
        pageToken = res.body.nextPageToken;
        if (pageToken === "") break;
      }
      expect(seen).toEqual(ids);
    });

    it("over gRPC: the same pages", async () => {
      const first = await grpc.call("CheckService", "Lookup", { userId: "dan", resource: "document", action: "read", pageSize: 2 }, key);
      expect(first.resourceIds).toEqual(["d1", "d10"]);
      const second = await grpc.call("CheckService", "Lookup", { userId: "dan", resource: "document", action: "read", pageSize: 2, pageToken: first.nextPageToken }, key);
      expect(second.resourceIds).toEqual(["d2", "d5"]);
    });
  });

  describe("refusals", () => {
    const bad: { name: string; path: string; body: unknown; field: string }[] = [
      { name: "explain without userId", path: EXPLAIN, body: { resource: "document", resourceId: "d1", action: "read" }, field: "userId" },
      { name: "explain of an unknown resource", path: EXPLAIN, body: { userId: "u", resource: "nope", resourceId: "d1", action: "read" }, field: "resource" },
      { name: "explain of an unknown action", path: EXPLAIN, body: { userId: "u", resource: "document", resourceId: "d1", action: "fly" }, field: "action" },
      { name: "explain with a malformed action", path: EXPLAIN, body: { userId: "u", resource: "document", resourceId: "d1", action: "Fly!" }, field: "action" },
      { name: "explain with a control character in tenantId", path: EXPLAIN, body: { userId: "u", resource: "document", resourceId: "d1", action: "read", tenantId: "a\u0001" }, field: "tenantId" },
      { name: "permissions without resourceId", path: PERMISSIONS, body: { userId: "u", resource: "document" }, field: "resourceId" },
      { name: "permissions of an unknown resource", path: PERMISSIONS, body: { userId: "u", resource: "nope", resourceId: "d1" }, field: "resource" },
      { name: "permissions with an action (no such field)", path: PERMISSIONS, body: { userId: "u", resource: "document", resourceId: "d1", action: "read" }, field: "action" },
      { name: "permissions with a userId of 257 characters", path: PERMISSIONS, body: { userId: "u".repeat(257), resource: "document", resourceId: "d1" }, field: "userId" },
      { name: "batch permissions with a bad entry", path: PERMISSIONS_BATCH, body: { requests: [{ userId: "u", resource: "document", resourceId: "d1" }, { userId: "", resource: "document", resourceId: "d1" }] }, field: "requests[1].userId" },
      { name: "batch permissions with an unknown resource", path: PERMISSIONS_BATCH, body: { requests: [{ userId: "u", resource: "document", resourceId: "d1" }, { userId: "u", resource: "nope", resourceId: "d1" }] }, field: "requests[1].resource" },
      { name: "batch permissions of 1,001", path: PERMISSIONS_BATCH, body: { requests: Array.from({ length: 1001 }, () => ({ userId: "u", resource: "document", resourceId: "d1" })) }, field: "requests" },
      { name: "lookup without action", path: LOOKUP, body: { userId: "u", resource: "document" }, field: "action" },
      { name: "lookup of an unknown action", path: LOOKUP, body: { userId: "u", resource: "document", action: "fly" }, field: "action" },
      { name: "lookup of an unknown resource", path: LOOKUP, body: { userId: "u", resource: "nope", action: "read" }, field: "resource" },
      { name: "lookup with pageSize 0", path: LOOKUP, body: { userId: "u", resource: "document", action: "read", pageSize: 0 }, field: "pageSize" },
      { name: "lookup with pageSize 1,001", path: LOOKUP, body: { userId: "u", resource: "document", action: "read", pageSize: 1001 }, field: "pageSize" },
      { name: "lookup with a forged page token", path: LOOKUP, body: { userId: "u", resource: "document", action: "read", pageToken: "not-a-token" }, field: "pageToken" },
      { name: "lookup with a token of another list", path: LOOKUP, body: { userId: "u", resource: "document", action: "read", pageToken: Buffer.from('{"appId":"x"}').toString("base64url") }, field: "pageToken" },
      { name: "lookup with a resourceId (no such field)", path: LOOKUP, body: { userId: "u", resource: "document", action: "read", resourceId: "d1" }, field: "resourceId" },
    ];

    it.each(bad)("$name → 400 naming $field", async ({ path, body, field }) => {
      const res = await service.call("POST", path, { key, body });
      expectError(res, 400, "invalid_argument", field);
    });

    it.each(bad.filter((b) => !/no such field/.test(b.name)))("over gRPC too: $name → INVALID_ARGUMENT", async ({ path, body, field }) => {
      const method = { [EXPLAIN]: "Explain", [PERMISSIONS]: "Permissions", [PERMISSIONS_BATCH]: "BatchPermissions", [LOOKUP]: "Lookup" }[path]!;
      await expectGrpcError(grpc.call("CheckService", method, body as object, key), GRPC.INVALID_ARGUMENT, field);
    });

    it.each([EXPLAIN, PERMISSIONS, PERMISSIONS_BATCH, LOOKUP])("%s: the operator key → 403, no key → 401", async (path) => {
      expectError(await service.call("POST", path, { body: {} }), 403, "permission_denied", "operator");
      expectError(await service.call("POST", path, { key: null, body: {} }), 401, "unauthenticated");
    });

    it("a revoked key fails on its very next question, whichever", async () => {
      const other = await createApp(service, "q-revoked", CATALOG);
      const list = await service.call("GET", "/api/v1/applications/q-revoked/api-keys");
      const bodies = {
        [EXPLAIN]: { userId: "u", resource: "document", resourceId: "d1", action: "read" },
        [PERMISSIONS]: { userId: "u", resource: "document", resourceId: "d1" },
        [PERMISSIONS_BATCH]: { requests: [] },
        [LOOKUP]: { userId: "u", resource: "document", action: "read" },
      };
      for (const [path, body] of Object.entries(bodies)) expectStatus(await service.call("POST", path, { key: other, body }), 200);
      expectStatus(await service.call("DELETE", `/api/v1/applications/q-revoked/api-keys/${list.body.apiKeys[0].keyId}`), 200);
      for (const [path, body] of Object.entries(bodies)) {
        expectError(await service.call("POST", path, { key: other, body }), 401, "unauthenticated");
      }
    });

    it("another application's key sees only its own application", async () => {
      const other = await createApp(service, "q-other", CATALOG);
      const res = await service.call("POST", EXPLAIN, { key: other, body: { userId: "ann", resource: "document", resourceId: "d1", action: "read" } });
      expect(res.body).toEqual({ allowed: false, reasons: [], considered: { relations: [], roles: [] }, conditions: [], blocked: [] });
      const lookup = await service.call("POST", LOOKUP, { key: other, body: { userId: "dan", resource: "document", action: "read" } });
      expect(lookup.body).toEqual({ allInstances: false, resourceIds: [], nextPageToken: "", conditional: [], allInstancesConditions: [] });
    });
  });
});
