/**
 * Hostile input, on a real port and on each engine: forged page tokens on
 * every list route; NUL, unpaired surrogates and percent-encodings that are
 * not UTF-8 in every kind of path id and query filter; "__proto__" and
 * friends, surrogates and NULs in every body route; bodies whose bytes are
 * not UTF-8 (fast path and Fastify); deep nesting; errors of the HTTP layer
 * itself over raw sockets; the same bad strings over gRPC, Connect and
 * gRPC-Web. Each answer is below 500, each 400 names the field, and nothing
 * changed (the state is read back after the writes were refused).
 */
import * as grpc from "@grpc/grpc-js";
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { Code } from "@connectrpc/connect";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectErrorBody } from "./helpers/error-body.js";
import { toConnectError } from "../src/transport/call/errors.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { grpcCaller, type GrpcCaller } from "./support/grpc-client.js";
import { ADMIN_KEY, createAppWithKey, startTestService, type RestAnswer, type TestService } from "./support/service.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

const CATALOG = {
  resources: [{ resource: "document", description: "a document", actions: ["read", "update", "comment"] }],
};

/** A 400 invalid_argument in the documented shape whose details name `field`, with a short message. */
function expectBad(res: RestAnswer, field: string): void {
  const said = JSON.stringify(res.body).slice(0, 600);
  expect(res.status, said).toBe(400);
  expectErrorBody(res.body, res.headers.get("x-request-id"), said);
  expect(res.body.code, said).toBe("invalid_argument");
  expect(res.body.message.length, said).toBeLessThan(600);
  const fields = (res.body.details as { field?: string }[]).map((d) => d.field);
  expect(fields, said).toContain(field);
}

const b64 = (x: string | Buffer) => Buffer.from(x).toString("base64url");
const forge = (position: unknown) => b64(JSON.stringify(position));
const GOOD_TIME = "2024-01-02T03:04:05.678Z";

/** Tokens no list of this service issued: each must be a 400 naming pageToken. */
const anyListForgeries: [string, string][] = [
  ["not base64url", "!!!!"],
  ["base64 with padding and dots", "e30=.."],
  ["text that is not JSON", b64("hello")],
  ["a JSON array", forge([1, 2])],
  ["JSON null", forge(null)],
  ["a JSON string", forge("x")],
  ["an empty object", forge({})],
  ["bytes that are not UTF-8", b64(Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d]))],
  ["a token of 5,000 characters", "A".repeat(5000)],
  ["a NUL in the token itself", "e30\u0000"],
];

const timeForgeries: [string, string][] = [
  ["a date that is no date", forge({ createdAt: "2024-13-45T00:00:00.000Z", id: "x" })],
  ["February 30th", forge({ createdAt: "2024-02-30T00:00:00.000Z", id: "x" })],
  ["25 o'clock", forge({ createdAt: "2024-01-01T25:00:00.000Z", id: "x" })],
  ["words for a date", forge({ createdAt: "yesterday", id: "x" })],
  ["year 0", forge({ createdAt: "0000-01-01T00:00:00.000Z", id: "x" })],
  ["a year past 9999", forge({ createdAt: "+275760-09-13T00:00:00.000Z", id: "x" })],
  ["a date without a zone", forge({ createdAt: "2024-01-02T03:04:05.678", id: "x" })],
  ["a NUL after the date", forge({ createdAt: `${GOOD_TIME}\u0000`, id: "x" })],
  ["a NUL in the id", forge({ createdAt: GOOD_TIME, id: "a\u0000b" })],
  ["an unpaired surrogate in the id", forge({ createdAt: GOOD_TIME, id: "a\ud800b" })],
  ["an id of 1,100 characters", forge({ createdAt: GOOD_TIME, id: "x".repeat(1100) })],
  ["a number for the id", forge({ createdAt: GOOD_TIME, id: 5 })],
  ["a number for the date", forge({ createdAt: 0, id: "x" })],
  ["an extra key", forge({ createdAt: GOOD_TIME, id: "x", more: 1 })],
  ["a missing key", forge({ createdAt: GOOD_TIME })],
  ["a __proto__ key", b64(`{"createdAt":"${GOOD_TIME}","id":"x","__proto__":{"id":"y"}}`)],
  ["a __proto__ key in place of one", b64(`{"createdAt":"${GOOD_TIME}","__proto__":"x"}`)],
];

const seqForgeries: [string, string][] = [
  ["{seq: 1.5}", forge({ seq: 1.5 })],
  ["a negative seq", forge({ seq: -1 })],
  ["a huge seq", forge({ seq: 1e300 })],
  ["a seq past 2^53", forge({ seq: 2 ** 53 })],
  ["a seq as a string", forge({ seq: "1" })],
  ["a seq as true", forge({ seq: true })],
  ["a seq and an extra key", forge({ seq: 1, more: 2 })],
];

const appIdForgeries: [string, string][] = [
  ["a NUL in the appId", forge({ appId: "a\u0000" })],
  ["an unpaired surrogate in the appId", forge({ appId: "\udfff" })],
  ["a number for the appId", forge({ appId: 7 })],
];

const instanceForgeries: [string, string][] = [
  ["a NUL in the userId", forge({ relation: "viewer", userId: "u\u0000" })],
  ["a number for the relation", forge({ relation: 1, userId: "u" })],
  ["an unpaired surrogate in the userId", forge({ relation: "viewer", userId: "\ud83d" })],
  ["a holder kind no page issues", forge({ relation: "viewer", kind: 7, a: "u", b: "", c: "" })],
  ["a holder kind that is no integer", forge({ relation: "viewer", kind: 0.5, a: "u", b: "", c: "" })],
  ["a NUL in a subject's id", forge({ relation: "viewer", kind: 1, a: "team", b: "t\u0000", c: "member" })],
];

const userForgeries: [string, string][] = [
  ["a NUL in the resourceId", forge({ resourceId: "d\u0000", relation: "viewer" })],
  ["the instance list's token", forge({ relation: "viewer", userId: "u" })],
];

const typeForgeries: [string, string][] = [
  ["a NUL in the userId", forge({ resourceId: "d1", relation: "viewer", userId: "u\u0000" })],
  ["a number for the resourceId", forge({ resourceId: 1, relation: "viewer", userId: "u" })],
  ["the user list's token", forge({ resourceId: "d1", relation: "viewer" })],
  ["a holder kind no page issues", forge({ resourceId: "d1", relation: "viewer", kind: 2, a: "u", b: "", c: "" })],
  ["an unpaired surrogate in a subject's relation", forge({ resourceId: "d1", relation: "viewer", kind: 1, a: "team", b: "t", c: "\udc00" })],
];

/** Percent-encodings that must never reach a route as text: a 400 naming the parameter. */
const badEncodings: [string, string][] = [
  ["%00", "%00"],
  ["a%00b", "a%00b"],
  ["an encoded surrogate", "%ed%a0%80"],
  ["%ff", "%ff"],
  ["%c0", "%c0"],
  ["an overlong NUL", "%c0%80"],
  ["a truncated sequence", "x%e2%82"],
  ["a malformed escape", "%zz"],
];

/** A raw HTTP/1.1 exchange: the bytes go out as given; the answer's status, headers and body. */
function rawExchange(port: number, bytes: string | Buffer): Promise<{ status: number; headers: Record<string, string>; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1");
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => socket.destroy(), 3_000);
    socket.on("data", (chunk) => chunks.push(chunk));
    socket.on("error", () => undefined);
    socket.on("close", () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString("utf8");
      const end = text.indexOf("\r\n\r\n");
      if (end < 0) return reject(new Error(`no HTTP answer: ${JSON.stringify(text.slice(0, 200))}`));
      const [statusLine, ...lines] = text.slice(0, end).split("\r\n");
      const headers: Record<string, string> = {};
      for (const line of lines) {
        const colon = line.indexOf(":");
        headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
      }
      let body = text.slice(end + 4);
      const length = headers["content-length"];
      if (length !== undefined) body = Buffer.from(body).subarray(0, Number(length)).toString("utf8");
      resolve({ status: Number(statusLine!.split(" ")[1]), headers, body });
    });
    socket.write(bytes);
    // Half-close after a moment, so a server waiting for more still answers.
    setTimeout(() => socket.end(), 300);
  });
}

/** One HTTP/1.1 request with exactly these body bytes, by Content-Length or chunked. */
function sendBytes(
  url: string,
  method: string,
  path: string,
  body: Buffer,
  headers: Record<string, string>,
  chunked = false,
): Promise<RestAnswer> {
  return new Promise((resolve, reject) => {
    const all = chunked ? headers : { ...headers, "content-length": String(body.length) };
    const req = http.request(url + path, { method, headers: all, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        resolve({ status: res.statusCode!, body: text === "" ? undefined : JSON.parse(text), headers: new Headers(res.headers as Record<string, string>) });
      });
    });
    req.on("error", reject);
    if (chunked) {
      const half = Math.floor(body.length / 2);
      req.write(body.subarray(0, half));
      req.end(body.subarray(half));
    } else req.end(body);
  });
}

/** Protobuf binary, by hand: length-delimited fields (wire type 2) only, values as given bytes. */
function pb(fields: [number, string | Buffer][]): Buffer {
  const parts: Buffer[] = [];
  for (const [number, value] of fields) {
    const bytes = typeof value === "string" ? Buffer.from(value, "utf8") : value;
    parts.push(varint((number << 3) | 2), varint(bytes.length), bytes);
  }
  return Buffer.concat(parts);
}

function varint(n: number): Buffer {
  const out: number[] = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  out.push(n);
  return Buffer.from(out);
}

describe.each(engines)("hostile input on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let appKey: string;
  let policyId: string;
  let roleId: string;
  let keyId: string;
  let grpcClient: GrpcCaller;
  let rawGrpc: grpc.Client;

  const call = (method: string, path: string, options: { key?: string | null; body?: unknown; rawBody?: string } = {}) =>
    service.call(method, path, options);
  const asApp = (method: string, path: string, options: { body?: unknown; rawBody?: string } = {}) =>
    service.call(method, path, { ...options, key: appKey });

  /** Everything a refused request could have changed. */
  async function snapshot(): Promise<Json> {
    const get = async (path: string, key: string = ADMIN_KEY) => {
      const res = await service.call("GET", path, { key });
      expect(res.status, `${path}: ${JSON.stringify(res.body)}`).toBe(200);
      return res.body;
    };
    return {
      apps: await get("/api/v1/applications?pageSize=1000"),
      keys: await get("/api/v1/applications/shop/api-keys?pageSize=1000"),
      catalog: await get("/api/v1/applications/shop/resources"),
      policies: await get("/api/v1/applications/shop/policies?pageSize=1000"),
      roles: await get("/api/v1/applications/shop/roles?pageSize=1000"),
      assignments: await get(`/api/v1/applications/shop/roles/${roleId}/assignments?pageSize=1000`),
      grants: await get("/api/v1/authorization/relationships?resource=document&resourceId=d1&pageSize=1000", appKey),
      audit: await get("/api/v1/applications/shop/audit-log?pageSize=1000"),
    };
  }
  let before: Json;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    appKey = await createAppWithKey(service, "shop");
    await createAppWithKey(service, "shop-two");
    expect((await call("PUT", "/api/v1/applications/shop/resources", { body: CATALOG })).status).toBe(200);
    for (const name of ["readers", "writers"]) {
      const res = await call("POST", "/api/v1/applications/shop/policies", { body: { name, permissions: ["document:read"] } });
      expect(res.status).toBe(201);
      policyId = res.body.policyId;
    }
    for (const name of ["reader", "writer"]) {
      const res = await call("POST", "/api/v1/applications/shop/roles", { body: { name, policyIds: [policyId] } });
      expect(res.status).toBe(201);
      roleId = res.body.roleId;
    }
    const roles = await call("GET", "/api/v1/applications/shop/roles");
    for (const role of roles.body.roles as { roleId: string }[]) {
      // alice holds both roles (so her roles list has two pages of one).
      expect((await call("POST", `/api/v1/applications/shop/roles/${role.roleId}/assignments`, { body: { userId: "alice" } })).status).toBe(201);
    }
    expect((await call("POST", `/api/v1/applications/shop/roles/${roleId}/assignments`, { body: { userId: "bob" } })).status).toBe(201);
    for (const [userId, resourceId] of [["alice", "d1"], ["bob", "d1"], ["alice", "d2"]]) {
      const grant = { userId, resource: "document", resourceId, relation: "viewer" };
      expect((await asApp("POST", "/api/v1/authorization/relationships", { body: grant })).status).toBe(201);
    }
    const keys = await call("POST", "/api/v1/applications/shop/api-keys", { body: { name: "second" } });
    keyId = keys.body.keyId;
    grpcClient = grpcCaller(service.url);
    rawGrpc = new grpc.Client(new URL(service.url).host, grpc.credentials.createInsecure());
    before = await snapshot();
  });
  afterAll(async () => {
    grpcClient?.close();
    rawGrpc?.close();
    await service?.close();
    await database?.dispose();
  });

  describe("forged page tokens, on every list route", () => {
    const lists: { name: string; path: () => string; key: () => string; forgeries: [string, string][] }[] = [
      { name: "applications", path: () => "/api/v1/applications?pageSize=1", key: () => ADMIN_KEY, forgeries: appIdForgeries },
      { name: "api keys", path: () => "/api/v1/applications/shop/api-keys?pageSize=1", key: () => ADMIN_KEY, forgeries: timeForgeries },
      { name: "policies", path: () => "/api/v1/applications/shop/policies?pageSize=1", key: () => ADMIN_KEY, forgeries: timeForgeries },
      { name: "roles", path: () => "/api/v1/applications/shop/roles?pageSize=1", key: () => ADMIN_KEY, forgeries: timeForgeries },
      { name: "a policy's roles", path: () => `/api/v1/applications/shop/policies/${policyId}/roles?pageSize=1`, key: () => ADMIN_KEY, forgeries: timeForgeries },
      { name: "role assignments", path: () => `/api/v1/applications/shop/roles/${roleId}/assignments?pageSize=1`, key: () => ADMIN_KEY, forgeries: timeForgeries },
      { name: "a user's roles", path: () => "/api/v1/applications/shop/users/alice/roles?pageSize=1", key: () => ADMIN_KEY, forgeries: timeForgeries },
      { name: "audit log", path: () => "/api/v1/applications/shop/audit-log?pageSize=1", key: () => ADMIN_KEY, forgeries: seqForgeries },
      { name: "grants of an instance", path: () => "/api/v1/authorization/relationships?resource=document&resourceId=d1&pageSize=1", key: () => appKey, forgeries: instanceForgeries },
      { name: "grants of a user", path: () => "/api/v1/authorization/relationships?userId=alice&resource=document&pageSize=1", key: () => appKey, forgeries: userForgeries },
      { name: "grants of a type", path: () => "/api/v1/authorization/relationships?resource=document&pageSize=1", key: () => appKey, forgeries: typeForgeries },
    ];

    it.each(lists)("$name: the tokens it issues work", async ({ path, key }) => {
      const first = await call("GET", path(), { key: key() });
      expect(first.status, JSON.stringify(first.body)).toBe(200);
      expect(first.body.nextPageToken).not.toBe("");
      const second = await call("GET", `${path()}&pageToken=${encodeURIComponent(first.body.nextPageToken)}`, { key: key() });
      expect(second.status, JSON.stringify(second.body)).toBe(200);
    });

    for (const list of lists) {
      it.each([...anyListForgeries, ...list.forgeries])(`${list.name}: %s → 400 naming pageToken`, async (_name, token) => {
        const res = await call("GET", `${list.path()}&pageToken=${encodeURIComponent(token)}`, { key: list.key() });
        expectBad(res, "pageToken");
      });
    }
  });

  describe("NUL, surrogates and bad percent-encodings in path ids", () => {
    const routes: { name: string; method: string; path: (id: string) => string; field: string; body?: unknown }[] = [
      { name: "GET an application", method: "GET", path: (id) => `/api/v1/applications/${id}`, field: "appId" },
      { name: "GET a catalog", method: "GET", path: (id) => `/api/v1/applications/${id}/resources`, field: "appId" },
      { name: "PUT a catalog", method: "PUT", path: (id) => `/api/v1/applications/${id}/resources`, field: "appId", body: CATALOG },
      { name: "GET the audit log", method: "GET", path: (id) => `/api/v1/applications/${id}/audit-log`, field: "appId" },
      { name: "GET a policy", method: "GET", path: (id) => `/api/v1/applications/shop/policies/${id}`, field: "policyId" },
      { name: "GET a policy's roles", method: "GET", path: (id) => `/api/v1/applications/shop/policies/${id}/roles`, field: "policyId" },
      { name: "PATCH a policy", method: "PATCH", path: (id) => `/api/v1/applications/shop/policies/${id}`, field: "policyId", body: { description: "x" } },
      { name: "DELETE a policy", method: "DELETE", path: (id) => `/api/v1/applications/shop/policies/${id}?force=true`, field: "policyId" },
      { name: "GET a role", method: "GET", path: (id) => `/api/v1/applications/shop/roles/${id}`, field: "roleId" },
      { name: "PATCH a role", method: "PATCH", path: (id) => `/api/v1/applications/shop/roles/${id}`, field: "roleId", body: { description: "x" } },
      { name: "DELETE a role", method: "DELETE", path: (id) => `/api/v1/applications/shop/roles/${id}`, field: "roleId" },
      { name: "assign a role", method: "POST", path: (id) => `/api/v1/applications/shop/roles/${id}/assignments`, field: "roleId", body: { userId: "carol" } },
      { name: "list a role's assignments", method: "GET", path: (id) => `/api/v1/applications/shop/roles/${id}/assignments`, field: "roleId" },
      { name: "unassign a user", method: "DELETE", path: (id) => `/api/v1/applications/shop/roles/${roleId}/assignments/${id}`, field: "userId" },
      { name: "a user's roles", method: "GET", path: (id) => `/api/v1/applications/shop/users/${id}/roles`, field: "userId" },
      { name: "DELETE a key", method: "DELETE", path: (id) => `/api/v1/applications/shop/api-keys/${id}`, field: "keyId" },
    ];
    for (const route of routes) {
      it.each(badEncodings)(`${route.name} with %s → 400 naming ${route.field}`, async (_name, encoded) => {
        const res = await call(route.method, route.path(encoded), route.body === undefined ? {} : { body: route.body });
        expectBad(res, route.field);
      });
    }
  });

  describe("NUL, surrogates and bad percent-encodings in query filters", () => {
    const filters: { name: string; path: (value: string) => string; field: string; app?: boolean }[] = [
      { name: "policies by tenant", path: (x) => `/api/v1/applications/shop/policies?tenantId=${x}`, field: "tenantId" },
      { name: "roles by tenant", path: (x) => `/api/v1/applications/shop/roles?tenantId=${x}`, field: "tenantId" },
      { name: "audit log by type", path: (x) => `/api/v1/applications/shop/audit-log?type=${x}`, field: "type" },
      { name: "audit log by target", path: (x) => `/api/v1/applications/shop/audit-log?targetId=${x}`, field: "targetId" },
      { name: "a page size", path: (x) => `/api/v1/applications/shop/roles?pageSize=${x}`, field: "pageSize" },
      { name: "force", path: (x) => `/api/v1/applications/shop/policies/${policyId}?force=${x}`, field: "force" },
      { name: "grants by instance", path: (x) => `/api/v1/authorization/relationships?resource=document&resourceId=${x}`, field: "resourceId", app: true },
      { name: "grants by user", path: (x) => `/api/v1/authorization/relationships?userId=${x}&resource=document`, field: "userId", app: true },
      { name: "grants by resource", path: (x) => `/api/v1/authorization/relationships?userId=alice&resource=${x}`, field: "resource", app: true },
      { name: "grants by relation", path: (x) => `/api/v1/authorization/relationships?resource=document&resourceId=d1&relation=${x}`, field: "relation", app: true },
      { name: "a grant's delete", path: (x) => `/api/v1/authorization/relationships?userId=${x}&resource=document&resourceId=d1&relation=viewer`, field: "userId", app: true },
    ];
    for (const filter of filters) {
      const method = filter.name === "force" || filter.name === "a grant's delete" ? "DELETE" : "GET";
      it.each(badEncodings)(`${filter.name} with %s → 400 naming ${filter.field}`, async (_name, encoded) => {
        const res = await call(method, filter.path(encoded), { key: filter.app ? appKey : ADMIN_KEY });
        expectBad(res, filter.field);
      });
    }

    it("a query parameter name that is not UTF-8 is a 400 naming it", async () => {
      const res = await call("GET", "/api/v1/applications/shop/roles?ty%ffpe=x");
      expectBad(res, "ty%ffpe");
    });

    it("a NUL in a query parameter's name is an unknown parameter", async () => {
      const res = await call("GET", "/api/v1/applications/shop/roles?a%00=x");
      expectBad(res, "a\u0000");
    });

    it("a __proto__ query parameter is an unknown parameter", async () => {
      const res = await call("GET", "/api/v1/applications/shop/roles?__proto__=x&__proto__[tenantId]=y");
      expectBad(res, "__proto__");
    });
  });

  describe("bodies: surrogates, NULs and prototype keys on every body route", () => {
    const bodyRoutes: { name: string; method: string; path: () => string; app?: boolean; body: Record<string, unknown>; poison: (body: Json, bad: string) => void; field: string }[] = [
      { name: "create an application", method: "POST", path: () => "/api/v1/applications", body: { appId: "never-1", name: "n" }, poison: (b, x) => (b.name = x), field: "name" },
      { name: "create a key", method: "POST", path: () => "/api/v1/applications/shop/api-keys", body: { name: "k" }, poison: (b, x) => (b.name = x), field: "name" },
      {
        name: "replace the catalog", method: "PUT", path: () => "/api/v1/applications/shop/resources",
        body: { resources: [{ resource: "document", description: "d", actions: ["read", "update", "comment"] }] },
        poison: (b, x) => (b.resources[0].description = x), field: "resources[0].description",
      },
      { name: "create a policy", method: "POST", path: () => "/api/v1/applications/shop/policies", body: { name: "p-new", permissions: ["document:read"] }, poison: (b, x) => (b.permissions = ["document:read", x]), field: "permissions[1]" },
      { name: "update a policy", method: "PATCH", path: () => `/api/v1/applications/shop/policies/${policyId}`, body: { description: "new" }, poison: (b, x) => (b.description = x), field: "description" },
      { name: "create a role", method: "POST", path: () => "/api/v1/applications/shop/roles", body: { name: "r-new" }, poison: (b, x) => (b.tenantId = x), field: "tenantId" },
      { name: "update a role", method: "PATCH", path: () => `/api/v1/applications/shop/roles/${roleId}`, body: { name: "renamed" }, poison: (b, x) => (b.name = x), field: "name" },
      { name: "assign a role", method: "POST", path: () => `/api/v1/applications/shop/roles/${roleId}/assignments`, body: { userId: "carol" }, poison: (b, x) => (b.userId = x), field: "userId" },
      {
        name: "write a grant", method: "POST", path: () => "/api/v1/authorization/relationships", app: true,
        body: { userId: "carol", resource: "document", resourceId: "d1", relation: "viewer" }, poison: (b, x) => (b.resourceId = x), field: "resourceId",
      },
      {
        name: "bulk-write grants", method: "POST", path: () => "/api/v1/authorization/relationships/bulk", app: true,
        body: { writes: [{ userId: "carol", resource: "document", resourceId: "d1", relation: "viewer" }, { userId: "dave", resource: "document", resourceId: "d1", relation: "viewer" }] },
        poison: (b, x) => (b.writes[1].userId = x), field: "writes[1].userId",
      },
      {
        name: "check", method: "POST", path: () => "/api/v1/authorization/check", app: true,
        body: { userId: "alice", resource: "document", resourceId: "d1", action: "read" }, poison: (b, x) => (b.userId = x), field: "userId",
      },
      {
        name: "batch check", method: "POST", path: () => "/api/v1/authorization/check/batch", app: true,
        body: { checks: [{ userId: "alice", resource: "document", resourceId: "d1", action: "read" }, { userId: "bob", resource: "document", resourceId: "d1", action: "read" }] },
        poison: (b, x) => (b.checks[1].resourceId = x), field: "checks[1].resourceId",
      },
      {
        name: "explain", method: "POST", path: () => "/api/v1/authorization/check/explain", app: true,
        body: { userId: "alice", resource: "document", resourceId: "d1", action: "read" }, poison: (b, x) => (b.resourceId = x), field: "resourceId",
      },
      {
        name: "permissions", method: "POST", path: () => "/api/v1/authorization/permissions", app: true,
        body: { userId: "alice", resource: "document", resourceId: "d1" }, poison: (b, x) => (b.tenantId = x), field: "tenantId",
      },
      {
        name: "batch permissions", method: "POST", path: () => "/api/v1/authorization/permissions/batch", app: true,
        body: { requests: [{ userId: "alice", resource: "document", resourceId: "d1" }, { userId: "bob", resource: "document", resourceId: "d1" }] },
        poison: (b, x) => (b.requests[1].userId = x), field: "requests[1].userId",
      },
      {
        name: "lookup", method: "POST", path: () => "/api/v1/authorization/lookup", app: true,
        body: { userId: "alice", resource: "document", action: "read" }, poison: (b, x) => (b.userId = x), field: "userId",
      },
      {
        name: "lookup's page token", method: "POST", path: () => "/api/v1/authorization/lookup", app: true,
        body: { userId: "alice", resource: "document", action: "read" },
        poison: (b, x) => (b.pageToken = Buffer.from(JSON.stringify({ resourceId: x })).toString("base64url")), field: "pageToken",
      },
      {
        name: "who can", method: "POST", path: () => "/api/v1/authorization/subjects", app: true,
        body: { resource: "document", resourceId: "d1", action: "read" }, poison: (b, x) => (b.resourceId = x), field: "resourceId",
      },
      {
        name: "who can's page token", method: "POST", path: () => "/api/v1/authorization/subjects", app: true,
        body: { resource: "document", resourceId: "d1", action: "read" },
        poison: (b, x) => (b.pageToken = Buffer.from(JSON.stringify({ userId: x })).toString("base64url")), field: "pageToken",
      },
      {
        name: "write a grant to a subject", method: "POST", path: () => "/api/v1/authorization/relationships", app: true,
        body: { subject: { resource: "document", resourceId: "d9" }, resource: "document", resourceId: "d1", relation: "viewer" },
        poison: (b, x) => (b.subject.resourceId = x), field: "subject.resourceId",
      },
      {
        name: "bulk-write a grant to a subject", method: "POST", path: () => "/api/v1/authorization/relationships/bulk", app: true,
        body: { writes: [{ subject: { resource: "document", resourceId: "d9", relation: "viewer" }, resource: "document", resourceId: "d1", relation: "viewer" }] },
        poison: (b, x) => (b.writes[0].subject.relation = x), field: "writes[0].subject.relation",
      },
      {
        name: "delete grants by subject", method: "POST", path: () => "/api/v1/authorization/relationships/delete", app: true,
        body: { subject: { resource: "document", resourceId: "d9" } }, poison: (b, x) => (b.subject.resourceId = x), field: "subject.resourceId",
      },
      {
        name: "write an expiring grant", method: "POST", path: () => "/api/v1/authorization/relationships", app: true,
        body: { userId: "carol", resource: "document", resourceId: "d1", relation: "viewer", expiresAt: "2099-01-01T00:00:00Z" }, poison: (b, x) => (b.expiresAt = `2099-01-01T00:00:00Z${x}`), field: "expiresAt",
      },
      {
        name: "bulk-write expiring grants", method: "POST", path: () => "/api/v1/authorization/relationships/bulk", app: true,
        body: { writes: [{ userId: "carol", resource: "document", resourceId: "d1", relation: "viewer", expiresAt: "2099-01-01T00:00:00Z" }] },
        poison: (b, x) => (b.writes[0].expiresAt = x), field: "writes[0].expiresAt",
      },
      {
        name: "delete grants by filter", method: "POST", path: () => "/api/v1/authorization/relationships/delete", app: true,
        body: { userId: "nobody-here" }, poison: (b, x) => (b.userId = x), field: "userId",
      },
      {
        name: "preview a policy update", method: "POST", path: () => `/api/v1/applications/shop/policies/${policyId}/preview`,
        body: { permissions: ["document:read"] }, poison: (b, x) => (b.permissions = ["document:read", x]), field: "permissions[1]",
      },
      {
        name: "create a key with scopes", method: "POST", path: () => "/api/v1/applications/shop/api-keys", body: { name: "k", scopes: ["check"] },
        poison: (b, x) => (b.scopes = ["check", x]), field: "scopes[1]",
      },
    ];
    const badStrings: [string, string][] = [
      ["an unpaired high surrogate", "x\ud800y"],
      ["an unpaired low surrogate", "\udc00"],
      ["a surrogate pair reversed", "\udc00\ud800"],
      ["a NUL", "a\u0000b"],
    ];

    for (const route of bodyRoutes) {
      const send = (rawBody: string) => call(route.method, route.path(), { rawBody, key: route.app ? appKey : ADMIN_KEY });

      it.each(badStrings)(`${route.name} with %s in ${route.field} → 400 naming it`, async (_name, bad) => {
        const body = structuredClone(route.body);
        route.poison(body, bad);
        expectBad(await send(JSON.stringify(body)), route.field);
      });

      it.each(["__proto__", "constructor", "prototype", "toString", "hasOwnProperty"])(
        `${route.name} with a "%s" key → 400 naming it as an unknown field`,
        async (key) => {
          const rest = JSON.stringify(route.body).slice(1);
          expectBad(await send(`{"${key}": ${JSON.stringify(route.body)}, ${rest}`), key);
        },
      );
    }

    it.each(bodyRoutes.filter((r) => r.body.writes !== undefined || r.body.checks !== undefined || r.body.resources !== undefined || r.body.requests !== undefined))(
      "$name with a __proto__ key inside a list element → 400 naming it",
      async (route) => {
        const list = Object.keys(route.body)[0]!;
        const items = route.body[list] as object[];
        const first = JSON.stringify(items[0]).slice(1);
        const raw = `{"${list}": [{"__proto__": {"x": 1}, ${first}]}`;
        const res = await call(route.method, route.path(), { rawBody: raw, key: route.app ? appKey : ADMIN_KEY });
        expectBad(res, `${list}[0].__proto__`);
      },
    );

    it("PUT .../resources {\"__proto__\": {\"resources\": []}} is a 400 and the catalog is untouched", async () => {
      const res = await call("PUT", "/api/v1/applications/shop/resources", { rawBody: '{"__proto__": {"resources": []}}' });
      expectBad(res, "__proto__");
      expectBad(res, "resources"); // required, and not given by a prototype
      const read = await call("GET", "/api/v1/applications/shop/resources");
      expect(read.body).toEqual(before.catalog);
    });

    it("a __proto__ that would fill a required field does not", async () => {
      const res = await call("POST", "/api/v1/applications/shop/roles", { rawBody: '{"__proto__": {"name": "sneaky"}}' });
      expectBad(res, "__proto__");
      const roles = await call("GET", "/api/v1/applications/shop/roles?pageSize=1000");
      expect(roles.body.roles.map((r: Json) => r.name)).not.toContain("sneaky");
    });
  });

  describe("bodies whose bytes are not UTF-8", () => {
    const check = (userId: Buffer) =>
      Buffer.concat([Buffer.from('{"userId":"'), userId, Buffer.from('","resource":"document","resourceId":"d1","action":"read"}')]);
    const grant = (userId: Buffer) =>
      Buffer.concat([Buffer.from('{"userId":"'), userId, Buffer.from('","resource":"document","resourceId":"d-utf8","relation":"viewer"}')]);
    const badBytes: [string, Buffer][] = [
      ["\\xff", Buffer.from([0x75, 0xff])],
      ["\\xc0", Buffer.from([0x75, 0xc0])],
      ["an overlong NUL", Buffer.from([0x75, 0xc0, 0x80])],
      ["an encoded surrogate", Buffer.from([0x75, 0xed, 0xa0, 0x80])],
      ["a truncated sequence", Buffer.from([0x75, 0xe2, 0x82])],
    ];
    const headers = () => ({ "x-api-key": appKey, "content-type": "application/json" });

    it.each(badBytes)("the check on the fast path (Content-Length) with %s → 400", async (_name, bytes) => {
      const res = await sendBytes(service.url, "POST", "/api/v1/authorization/check", check(bytes), headers());
      expect(res.status, JSON.stringify(res.body)).toBe(400);
      expect(res.body.message).toBe("request body is not valid UTF-8");
    });

    it.each(badBytes)("the check through Fastify (chunked) with %s → 400", async (_name, bytes) => {
      const res = await sendBytes(service.url, "POST", "/api/v1/authorization/check", check(bytes), headers(), true);
      expect(res.status, JSON.stringify(res.body)).toBe(400);
      expect(res.body.message).toBe("request body is not valid UTF-8");
    });

    it("two different ill-formed user ids do not become one stored grant: both are refused", async () => {
      for (const bytes of [Buffer.from([0x75, 0xff]), Buffer.from([0x75, 0xc0])]) {
        for (const chunked of [false, true]) {
          const res = await sendBytes(service.url, "POST", "/api/v1/authorization/relationships", grant(bytes), headers(), chunked);
          expect(res.status, JSON.stringify(res.body)).toBe(400);
          expect(res.body.message).toBe("request body is not valid UTF-8");
        }
      }
      const listed = await asApp("GET", "/api/v1/authorization/relationships?resource=document&resourceId=d-utf8");
      expect(listed.status).toBe(200);
      expect(listed.body.relationships).toEqual([]);
    });

    it("well-formed UTF-8 beyond ASCII is taken as it is", async () => {
      const res = await sendBytes(service.url, "POST", "/api/v1/authorization/check", check(Buffer.from("ünïcødé 🦀")), headers());
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body).toEqual({ allowed: false });
    });
  });

  describe("deep nesting", () => {
    const nested = (depth: number, inner = "") => `${"[".repeat(depth)}${inner}${"]".repeat(depth)}`;

    it.each([65, 3_000, 10_000, 100_000])("updateMask nested %i deep → 400 with a short message", async (depth) => {
      const res = await call("PATCH", `/api/v1/applications/shop/policies/${policyId}`, { rawBody: `{"updateMask": ${nested(depth)}}` });
      expect(res.status, JSON.stringify(res.body).slice(0, 300)).toBe(400);
      expect(res.body.code).toBe("invalid_argument");
      expect(res.body.message.length).toBeLessThan(200);
    });

    it("64 levels are still read (and refused for what they are)", async () => {
      const res = await call("PATCH", `/api/v1/applications/shop/policies/${policyId}`, { rawBody: `{"updateMask": ${nested(63)}}` });
      expectBad(res, "updateMask");
      expect(res.body.message.length).toBeLessThan(300);
    });

    it("a deep value in the check's field, on the fast path → 400", async () => {
      const res = await asApp("POST", "/api/v1/authorization/check", { rawBody: `{"userId": ${nested(10_000, '"x"')}, "resource": "document", "resourceId": "d1", "action": "read"}` });
      expect(res.status).toBe(400);
      expect(res.body.message).toContain("nested deeper than 64");
    });

    it("deep objects under an unknown key → 400", async () => {
      const deep = `${'{"a":'.repeat(5_000)}1${"}".repeat(5_000)}`;
      const res = await call("POST", "/api/v1/applications", { rawBody: `{"appId": "never-deep", "x": ${deep}}` });
      expect(res.status).toBe(400);
    });

    it("a wrong type is named without echoing the whole value", async () => {
      const res = await call("PATCH", `/api/v1/applications/shop/policies/${policyId}`, { body: { updateMask: "x".repeat(100_000) } });
      expectBad(res, "updateMask[0]");
      expect(res.body.message.length).toBeLessThan(300);
    });

    it("an unknown key of 100,000 characters is named cut short", async () => {
      const res = await call("POST", "/api/v1/applications", { rawBody: `{"appId": "never-long", "${"k".repeat(100_000)}": 1}` });
      expect(res.status).toBe(400);
      expect(JSON.stringify(res.body).length).toBeLessThan(1_000);
    });
  });

  describe("errors of the HTTP layer itself, over a raw socket", () => {
    const cases: { name: string; bytes: string; status: number }[] = [
      { name: "a method token HTTP does not know", bytes: "FOO / HTTP/1.1\r\nHost: x\r\n\r\n", status: 400 },
      { name: "a method the service does not route", bytes: "PROPFIND /api/v1/applications HTTP/1.1\r\nHost: x\r\n\r\n", status: 404 },
      { name: "TRACE", bytes: "TRACE /api/v1/applications HTTP/1.1\r\nHost: x\r\n\r\n", status: 404 },
      { name: "a bad chunk size", bytes: "POST /api/v1/applications HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", status: 400 },
      { name: "a missing Host", bytes: "GET /healthz HTTP/1.1\r\n\r\n", status: 400 },
      { name: "a missing Host on an API route", bytes: "GET /api/v1/applications HTTP/1.1\r\nX-Api-Key: x\r\n\r\n", status: 400 },
      { name: "an Expect that is not 100-continue", bytes: "POST /api/v1/applications HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n{}", status: 417 },
      { name: "a header over the limit", bytes: `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`, status: 431 },
      { name: "a Content-Length that is no number", bytes: "POST /api/v1/applications HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}", status: 400 },
      { name: "both Content-Length and chunked", bytes: "POST /api/v1/applications HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 400 },
      { name: "an HTTP version that does not exist", bytes: "GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n", status: 400 },
      { name: "bytes that are not HTTP", bytes: "\u0001\u0002\u0003 hello\r\n\r\n", status: 400 },
      { name: "a path that is not UTF-8", bytes: "GET /api/v1/applications/%ff HTTP/1.1\r\nHost: x\r\n\r\n", status: 400 },
      { name: "CONNECT (a proxy tunnel)", bytes: "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", status: 405 },
      { name: "a NUL in the request target", bytes: "GET /api/v1/\u0000 HTTP/1.1\r\nHost: x\r\n\r\n", status: 400 },
      { name: "a request target without a slash", bytes: "GET healthz HTTP/1.1\r\nHost: x\r\n\r\n", status: 400 },
      { name: "a space in a header name", bytes: "GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n", status: 400 },
      { name: "a folded header line", bytes: "GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", status: 400 },
      { name: "a transfer coding other than chunked", bytes: "POST /api/v1/applications HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n{}", status: 400 },
      { name: "a request target over the header limit", bytes: `GET /api/v1/applications/${"a".repeat(70_000)} HTTP/1.1\r\nHost: x\r\n\r\n`, status: 431 },
      { name: "a Content-Type no parser takes, on a Connect route", bytes: "POST /authz.v1.ApplicationService/GetApplication HTTP/1.1\r\nHost: x\r\nContent-Type: application/xml\r\nContent-Length: 2\r\n\r\n{}", status: 415 },
    ];

    it.each(cases)("$name → $status with the documented body", async ({ bytes, status }) => {
      const res = await rawExchange(service.port, bytes);
      expect(res.status, res.body).toBe(status);
      expect(res.headers["content-type"]).toMatch(/^application\/json/);
      const body = JSON.parse(res.body);
      expectErrorBody(body, res.headers["x-request-id"]);
      expect(typeof body.message).toBe("string");
    });

    const connectCases: { name: string; bytes: string; status: number }[] = [
      { name: "GET on a method that takes only POST", bytes: "GET /authz.v1.ApplicationService/GetApplication?message=%7B%7D&encoding=json HTTP/1.1\r\nHost: x\r\n\r\n", status: 405 },
      {
        name: "a compression the server does not know",
        bytes: "POST /authz.v1.ApplicationService/GetApplication HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Encoding: zstd\r\nContent-Length: 2\r\n\r\n{}",
        status: 400,
      },
      {
        name: "a bidirectional stream over HTTP/1.1",
        bytes: "POST /grpc.reflection.v1.ServerReflection/ServerReflectionInfo HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+json\r\nContent-Length: 0\r\n\r\n",
        status: 400,
      },
    ];

    it.each(connectCases)("Connect: $name → $status with an error body", async ({ bytes, status }) => {
      const res = await rawExchange(service.port, bytes);
      expect(res.status, res.body).toBe(status);
      const body = JSON.parse(res.body);
      expect(typeof body.code).toBe("string");
      expect(typeof body.message).toBe("string");
    });

    it("the service still answers after all of them", async () => {
      expect((await call("GET", "/healthz", { key: null })).status).toBe(200);
    });
  });

  describe("the same over gRPC, Connect and gRPC-Web", () => {
    const grpcCode = async (promise: Promise<unknown>) => {
      try {
        await promise;
        return { code: grpc.status.OK, details: "" };
      } catch (error) {
        const e = error as grpc.ServiceError;
        return { code: e.code, details: e.details };
      }
    };
    /** A unary gRPC call whose request is exactly these protobuf bytes. */
    const rawUnary = (path: string, request: Buffer, key: string) =>
      new Promise<{ code: number; details: string }>((resolve) => {
        const metadata = new grpc.Metadata();
        metadata.set("x-api-key", key);
        rawGrpc.makeUnaryRequest(path, (x: Buffer) => x, (x: Buffer) => x, request, metadata, (error) =>
          resolve(error ? { code: error.code, details: error.details } : { code: grpc.status.OK, details: "" }),
        );
      });

    it("gRPC: a NUL in a path id → INVALID_ARGUMENT naming appId, not INTERNAL", async () => {
      const res = await grpcCode(grpcClient.call("ApplicationService", "GetApplication", { appId: "shop\u0000" }, ADMIN_KEY));
      expect(res.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(res.details).toContain("appId");
    });

    it("gRPC: a NUL in a filter → INVALID_ARGUMENT naming type", async () => {
      const res = await grpcCode(grpcClient.call("AuditService", "ListAuditEvents", { appId: "shop", type: "\u0000" }, ADMIN_KEY));
      expect(res.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(res.details).toContain("type");
    });

    it("gRPC: a forged page token → INVALID_ARGUMENT naming pageToken", async () => {
      const res = await grpcCode(grpcClient.call("AuditService", "ListAuditEvents", { appId: "shop", pageToken: forge({ seq: 1.5 }) }, ADMIN_KEY));
      expect(res.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(res.details).toContain("pageToken");
    });

    it("gRPC: a NUL in the second check of a batch → INVALID_ARGUMENT naming checks[1].resourceId", async () => {
      const checks = [
        { userId: "alice", resource: "document", resourceId: "d1", action: "read" },
        { userId: "alice", resource: "document", resourceId: "d\u0000", action: "read" },
      ];
      const res = await grpcCode(grpcClient.call("CheckService", "BatchCheck", { checks }, appKey));
      expect(res.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(res.details).toContain("checks[1].resourceId");
    });

    it.each([
      ["\\xff", Buffer.from([0x75, 0xff])],
      ["\\xc0", Buffer.from([0x75, 0xc0])],
      ["an encoded surrogate", Buffer.from([0x75, 0xed, 0xa0, 0x80])],
    ])("gRPC: a user id with %s → INVALID_ARGUMENT naming userId, and no grant is stored", async (_name, bytes) => {
      const request = pb([[1, bytes], [2, "document"], [3, "d-utf8"], [4, "viewer"]]);
      const res = await rawUnary("/authz.v1.RelationshipService/WriteRelationship", request, appKey);
      expect(res.code, res.details).toBe(grpc.status.INVALID_ARGUMENT);
      expect(res.details).toContain("userId");
      const listed = await asApp("GET", "/api/v1/authorization/relationships?resource=document&resourceId=d-utf8");
      expect(listed.body.relationships).toEqual([]);
    });

    it("gRPC: an application key naming an appId that is not UTF-8 → PERMISSION_DENIED, its message still encodable", async () => {
      // The 403 quotes the appId before the guard has checked it.
      const res = await rawUnary("/authz.v1.ApplicationService/GetApplication", pb([[1, Buffer.from([0x73, 0xff])]]), appKey);
      expect(res.code, res.details).toBe(grpc.status.PERMISSION_DENIED);
      expect(res.details).toContain("cannot act on application");
    });

    it("gRPC-Web: the same → grpc-status 7", async () => {
      const message = pb([[1, Buffer.from([0x73, 0xff])]]);
      const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, message.length]), message]);
      const res = await fetch(`${service.url}/authz.v1.ApplicationService/GetApplication`, {
        method: "POST",
        headers: { "content-type": "application/grpc-web+proto", "x-api-key": appKey },
        body: new Uint8Array(frame),
      });
      const all = Buffer.from(await res.arrayBuffer()).toString("latin1");
      expect(res.headers.get("grpc-status") ?? /grpc-status:\s*(\d+)/.exec(all)?.[1]).toBe("7");
    });

    it("gRPC: the same request with a well-formed id is written (the bytes above were the only fault)", async () => {
      const request = pb([[1, "u\u00ff"], [2, "document"], [3, "d-utf8-ok"], [4, "viewer"]]);
      const res = await rawUnary("/authz.v1.RelationshipService/WriteRelationship", request, appKey);
      expect(res.code, res.details).toBe(grpc.status.OK);
      const listed = await asApp("GET", "/api/v1/authorization/relationships?resource=document&resourceId=d-utf8-ok");
      expect(listed.body.relationships.map((r: Json) => r.userId)).toEqual(["u\u00ff"]);
      expect((await asApp("DELETE", "/api/v1/authorization/relationships?userId=u%C3%BF&resource=document&resourceId=d-utf8-ok&relation=viewer")).status).toBe(200);
    });

    const connectPost = (procedure: string, body: Buffer | string, contentType: string, key = ADMIN_KEY) =>
      fetch(`${service.url}/${procedure}`, {
        method: "POST",
        headers: { "content-type": contentType, "connect-protocol-version": "1", "x-api-key": key },
        body: typeof body === "string" ? body : new Uint8Array(body),
      });

    // protobuf-es itself refuses an unpaired surrogate in JSON, naming the proto field (app_id).
    it.each([
      ["a NUL", '{"appId": "shop\\u0000"}'],
      ["an unpaired surrogate", '{"appId": "shop\\ud800"}'],
    ])("Connect JSON: %s → invalid_argument naming the field", async (_name, body) => {
      const res = await connectPost("authz.v1.ApplicationService/GetApplication", body, "application/json");
      expect(res.status).toBe(400);
      const answer = (await res.json()) as Json;
      expect(answer.code).toBe("invalid_argument");
      expect(answer.message).toMatch(/app_?[iI]d/);
    });

    it("Connect JSON: a __proto__ key → invalid_argument", async () => {
      const res = await connectPost("authz.v1.RoleService/CreateRole", '{"appId": "shop", "__proto__": {"name": "sneaky"}}', "application/json");
      expect(res.status).toBe(400);
      expect(((await res.json()) as Json).code).toBe("invalid_argument");
    });

    it("Connect JSON: bytes that are not UTF-8 → invalid_argument", async () => {
      const body = Buffer.concat([Buffer.from('{"appId": "sh'), Buffer.from([0xff]), Buffer.from('op"}')]);
      const res = await connectPost("authz.v1.ApplicationService/GetApplication", body, "application/json");
      expect(res.status).toBe(400);
      const answer = (await res.json()) as Json;
      expect(answer.code).toBe("invalid_argument");
      expect(answer.message).toContain("UTF-8");
    });

    it("Connect JSON: updateMask nested 10,000 deep → invalid_argument with a short message", async () => {
      const body = `{"appId": "shop", "policyId": "${policyId}", "updateMask": ${"[".repeat(10_000)}${"]".repeat(10_000)}}`;
      const res = await connectPost("authz.v1.PolicyService/UpdatePolicy", body, "application/json");
      expect(res.status).toBe(400);
      const answer = (await res.json()) as Json;
      expect(answer.code).toBe("invalid_argument");
      expect(answer.message.length).toBeLessThan(300);
    });

    it("Connect binary: a string field that is not UTF-8 → invalid_argument naming it", async () => {
      const res = await connectPost("authz.v1.ApplicationService/GetApplication", pb([[1, Buffer.from([0x73, 0xff])]]), "application/proto");
      expect(res.status).toBe(400);
      const answer = (await res.json()) as Json;
      expect(answer.code).toBe("invalid_argument");
      expect(answer.message).toContain("appId");
    });

    it("gRPC-Web: a string field that is not UTF-8 → grpc-status 3 naming it", async () => {
      const message = pb([[1, Buffer.from([0x73, 0xc0])]]);
      const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, message.length]), message]);
      const res = await fetch(`${service.url}/authz.v1.ApplicationService/GetApplication`, {
        method: "POST",
        headers: { "content-type": "application/grpc-web+proto", "x-grpc-web": "1", "x-api-key": ADMIN_KEY },
        body: new Uint8Array(frame),
      });
      const all = Buffer.from(await res.arrayBuffer());
      const status = res.headers.get("grpc-status") ?? /grpc-status:\s*(\d+)/.exec(all.toString("latin1"))?.[1];
      const text = res.headers.get("grpc-message") ?? /grpc-message:\s*([^\r\n]*)/.exec(all.toString("latin1"))?.[1] ?? "";
      expect(status).toBe("3");
      expect(decodeURIComponent(text)).toContain("appId");
    });
  });

  describe("messages that are not protobuf, and HTTP/2", () => {
    const garbage: [string, Buffer][] = [
      ["cut short", Buffer.from([0x0a, 0x10, 0x41])],
      ["a bad tag", Buffer.from([0xff, 0xff, 0xff])],
      ["nested group starts", Buffer.alloc(5_000, 0x0b)],
      ["a varint that never ends", Buffer.alloc(20, 0x80)],
    ];

    it.each(garbage)("Connect binary: %s → 400 invalid_argument, not 500", async (_name, bytes) => {
      const res = await fetch(`${service.url}/authz.v1.ApplicationService/GetApplication`, {
        method: "POST",
        headers: { "content-type": "application/proto", "x-api-key": ADMIN_KEY },
        body: new Uint8Array(bytes),
      });
      expect(res.status).toBe(400);
      const answer = (await res.json()) as Json;
      expect(answer.code).toBe("invalid_argument");
      expect(answer.message).toContain("not valid protobuf");
    });

    it.each(garbage)("gRPC-Web binary: %s → grpc-status 3, not 13", async (_name, bytes) => {
      const frame = Buffer.concat([Buffer.from([0]), Buffer.alloc(4), bytes]);
      frame.writeUInt32BE(bytes.length, 1);
      const res = await fetch(`${service.url}/authz.v1.ApplicationService/GetApplication`, {
        method: "POST",
        headers: { "content-type": "application/grpc-web+proto", "x-grpc-web": "1", "x-api-key": ADMIN_KEY },
        body: new Uint8Array(frame),
      });
      const all = Buffer.from(await res.arrayBuffer()).toString("latin1");
      expect(res.headers.get("grpc-status") ?? /grpc-status:\s*(\d+)/.exec(all)?.[1]).toBe("3");
    });

    it.each(garbage)("gRPC binary: %s → INVALID_ARGUMENT", async (_name, bytes) => {
      const res = await new Promise<{ code: number }>((resolve) => {
        const metadata = new grpc.Metadata();
        metadata.set("x-api-key", ADMIN_KEY);
        rawGrpc.makeUnaryRequest("/authz.v1.ApplicationService/GetApplication", (x: Buffer) => x, (x: Buffer) => x, bytes, metadata, (error) =>
          resolve({ code: error ? error.code : grpc.status.OK }),
        );
      });
      expect(res.code).toBe(grpc.status.INVALID_ARGUMENT);
    });

    /** One HTTP/2 (h2c) request; the status, body and trailers. */
    function h2(headers: http2.OutgoingHttpHeaders, body?: Buffer) {
      return new Promise<{ status: number; body: string; trailers: http2.IncomingHttpHeaders }>((resolve, reject) => {
        const session = http2.connect(service.url);
        session.on("error", reject);
        const req = session.request(headers, { endStream: body === undefined });
        let status = 0;
        let trailers: http2.IncomingHttpHeaders = {};
        const chunks: Buffer[] = [];
        req.on("response", (h) => {
          status = Number(h[":status"]);
          trailers = h; // a trailers-only answer carries its status here
        });
        req.on("trailers", (t) => (trailers = t));
        req.on("data", (c: Buffer) => chunks.push(c));
        req.on("end", () => {
          session.close();
          resolve({ status, body: Buffer.concat(chunks).toString("utf8"), trailers });
        });
        req.on("error", reject);
        if (body !== undefined) req.end(body);
      });
    }
    const documented = (res: { body: string; trailers: http2.IncomingHttpHeaders }) => expectErrorBody(JSON.parse(res.body), res.trailers["x-request-id"]);

    it("HTTP/2: an Expect that is not 100-continue → 417 with the documented body", async () => {
      const res = await h2({ ":method": "POST", ":path": "/api/v1/applications", "x-api-key": ADMIN_KEY, expect: "200-ok" }, Buffer.from("{}"));
      expect(res.status).toBe(417);
      documented(res);
    });

    it("HTTP/2: a path that is not UTF-8 → 400 naming the path variable", async () => {
      const res = await h2({ ":method": "GET", ":path": "/api/v1/applications/shop/roles/%c0", "x-api-key": ADMIN_KEY });
      expect(res.status).toBe(400);
      expect(JSON.parse(res.body).details).toContainEqual(expect.objectContaining({ field: "roleId" }));
    });

    it("HTTP/2: a NUL in a filter → 400 naming it", async () => {
      const res = await h2({ ":method": "GET", ":path": "/api/v1/applications/shop/audit-log?type=%00", "x-api-key": ADMIN_KEY });
      expect(res.status).toBe(400);
      expect(JSON.parse(res.body).details).toContainEqual(expect.objectContaining({ field: "type" }));
    });

    // HTTP/1.1's parser refuses bytes outside ASCII in the request target; an HTTP/2 :path may carry them.
    it.each([
      ["a path id", "/api/v1/applications/shop/users/\u00c3\u00a9/roles", "userId"],
      ["a filter", "/api/v1/applications/shop/audit-log?type=\u00c3\u00a9", "type"],
    ])("HTTP/2: raw UTF-8 bytes in %s → 400 naming it, not a Latin-1 reading", async (_name, path, field) => {
      const res = await h2({ ":method": "GET", ":path": path, "x-api-key": ADMIN_KEY });
      expect(res.status, res.body).toBe(400);
      expect(JSON.parse(res.body).details).toContainEqual(expect.objectContaining({ field }));
    });

    it("HTTP/2: the same, percent-encoded, is read as UTF-8", async () => {
      const res = await h2({ ":method": "GET", ":path": "/api/v1/applications/shop/users/%C3%A9/roles", "x-api-key": ADMIN_KEY });
      expect(res.status, res.body).toBe(200);
    });

    it("gRPC with the JSON codec: bytes that are not UTF-8 → INVALID_ARGUMENT, not U+FFFD", async () => {
      const json = Buffer.concat([Buffer.from('{"appId":"sh'), Buffer.from([0xff]), Buffer.from('op"}')]);
      const frame = Buffer.concat([Buffer.from([0]), Buffer.alloc(4), json]);
      frame.writeUInt32BE(json.length, 1);
      const res = await h2(
        { ":method": "POST", ":path": "/authz.v1.ApplicationService/GetApplication", "content-type": "application/grpc+json", te: "trailers", "x-api-key": ADMIN_KEY },
        frame,
      );
      expect(res.trailers["grpc-status"]).toBe("3");
      expect(decodeURIComponent(String(res.trailers["grpc-message"]))).toContain("UTF-8");
    });
  });

  describe("the safety net: a value the database refuses is a 400, not a 500", () => {
    const silent = pino({ level: "silent" });
    const refused: [string, string, unknown[]][] = [
      ["1.5 as a bigint (22P02)", "SELECT $1::bigint", ["1.5"]],
      ["a date that is no date (22008)", "SELECT $1::timestamptz", ["2024-13-45T00:00:00Z"]],
      ["a number out of range (22003)", "SELECT $1::int", ["99999999999"]],
      ["a NUL in text (22021)", "SELECT $1::text", ["a\u0000b"]],
    ];
    it.each(refused)("%s → INVALID_ARGUMENT without the SQL", async (_name, sql, params) => {
      const error = await database.db.query(sql, params).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error, "the database took it").toBeDefined();
      const mapped = toConnectError(error, silent);
      expect(mapped.code).toBe(Code.InvalidArgument);
      expect(mapped.rawMessage).toMatch(/^a value in the request is malformed, out of range or too large \(SQLSTATE 22\w{3}\)$/);
    });

    it("a value too large for an index (54000) → INVALID_ARGUMENT", async () => {
      const error = await database.db
        .transaction(async (tx) => {
          await tx.query("CREATE TEMP TABLE too_large (x text PRIMARY KEY) ON COMMIT DROP");
          await tx.query("INSERT INTO too_large SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 1000)");
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(error, "the database took it").toBeDefined();
      const mapped = toConnectError(error, silent);
      expect(mapped.code).toBe(Code.InvalidArgument);
      expect(mapped.rawMessage).toContain("SQLSTATE 54");
    });
  });

  it.each([
    ["a serialization failure", "40001"],
    ["a deadlock", "40P01"],
  ])("%s on every attempt → ABORTED (409), not INTERNAL", async (_name, state) => {
    const error = await database.db.query(`DO $$ BEGIN RAISE EXCEPTION 'lost' USING ERRCODE = '${state}'; END $$`).then(
      () => undefined,
      (e: unknown) => e,
    );
    const mapped = toConnectError(error, pino({ level: "silent" }));
    expect(mapped.code).toBe(Code.Aborted);
    expect(mapped.rawMessage).toBe(`the call met concurrent changes on every attempt (SQLSTATE ${state}); nothing was changed; try again`);
  });

  it("none of the refused requests changed anything", async () => {
    const after = await snapshot();
    expect(after).toEqual(before);
  });
});
