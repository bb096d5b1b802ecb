/**
 * AuthZEN's routes on the REST fast path (rest-fast-path.ts) and the direct
 * JSON reader (flat-json.ts): which requests the fast path takes, that the
 * plain body of an Access Evaluation is read without the strict reader,
 * and that every AuthZEN rule (authzen-gateway.ts) holds there: a request
 * sent once with a Content-Length (the fast path) and once chunked (Fastify)
 * gets the very same status, headers and bytes, whatever it is.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { serviceBindings } from "../src/bindings.js";
import { KeyAuthenticator } from "../src/domain/keys.js";
import { RequestLog } from "../src/transport/call/request-log.js";
import { withAuthZenRules } from "../src/transport/rest/authzen-gateway.js";
import { restFastPath } from "../src/transport/rest/rest-fast-path.js";
import { restRoutes } from "../src/transport/rest/rest-gateway.js";
import { admin, createApp, expectStatus } from "./helpers/authz.js";
import { createTestDatabase, type TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, startTestService, type TestService } from "./support/service.js";

/** How many requests the strict reader (json-input) read: the direct reader takes the rest. */
const strictReads = vi.hoisted(() => ({ count: 0 }));
vi.mock("../src/transport/rest/json-input.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("../src/transport/rest/json-input.js")>();
  return {
    ...original,
    messageFromJson: (...args: Parameters<typeof original.messageFromJson>) => {
      strictReads.count++;
      return original.messageFromJson(...args);
    },
  };
});

const EVALUATION = "/access/v1/evaluation";
const EVALUATIONS = "/access/v1/evaluations";
const SEARCH_SUBJECT = "/access/v1/search/subject";
const SEARCH_RESOURCE = "/access/v1/search/resource";
const SEARCH_ACTION = "/access/v1/search/action";
const CATALOG = [{ resource: "document", description: "", actions: ["read", "update"], relations: [{ name: "reviewer", actions: ["read"] }] }];
const FELL_THROUGH = 599;
const REQUEST_ID = "same-id-both-ways";

type Json = Record<string, unknown>;

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** One HTTP/1.1 request: with a Content-Length, or chunked (without one), which the fast path leaves to Fastify. */
function send(url: string, path: string, body: string | Buffer, headers: Record<string, string | string[]>, options: { chunked?: boolean; method?: string } = {}) {
  return new Promise<Answer>((resolve, reject) => {
    const all = options.chunked ? headers : { ...headers, "content-length": String(Buffer.byteLength(body)) };
    const req = http.request(url + path, { method: options.method ?? "POST", headers: all, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString("utf8") }));
    });
    req.on("error", reject);
    if (options.chunked) {
      const half = Math.floor(body.length / 2);
      req.write(body.slice(0, half));
      req.end(body.slice(half));
    } else req.end(body);
  });
}

/** An AuthZEN request: `user` may `action` `type`:`id`? */
const q = (user: string, type: string, id: string, action: string, extra: Json = {}): Json => ({
  subject: { type: "user", id: user },
  resource: { type, id },
  action: { name: action },
  ...extra,
});

describe("AuthZEN on the REST fast path, on pglite", () => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;
  let noCheckKey: string;
  /** A server with only the fast path; what it leaves answers FELL_THROUGH. */
  let bare: http.Server;
  let bareUrl: string;

  beforeAll(async () => {
    database = await createTestDatabase("pglite");
    service = await startTestService(database.db);
    key = await createApp(service, "fastz", CATALOG);
    noCheckKey = (await service.call("POST", "/api/v1/applications/fastz/api-keys", { body: { name: "no-check", scopes: ["read", "write"] } })).body.key as string;
    const grants: Json[] = [
      { userId: "ann", resource: "document", resourceId: "d1", relation: "viewer" },
      { userId: "cat", resource: "document", resourceId: "d3", relation: "reviewer", condition: "context.mfa == true" },
      { userId: "dan", resource: "document", resourceId: "d4", relation: "reviewer", condition: "resource.properties.ownerID == subject.id" },
    ];
    for (const body of grants) expect([200, 201]).toContain((await service.call("POST", "/api/v1/authorization/relationships", { key, body })).status);
    const a = admin(service, "fastz");
    await a.assign(await a.createRole("Editor", [await a.createPolicy("editors", ["document:update"])]), "eve");

    const log = pino({ level: "silent" });
    const keys = new KeyAuthenticator(database.db, ADMIN_KEY);
    const fast = restFastPath(withAuthZenRules(restRoutes(serviceBindings(database.db, { keys, log }))), { keys, log }, new RequestLog(log));
    bare = http.createServer((req, res) => {
      if (fast(req, res)) return;
      req.resume();
      res.writeHead(FELL_THROUGH).end();
    });
    await new Promise<void>((resolve) => bare.listen(0, "127.0.0.1", resolve));
    bareUrl = `http://127.0.0.1:${(bare.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await new Promise((resolve) => bare?.close(resolve));
    await service?.close();
    await database?.dispose();
  });

  const json = { "content-type": "application/json" };
  const allowed = JSON.stringify(q("ann", "document", "d1", "read"));

  describe("which requests it takes", () => {
    it.each<{ name: string; path: string; headers: Record<string, string>; body?: string; chunked?: boolean; method?: string; taken?: string }>([
      { name: "a JSON evaluation with a length", path: EVALUATION, headers: json, taken: '{"decision":true}' },
      { name: "a deny", path: EVALUATION, headers: json, body: JSON.stringify(q("bob", "document", "d1", "read")), taken: '{"decision":false}' },
      { name: "the key as a bearer token", path: EVALUATION, headers: { ...json, authorization: "PLACEHOLDER" }, taken: '{"decision":true}' },
      { name: "a JSON type with parameters", path: EVALUATION, headers: { "content-type": "Application/JSON; charset=utf-8" }, taken: '{"decision":true}' },
      { name: "evaluations", path: EVALUATIONS, headers: json, body: JSON.stringify({ ...q("ann", "document", "d1", "read"), evaluations: [{}, { action: { name: "update" } }] }), taken: '{"evaluations":[{"decision":true},{"decision":false}]}' },
      { name: "a subject search", path: SEARCH_SUBJECT, headers: json, body: JSON.stringify(q("", "document", "d1", "read")), taken: '{"page":{"next_token":"","count":1},"results":[{"type":"user","id":"ann"}]}' },
      { name: "a resource search", path: SEARCH_RESOURCE, headers: json, body: JSON.stringify(q("ann", "document", "", "read")), taken: '{"page":{"next_token":"","count":1},"results":[{"type":"document","id":"d1"}]}' },
      { name: "an action search", path: SEARCH_ACTION, headers: json, body: JSON.stringify({ subject: { type: "user", id: "ann" }, resource: { type: "document", id: "d1" } }), taken: '{"page":{"next_token":"","count":1},"results":[{"name":"read"}]}' },
      { name: "a chunked body", path: EVALUATION, headers: json, chunked: true },
      { name: "a JSON-suffixed media type (AuthZEN's rule takes it: Fastify answers)", path: EVALUATION, headers: { "content-type": "application/authzen+json" } },
      { name: "another media type", path: EVALUATION, headers: { "content-type": "text/plain" } },
      { name: "no media type", path: EVALUATION, headers: {} },
      { name: "a query string", path: `${EVALUATION}?debug=1`, headers: json },
      { name: "an Expect header", path: EVALUATION, headers: { ...json, expect: "100-continue" } },
      { name: "a GET", path: EVALUATION, headers: json, method: "GET" },
      { name: "a trailing slash", path: `${EVALUATION}/`, headers: json },
      { name: "the metadata", path: "/.well-known/authzen-configuration", headers: json, method: "GET" },
    ])("$name: $taken", async ({ path, headers, body, chunked, method, taken }) => {
      const withKey: Record<string, string> = headers.authorization === "PLACEHOLDER" ? { ...headers, authorization: `Bearer ${key}` } : { ...headers, "x-api-key": key };
      const answer = await send(bareUrl, path, body ?? allowed, withKey, { chunked, method });
      if (taken === undefined) expect(answer.status).toBe(FELL_THROUGH);
      else {
        expect(answer.status, answer.body).toBe(200);
        expect(answer.headers["content-type"]).toBe("application/json; charset=utf-8");
        expect(answer.body).toBe(taken);
      }
    });

    it("reads the plain shape directly, properties and context too", async () => {
      const before = strictReads.count;
      for (const body of [allowed, JSON.stringify(q("bob", "document", "d1", "read")), JSON.stringify({ ...q("ann", "document", "d1", "read"), extra: { any: "thing" } })]) {
        expect((await send(bareUrl, EVALUATION, body, { ...json, "x-api-key": key })).status).toBe(200);
      }
      expect(strictReads.count).toBe(before);
      const conditional = JSON.stringify(q("cat", "document", "d3", "read", { context: { mfa: true } }));
      const answer = await send(bareUrl, EVALUATION, conditional, { ...json, "x-api-key": key });
      expect(answer.body).toBe('{"decision":true}');
      expect(strictReads.count).toBe(before);
    });
  });

  // Each request once through the fast path (a length) and once through
  // Fastify (chunked): the same status, headers (but the date) and bytes.
  const good = q("ann", "document", "d1", "read");
  const text = (value: Json) => JSON.stringify(value);
  const deep = `{"subject":{"type":"user","id":"ann"},"action":{"name":"read"},"resource":{"type":"document","id":"d1"},"context":${'{"a":'.repeat(70)}1${"}".repeat(70)}}`;
  const cases: {
    name: string;
    path?: string;
    body: string | Buffer;
    headers?: Record<string, string | string[]>;
    key?: string | null;
    bearer?: boolean;
    noRequestId?: boolean;
    status: number;
  }[] = [
    // Answers.
    { name: "an allowed evaluation", body: text(good), status: 200 },
    { name: "a deny: 200 {\"decision\":false}", body: text(q("bob", "document", "d1", "read")), status: 200 },
    { name: "allowed by a role", body: text(q("eve", "document", "d9", "update")), status: 200 },
    { name: "unknown fields at the top and in each part, ignored", body: text({ ...good, extra: [1], subject: { type: "user", id: "ann", email: "a@b" }, resource: { type: "document", id: "d1", x: null }, action: { name: "read", y: {} } }), status: 200 },
    { name: "parts in another order", body: text({ action: { name: "read" }, resource: { id: "d1", type: "document" }, subject: { id: "ann", type: "user" } }), status: 200 },
    { name: "a __proto__ key", body: '{"__proto__": {"subject": {"type": "user", "id": "bob"}}, "subject": {"type": "user", "id": "ann"}, "resource": {"type": "document", "id": "d1"}, "action": {"name": "read"}}', status: 200 },
    { name: "a key given twice (the last counts)", body: '{"subject": {"type": "user", "id": "bob"}, "subject": {"type": "user", "id": "ann"}, "resource": {"type": "document", "id": "d1"}, "action": {"name": "read"}}', status: 200 },
    { name: "a type the catalog lacks: a deny", body: text(q("ann", "folder", "f1", "read")), status: 200 },
    { name: "an action the catalog lacks: a deny", body: text(q("ann", "document", "d1", "publish")), status: 200 },
    { name: "a subject that is not a user: a deny", body: text({ ...good, subject: { type: "group", id: "g1" } }), status: 200 },
    { name: "an id no grant can carry: a deny", body: text(q("a".repeat(300), "document", "d1", "read")), status: 200 },
    { name: "non-ASCII ids", body: text(q("zoë-名前-😀", "document", "d1", "read")), status: 200 },
    { name: "context that makes a condition hold", body: text(q("cat", "document", "d3", "read", { context: { mfa: true } })), status: 200 },
    { name: "context that does not", body: text(q("cat", "document", "d3", "read", { context: { mfa: false } })), status: 200 },
    { name: "resource properties read by a condition", body: text({ ...good, subject: { type: "user", id: "dan" }, resource: { type: "document", id: "d4", properties: { ownerID: "dan" } } }), status: 200 },
    // The standard's 400s.
    { name: "no subject", body: text({ resource: good.resource, action: good.action }), status: 400 },
    { name: "no action", body: text({ subject: good.subject, resource: good.resource }), status: 400 },
    { name: "no resource id", body: text({ ...good, resource: { type: "document" } }), status: 400 },
    { name: "an empty action name", body: text({ ...good, action: { name: "" } }), status: 400 },
    { name: "a null subject", body: text({ ...good, subject: null }), status: 400 },
    { name: "a null id", body: text({ ...good, subject: { type: "user", id: null } }), status: 400 },
    { name: "an empty object", body: "{}", status: 400 },
    { name: "an empty body", body: "", status: 400 },
    { name: "a body of spaces", body: "   ", status: 400 },
    { name: "invalid JSON", body: '{"subject": ', status: 400 },
    { name: "an array body", body: "[1]", status: 400 },
    { name: "a null body", body: "null", status: 400 },
    { name: "a JSON string", body: '"subject"', status: 400 },
    { name: "a part that is a string", body: text({ ...good, subject: "ann" }), status: 400 },
    { name: "a number for an id", body: text({ ...good, resource: { type: "document", id: 7 } }), status: 400 },
    { name: "properties that are a list", body: text({ ...good, subject: { type: "user", id: "ann", properties: [1] } }), status: 400 },
    { name: "context that is a string", body: text({ ...good, context: "x" }), status: 400 },
    { name: "a NUL in a type", body: text({ ...good, resource: { type: "doc\u0000", id: "d1" } }), status: 400 },
    { name: "an unpaired surrogate in an id", body: text({ ...good, subject: { type: "user", id: "a\ud800" } }), status: 400 },
    { name: "two bad strings, named in the body's order", body: text({ resource: { type: "doc\u0000", id: "d1" }, action: { name: "read" }, subject: { type: "user", id: "a\udc00" } }), status: 400 },
    { name: "bytes that are not UTF-8", body: Buffer.concat([Buffer.from('{"subject":{"type":"user","id":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}}')]), status: 400 },
    { name: "a number beyond a double", body: text(good).replace(/}$/, ',"context":{"level":1e400}}'), status: 400 },
    { name: "nesting past 64 levels", body: deep, status: 400 },
    { name: "context and properties over 64 KiB together", body: text({ ...good, context: { a: "x".repeat(40_000) }, resource: { type: "document", id: "d1", properties: { b: "y".repeat(30_000) } } }), status: 400 },
    // Media types the fast path takes.
    { name: "a JSON type with a charset", body: text(good), headers: { "content-type": "application/json; charset=utf-8" }, status: 200 },
    { name: "a JSON type in capitals", body: text(good), headers: { "content-type": "APPLICATION/JSON" }, status: 200 },
    { name: "a JSON type with a bare semicolon", body: text(good), headers: { "content-type": "application/json;" }, status: 200 },
    { name: "a JSON type with odd parameters", body: text(good), headers: { "content-type": "application/json ; a=b; c" }, status: 200 },
    { name: "a JSON type and an empty body", body: "", headers: { "content-type": "application/json; charset=utf-8" }, status: 400 },
    // Keys.
    { name: "the key as a bearer token", body: text(good), key: null, bearer: true, status: 200 },
    { name: "the scheme in lower case", body: text(good), key: null, headers: { authorization: "PLACEHOLDER-lower" }, status: 200 },
    { name: "both headers, agreeing", body: text(good), bearer: true, status: 200 },
    { name: "both headers, two keys: 401", body: text(good), headers: { authorization: "Bearer pcl_another" }, status: 401 },
    { name: "another Authorization scheme: 401", body: text(good), key: null, headers: { authorization: "Basic YTpi" }, status: 401 },
    { name: "no key: 401", body: text(good), key: null, status: 401 },
    { name: "an unknown key: 401", body: text(good), key: "pcl_nope", status: 401 },
    { name: "an unknown bearer token: 401", body: text(good), key: null, headers: { authorization: "Bearer pcl_nope" }, status: 401 },
    { name: "a bad key with a bad body: 401 first", body: "{", key: "pcl_nope", status: 401 },
    { name: "the operator key: 403", body: text(good), key: ADMIN_KEY, status: 403 },
    { name: "a key without the check scope: 403", body: text(good), key: "NO-CHECK", status: 403 },
    // X-Request-ID.
    { name: "an arbitrary X-Request-ID, echoed", body: text(good), headers: { "x-request-id": "PEP request #42 (retry)" }, status: 200 },
    { name: "an arbitrary X-Request-ID on an error, echoed", body: "{", headers: { "x-request-id": "PEP request #42 (retry)" }, status: 400 },
    { name: "an arbitrary X-Request-ID on a 401, echoed", body: text(good), key: null, headers: { "x-request-id": "PEP request #42 (retry)" }, status: 401 },
    { name: "a UUID as X-Request-ID", body: text(good), headers: { "x-request-id": "0f8fad5b-d9cb-469f-a165-70867728950e" }, status: 200 },
    { name: "an empty X-Request-ID", body: text(good), headers: { "x-request-id": "" }, status: 200 },
    { name: "X-Request-ID twice", body: text(good), headers: { "x-request-id": ["one", "two"] }, status: 200 },
    { name: "no X-Request-ID", body: text(good), noRequestId: true, status: 200 },
    { name: "no X-Request-ID, an error", body: "[]", noRequestId: true, status: 400 },
    // Access Evaluations and the searches.
    { name: "evaluations without items", path: EVALUATIONS, body: text(good), status: 200 },
    { name: "evaluations with items and defaults", path: EVALUATIONS, body: text({ subject: good.subject, evaluations: [{ action: { name: "read" }, resource: { type: "document", id: "d1" } }, { action: { name: "update" }, resource: { type: "document", id: "d1" } }, { extra: 1 }] }), status: 200 },
    { name: "evaluations cut at the first deny", path: EVALUATIONS, body: text({ ...good, evaluations: [{}, { action: { name: "update" } }, {}], options: { evaluations_semantic: "deny_on_first_deny" } }), status: 200 },
    { name: "evaluations with an unknown semantic", path: EVALUATIONS, body: text({ ...good, evaluations: [{}], options: { evaluations_semantic: "all" } }), status: 400 },
    { name: "evaluations over the limit", path: EVALUATIONS, body: text({ ...good, evaluations: Array.from({ length: 1001 }, () => ({})) }), status: 400 },
    { name: "a subject search", path: SEARCH_SUBJECT, body: text({ subject: { type: "user" }, action: good.action, resource: good.resource, page: { limit: 1 } }), status: 200 },
    { name: "a resource search", path: SEARCH_RESOURCE, body: text({ subject: good.subject, action: good.action, resource: { type: "document" } }), status: 200 },
    { name: "an action search", path: SEARCH_ACTION, body: text({ subject: good.subject, resource: good.resource }), status: 200 },
    { name: "a search with a foreign token", path: SEARCH_ACTION, body: text({ subject: good.subject, resource: good.resource, page: { token: "nope" } }), status: 400 },
  ];

  it.each(cases)("answers $name the same either way", async ({ path, body, headers: given, key: which, bearer, noRequestId, status }) => {
    const headers: Record<string, string | string[]> = { ...json, ...(noRequestId ? {} : { "x-request-id": REQUEST_ID }), ...given };
    const k = which === undefined ? key : which === "NO-CHECK" ? noCheckKey : which;
    if (k !== null) headers["x-api-key"] = k;
    if (bearer) headers.authorization = `Bearer ${key}`;
    if (headers.authorization === "PLACEHOLDER-lower") headers.authorization = `bearer ${key}`;
    const fast = await send(service.url, path ?? EVALUATION, body, headers);
    const viaFastify = await send(service.url, path ?? EVALUATION, body, headers, { chunked: true });
    expect(fast.status, fast.body).toBe(status);
    expect(normalized(fast)).toEqual(normalized(viaFastify));
    // The AuthZEN rules themselves, on the fast path's answer.
    expect(fast.headers["content-type"]).toBe("application/json; charset=utf-8");
    const sentId = Array.isArray(headers["x-request-id"]) ? headers["x-request-id"].join(", ") : headers["x-request-id"];
    if (sentId === undefined || sentId === "") expect(fast.headers["x-request-id"]).toMatch(/^req_/);
    else expect(fast.headers["x-request-id"]).toBe(sentId);
    if (status === 401) expect(fast.headers["www-authenticate"]).toBe('Bearer realm="portcullis"');
    else expect(fast.headers).not.toHaveProperty("www-authenticate");
    const parsed = JSON.parse(fast.body) as Json;
    if (status === 200) expect(parsed).not.toHaveProperty("code");
    else expect(Object.keys(parsed).sort()).toEqual(["code", "details", "message", "requestId"]);
  });

  it("names bad text as the strict reader does, in the body's order, on the fast path", async () => {
    const body = text({ resource: { type: "doc\u0000", id: "d1" }, action: { name: "read" }, subject: { type: "user", id: "a\udc00" } });
    const answer = await send(bareUrl, EVALUATION, body, { ...json, "x-api-key": key });
    expect(answer.status).toBe(400);
    expect((JSON.parse(answer.body) as { details: { field: string }[] }).details.map((d) => d.field)).toEqual(["resource.type", "subject.id"]);
  });

  it("an unplain body sent with a length is read by the strict reader on the fast path as through Fastify", async () => {
    // A null context: the flat reader leaves it to the strict one, which takes it as none.
    const body = text({ ...q("ann", "document", "d1", "read"), context: null });
    const before = strictReads.count;
    const fast = await send(service.url, EVALUATION, body, { ...json, "x-api-key": key });
    expect(strictReads.count).toBe(before + 1);
    expect(fast.body).toBe('{"decision":true}');
  });
});

/** An answer as compared: its date left out, and an id the service made (it differs between two requests) as "req_*". */
function normalized(answer: Answer): Answer {
  const { date: _date, ...headers } = answer.headers;
  const made = typeof headers["x-request-id"] === "string" && headers["x-request-id"].startsWith("req_") ? headers["x-request-id"] : undefined;
  const madeInBody = /"requestId":"(req_[a-z0-9]+)"/.exec(answer.body)?.[1];
  let body = answer.body;
  if (madeInBody !== undefined) body = body.replaceAll(madeInBody, "req_*");
  return { status: answer.status, headers: made === undefined ? headers : { ...headers, "x-request-id": "req_*" }, body };
}
