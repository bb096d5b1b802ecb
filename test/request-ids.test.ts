/**
 * Request ids (src/transport/call/request-log.ts): a caller's well-formed
 * X-Request-Id is kept; without one (or with an ill-formed one), the trace
 * id of a well-formed W3C traceparent; else one is made. The id goes back in
 * x-request-id on every protocol, is in the request's log line and in the
 * lines of errors logged while it ran, and in every REST error body as
 * `requestId`, whoever answers it: the gateway, the fast path, Fastify's
 * handlers, the HTTP layer's own refusals (HTTP/1.1 and HTTP/2).
 */
import http2 from "node:http2";
import net from "node:net";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startPortcullis, type Portcullis } from "../src/app.js";
import { PgliteDb } from "../src/store/pglite-db.js";
import { createTestDatabase, type TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, restCaller, testConfig } from "./support/service.js";
import { ERROR_BODY_KEYS, expectErrorBody } from "./helpers/error-body.js";
import { checkCaller, PROTOCOLS, type CheckCaller } from "./helpers/protocols.js";

type Line = Record<string, unknown>;

const MADE = /^req_[a-z0-9]+$/;
const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACEPARENT = `00-${TRACE_ID}-00f067aa0ba902b7-01`;

/** A service whose logger writes into memory. */
async function startLogged(db: TestDatabase["db"]): Promise<{ service: Portcullis; lines: Line[] }> {
  const lines: Line[] = [];
  const log = pino({ level: "info" }, { write: (s: string) => void lines.push(JSON.parse(s) as Line) });
  const service = await startPortcullis(testConfig({ logLevel: "info" }), { db, log });
  await service.ready;
  return { service, lines };
}

/** The log lines with this request id from line `from` on, once there is one (a line may follow its answer by a tick). */
function linesOf(lines: Line[], requestId: string, from = 0, msg = "request"): Promise<Line[]> {
  return vi.waitFor(
    () => {
      const found = lines.slice(from).filter((l) => l.requestId === requestId && l.msg === msg);
      if (found.length === 0) throw new Error(`no "${msg}" line with id ${requestId}`);
      return found;
    },
    { timeout: 5_000, interval: 5 },
  );
}

/** A whole exchange on a raw socket: the bytes as sent, the answer as parsed. */
function rawExchange(port: number, bytes: string | Buffer): Promise<{ status: number; headers: Record<string, string>; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1");
    const chunks: Buffer[] = [];
    socket.on("data", (chunk) => chunks.push(chunk));
    socket.on("error", () => undefined);
    socket.on("close", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      const end = text.indexOf("\r\n\r\n");
      if (end < 0) return reject(new Error(`no HTTP answer: ${JSON.stringify(text.slice(0, 200))}`));
      const [statusLine, ...lines] = text.slice(0, end).split("\r\n");
      const headers: Record<string, string> = {};
      for (const line of lines) headers[line.slice(0, line.indexOf(":")).trim().toLowerCase()] = line.slice(line.indexOf(":") + 1).trim();
      const length = headers["content-length"];
      const body = length === undefined ? text.slice(end + 4) : Buffer.from(text.slice(end + 4)).subarray(0, Number(length)).toString("utf8");
      resolve({ status: Number(statusLine!.split(" ")[1]), headers, body });
    });
    socket.write(bytes);
    setTimeout(() => socket.end(), 300);
  });
}

/** One HTTP/2 request: status, headers and body. */
function h2Exchange(url: string, headers: http2.OutgoingHttpHeaders, body?: string): Promise<{ status: number; headers: http2.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(url);
    session.on("error", reject);
    const req = session.request(headers, { endStream: body === undefined });
    let answer: http2.IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    req.on("response", (h) => (answer = h));
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      session.close();
      resolve({ status: Number(answer[":status"]), headers: answer, body: Buffer.concat(chunks).toString("utf8") });
    });
    req.on("error", reject);
    if (body !== undefined) req.end(body);
  });
}

describe("request ids", () => {
  let database: TestDatabase;
  let service: Portcullis;
  let lines: Line[];
  let caller: CheckCaller;
  let key: string;
  const question = { userId: "ann", resource: "doc", resourceId: "d1", action: "read" };

  beforeAll(async () => {
    database = await createTestDatabase("pglite");
    ({ service, lines } = await startLogged(database.db));
    const call = restCaller(service.url);
    expect((await call("POST", "/api/v1/applications", { body: { appId: "ids" } })).status).toBe(201);
    key = (await call("POST", "/api/v1/applications/ids/api-keys", { body: { name: "backend" } })).body.key as string;
    const catalog = { resources: [{ resource: "doc", description: "", actions: ["read"] }] };
    expect((await call("PUT", "/api/v1/applications/ids/resources", { key, body: catalog })).status).toBe(200);
    caller = checkCaller(service.url);
  });
  afterAll(async () => {
    caller?.close();
    await service?.close();
    await database?.dispose();
  });

  /** Which id a request gets from its headers. */
  const derivations: { name: string; headers: Record<string, string>; expected: string | RegExp }[] = [
    { name: "a well-formed x-request-id is kept", headers: { "x-request-id": "trace.7f3a:01-x" }, expected: "trace.7f3a:01-x" },
    { name: "x-request-id wins over traceparent", headers: { "x-request-id": "mine-1", traceparent: TRACEPARENT }, expected: "mine-1" },
    { name: "without x-request-id, traceparent's trace id", headers: { traceparent: TRACEPARENT }, expected: TRACE_ID },
    { name: "an ill-formed x-request-id gives way to traceparent", headers: { "x-request-id": "has space", traceparent: TRACEPARENT }, expected: TRACE_ID },
    { name: "a future traceparent version is read", headers: { traceparent: `cc-${TRACE_ID}-00f067aa0ba902b7-01-later` }, expected: TRACE_ID },
    { name: "nothing given: one is made", headers: {}, expected: MADE },
    { name: "an ill-formed x-request-id (a space) is replaced", headers: { "x-request-id": "has space" }, expected: MADE },
    { name: "an ill-formed x-request-id (too long) is replaced", headers: { "x-request-id": "x".repeat(129) }, expected: MADE },
    { name: "an ill-formed x-request-id (markup) is replaced", headers: { "x-request-id": "<script>" }, expected: MADE },
    { name: "a traceparent with a zero trace id is ignored", headers: { traceparent: `00-${"0".repeat(32)}-00f067aa0ba902b7-01` }, expected: MADE },
    { name: "a traceparent of version ff is ignored", headers: { traceparent: `ff-${TRACE_ID}-00f067aa0ba902b7-01` }, expected: MADE },
    { name: "a traceparent in upper case is ignored", headers: { traceparent: `00-${TRACE_ID.toUpperCase()}-00F067AA0BA902B7-01` }, expected: MADE },
    { name: "a traceparent that is not one is ignored", headers: { traceparent: "hello" }, expected: MADE },
  ];

  describe.each(PROTOCOLS)("over %s", (protocol) => {
    it.each(derivations)("$name: the answer's x-request-id, and its log line", async ({ headers, expected }) => {
      for (const withKey of [true, false]) {
        const from = lines.length;
        const answer = await caller.check(protocol, question, { ...headers, ...(withKey ? { "x-api-key": key } : {}) });
        expect(answer.status, `${withKey}`).toBe(withKey ? (protocol.startsWith("grpc") ? 0 : 200) : protocol.startsWith("grpc") ? 16 : 401);
        if (typeof expected === "string") expect(answer.requestId).toBe(expected);
        else expect(answer.requestId).toMatch(expected);
        const [line] = await linesOf(lines, answer.requestId!, from);
        expect(line).toMatchObject({ route: protocol.startsWith("rest") ? "/api/v1/authorization/check" : "/authz.v1.CheckService/Check" });
        // A REST error carries it in its body too (Connect's own error body is left as Connect defines it).
        if (!withKey && protocol.startsWith("rest")) expectErrorBody(answer.body, answer.requestId);
        if (!withKey && protocol === "connect") expect(Object.keys(answer.body as object).sort()).toEqual(["code", "message"]);
      }
    });
  });

  /**
   * Every kind of REST error, each answered by another part of the service:
   * its body's requestId is the answer's x-request-id, the caller's own when
   * it sent one (and the HTTP layer had parsed the headers).
   */
  const json = "Content-Type: application/json\r\n";
  const errors: { name: string; status: number; code: string; raw: (id: string) => string; keepsId: boolean }[] = [
    {
      name: "400 from the fast path (invalid JSON)",
      status: 400,
      code: "invalid_argument",
      raw: (id) => `POST /api/v1/authorization/check HTTP/1.1\r\nHost: x\r\n${json}X-Api-Key: ${key}\r\nX-Request-Id: ${id}\r\nContent-Length: 2\r\n\r\n{"`,
      keepsId: true,
    },
    {
      name: "400 from a Fastify route (invalid JSON, chunked)",
      status: 400,
      code: "invalid_argument",
      raw: (id) => `POST /api/v1/authorization/check HTTP/1.1\r\nHost: x\r\n${json}X-Api-Key: ${key}\r\nX-Request-Id: ${id}\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{"\r\n0\r\n\r\n`,
      keepsId: true,
    },
    {
      name: "400 from Fastify's router (a path that is not UTF-8)",
      status: 400,
      code: "invalid_argument",
      raw: (id) => `GET /api/v1/applications/%ff HTTP/1.1\r\nHost: x\r\nX-Request-Id: ${id}\r\n\r\n`,
      keepsId: true,
    },
    {
      name: "400 for a missing Host",
      status: 400,
      code: "invalid_argument",
      raw: (id) => `GET /healthz HTTP/1.1\r\nX-Request-Id: ${id}\r\n\r\n`,
      keepsId: true,
    },
    {
      name: "400 from Node's parser (no headers read: an id made)",
      status: 400,
      code: "invalid_argument",
      raw: () => "FOO / HTTP/1.1\r\nHost: x\r\n\r\n",
      keepsId: false,
    },
    {
      name: "401 (no key) from the fast path",
      status: 401,
      code: "unauthenticated",
      raw: (id) => `POST /api/v1/authorization/check HTTP/1.1\r\nHost: x\r\n${json}X-Request-Id: ${id}\r\nContent-Length: 2\r\n\r\n{}`,
      keepsId: true,
    },
    {
      name: "401 (unknown key) from a Fastify route",
      status: 401,
      code: "unauthenticated",
      raw: (id) => `GET /api/v1/applications/ids HTTP/1.1\r\nHost: x\r\nX-Api-Key: pcl_nope\r\nX-Request-Id: ${id}\r\n\r\n`,
      keepsId: true,
    },
    {
      name: "403 (the operator key on /authorization)",
      status: 403,
      code: "permission_denied",
      raw: (id) => `POST /api/v1/authorization/check HTTP/1.1\r\nHost: x\r\n${json}X-Api-Key: ${ADMIN_KEY}\r\nX-Request-Id: ${id}\r\nContent-Length: 2\r\n\r\n{}`,
      keepsId: true,
    },
    {
      name: "404 (an unknown route, Fastify's not-found handler)",
      status: 404,
      code: "not_found",
      raw: (id) => `GET /nowhere HTTP/1.1\r\nHost: x\r\nX-Request-Id: ${id}\r\n\r\n`,
      keepsId: true,
    },
    {
      name: "404 (an unknown application, the gateway)",
      status: 404,
      code: "not_found",
      raw: (id) => `GET /api/v1/applications/nope HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${ADMIN_KEY}\r\nX-Request-Id: ${id}\r\n\r\n`,
      keepsId: true,
    },
    {
      name: "404 (the console's handlers: a missing asset, or no build)",
      status: 404,
      code: "not_found",
      raw: (id) => `GET /console/assets/nope.js HTTP/1.1\r\nHost: x\r\nX-Request-Id: ${id}\r\n\r\n`,
      keepsId: true,
    },
    {
      name: "405 (CONNECT)",
      status: 405,
      code: "invalid_argument",
      raw: (id) => `CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nX-Request-Id: ${id}\r\n\r\n`,
      keepsId: true,
    },
    {
      name: "413 (a body over 8 MiB, Fastify's error handler)",
      status: 413,
      code: "resource_exhausted",
      raw: (id) => `POST /api/v1/applications HTTP/1.1\r\nHost: x\r\n${json}X-Api-Key: ${ADMIN_KEY}\r\nX-Request-Id: ${id}\r\nContent-Length: ${9 * 1024 * 1024}\r\n\r\n{}`,
      keepsId: true,
    },
    {
      name: "415 (a media type no parser takes, on a Connect route)",
      status: 415,
      code: "invalid_argument",
      raw: (id) => `POST /authz.v1.ApplicationService/GetApplication HTTP/1.1\r\nHost: x\r\nContent-Type: application/xml\r\nX-Request-Id: ${id}\r\nContent-Length: 2\r\n\r\n{}`,
      keepsId: true,
    },
    {
      name: "417 (an Expect other than 100-continue)",
      status: 417,
      code: "invalid_argument",
      raw: (id) => `POST /api/v1/applications HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nX-Request-Id: ${id}\r\nContent-Length: 2\r\n\r\n{}`,
      keepsId: true,
    },
    {
      name: "431 (headers over the limit: no headers read, an id made)",
      status: 431,
      code: "invalid_argument",
      raw: () => `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(70_000)}\r\n\r\n`,
      keepsId: false,
    },
  ];

  it.each(errors)("$name: requestId in the body, the header and the request's line", async ({ status, code, raw, keepsId }) => {
    for (const given of [true, false]) {
      const id = `err-${status}-${Math.random().toString(36).slice(2, 10)}`;
      const bytes = given ? raw(id) : raw(id).replace(/X-Request-Id: [^\r]*\r\n/, "");
      const res = await rawExchange(service.port, bytes);
      expect(res.status, res.body).toBe(status);
      const body = JSON.parse(res.body) as { code: string; requestId: string };
      expectErrorBody(body, res.headers["x-request-id"]);
      expect(body.code).toBe(code);
      if (given && keepsId) expect(body.requestId).toBe(id);
      else expect(body.requestId).toMatch(MADE);
      const [line] = await linesOf(lines, body.requestId);
      expect(line!.status).toBe(status);
    }
  });

  it.each([
    { name: "an Expect other than 100-continue", headers: { ":method": "POST", ":path": "/api/v1/applications", expect: "200-ok" }, body: "{}", status: 417 },
    { name: "an unknown route", headers: { ":path": "/nowhere" }, status: 404 },
    { name: "no key", headers: { ":path": "/api/v1/applications/ids" }, status: 401 },
  ])("HTTP/2: $name → $status, requestId in the body and the header", async ({ headers, body, status }) => {
    const res = await h2Exchange(service.url, { ...headers, "x-request-id": "h2-given" }, body);
    expect(res.status).toBe(status);
    expectErrorBody(JSON.parse(res.body), res.headers["x-request-id"]);
    expect(JSON.parse(res.body).requestId).toBe("h2-given");
  });

  it("the error body's keys are exactly the documented ones", () => {
    expect(ERROR_BODY_KEYS).toEqual(["code", "details", "message", "requestId"]);
  });

  it("an error logged while a request ran carries its id, on every protocol", async () => {
    // A database that goes away under a running service: the next calls fail
    // inside their handlers, which log the error with the request's id.
    const db = await PgliteDb.open(undefined);
    const broken = await startLogged(db);
    try {
      const call = restCaller(broken.service.url);
      expect((await call("POST", "/api/v1/applications", { body: { appId: "gone" } })).status).toBe(201);
      await db.close();
      const rest = await fetch(`${broken.service.url}/api/v1/applications/gone`, { headers: { "x-api-key": ADMIN_KEY, "x-request-id": "rest-failing" } });
      expect(rest.status).toBeGreaterThanOrEqual(500);
      const body = (await rest.json()) as { requestId: string; message: string };
      expectErrorBody(body, rest.headers.get("x-request-id"));
      expect(body.requestId).toBe("rest-failing");
      const connect = await fetch(`${broken.service.url}/authz.v1.ApplicationService/GetApplication`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": ADMIN_KEY, "x-request-id": "connect-failing" },
        body: JSON.stringify({ appId: "gone" }),
      });
      expect(connect.status).toBeGreaterThanOrEqual(500);
      expect(connect.headers.get("x-request-id")).toBe("connect-failing");
      for (const id of ["rest-failing", "connect-failing"]) {
        const errorLines = await vi.waitFor(() => {
          const found = broken.lines.filter((l) => l.requestId === id && (l.level as number) >= 50);
          if (found.length === 0) throw new Error(`no error line for ${id}`);
          return found;
        });
        expect(errorLines[0]).toHaveProperty("err");
        await linesOf(broken.lines, id);
      }
    } finally {
      await broken.service.close();
    }
  });
});
