/**
 * The REST gateway's own rules, on each engine: JSON bodies (malformed, not an
 * object, unknown fields, wrong types, path fields in the body), content
 * types, body size, query parameters, unknown routes and methods, every
 * declared route answering, the error body and JSON answers, and booleans always emitted.
 */
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectErrorBody } from "./helpers/error-body.js";
import { createTestDatabase, oneEngine, POSTGRES_ADMIN_URL, type TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, createAppWithKey, startTestService, type RestAnswer, type TestService } from "./support/service.js";

const MiB = 1024 * 1024;
const BODY_LIMIT = 8 * MiB;

/** Every non-2xx answer: exactly {code, message, details, requestId}, details an array, requestId the answer's x-request-id, sent as JSON. */
function expectError(res: RestAnswer, status: number, code: string, ...fragments: string[]): void {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expect(res.headers.get("content-type")).toMatch(/^application\/json/);
  expectErrorBody(res.body, res.headers.get("x-request-id"));
  expect(res.body.code).toBe(code);
  expect(typeof res.body.message).toBe("string");
  expect(Array.isArray(res.body.details)).toBe(true);
  for (const fragment of fragments) expect(res.body.message).toContain(fragment);
}

const catalog = {
  resources: [{ resource: "document", description: "", actions: ["read", "update"], relations: [{ name: "reviewer", actions: ["read"] }] }],
};

interface BodyCase {
  name: string;
  method: string;
  path: string;
  body?: unknown;
  rawBody?: string;
  fragments: string[];
  /** A field the details must name. */
  field?: string;
}

/** Bad request bodies: each → 400 invalid_argument. */
const badBodies: BodyCase[] = [
  { name: "malformed JSON", method: "POST", path: "/api/v1/applications", rawBody: '{"appId": ', fragments: ["not valid JSON"] },
  { name: "JSON with a trailing comma", method: "POST", path: "/api/v1/applications", rawBody: '{"appId": "never-1",}', fragments: ["not valid JSON"] },
  { name: "single-quoted JSON", method: "POST", path: "/api/v1/applications", rawBody: "{'appId': 'never-2'}", fragments: ["not valid JSON"] },
  { name: "a body that is a JSON array", method: "POST", path: "/api/v1/applications", rawBody: '[{"appId": "never-3"}]', fragments: ["JSON object", "array"] },
  { name: "a body that is a JSON string", method: "POST", path: "/api/v1/applications", rawBody: '"never-4"', fragments: ["JSON object", "string"] },
  { name: "a body that is a JSON number", method: "PUT", path: "/api/v1/applications/shop/resources", rawBody: "42", fragments: ["JSON object", "number"] },
  { name: "a body that is JSON true", method: "PUT", path: "/api/v1/applications/shop/resources", rawBody: "true", fragments: ["JSON object", "boolean"] },
  { name: "a body that is JSON null", method: "POST", path: "/api/v1/applications", rawBody: "null", fragments: ["JSON object", "null"] },
  { name: "an unknown field", method: "POST", path: "/api/v1/applications", body: { appId: "never-5", colour: "red" }, fragments: ["colour", "appId"], field: "colour" },
  { name: "an unknown field on a key", method: "POST", path: "/api/v1/applications/shop/api-keys", body: { name: "k", roles: ["all"] }, fragments: ["roles"], field: "roles" },
  { name: "an unknown nested field", method: "PUT", path: "/api/v1/applications/shop/resources", body: { resources: [{ ...catalog.resources[0], colour: "red" }] }, fragments: ["resources[0].colour"], field: "resources[0].colour" },
  { name: "appId of the wrong type", method: "POST", path: "/api/v1/applications", body: { appId: 5 }, fragments: ["appId", "string", "number"], field: "appId" },
  { name: "name of the wrong type", method: "POST", path: "/api/v1/applications", body: { appId: "never-6", name: ["x"] }, fragments: ["name", "string", "array"], field: "name" },
  { name: "a key name of the wrong type", method: "POST", path: "/api/v1/applications/shop/api-keys", body: { name: true }, fragments: ["name", "string", "boolean"], field: "name" },
  { name: "resources of the wrong type", method: "PUT", path: "/api/v1/applications/shop/resources", body: { resources: {} }, fragments: ["resources", "array", "object"], field: "resources" },
  { name: "actions of the wrong type", method: "PUT", path: "/api/v1/applications/shop/resources", body: { resources: [{ resource: "document", description: "", actions: "read" }] }, fragments: ["resources[0].actions", "array", "string"], field: "resources[0].actions" },
  { name: "builtIn of the wrong type", method: "PUT", path: "/api/v1/applications/shop/resources", body: { resources: [{ resource: "document", description: "", actions: ["read"], relations: [{ name: "reviewer", actions: ["read"], builtIn: "yes" }] }] }, fragments: ["resources[0].relations[0].builtIn", "true or false"], field: "resources[0].relations[0].builtIn" },
  { name: "appId in the body of PUT .../resources (the path gives it)", method: "PUT", path: "/api/v1/applications/shop/resources", body: { appId: "shop", ...catalog }, fragments: ["appId", "path"], field: "appId" },
  { name: "app_id in the body of PUT .../resources", method: "PUT", path: "/api/v1/applications/shop/resources", body: { app_id: "shop", ...catalog }, fragments: ["app_id", "path"], field: "app_id" },
  { name: "appId in the body of POST .../api-keys", method: "POST", path: "/api/v1/applications/shop/api-keys", body: { appId: "shop", name: "k" }, fragments: ["appId", "path"], field: "appId" },
  { name: "an empty body on POST /api/v1/applications", method: "POST", path: "/api/v1/applications", rawBody: "", fragments: ["appId"] },
  { name: "a blank body on POST /api/v1/applications", method: "POST", path: "/api/v1/applications", rawBody: "  \n ", fragments: ["appId"] },
  { name: "{} on POST /api/v1/applications", method: "POST", path: "/api/v1/applications", body: {}, fragments: ["appId"] },
  { name: "an empty body on POST .../api-keys", method: "POST", path: "/api/v1/applications/shop/api-keys", rawBody: "", fragments: ["name"] },
];

describe.each(oneEngine(import.meta.url))("REST gateway rules on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let appKey: string;

  /** fetch with full control of the body and its Content-Type (undefined: no header at all). */
  async function rawFetch(method: string, path: string, body: string, contentType: string | undefined): Promise<RestAnswer> {
    const headers: Record<string, string> = { "x-api-key": ADMIN_KEY };
    if (contentType !== undefined) headers["content-type"] = contentType;
    // A Uint8Array body makes fetch send no Content-Type of its own.
    const res = await fetch(service.url + path, { method, headers, body: new TextEncoder().encode(body) });
    const text = await res.text();
    return { status: res.status, body: text === "" ? undefined : JSON.parse(text), headers: res.headers };
  }

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    appKey = await createAppWithKey(service, "shop");
    const put = await service.call("PUT", "/api/v1/applications/shop/resources", { body: catalog });
    expect(put.status).toBe(200);
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  describe("request bodies", () => {
    it.each(badBodies)("$name → 400", async ({ method, path, body, rawBody, fragments, field }) => {
      const res = await service.call(method, path, {
        ...(body !== undefined ? { body } : {}),
        ...(rawBody !== undefined ? { rawBody } : {}),
      });
      expectError(res, 400, "invalid_argument", ...fragments);
      if (field !== undefined) expect(res.body.details).toContainEqual(expect.objectContaining({ field }));
    });

    it("none of the refused bodies changed anything", async () => {
      const apps = await service.call("GET", "/api/v1/applications?pageSize=1000");
      expect((apps.body.applications as { appId: string }[]).map((a) => a.appId)).toEqual(["shop"]);
      const keys = await service.call("GET", "/api/v1/applications/shop/api-keys");
      expect(keys.body.apiKeys).toHaveLength(1);
      const read = await service.call("GET", "/api/v1/applications/shop/resources");
      expect(read.body.resources.map((r: { resource: string; actions: string[] }) => [r.resource, r.actions])).toEqual([
        ["document", ["read", "update"]],
      ]);
    });

    it("the accepted fields an unknown-field error lists do not include the path's fields", async () => {
      // Listing appId as accepted sends the caller straight into "appId is given by the path".
      const res = await service.call("PUT", "/api/v1/applications/shop/resources", { body: { colour: "red", ...catalog } });
      expectError(res, 400, "invalid_argument", "colour", "resources");
      expect(res.body.message).not.toMatch(/accepted: [^)]*appId/);
    });

    it("two unknown fields are both named in the details", async () => {
      const res = await service.call("POST", "/api/v1/applications", { body: { appId: "never-7", colour: "red", size: 3 } });
      expectError(res, 400, "invalid_argument", "colour");
      const fields = (res.body.details as { field: string }[]).map((d) => d.field);
      expect(fields).toEqual(expect.arrayContaining(["colour", "size"]));
    });

    it("PUT .../resources with no body at all → 400 naming resources, and the catalog is kept", async () => {
      // Its own application: on failure the catalog is wiped, which must not spill into other tests.
      expect((await service.call("POST", "/api/v1/applications", { body: { appId: "no-body" } })).status).toBe(201);
      expect((await service.call("PUT", "/api/v1/applications/no-body/resources", { body: catalog })).status).toBe(200);
      const before = await service.call("GET", "/api/v1/applications/no-body/resources");
      const res = await service.call("PUT", "/api/v1/applications/no-body/resources", { rawBody: "" });
      expectError(res, 400, "invalid_argument", "resources");
      expect((await service.call("GET", "/api/v1/applications/no-body/resources")).body).toEqual(before.body);
    });

    it("PUT .../resources with resources: null → 400 naming resources, and the catalog is kept", async () => {
      expect((await service.call("POST", "/api/v1/applications", { body: { appId: "null-body" } })).status).toBe(201);
      expect((await service.call("PUT", "/api/v1/applications/null-body/resources", { body: catalog })).status).toBe(200);
      const before = await service.call("GET", "/api/v1/applications/null-body/resources");
      const res = await service.call("PUT", "/api/v1/applications/null-body/resources", { body: { resources: null } });
      expectError(res, 400, "invalid_argument", "resources");
      expect((await service.call("GET", "/api/v1/applications/null-body/resources")).body).toEqual(before.body);
    });
  });

  describe("content types", () => {
    it.each([
      ["no Content-Type", undefined, "ct-none"],
      ["text/plain", "text/plain", "ct-text"],
      ["the form type curl -d sends", "application/x-www-form-urlencoded", "ct-form"],
      ["application/json with a charset", "application/json; charset=utf-8", "ct-json"],
    ])("a JSON body with %s is accepted", async (_label, contentType, appId) => {
      const res = await rawFetch("POST", "/api/v1/applications", JSON.stringify({ appId }), contentType);
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      expect(res.body.appId).toBe(appId);
    });

    it("a bad body sent as text/plain is still read as JSON and refused as such", async () => {
      const res = await rawFetch("POST", "/api/v1/applications", '{"appId": "ct-bad", "colour": 1}', "text/plain");
      expectError(res, 400, "invalid_argument", "colour");
    });

    it.each([
      ["a created application (201)", "POST", "/api/v1/applications", { appId: "json-answers" }, 201],
      ["a list (200)", "GET", "/api/v1/applications", undefined, 200],
      ["a catalog (200)", "GET", "/api/v1/applications/shop/resources", undefined, 200],
      ["the audit log (200)", "GET", "/api/v1/applications/shop/audit-log", undefined, 200],
    ])("answers are application/json: %s", async (_label, method, path, body, status) => {
      const res = await service.call(method, path, body === undefined ? {} : { body });
      expect(res.status).toBe(status);
      expect(res.headers.get("content-type")).toMatch(/^application\/json/);
      expect(typeof res.body).toBe("object");
    });
  });

  describe("body size", () => {
    it("a body over 8 MiB → 413 resource_exhausted", async () => {
      const rawBody = `{"appId": "huge", "name": "${"x".repeat(BODY_LIMIT)}"}`;
      expectError(await service.call("POST", "/api/v1/applications", { rawBody }), 413, "resource_exhausted", "8 MiB");
      expectError(await service.call("GET", "/api/v1/applications/huge"), 404, "not_found");
    });

    it("a catalog PUT over 8 MiB → 413, with an application key too", async () => {
      const rawBody = JSON.stringify({ resources: [{ resource: "x", description: "d".repeat(BODY_LIMIT), actions: ["read"] }] });
      expectError(
        await service.call("PUT", "/api/v1/applications/shop/resources", { key: appKey, rawBody }),
        413,
        "resource_exhausted",
      );
    });

    it("a body of exactly 8 MiB is read", async () => {
      const head = '{"appId": "big-ok"';
      const rawBody = `${head}${" ".repeat(BODY_LIMIT - head.length - 1)}}`;
      expect(Buffer.byteLength(rawBody)).toBe(BODY_LIMIT);
      const res = await service.call("POST", "/api/v1/applications", { rawBody });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
    });
  });

  describe("query parameters", () => {
    it.each([
      ["GET /api/v1/applications", "/api/v1/applications?colour=red", ["colour", "pageSize", "pageToken"]],
      ["GET .../api-keys", "/api/v1/applications/shop/api-keys?colour=red", ["colour", "pageSize", "pageToken"]],
      ["GET .../audit-log", "/api/v1/applications/shop/audit-log?actor=operator", ["actor", "type", "targetId", "pageSize", "pageToken"]],
      ["GET .../resources (takes none)", "/api/v1/applications/shop/resources?version=2", ["version", "none"]],
      ["GET one application (takes none)", "/api/v1/applications/shop?expand=keys", ["expand", "none"]],
      ["a path field as a query parameter", "/api/v1/applications/shop/api-keys?appId=other", ["appId"]],
    ])("an unknown query parameter on %s → 400 naming it and the accepted ones", async (_label, path, fragments) => {
      const res = await service.call("GET", path);
      expectError(res, 400, "invalid_argument", ...fragments);
      expect(res.body.details).toContainEqual(expect.objectContaining({ field: fragments[0] }));
    });

    it("a query parameter on a route with a body → 400 naming it", async () => {
      const res = await service.call("PUT", "/api/v1/applications/shop/resources?dryRun=true", { body: catalog });
      expectError(res, 400, "invalid_argument", "dryRun");
    });

    it.each([
      ["/api/v1/applications?pageSize=1&pageSize=2", "pageSize"],
      ["/api/v1/applications?pageToken=a&pageToken=b", "pageToken"],
      ["/api/v1/applications/shop/audit-log?type=a&type=b", "type"],
    ])("a repeated query parameter %s → 400 naming it", async (path, field) => {
      expectError(await service.call("GET", path), 400, "invalid_argument", field, "more than once");
    });
  });

  describe("routes", () => {
    it.each([
      ["GET", "/api/v1/nothing"],
      ["GET", "/api/v2/applications"],
      ["GET", "/api/v1/applications/shop/nothing"],
      ["GET", "/nothing"],
      ["POST", "/api/v1/authorization/nothing"],
    ])("unknown route %s %s → 404 not_found JSON", async (method, path) => {
      expectError(await service.call(method, path, method === "GET" ? {} : { body: {} }), 404, "not_found", path);
    });

    it("a path with broken percent-encoding → 400 invalid_argument in the contract's error shape", async () => {
      expectError(await service.call("GET", "/api/v1/applications/%E0%A4%A"), 400, "invalid_argument");
    });

    it("a path segment over the router's length limit still answers in the contract's error shape", async () => {
      const res = await service.call("DELETE", `/api/v1/applications/shop/api-keys/key_${"x".repeat(200)}`);
      expect([400, 404]).toContain(res.status);
      expectError(res, res.status, res.status === 404 ? "not_found" : "invalid_argument");
    });

    it("an unknown route is 404 without a key too", async () => {
      expectError(await service.call("GET", "/api/v1/nothing", { key: null }), 404, "not_found");
    });

    it.each([
      ["DELETE", "/api/v1/applications"],
      ["PUT", "/api/v1/applications"],
      ["POST", "/api/v1/applications/shop"],
      ["DELETE", "/api/v1/applications/shop"],
      ["PATCH", "/api/v1/applications/shop/resources"],
      ["POST", "/api/v1/applications/shop/resources"],
      ["PUT", "/api/v1/applications/shop/api-keys"],
      ["GET", "/api/v1/authorization/check"],
    ])("wrong method %s on a known path %s → 404 not_found JSON", async (method, path) => {
      const res = await service.call(method, path, method === "GET" || method === "DELETE" ? {} : { body: {} });
      expectError(res, 404, "not_found", method);
    });

    it.each([
      ["POST", "/api/v1/applications/shop/policies", ADMIN_KEY, { name: "readers", permissions: [] }, 201, { name: "readers", description: "", permissions: [], roleCount: 0 }],
      ["GET", "/api/v1/applications/shop/policies", ADMIN_KEY, undefined, 200, { nextPageToken: "" }],
      ["POST", "/api/v1/applications/shop/roles", ADMIN_KEY, { name: "admins" }, 201, { name: "admins", description: "", policyIds: [] }],
      ["POST", "/api/v1/authorization/check", "app", { userId: "u", resource: "document", resourceId: "1", action: "read" }, 200, { allowed: false }],
      ["POST", "/api/v1/authorization/relationships/bulk", "app", { writes: [] }, 200, { written: 0, unchanged: 0, deleted: 0 }],
    ] as const)("every declared route is built: %s %s → %i", async (method, path, key, body, status, answer) => {
      const res = await service.call(method, path, { key: key === "app" ? appKey : key, ...(body !== undefined ? { body } : {}) });
      expect(res.status, JSON.stringify(res.body)).toBe(status);
      expect(res.headers.get("content-type")).toMatch(/^application\/json/);
      expect(res.body).toMatchObject(answer);
    });

    it("a route's validation still answers 400 in the contract's shape (a policy without a name)", async () => {
      const res = await service.call("POST", "/api/v1/applications/shop/policies", { body: { permissions: [] } });
      expectError(res, 400, "invalid_argument", "name");
    });
  });

  describe("database outage", () => {
    /** Runs one statement on the Postgres server as its admin. */
    async function admin(sql: string): Promise<void> {
      const client = new pg.Client({ connectionString: POSTGRES_ADMIN_URL });
      await client.connect();
      try {
        await client.query(sql);
      } finally {
        await client.end();
      }
    }

    it.runIf(engine === "postgres")("the database going away → /readyz 503 and API calls 503 unavailable; back → 200", async () => {
      const own = await createTestDatabase("postgres");
      const replica = await startTestService(own.db);
      const name = new URL(own.url!).pathname.slice(1);
      try {
        expect((await replica.call("GET", "/readyz", { key: null })).status).toBe(200);
        await admin(`ALTER DATABASE ${name} ALLOW_CONNECTIONS false`);
        await admin(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${name}'`);
        await new Promise((resolve) => setTimeout(resolve, 200)); // let the pool notice its dead clients

        expectError(await replica.call("GET", "/readyz", { key: null }), 503, "unavailable");
        expect((await replica.call("GET", "/healthz", { key: null })).status).toBe(200);
        const res = await replica.call("GET", "/api/v1/applications");
        expectError(res, 503, "unavailable");
        expect(res.body.message).not.toMatch(/ALLOW_CONNECTIONS|pg_|SQLSTATE|accepting connections/);

        await admin(`ALTER DATABASE ${name} ALLOW_CONNECTIONS true`);
        expect((await replica.call("GET", "/readyz", { key: null })).status).toBe(200);
        expect((await replica.call("GET", "/api/v1/applications")).status).toBe(200);
      } finally {
        await admin(`ALTER DATABASE ${name} ALLOW_CONNECTIONS true`).catch(() => undefined);
        await replica.close();
        await own.dispose();
      }
    });
  });

  describe("booleans are always emitted", () => {
    it("deleted: true on a key delete", async () => {
      const created = await service.call("POST", "/api/v1/applications/shop/api-keys", { body: { name: "bool" } });
      const res = await service.call("DELETE", `/api/v1/applications/shop/api-keys/${created.body.keyId}`);
      expect(res.status).toBe(200);
      expect(res.body).toHaveProperty("deleted", true);
    });

    it("builtIn: false on a custom relation, builtIn: true on the built-ins", async () => {
      const res = await service.call("GET", "/api/v1/applications/shop/resources");
      const relations = res.body.resources[0].relations as { name: string; builtIn?: boolean }[];
      expect(relations.find((r) => r.name === "reviewer")).toHaveProperty("builtIn", false);
      expect(relations.find((r) => r.name === "owner")).toHaveProperty("builtIn", true);
    });

    it("empty lists are emitted too: a new application's catalog is {resources: []}", async () => {
      await service.call("POST", "/api/v1/applications", { body: { appId: "bare" } });
      const res = await service.call("GET", "/api/v1/applications/bare/resources");
      expect(res.body).toEqual({ resources: [] });
    });
  });
});
