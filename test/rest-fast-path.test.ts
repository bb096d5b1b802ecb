/**
 * The REST fast path (src/transport/rest/rest-fast-path.ts): which requests it
 * takes and which it leaves to Fastify, and that a request answered either
 * way gets the very same answer, byte for byte in its JSON, over real
 * HTTP/1.1 connections.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CheckService } from "../gen/authz/v1/check_pb.js";
import { Checker } from "../src/domain/check.js";
import { Explainer } from "../src/domain/explain.js";
import { Lookup } from "../src/domain/lookup.js";
import { WhoCan } from "../src/domain/who-can.js";
import { KeyAuthenticator } from "../src/domain/keys.js";
import { checkService } from "../src/services/check-service.js";
import { guard, type ServiceBinding } from "../src/transport/call/guard.js";
import { restFastPath } from "../src/transport/rest/rest-fast-path.js";
import { RequestLog } from "../src/transport/call/request-log.js";
import { restRoutes } from "../src/transport/rest/rest-gateway.js";
import { createTestDatabase, type TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, createAppWithKey, startTestService, type TestService } from "./support/service.js";

const CHECK = "/api/v1/authorization/check";
const BATCH = "/api/v1/authorization/check/batch";
const catalog = { resources: [{ resource: "doc", description: "", actions: ["read", "update"] }] };
const FELL_THROUGH = 599;

interface Answer {
  status: number;
  type: string | undefined;
  body: string;
}

/**
 * One HTTP/1.1 request with its framing chosen: a Content-Length (unless
 * `chunked`, which sends the body as chunks without one).
 */
function send(url: string, path: string, body: string, headers: Record<string, string>, options: { chunked?: boolean; method?: string } = {}) {
  return new Promise<Answer>((resolve, reject) => {
    const all = options.chunked ? headers : { ...headers, "content-length": String(Buffer.byteLength(body)) };
    const req = http.request(url + path, { method: options.method ?? "POST", headers: all, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode!, type: res.headers["content-type"], body: Buffer.concat(chunks).toString("utf8") }));
    });
    req.on("error", reject);
    if (options.chunked) {
      // Two writes, so the body really goes as two chunks.
      const half = Math.floor(body.length / 2);
      req.write(body.slice(0, half));
      req.end(body.slice(half));
    } else req.end(body);
  });
}

describe("REST fast path on pglite", () => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;
  /** A server with only the fast path; what it leaves answers FELL_THROUGH. */
  let bare: http.Server;
  let bareUrl: string;

  beforeAll(async () => {
    database = await createTestDatabase("pglite");
    service = await startTestService(database.db);
    key = await createAppWithKey(service, "fast");
    await service.call("PUT", "/api/v1/applications/fast/resources", { body: catalog });
    await service.call("POST", "/api/v1/authorization/relationships", {
      key,
      body: { userId: "ann", resource: "doc", resourceId: "d1", relation: "viewer" },
    });

    const log = pino({ level: "silent" });
    const keys = new KeyAuthenticator(database.db, ADMIN_KEY);
    const bindings = [guard(CheckService, checkService({ checker: new Checker(database.db), explainer: new Explainer(database.db), lookup: new Lookup(database.db), whoCan: new WhoCan(database.db) }), { keys, log })] as ServiceBinding[];
    const fast = restFastPath(restRoutes(bindings), { keys, log }, new RequestLog(log));
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

  const question = JSON.stringify({ userId: "ann", resource: "doc", resourceId: "d1", action: "read" });
  const json = { "content-type": "application/json" };

  it.each([
    { name: "a JSON check with a length", path: CHECK, headers: json, taken: true },
    { name: "a JSON batch check", path: BATCH, headers: json, body: JSON.stringify({ checks: [JSON.parse(question)] }), taken: true },
    { name: "a JSON type with parameters", path: CHECK, headers: { "content-type": "Application/JSON; charset=utf-8" }, taken: true },
    { name: "a chunked body", path: CHECK, headers: json, chunked: true, taken: false },
    { name: "another media type", path: CHECK, headers: { "content-type": "text/plain" }, taken: false },
    { name: "a JSON-suffixed media type", path: CHECK, headers: { "content-type": "application/json-patch+json" }, taken: false },
    { name: "no media type", path: CHECK, headers: {}, taken: false },
    { name: "a query string", path: `${CHECK}?x=1`, headers: json, taken: false },
    { name: "an Expect header", path: CHECK, headers: { ...json, expect: "100-continue" }, taken: false },
    { name: "a GET", path: CHECK, headers: json, method: "GET", taken: false },
    { name: "a path with a trailing slash", path: `${CHECK}/`, headers: json, taken: false },
  ])("takes $name: $taken", async ({ path, headers, body, chunked, method, taken }) => {
    const answer = await send(bareUrl, path, body ?? question, { ...headers, "x-api-key": key }, { chunked, method });
    if (taken) {
      expect(answer.status).toBe(200);
      expect(answer.type).toBe("application/json; charset=utf-8");
    } else expect(answer.status).toBe(FELL_THROUGH);
  });

  // Each request once through the fast path (a length) and once through
  // Fastify (chunked): same status, media type and JSON.
  const big = JSON.stringify({ checks: Array.from({ length: 1001 }, () => JSON.parse(question)) });
  it.each([
    { name: "allowed", path: CHECK, body: question, status: 200 },
    { name: "denied", path: CHECK, body: JSON.stringify({ userId: "bob", resource: "doc", resourceId: "d1", action: "read" }), status: 200 },
    { name: "a batch", path: BATCH, body: JSON.stringify({ checks: [JSON.parse(question), { ...JSON.parse(question), userId: "bob" }] }), status: 200 },
    { name: "an empty batch", path: BATCH, body: JSON.stringify({ checks: [] }), status: 200 },
    { name: "no key", path: CHECK, body: question, key: null, status: 401 },
    { name: "an unknown key", path: CHECK, body: question, key: "pcl_nope", status: 401 },
    { name: "the operator key", path: CHECK, body: question, key: ADMIN_KEY, status: 403 },
    { name: "a bad key with a bad body: 401 first", path: CHECK, body: "{", key: "pcl_nope", status: 401 },
    { name: "invalid JSON", path: CHECK, body: '{"userId": ', status: 400 },
    { name: "an array body", path: CHECK, body: "[]", status: 400 },
    { name: "a null body", path: CHECK, body: "null", status: 400 },
    { name: "an empty body", path: CHECK, body: "", status: 400 },
    { name: "a missing field", path: CHECK, body: JSON.stringify({ userId: "ann", resource: "doc", resourceId: "d1" }), status: 400 },
    { name: "an unknown field", path: CHECK, body: JSON.stringify({ ...JSON.parse(question), extra: 1 }), status: 400 },
    { name: "a wrong type", path: CHECK, body: JSON.stringify({ ...JSON.parse(question), userId: 7 }), status: 400 },
    { name: "an unknown resource", path: CHECK, body: JSON.stringify({ ...JSON.parse(question), resource: "nope" }), status: 400 },
    { name: "non-ASCII ids", path: CHECK, body: JSON.stringify({ ...JSON.parse(question), userId: "zoë-名前" }), status: 200 },
    { name: "a batch over the limit", path: BATCH, body: big, status: 400 },
  ])("answers $name the same either way", async ({ path, body, key: given, status }) => {
    // One request id both ways: an error body carries it (its requestId), and the bytes must match.
    const headers: Record<string, string> = { ...json, "x-request-id": "same-id-both-ways" };
    const k = given === undefined ? key : given;
    if (k !== null) headers["x-api-key"] = k;
    const fast = await send(service.url, path, body, headers);
    const viaFastify = await send(service.url, path, body, headers, { chunked: true });
    expect(fast.status).toBe(status);
    expect(fast).toEqual(viaFastify);
    expect(() => JSON.parse(fast.body)).not.toThrow();
  });

  it("answers many requests on one kept-alive connection, and after a client that left mid-body", async () => {
    // A client that declares a length and goes away before sending it all.
    await new Promise<void>((resolve) => {
      const req = http.request(service.url + CHECK, {
        method: "POST",
        headers: { ...json, "x-api-key": key, "content-length": "1000" },
        agent: false,
      });
      req.on("error", () => resolve());
      req.write(question.slice(0, 10), () => {
        req.destroy();
        resolve();
      });
    });
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const answers = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          new Promise<string>((resolve, reject) => {
            const body = JSON.stringify({ ...JSON.parse(question), userId: i % 2 === 0 ? "ann" : "bob" });
            const req = http.request(service.url + CHECK, {
              method: "POST",
              headers: { ...json, "x-api-key": key, "content-length": String(body.length) },
              agent,
            }, (res) => {
              let text = "";
              res.on("data", (c: Buffer) => (text += c.toString()));
              res.on("end", () => resolve(text));
            });
            req.on("error", reject);
            req.end(body);
          }),
        ),
      );
      expect(answers).toEqual(Array.from({ length: 20 }, (_, i) => JSON.stringify({ allowed: i % 2 === 0 })));
    } finally {
      agent.destroy();
    }
  });
});
