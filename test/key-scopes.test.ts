/**
 * Key scopes (docs/decisions.md): every annotated route, read from the same
 * google.api.http annotations the gateway serves, called with a key of each
 * of the seven scope sets, over REST and over gRPC. Lacking the route's scope
 * is a 403 / PERMISSION_DENIED naming it, and changes nothing; holding it
 * gets past the scope check. Then the rules of creating scoped keys, and the
 * migration that gives keys made before scopes all three.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AuditService } from "../gen/authz/v1/audit_pb.js";
import { ApplicationService } from "../gen/authz/v1/applications_pb.js";
import { CatalogService } from "../gen/authz/v1/catalog_pb.js";
import { CheckService } from "../gen/authz/v1/check_pb.js";
import { PolicyService } from "../gen/authz/v1/policies_pb.js";
import { RelationshipService } from "../gen/authz/v1/relationships_pb.js";
import { RoleService } from "../gen/authz/v1/roles_pb.js";
import { UserService } from "../gen/authz/v1/users_pb.js";
import { loadMigrations, migrate } from "../src/store/migrate.js";
import { httpBindings, type HttpBinding } from "../src/transport/rest/http-rules.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { grpcCaller, type GrpcCaller, type GrpcService } from "./support/grpc-client.js";
import { startTestService, type TestService } from "./support/service.js";
import { expectError, expectStatus, GRPC } from "./helpers/authz.js";

type Scope = "check" | "read" | "write";
const SCOPE_SETS: Scope[][] = [["check"], ["read"], ["write"], ["check", "read"], ["check", "write"], ["read", "write"], ["check", "read", "write"]];
const APP = "scoped";
const CATALOG = { resources: [{ resource: "document", description: "", actions: ["read", "update"] }] };

/** Operator-only routes: an application key is refused whatever its scopes (auth-api.test.ts). */
const OPERATOR_ONLY = new Set(["CreateApplication", "ListApplications"]);

const bindings = httpBindings([ApplicationService, CatalogService, PolicyService, RoleService, UserService, RelationshipService, CheckService, AuditService]);
/** Any valid key may ask who it is (the console's sign-in), whatever its scopes: tested below. */
const SCOPE_FREE = new Set(["GetCurrentKey"]);
const routes = bindings.filter((b) => !OPERATOR_ONLY.has(b.method.name) && !SCOPE_FREE.has(b.method.name));

/** The scope a route takes, by the contract: the questions "check", GETs "read", the rest "write". */
const scopeOf = (b: HttpBinding): Scope => (b.method.parent.name === "CheckService" ? "check" : b.verb === "GET" ? "read" : "write");

const question = { userId: "ann", resource: "document", resourceId: "d1", action: "read" };
const grant = { userId: "ann", resource: "document", resourceId: "d1", relation: "viewer" };

/**
 * A request for each RPC, as JSON fields (path fields included). Deletes name
 * ids that do not exist, so a call that passes the scope check removes
 * nothing the next row needs; everything else is harmless to repeat.
 */
function requestOf(b: HttpBinding, ids: { policyId: string; roleId: string }, n: number): Record<string, unknown> {
  const bodies: Record<string, Record<string, unknown>> = {
    GetApplication: {},
    CreateApiKey: { name: `k${n}` }, // the creator's own scopes: a key cannot grant more (tested below)
    ListApiKeys: {},
    DeleteApiKey: { keyId: "key_nope" },
    GetCurrentKey: {},
    PutCatalog: { resources: CATALOG.resources },
    GetCatalog: {},
    CreatePolicy: { name: `policy ${n}`, permissions: ["document:read"] },
    ListPolicies: {},
    GetPolicy: { policyId: ids.policyId },
    ListPolicyRoles: { policyId: ids.policyId },
    UpdatePolicy: { policyId: ids.policyId, description: `d${n}` },
    PreviewPolicyUpdate: { policyId: ids.policyId, permissions: [] },
    DeletePolicy: { policyId: "pol_nope" },
    CreateRole: { name: `role ${n}` },
    ListRoles: {},
    GetRole: { roleId: ids.roleId },
    UpdateRole: { roleId: ids.roleId, description: `d${n}` },
    DeleteRole: { roleId: "rol_nope" },
    AssignRole: { roleId: ids.roleId, userId: "ann" },
    UnassignRole: { roleId: ids.roleId, userId: "nobody" },
    ListRoleAssignments: { roleId: ids.roleId },
    ListUserRoles: { userId: "ann" },
    DeleteUserRoles: { userId: "nobody" },
    // {} on both protocols: plain JSON over REST, an empty google.protobuf.Struct to proto-loader.
    SetUserProperties: { userId: "ann", properties: {} },
    GetUserProperties: { userId: "ann" },
    WriteRelationship: grant,
    ListRelationships: { resource: "document", resourceId: "d1" },
    DeleteRelationship: { ...grant, resourceId: "gone" },
    DeleteRelationships: { resource: "document", resourceId: "gone" },
    BulkWriteRelationships: { writes: [grant] },
    Check: question,
    BatchCheck: { checks: [question] },
    Explain: question,
    Permissions: { userId: "ann", resource: "document", resourceId: "d1" },
    BatchPermissions: { requests: [{ userId: "ann", resource: "document", resourceId: "d1" }] },
    Lookup: { userId: "ann", resource: "document", action: "read" },
    WhoCan: { resource: "document", resourceId: "d1", action: "read" },
    ListAuditEvents: {},
  };
  const body = bodies[b.method.name];
  if (body === undefined) throw new Error(`no request for ${b.method.name}: add one to the table`);
  return b.template.includes("{app_id}") ? { appId: APP, ...body } : body;
}

/** The REST call of a route: path variables from the request, the rest in the body or the query. */
function restCall(b: HttpBinding, request: Record<string, unknown>): { method: string; path: string; body?: unknown } {
  const rest = { ...request };
  const path = b.template.replace(/\{([^}]+)\}/g, (_, name: string) => {
    const json = name.replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase());
    const value = String(rest[json]);
    delete rest[json];
    return encodeURIComponent(value);
  });
  if (b.body !== undefined) return { method: b.verb, path, body: b.body === "*" ? rest : rest[b.body.jsonName] };
  const query = new URLSearchParams(Object.entries(rest).map(([k, v]): [string, string] => [k, String(v)])).toString();
  return { method: b.verb, path: query === "" ? path : `${path}?${query}` };
}

describe.each(engines)("key scopes on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let grpc: GrpcCaller;
  const keys = new Map<string, string>();
  const ids = { policyId: "", roleId: "" };
  let counter = 0;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    grpc = grpcCaller(service.url);
    expectStatus(await service.call("POST", "/api/v1/applications", { body: { appId: APP } }), 201);
    expectStatus(await service.call("PUT", `/api/v1/applications/${APP}/resources`, { body: CATALOG }), 200);
    const policy = await service.call("POST", `/api/v1/applications/${APP}/policies`, { body: { name: "P", permissions: ["document:read"] } });
    ids.policyId = policy.body.policyId;
    ids.roleId = (await service.call("POST", `/api/v1/applications/${APP}/roles`, { body: { name: "R", policyIds: [ids.policyId] } })).body.roleId;
    // So that a SetUserProperties ({}) let through would show in the snapshot.
    expectStatus(await service.call("PUT", `/api/v1/applications/${APP}/users/ann/properties`, { body: { tier: "gold" } }), 200);
    for (const scopes of SCOPE_SETS) {
      const created = await service.call("POST", `/api/v1/applications/${APP}/api-keys`, { body: { name: scopes.join("+"), scopes } });
      expectStatus(created, 201);
      expect(created.body.scopes).toEqual(scopes);
      keys.set(scopes.join("+"), created.body.key);
    }
  });
  afterAll(async () => {
    grpc?.close();
    await service?.close();
    await database?.dispose();
  });

  it("the table covers every annotated route an application key may call", () => {
    expect(routes.length + OPERATOR_ONLY.size + SCOPE_FREE.size).toBe(bindings.length);
    expect(routes.length).toBe(38);
    expect(new Set(routes.map(scopeOf))).toEqual(new Set(["check", "read", "write"]));
  });

  /** Everything an application's state is, read with the operator key. */
  const snapshot = async () => {
    const base = `/api/v1/applications/${APP}`;
    const paths = [`${base}/resources`, `${base}/policies?pageSize=1000`, `${base}/roles?pageSize=1000`, `${base}/api-keys?pageSize=1000`,
      `${base}/roles/${ids.roleId}/assignments`, `${base}/audit-log?pageSize=1000`, `${base}/users/ann/properties`];
    const grants = await service.call("GET", "/api/v1/authorization/relationships?resource=document&resourceId=d1", { key: keys.get("check+read+write")! });
    return [...(await Promise.all(paths.map(async (p) => (await service.call("GET", p)).body))), grants.body];
  };

  const lacking = routes.flatMap((route) =>
    SCOPE_SETS.filter((set) => !set.includes(scopeOf(route))).map((set) => ({ route, set, label: `${route.verb} ${route.template} (${route.method.name})`, scopes: set.join("+") })),
  );
  const holding = routes.flatMap((route) =>
    SCOPE_SETS.filter((set) => set.includes(scopeOf(route))).map((set) => ({ route, set, label: `${route.verb} ${route.template} (${route.method.name})`, scopes: set.join("+") })),
  );

  it("lacking the route's scope: 403 naming it over REST, PERMISSION_DENIED over gRPC; nothing changes", async () => {
    const before = await snapshot();
    for (const { route, label, scopes } of lacking) {
      const key = keys.get(scopes)!;
      const request = requestOf(route, ids, counter++);
      const call = restCall(route, request);
      const res = await service.call(call.method, call.path, { key, ...(call.body === undefined ? {} : { body: call.body }) });
      expect(res.status, `${label} with ${scopes}: ${JSON.stringify(res.body)}`).toBe(403);
      expectError(res, 403, "permission_denied", `"${scopeOf(route)}"`);
      const error = await grpc.call(route.method.parent.name as GrpcService, route.method.name, request, key).then(
        () => undefined,
        (e: { code: number; details: string }) => e,
      );
      expect(error?.code, `${label} over gRPC with ${scopes}`).toBe(GRPC.PERMISSION_DENIED);
      expect(error?.details).toContain(`"${scopeOf(route)}"`);
    }
    expect(lacking.length).toBeGreaterThan(80);
    expect(await snapshot()).toEqual(before);
  });

  it("holding the route's scope: past the scope check, over REST and gRPC", async () => {
    for (const { route, label, scopes } of holding) {
      const key = keys.get(scopes)!;
      const request = requestOf(route, ids, counter++);
      const call = restCall(route, request);
      const res = await service.call(call.method, call.path, { key, ...(call.body === undefined ? {} : { body: call.body }) });
      expect(res.status, `${label} with ${scopes}: ${JSON.stringify(res.body)}`).not.toBe(403);
      expect(res.status, `${label} with ${scopes}: ${JSON.stringify(res.body)}`).toBeLessThan(500);
      const code = await grpc.call(route.method.parent.name as GrpcService, route.method.name, request, key).then(
        () => 0,
        (e: { code: number }) => e.code,
      );
      expect(code, `${label} over gRPC with ${scopes}`).not.toBe(GRPC.PERMISSION_DENIED);
    }
  });

  it("GET /api/v1/api-keys/current answers every key, whatever its scopes, over REST and gRPC", async () => {
    for (const scopes of SCOPE_SETS) {
      const key = keys.get(scopes.join("+"))!;
      const res = await service.call("GET", "/api/v1/api-keys/current", { key });
      expectStatus(res, 200);
      expect(res.body).toEqual({ keyId: expect.stringMatching(/^key_/), kind: "application", appId: APP, scopes });
      const answer = await grpc.call("ApplicationService", "GetCurrentKey", {}, key);
      expect({ keyId: answer.keyId, kind: answer.kind, appId: answer.appId, scopes: answer.scopes }).toEqual(res.body);
    }
  });

  it("the questions answer 200 with a check-only key", async () => {
    const key = keys.get("check")!;
    for (const [path, body] of [
      ["/api/v1/authorization/check", question],
      ["/api/v1/authorization/check/batch", { checks: [question] }],
      ["/api/v1/authorization/check/explain", question],
      ["/api/v1/authorization/permissions", { userId: "ann", resource: "document", resourceId: "d1" }],
      ["/api/v1/authorization/permissions/batch", { requests: [] }],
      ["/api/v1/authorization/lookup", { userId: "ann", resource: "document", action: "read" }],
      ["/api/v1/authorization/subjects", { resource: "document", resourceId: "d1", action: "read" }],
    ] as const) {
      expectStatus(await service.call("POST", path, { key, body }), 200);
    }
  });

  describe("creating keys with scopes", () => {
    const create = (body: unknown, key?: string) => service.call("POST", `/api/v1/applications/${APP}/api-keys`, { body, ...(key ? { key } : {}) });

    it("without scopes: all three, in the answer and in the list", async () => {
      const created = await create({ name: "default" });
      expectStatus(created, 201);
      expect(created.body.scopes).toEqual(["check", "read", "write"]);
      const list = await service.call("GET", `/api/v1/applications/${APP}/api-keys?pageSize=1000`);
      expect(list.body.apiKeys.find((k: { keyId: string }) => k.keyId === created.body.keyId).scopes).toEqual(["check", "read", "write"]);
    });

    it.each([
      { name: "repeats folded, canonical order", scopes: ["write", "check", "write"], want: ["check", "write"] },
      { name: "one", scopes: ["read"], want: ["read"] },
    ])("$name", async ({ scopes, want }) => {
      const created = await create({ name: "k", scopes });
      expectStatus(created, 201);
      expect(created.body.scopes).toEqual(want);
    });

    it.each([
      { name: "an empty list", scopes: [], field: "scopes" },
      { name: "an unknown scope", scopes: ["check", "admin"], field: "scopes[1]" },
      { name: "a scope in capitals", scopes: ["CHECK"], field: "scopes[0]" },
      { name: "a scope that is not a string", scopes: ["check", 7], field: "scopes" },
    ])("$name → 400 naming $field, and no key", async ({ scopes, field }) => {
      const before = (await service.call("GET", `/api/v1/applications/${APP}/api-keys?pageSize=1000`)).body.apiKeys.length;
      expectError(await create({ name: "bad", scopes }), 400, "invalid_argument", field);
      expect((await service.call("GET", `/api/v1/applications/${APP}/api-keys?pageSize=1000`)).body.apiKeys.length).toBe(before);
    });

    it("a key cannot create a key with a scope it lacks; without scopes, the new key gets the creator's", async () => {
      const writeOnly = keys.get("write")!;
      expectError(await create({ name: "more", scopes: ["check"] }, writeOnly), 403, "permission_denied", '"check"');
      expectError(await create({ name: "more", scopes: ["read", "write"] }, writeOnly), 403, "permission_denied", '"read"');
      const same = await create({ name: "same" }, writeOnly);
      expectStatus(same, 201);
      expect(same.body.scopes).toEqual(["write"]);
      const checkWrite = await create({ name: "cw", scopes: ["check"] }, keys.get("check+write")!);
      expect(checkWrite.body.scopes).toEqual(["check"]);
      // A check-only key cannot create keys at all: creating is a write.
      expectError(await create({ name: "x", scopes: ["check"] }, keys.get("check")!), 403, "permission_denied", '"write"');
      // Over gRPC too.
      const error = await grpc.call("ApplicationService", "CreateApiKey", { appId: APP, name: "g", scopes: ["read"] }, writeOnly).then(
        () => undefined,
        (e: { code: number }) => e,
      );
      expect(error?.code).toBe(GRPC.PERMISSION_DENIED);
    });

    it("a write key revokes keys; the revoked key fails on its next call", async () => {
      const victim = await create({ name: "victim", scopes: ["check"] });
      expectStatus(await service.call("DELETE", `/api/v1/applications/${APP}/api-keys/${victim.body.keyId}`, { key: keys.get("write")! }), 200);
      expectError(await service.call("POST", "/api/v1/authorization/check", { key: victim.body.key, body: question }), 401, "unauthenticated");
    });

    it("the creation is audit-logged with the scopes", async () => {
      const created = await create({ name: "audited", scopes: ["check", "read"] });
      const log = await service.call("GET", `/api/v1/applications/${APP}/audit-log?targetId=${created.body.keyId}`);
      expect(log.body.events[0].data).toEqual({ name: "audited", scopes: ["check", "read"] });
    });
  });
});

describe.each(engines)("keys made before scopes existed (migration 004) on %s", (engine) => {
  it("have all three scopes and keep working on every kind of route", async () => {
    const database = await createTestDatabase(engine);
    let service: TestService | undefined;
    try {
      const all = await loadMigrations();
      expect(await migrate(database.db, all.slice(0, 3))).toEqual([1, 2, 3]);
      // A key as version 3 stored it: a SHA-256 of the secret, no scopes column.
      const { createHash } = await import("node:crypto");
      const secret = "pcl_old_key_made_before_scopes_0123456789";
      await database.db.query("INSERT INTO applications (app_id, name) VALUES ('old', 'Old')");
      await database.db.query("INSERT INTO model_versions (app_id) VALUES ('old')");
      await database.db.query(
        "INSERT INTO api_keys (key_id, app_id, kind, name, secret_hash) VALUES ('key_old', 'old', 'application', 'old', $1)",
        [createHash("sha256").update(secret).digest("hex")],
      );
      expect(await migrate(database.db, all)).toEqual(all.slice(3).map((m) => m.version));
      const { rows } = await database.db.query<{ scopes: string[] }>("SELECT scopes FROM api_keys WHERE key_id = 'key_old'");
      expect(rows[0]!.scopes).toEqual(["check", "read", "write"]);

      service = await startTestService(database.db);
      expectStatus(await service.call("PUT", "/api/v1/applications/old/resources", { key: secret, body: CATALOG }), 200);
      expectStatus(await service.call("GET", "/api/v1/applications/old/resources", { key: secret }), 200);
      expectStatus(await service.call("POST", "/api/v1/authorization/relationships", { key: secret, body: grant }), 201);
      const check = await service.call("POST", "/api/v1/authorization/check", { key: secret, body: question });
      expect(check.body).toEqual({ allowed: true });
      const listed = await service.call("GET", "/api/v1/applications/old/api-keys");
      expect(listed.body.apiKeys[0].scopes).toEqual(["check", "read", "write"]);
    } finally {
      await service?.close();
      await database.dispose();
    }
  });
});
