/**
 * Who may call what, over REST on each engine: missing, unknown and revoked
 * keys; application keys outside their application and on operator routes;
 * the operator key on /api/v1/authorization/*; the routes each key may reach;
 * the health endpoints; and the error body of every refusal.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectErrorBody } from "./helpers/error-body.js";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, createAppWithKey, startTestService, type RestAnswer, type TestService } from "./support/service.js";

const catalog = { resources: [{ resource: "document", description: "", actions: ["read", "update"] }] };

/** Every non-2xx answer: exactly {code, message, details, requestId}, details an array, requestId the answer's x-request-id. */
function expectError(res: RestAnswer, status: number, code: string, ...fragments: string[]): void {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expectErrorBody(res.body, res.headers.get("x-request-id"));
  expect(res.body.code).toBe(code);
  expect(typeof res.body.message).toBe("string");
  expect(Array.isArray(res.body.details)).toBe(true);
  for (const fragment of fragments) expect(res.body.message).toContain(fragment);
}

type KeyName = "none" | "empty" | "unknown" | "operator" | "alpha" | "beta";

interface Row {
  name: string;
  key: KeyName;
  method: string;
  path: string;
  body?: unknown;
  rawBody?: string;
  status: number;
  code?: string;
  fragments?: string[];
  /** The exact answer body, where it is known. */
  expect?: unknown;
}

/** Refusals: each must be an error body with the given status and code. */
const refused: Row[] = [
  // 401: missing key
  { name: "missing key on an app route", key: "none", method: "GET", path: "/api/v1/applications/alpha", status: 401, code: "unauthenticated", fragments: ["X-API-Key"] },
  { name: "missing key on an operator route", key: "none", method: "GET", path: "/api/v1/applications", status: 401, code: "unauthenticated", fragments: ["X-API-Key"] },
  { name: "missing key on create application", key: "none", method: "POST", path: "/api/v1/applications", body: { appId: "nokey" }, status: 401, code: "unauthenticated" },
  { name: "missing key on the catalog PUT", key: "none", method: "PUT", path: "/api/v1/applications/alpha/resources", body: catalog, status: 401, code: "unauthenticated" },
  { name: "missing key on check", key: "none", method: "POST", path: "/api/v1/authorization/check", body: {}, status: 401, code: "unauthenticated" },
  { name: "missing key on an app's policies", key: "none", method: "GET", path: "/api/v1/applications/alpha/policies", status: 401, code: "unauthenticated" },
  { name: "missing key on an app's roles", key: "none", method: "POST", path: "/api/v1/applications/alpha/roles", body: { name: "r" }, status: 401, code: "unauthenticated" },
  { name: "missing key on who-am-I", key: "none", method: "GET", path: "/api/v1/api-keys/current", status: 401, code: "unauthenticated", fragments: ["X-API-Key"] },
  { name: "unknown key on who-am-I", key: "unknown", method: "GET", path: "/api/v1/api-keys/current", status: 401, code: "unauthenticated" },
  { name: "empty key header", key: "empty", method: "GET", path: "/api/v1/applications/alpha", status: 401, code: "unauthenticated" },
  // 401: unknown key
  { name: "unknown key on an app route", key: "unknown", method: "GET", path: "/api/v1/applications/alpha", status: 401, code: "unauthenticated", fragments: ["not valid"] },
  { name: "unknown key on an operator route", key: "unknown", method: "GET", path: "/api/v1/applications", status: 401, code: "unauthenticated" },
  { name: "unknown key on relationships", key: "unknown", method: "GET", path: "/api/v1/authorization/relationships", status: 401, code: "unauthenticated" },
  // 401 comes before validation: an unauthenticated caller learns nothing about the request's shape
  { name: "missing key with a malformed JSON body", key: "none", method: "POST", path: "/api/v1/applications", rawBody: "{nope", status: 401, code: "unauthenticated" },
  { name: "missing key with an unknown body field", key: "none", method: "PUT", path: "/api/v1/applications/alpha/resources", body: { colour: "red" }, status: 401, code: "unauthenticated" },
  { name: "unknown key with an unknown query parameter", key: "unknown", method: "GET", path: "/api/v1/applications?colour=red", status: 401, code: "unauthenticated" },
  // 403: application key outside its application
  { name: "alpha key on beta", key: "alpha", method: "GET", path: "/api/v1/applications/beta", status: 403, code: "permission_denied", fragments: ['"alpha"', '"beta"'] },
  { name: "alpha key on beta's catalog GET", key: "alpha", method: "GET", path: "/api/v1/applications/beta/resources", status: 403, code: "permission_denied", fragments: ['"beta"'] },
  { name: "alpha key on beta's catalog PUT", key: "alpha", method: "PUT", path: "/api/v1/applications/beta/resources", body: catalog, status: 403, code: "permission_denied" },
  { name: "alpha key listing beta's keys", key: "alpha", method: "GET", path: "/api/v1/applications/beta/api-keys", status: 403, code: "permission_denied" },
  { name: "alpha key creating a beta key", key: "alpha", method: "POST", path: "/api/v1/applications/beta/api-keys", body: { name: "sneaky" }, status: 403, code: "permission_denied" },
  { name: "alpha key deleting a beta key", key: "alpha", method: "DELETE", path: "/api/v1/applications/beta/api-keys/key_whatever", status: 403, code: "permission_denied" },
  { name: "alpha key on beta's audit log", key: "alpha", method: "GET", path: "/api/v1/applications/beta/audit-log", status: 403, code: "permission_denied" },
  { name: "alpha key creating a policy of beta", key: "alpha", method: "POST", path: "/api/v1/applications/beta/policies", body: { name: "p" }, status: 403, code: "permission_denied", fragments: ['"beta"'] },
  { name: "alpha key listing beta's policies", key: "alpha", method: "GET", path: "/api/v1/applications/beta/policies", status: 403, code: "permission_denied" },
  { name: "alpha key creating a role of beta", key: "alpha", method: "POST", path: "/api/v1/applications/beta/roles", body: { name: "r" }, status: 403, code: "permission_denied" },
  { name: "alpha key on a user's roles in beta", key: "alpha", method: "GET", path: "/api/v1/applications/beta/users/u/roles", status: 403, code: "permission_denied" },
  { name: "alpha key on an application that does not exist", key: "alpha", method: "GET", path: "/api/v1/applications/nowhere", status: 403, code: "permission_denied" },
  // 403: application key on operator routes
  { name: "app key creating an application", key: "alpha", method: "POST", path: "/api/v1/applications", body: { appId: "gamma" }, status: 403, code: "permission_denied", fragments: ["operator key"] },
  { name: "app key listing applications", key: "alpha", method: "GET", path: "/api/v1/applications", status: 403, code: "permission_denied", fragments: ["operator key"] },
  // 403: operator key on /api/v1/authorization/*
  { name: "operator key on check", key: "operator", method: "POST", path: "/api/v1/authorization/check", body: { userId: "u", resource: "document", resourceId: "1", action: "read" }, status: 403, code: "permission_denied", fragments: ["application key"] },
  { name: "operator key on batch check", key: "operator", method: "POST", path: "/api/v1/authorization/check/batch", body: { checks: [] }, status: 403, code: "permission_denied", fragments: ["application key"] },
  { name: "operator key writing a relationship", key: "operator", method: "POST", path: "/api/v1/authorization/relationships", body: { userId: "u", resource: "document", resourceId: "1", relation: "owner" }, status: 403, code: "permission_denied", fragments: ["application key"] },
  { name: "operator key reading relationships", key: "operator", method: "GET", path: "/api/v1/authorization/relationships?resource=document&resourceId=1", status: 403, code: "permission_denied", fragments: ["application key"] },
  { name: "operator key deleting a relationship", key: "operator", method: "DELETE", path: "/api/v1/authorization/relationships?userId=u&resource=document&resourceId=1&relation=owner", status: 403, code: "permission_denied", fragments: ["application key"] },
  { name: "operator key on bulk relationships", key: "operator", method: "POST", path: "/api/v1/authorization/relationships/bulk", body: { writes: [] }, status: 403, code: "permission_denied", fragments: ["application key"] },
];

/**
 * Allowed calls: past authentication and authorization. Each answers 2xx, or
 * (with `code`) the validation error the call itself earns once it is let in.
 * alpha's and beta's catalogs are `catalog` (set in beforeAll), so checks of
 * document:read are well-formed.
 */
const allowed: Row[] = [
  { name: "app key on its application", key: "alpha", method: "GET", path: "/api/v1/applications/alpha", status: 200 },
  { name: "app key reading its catalog", key: "alpha", method: "GET", path: "/api/v1/applications/alpha/resources", status: 200 },
  { name: "app key replacing its catalog", key: "alpha", method: "PUT", path: "/api/v1/applications/alpha/resources", body: catalog, status: 200 },
  { name: "app key listing its keys", key: "alpha", method: "GET", path: "/api/v1/applications/alpha/api-keys", status: 200 },
  { name: "app key creating a key of its application", key: "alpha", method: "POST", path: "/api/v1/applications/alpha/api-keys", body: { name: "second" }, status: 201 },
  { name: "app key reading its audit log", key: "alpha", method: "GET", path: "/api/v1/applications/alpha/audit-log", status: 200 },
  { name: "operator key on who-am-I", key: "operator", method: "GET", path: "/api/v1/api-keys/current", status: 200, expect: { keyId: "operator", kind: "operator", scopes: ["check", "read", "write"] } },
  { name: "app key on check", key: "alpha", method: "POST", path: "/api/v1/authorization/check", body: { userId: "u", resource: "document", resourceId: "1", action: "read" }, status: 200, expect: { allowed: false } },
  { name: "app key on check of a resource not in its catalog (let in, then 400)", key: "alpha", method: "POST", path: "/api/v1/authorization/check", body: { userId: "u", resource: "invoice", resourceId: "1", action: "read" }, status: 400, code: "invalid_argument" },
  { name: "app key on batch check", key: "alpha", method: "POST", path: "/api/v1/authorization/check/batch", body: { checks: [] }, status: 200, expect: { results: [] } },
  { name: "app key on relationships", key: "alpha", method: "GET", path: "/api/v1/authorization/relationships?resource=document&resourceId=1", status: 200, expect: { relationships: [], nextPageToken: "" } },
  { name: "app key on bulk relationships", key: "alpha", method: "POST", path: "/api/v1/authorization/relationships/bulk", body: { writes: [] }, status: 200, expect: { written: 0, unchanged: 0, deleted: 0 } },
  { name: "app key listing its policies", key: "beta", method: "GET", path: "/api/v1/applications/beta/policies", status: 200 },
  { name: "app key creating a policy", key: "beta", method: "POST", path: "/api/v1/applications/beta/policies", body: { name: "beta readers", permissions: ["document:read"] }, status: 201 },
  { name: "app key listing its roles", key: "beta", method: "GET", path: "/api/v1/applications/beta/roles", status: 200 },
  { name: "app key reading a user's roles", key: "beta", method: "GET", path: "/api/v1/applications/beta/users/u/roles", status: 200, expect: { roles: [], nextPageToken: "" } },
  { name: "operator key on alpha", key: "operator", method: "GET", path: "/api/v1/applications/alpha", status: 200 },
  { name: "operator key on beta", key: "operator", method: "GET", path: "/api/v1/applications/beta", status: 200 },
  { name: "operator key on beta's catalog", key: "operator", method: "GET", path: "/api/v1/applications/beta/resources", status: 200 },
  { name: "operator key replacing beta's catalog", key: "operator", method: "PUT", path: "/api/v1/applications/beta/resources", body: catalog, status: 200 },
  { name: "operator key on beta's keys", key: "operator", method: "GET", path: "/api/v1/applications/beta/api-keys", status: 200 },
  { name: "operator key creating a beta key", key: "operator", method: "POST", path: "/api/v1/applications/beta/api-keys", body: { name: "ops" }, status: 201 },
  { name: "operator key on beta's audit log", key: "operator", method: "GET", path: "/api/v1/applications/beta/audit-log", status: 200 },
  { name: "operator key listing applications", key: "operator", method: "GET", path: "/api/v1/applications", status: 200 },
  { name: "operator key on an app's policies", key: "operator", method: "GET", path: "/api/v1/applications/alpha/policies", status: 200 },
  { name: "operator key creating a policy of an app", key: "operator", method: "POST", path: "/api/v1/applications/alpha/policies", body: { name: "operator readers" }, status: 201 },
  { name: "operator key creating a role of an app", key: "operator", method: "POST", path: "/api/v1/applications/alpha/roles", body: { name: "operators" }, status: 201 },
];

describe.each(oneEngine(import.meta.url))("authentication and authorization on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  const keys: Record<KeyName, string | null> = {
    none: null,
    empty: "",
    unknown: "pcl_this-key-was-never-issued",
    operator: ADMIN_KEY,
    alpha: null,
    beta: null,
  };

  const send = (row: Pick<Row, "key" | "method" | "path" | "body" | "rawBody">) =>
    service.call(row.method, row.path, {
      key: keys[row.key],
      ...(row.body !== undefined ? { body: row.body } : {}),
      ...(row.rawBody !== undefined ? { rawBody: row.rawBody } : {}),
    });

  /** Creates a key for `appId` with the operator key; returns {keyId, key}. */
  async function newKey(appId: string, name = "temp"): Promise<{ keyId: string; key: string }> {
    const res = await service.call("POST", `/api/v1/applications/${appId}/api-keys`, { body: { name } });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    return { keyId: res.body.keyId, key: res.body.key };
  }

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    keys.alpha = await createAppWithKey(service, "alpha");
    keys.beta = await createAppWithKey(service, "beta");
    for (const appId of ["alpha", "beta"]) {
      const put = await service.call("PUT", `/api/v1/applications/${appId}/resources`, { body: catalog });
      expect(put.status, JSON.stringify(put.body)).toBe(200);
    }
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  describe("refused", () => {
    it.each(refused)("$name → $status $code", async (row) => {
      const res = await send(row);
      expectError(res, row.status, row.code!, ...(row.fragments ?? []));
    });
  });

  describe("allowed", () => {
    it.each(allowed)("$name → $status", async (row) => {
      const res = await send(row);
      if (row.code !== undefined) expectError(res, row.status, row.code);
      else expect(res.status, JSON.stringify(res.body)).toBe(row.status);
      if (row.expect !== undefined) expect(res.body).toEqual(row.expect);
    });
  });

  it("a refused catalog PUT by another application's key changes nothing", async () => {
    const before = await service.call("GET", "/api/v1/applications/beta/resources");
    const res = await service.call("PUT", "/api/v1/applications/beta/resources", {
      key: keys.alpha,
      body: { resources: [{ resource: "hijacked", description: "", actions: ["read"] }] },
    });
    expectError(res, 403, "permission_denied");
    const after = await service.call("GET", "/api/v1/applications/beta/resources");
    expect(after.body).toEqual(before.body);
  });

  it("a revoked key fails with 401 on its very next call", async () => {
    const { keyId, key } = await newKey("alpha", "short-lived");
    expect((await service.call("GET", "/api/v1/applications/alpha", { key })).status).toBe(200);

    const del = await service.call("DELETE", `/api/v1/applications/alpha/api-keys/${keyId}`);
    expect(del.status).toBe(200);

    expectError(await service.call("GET", "/api/v1/applications/alpha", { key }), 401, "unauthenticated");
    expectError(await service.call("GET", "/api/v1/applications/alpha/resources", { key }), 401, "unauthenticated");
    // The console's sign-in asks who the key is: a revoked key is nobody.
    expectError(await service.call("GET", "/api/v1/api-keys/current", { key }), 401, "unauthenticated");
    // The application's other keys still work.
    expect((await service.call("GET", "/api/v1/applications/alpha", { key: keys.alpha })).status).toBe(200);
  });

  it("a key that revokes itself fails on its very next call", async () => {
    const { keyId, key } = await newKey("alpha", "self-revoking");
    const del = await service.call("DELETE", `/api/v1/applications/alpha/api-keys/${keyId}`, { key });
    expect(del.status, JSON.stringify(del.body)).toBe(200);
    expectError(await service.call("GET", "/api/v1/applications/alpha/api-keys", { key }), 401, "unauthenticated");
  });

  it("a revoked key is refused on /api/v1/authorization/* too", async () => {
    const { keyId, key } = await newKey("alpha", "check-key");
    const body = { userId: "u", resource: "document", resourceId: "1", action: "read" };
    const before = await service.call("POST", "/api/v1/authorization/check", { key, body });
    expect(before.status, JSON.stringify(before.body)).toBe(200);
    expect(before.body).toEqual({ allowed: false });
    expect((await service.call("DELETE", `/api/v1/applications/alpha/api-keys/${keyId}`)).status).toBe(200);
    expectError(await service.call("POST", "/api/v1/authorization/check", { key, body }), 401, "unauthenticated");
  });

  it.runIf(engine === "postgres")("a key revoked on one replica fails on the very next call to another", async () => {
    const other = await startTestService(await database.openAnother());
    try {
      const { keyId, key } = await newKey("alpha", "two-replicas");
      expect((await other.call("GET", "/api/v1/applications/alpha", { key })).status).toBe(200);
      expect((await service.call("DELETE", `/api/v1/applications/alpha/api-keys/${keyId}`)).status).toBe(200);
      expectError(await other.call("GET", "/api/v1/applications/alpha", { key }), 401, "unauthenticated");
    } finally {
      await other.close();
    }
  });

  it("another application's key cannot revoke a key, which keeps working", async () => {
    const { keyId, key } = await newKey("beta", "victim");
    expectError(
      await service.call("DELETE", `/api/v1/applications/beta/api-keys/${keyId}`, { key: keys.alpha }),
      403,
      "permission_denied",
    );
    // Nor through its own path: the key is not one of alpha's.
    expectError(
      await service.call("DELETE", `/api/v1/applications/alpha/api-keys/${keyId}`, { key: keys.alpha }),
      404,
      "not_found",
    );
    expect((await service.call("GET", "/api/v1/applications/beta", { key })).status).toBe(200);
  });

  it("the operator key reaches an unknown application's routes and gets 404", async () => {
    expectError(await service.call("GET", "/api/v1/applications/nowhere"), 404, "not_found", "nowhere");
    expectError(await service.call("GET", "/api/v1/applications/nowhere/resources"), 404, "not_found", "nowhere");
  });

  it.each([
    ["/healthz", null],
    ["/readyz", null],
    ["/healthz", "pcl_garbage"],
    ["/readyz", "pcl_garbage"],
  ] as const)("GET %s needs no key (key: %s)", async (path, key) => {
    const res = await service.call("GET", path, { key });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
  });
});
