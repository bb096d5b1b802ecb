/**
 * One log line per request, at info, whichever path answered it: the REST
 * fast path, REST routes through Fastify, Connect, gRPC-Web, unary gRPC (the
 * service's own HTTP/2), a gRPC stream relayed to Fastify (reflection),
 * health and 404s. Each line has the protocol, method, route template,
 * status, duration, request id and the calling key's id; none carries a key,
 * a body or a query string. Request ids: a caller's well-formed x-request-id
 * is kept, others are made per service instance and differ between two.
 */
import { create, fromBinary, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport, Http2SessionManager } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import http from "node:http";
import http2 from "node:http2";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { CheckRequestSchema, CheckResponseSchema, CheckService } from "../gen/authz/v1/check_pb.js";
import { ServerReflectionRequestSchema, ServerReflectionResponseSchema } from "../gen/grpc/reflection/v1/reflection_pb.js";
import { startPortcullis, type Portcullis } from "../src/app.js";
import { createTestDatabase, type TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, restCaller, testConfig } from "./support/service.js";

type Line = Record<string, unknown>;

/** A service whose logger writes into memory. */
async function startLogged(db: TestDatabase["db"]): Promise<{ service: Portcullis; lines: Line[]; text: string[] }> {
  const lines: Line[] = [];
  const text: string[] = [];
  const log = pino({ level: "info" }, { write: (s: string) => void (text.push(s), lines.push(JSON.parse(s) as Line)) });
  const service = await startPortcullis(testConfig({ logLevel: "info" }), { db, log });
  await service.ready;
  return { service, lines, text };
}

const requestLines = (lines: Line[]) => lines.filter((l) => l.msg === "request");

/** The request lines with this id, once at least one was written (a line may follow the answer by a tick). */
async function linesOf(lines: Line[], requestId: string): Promise<Line[]> {
  return vi.waitFor(
    () => {
      const found = requestLines(lines).filter((l) => l.requestId === requestId);
      if (found.length === 0) throw new Error(`no request line with id ${requestId}`);
      return found;
    },
    { timeout: 5_000, interval: 5 },
  );
}

/** A raw HTTP/1.1 request (fetch would not let a test choose chunked against a length). */
function send(url: string, method: string, path: string, headers: Record<string, string>, body?: string, chunked = false) {
  return new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }>((resolve, reject) => {
    const all = body !== undefined && !chunked ? { ...headers, "content-length": String(Buffer.byteLength(body)) } : headers;
    const req = http.request(url + path, { method, headers: all, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString("utf8") }));
    });
    req.on("error", reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

/** A unary gRPC call with grpc-js on raw protobuf bytes; resolves with the status code and the response metadata. */
function grpcUnary<I extends DescMessage, O extends DescMessage>(
  client: grpc.Client,
  path: string,
  input: I,
  output: O,
  request: MessageShape<I>,
  metadata: Record<string, string>,
): Promise<{ code: number; answer?: MessageShape<O> }> {
  const md = new grpc.Metadata();
  for (const [k, v] of Object.entries(metadata)) md.set(k, v);
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      path,
      (m: MessageShape<I>) => Buffer.from(toBinary(input, m)),
      (b: Buffer) => fromBinary(output, b),
      request,
      md,
      { deadline: Date.now() + 5_000 },
      (error, answer) => resolve(error ? { code: error.code } : { code: grpc.status.OK, answer: answer as MessageShape<O> }),
    );
  });
}

describe("request lines", () => {
  let database: TestDatabase;
  let service: Portcullis;
  let lines: Line[];
  let text: string[];
  let url: string;
  let key: string;
  let keyId: string;
  let grpcClient: grpc.Client;
  let h2: Http2SessionManager;
  let connect: ReturnType<typeof createClient<typeof CheckService>>;
  let connectH2: ReturnType<typeof createClient<typeof CheckService>>;
  let grpcWeb: ReturnType<typeof createClient<typeof CheckService>>;

  const question = { userId: "ann", resource: "doc", resourceId: "d1", action: "read" };
  const evaluation = { subject: { type: "user", id: "ann" }, resource: { type: "doc", id: "d1" }, action: { name: "read" } };
  const json = { "content-type": "application/json" };

  beforeAll(async () => {
    database = await createTestDatabase("pglite");
    ({ service, lines, text } = await startLogged(database.db));
    url = service.url;
    const call = restCaller(url);
    expect((await call("POST", "/api/v1/applications", { body: { appId: "logs" } })).status).toBe(201);
    const created = await call("POST", "/api/v1/applications/logs/api-keys", { body: { name: "backend" } });
    ({ key, keyId } = created.body as { key: string; keyId: string });
    const catalog = { resources: [{ resource: "doc", description: "", actions: ["read"] }] };
    expect((await call("PUT", "/api/v1/applications/logs/resources", { key, body: catalog })).status).toBe(200);

    grpcClient = new grpc.Client(new URL(url).host, grpc.credentials.createInsecure());
    h2 = new Http2SessionManager(url);
    connect = createClient(CheckService, createConnectTransport({ baseUrl: url, httpVersion: "1.1" }));
    connectH2 = createClient(CheckService, createConnectTransport({ baseUrl: url, httpVersion: "2", sessionManager: h2 }));
    grpcWeb = createClient(CheckService, createGrpcWebTransport({ baseUrl: url, httpVersion: "1.1" }));
  });
  afterAll(async () => {
    grpcClient?.close();
    h2?.abort();
    await service?.close();
    await database?.dispose();
  });

  /** Headers of a call: the key (unless null) and the request id. */
  const hdrs = (requestId: string, k: string | null = key) => ({ "x-request-id": requestId, ...(k === null ? {} : { "x-api-key": k }) });

  /**
   * Every path, each request with an x-request-id of its own: what the line
   * must say. `keyId: undefined` means no keyId field at all.
   */
  const cases: {
    name: string;
    send: (id: string) => Promise<unknown>;
    line: { protocol: string; method: string; route: string; status: number; keyId?: string | undefined };
  }[] = [
    {
      name: "REST fast path: the check",
      send: (id) => send(url, "POST", "/api/v1/authorization/check", { ...json, ...hdrs(id) }, JSON.stringify(question)),
      line: { protocol: "rest", method: "POST", route: "/api/v1/authorization/check", status: 200, keyId: "app" },
    },
    {
      name: "REST fast path: the check without a key (401)",
      send: (id) => send(url, "POST", "/api/v1/authorization/check", { ...json, ...hdrs(id, null) }, JSON.stringify(question)),
      line: { protocol: "rest", method: "POST", route: "/api/v1/authorization/check", status: 401, keyId: undefined },
    },
    {
      name: "REST via Fastify: the check, chunked",
      send: (id) => send(url, "POST", "/api/v1/authorization/check", { ...json, ...hdrs(id) }, JSON.stringify(question), true),
      line: { protocol: "rest", method: "POST", route: "/api/v1/authorization/check", status: 200, keyId: "app" },
    },
    {
      name: "REST fast path: AuthZEN's evaluation",
      send: (id) => send(url, "POST", "/access/v1/evaluation", { ...json, ...hdrs(id) }, JSON.stringify(evaluation)),
      line: { protocol: "rest", method: "POST", route: "/access/v1/evaluation", status: 200, keyId: "app" },
    },
    {
      name: "REST fast path: AuthZEN's evaluation, the key as a bearer token, an empty object (400)",
      send: (id) => send(url, "POST", "/access/v1/evaluation", { ...json, "x-request-id": id, authorization: `Bearer ${key}` }, "{}"),
      line: { protocol: "rest", method: "POST", route: "/access/v1/evaluation", status: 400, keyId: "app" },
    },
    {
      name: "REST fast path: AuthZEN's evaluation without a key (401)",
      send: (id) => send(url, "POST", "/access/v1/evaluation", { ...json, ...hdrs(id, null) }, JSON.stringify(evaluation)),
      line: { protocol: "rest", method: "POST", route: "/access/v1/evaluation", status: 401, keyId: undefined },
    },
    {
      name: "REST via Fastify: AuthZEN's evaluation, chunked",
      send: (id) => send(url, "POST", "/access/v1/evaluation", { ...json, ...hdrs(id) }, JSON.stringify(evaluation), true),
      line: { protocol: "rest", method: "POST", route: "/access/v1/evaluation", status: 200, keyId: "app" },
    },
    {
      name: "REST via Fastify: a path variable and a query string",
      send: (id) => send(url, "GET", "/api/v1/applications/logs/policies?pageSize=7", hdrs(id)),
      line: { protocol: "rest", method: "GET", route: "/api/v1/applications/{app_id}/policies", status: 200, keyId: "app" },
    },
    {
      name: "REST via Fastify: the operator key",
      send: (id) => send(url, "GET", "/api/v1/applications/logs", hdrs(id, ADMIN_KEY)),
      line: { protocol: "rest", method: "GET", route: "/api/v1/applications/{app_id}", status: 200, keyId: "operator" },
    },
    {
      name: "REST via Fastify: an unknown key (401)",
      send: (id) => send(url, "GET", "/api/v1/applications/logs", hdrs(id, "pcl_notakey")),
      line: { protocol: "rest", method: "GET", route: "/api/v1/applications/{app_id}", status: 401, keyId: undefined },
    },
    {
      name: "health",
      send: (id) => send(url, "GET", "/healthz", hdrs(id, null)),
      line: { protocol: "rest", method: "GET", route: "/healthz", status: 200, keyId: undefined },
    },
    {
      name: "an unknown route (404)",
      send: (id) => send(url, "GET", "/nowhere/at/all?token=abc", hdrs(id)),
      line: { protocol: "rest", method: "GET", route: "(no route)", status: 404, keyId: undefined },
    },
    {
      name: "a path Fastify cannot decode (400)",
      send: (id) => send(url, "GET", "/api/v1/applications/%zz/policies", hdrs(id)),
      line: { protocol: "rest", method: "GET", route: "(no route)", status: 400, keyId: undefined },
    },
    {
      name: "Connect over HTTP/1.1",
      send: (id) => connect.check(question, { headers: hdrs(id) }),
      line: { protocol: "connect", method: "POST", route: "/authz.v1.CheckService/Check", status: 200, keyId: "app" },
    },
    {
      name: "Connect over HTTP/1.1 without a key (401)",
      send: (id) => connect.check(question, { headers: hdrs(id, null) }).catch(() => undefined),
      line: { protocol: "connect", method: "POST", route: "/authz.v1.CheckService/Check", status: 401, keyId: undefined },
    },
    {
      name: "Connect over HTTP/2",
      send: (id) => connectH2.check(question, { headers: hdrs(id) }),
      line: { protocol: "connect", method: "POST", route: "/authz.v1.CheckService/Check", status: 200, keyId: "app" },
    },
    {
      name: "gRPC-Web",
      send: (id) => grpcWeb.check(question, { headers: hdrs(id) }),
      line: { protocol: "grpc-web", method: "POST", route: "/authz.v1.CheckService/Check", status: 0, keyId: "app" },
    },
    {
      name: "gRPC-Web without a key (UNAUTHENTICATED)",
      send: (id) => grpcWeb.check(question, { headers: hdrs(id, null) }).catch(() => undefined),
      line: { protocol: "grpc-web", method: "POST", route: "/authz.v1.CheckService/Check", status: 16, keyId: undefined },
    },
    {
      name: "unary gRPC (grpc-js)",
      send: (id) => grpcUnary(grpcClient, "/authz.v1.CheckService/Check", CheckRequestSchema, CheckResponseSchema, create(CheckRequestSchema, question), hdrs(id)),
      line: { protocol: "grpc", method: "POST", route: "/authz.v1.CheckService/Check", status: 0, keyId: "app" },
    },
    {
      name: "unary gRPC without a key (UNAUTHENTICATED)",
      send: (id) => grpcUnary(grpcClient, "/authz.v1.CheckService/Check", CheckRequestSchema, CheckResponseSchema, create(CheckRequestSchema, question), hdrs(id, null)),
      line: { protocol: "grpc", method: "POST", route: "/authz.v1.CheckService/Check", status: 16, keyId: undefined },
    },
    {
      name: "gRPC to an unknown method (UNIMPLEMENTED)",
      send: (id) => grpcUnary(grpcClient, "/authz.v1.NoService/Nothing", CheckRequestSchema, CheckResponseSchema, create(CheckRequestSchema, question), hdrs(id)),
      line: { protocol: "grpc", method: "POST", route: "(no route)", status: 12, keyId: undefined },
    },
    {
      name: "gRPC reflection (a stream relayed to Fastify)",
      send: (id) =>
        new Promise<void>((resolve, reject) => {
          const md = new grpc.Metadata();
          md.set("x-request-id", id);
          const stream = grpcClient.makeBidiStreamRequest(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            (m: MessageShape<typeof ServerReflectionRequestSchema>) => Buffer.from(toBinary(ServerReflectionRequestSchema, m)),
            (b: Buffer) => fromBinary(ServerReflectionResponseSchema, b),
            md,
            { deadline: Date.now() + 5_000 },
          );
          stream.on("data", () => stream.end());
          stream.on("error", reject);
          stream.on("status", () => resolve());
          stream.write(create(ServerReflectionRequestSchema, { messageRequest: { case: "listServices", value: "" } }));
        }),
      line: { protocol: "grpc", method: "POST", route: "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", status: 0, keyId: undefined },
    },
  ];

  it.each(cases.map((c, i) => ({ ...c, id: `case-${i}` })))("$name: one line with its fields", async ({ send: go, id, line }) => {
    await go(id);
    const [found] = await linesOf(lines, id);
    const expected = { ...line, keyId: line.keyId === "app" ? keyId : line.keyId };
    const { keyId: expectedKeyId, ...fields } = expected;
    expect(found).toMatchObject({ level: 30, msg: "request", requestId: id, ...fields, ...(expectedKeyId === undefined ? {} : { keyId: expectedKeyId }) });
    if (expected.keyId === undefined) expect(found).not.toHaveProperty("keyId");
    expect(typeof found!.ms).toBe("number");
    expect(found!.ms as number).toBeGreaterThanOrEqual(0);
    expect(found!.ms as number).toBeLessThan(5_000);
    expect(Object.keys(found!).sort()).toEqual(
      ["hostname", "level", "method", "ms", "msg", "pid", "protocol", "requestId", "route", "status", "time", ...(expected.keyId === undefined ? [] : ["keyId"])].sort(),
    );
    // Exactly one: a sentinel request answered after this one has its line, and this one still has one.
    await send(url, "GET", "/healthz", { "x-request-id": `${id}-sentinel` });
    await linesOf(lines, `${id}-sentinel`);
    expect(requestLines(lines).filter((l) => l.requestId === id)).toHaveLength(1);
  });

  it("no line holds a key, a body or a query string", () => {
    const all = text.join("");
    expect(requestLines(lines).length).toBeGreaterThanOrEqual(cases.length);
    for (const secret of [key, ADMIN_KEY, "pcl_notakey", "pageSize", "token=abc", '"ann"', "d1"]) expect(all).not.toContain(secret);
  });

  it("each answer over HTTP carries its request id in x-request-id; ids made here are unique", async () => {
    const made: string[] = [];
    for (let i = 0; i < 5; i++) {
      for (const answer of [
        await send(url, "POST", "/api/v1/authorization/check", { ...json, "x-api-key": key }, JSON.stringify(question)),
        await send(url, "POST", "/api/v1/authorization/check", { ...json, "x-api-key": key }, JSON.stringify(question), true),
        await send(url, "GET", "/healthz", {}),
        await send(url, "GET", "/nowhere", {}),
      ]) {
        const id = answer.headers["x-request-id"];
        expect(id).toMatch(/^req_[a-z0-9]+$/);
        made.push(id as string);
        expect(await linesOf(lines, id as string)).toHaveLength(1);
      }
    }
    expect(new Set(made).size).toBe(made.length);
  });

  it("a caller's well-formed x-request-id is kept; a malformed one is replaced", async () => {
    for (const chunked of [false, true]) {
      const kept = await send(url, "POST", "/api/v1/authorization/check", { ...json, ...hdrs("trace.7f3a:01-x") }, JSON.stringify(question), chunked);
      expect(kept.headers["x-request-id"]).toBe("trace.7f3a:01-x");
      for (const bad of ["has space", "x".repeat(129), "<script>"]) {
        const replaced = await send(url, "POST", "/api/v1/authorization/check", { ...json, ...hdrs(bad) }, JSON.stringify(question), chunked);
        expect(replaced.headers["x-request-id"]).toMatch(/^req_/);
        await linesOf(lines, replaced.headers["x-request-id"] as string);
        expect(text.join("")).not.toContain(bad);
      }
    }
  });

  it("AuthZEN sends any X-Request-ID back as it came; its line, like any other, keeps only a well-formed one (fast path and Fastify)", async () => {
    for (const chunked of [false, true]) {
      const bad = `PEP request #${chunked ? 2 : 1} (retry)`;
      const answer = await send(url, "POST", "/access/v1/evaluation", { ...json, ...hdrs(bad) }, "{}", chunked);
      expect(answer.status).toBe(400);
      expect(answer.headers["x-request-id"]).toBe(bad);
      const { requestId } = JSON.parse(answer.body) as { requestId: string };
      expect(requestId).toMatch(/^req_/);
      const [line] = await linesOf(lines, requestId);
      expect(line).toMatchObject({ protocol: "rest", route: "/access/v1/evaluation", status: 400, keyId });
      expect(text.join("")).not.toContain(bad);
    }
  });

  it("unary gRPC sends the request id back in its response headers, on success and on error: the caller's well-formed one, else one made here", async () => {
    const session = http2.connect(url);
    session.on("error", () => undefined);
    const call = (requestId: string, apiKey: string | null) =>
      new Promise<{ header: string | undefined; status: string | undefined }>((resolve, reject) => {
        const message = toBinary(CheckRequestSchema, create(CheckRequestSchema, question));
        const body = Buffer.alloc(5 + message.length);
        body.writeUInt32BE(message.length, 1);
        body.set(message, 5);
        const stream = session.request({
          ":method": "POST",
          ":path": "/authz.v1.CheckService/Check",
          "content-type": "application/grpc",
          te: "trailers",
          "x-request-id": requestId,
          ...(apiKey === null ? {} : { "x-api-key": apiKey }),
        });
        let header: string | undefined;
        let status: string | undefined;
        stream.on("response", (h) => {
          header = h["x-request-id"] as string | undefined;
          status = h["grpc-status"] as string | undefined;
        });
        stream.on("trailers", (h) => (status = h["grpc-status"] as string | undefined));
        stream.on("end", () => resolve({ header, status }));
        stream.on("error", reject);
        stream.resume();
        stream.end(body);
      });
    try {
      expect(await call("grpc-trace-1", key)).toEqual({ header: "grpc-trace-1", status: "0" });
      expect(await call("grpc-trace-2", null)).toEqual({ header: "grpc-trace-2", status: "16" });
      // A malformed one is not sent back (nor logged): the answer and the line get an id made here.
      const made = await call("has space", key);
      expect(made).toEqual({ header: expect.stringMatching(/^req_[a-z0-9]+$/), status: "0" });
      await linesOf(lines, made.header!);
      await linesOf(lines, "grpc-trace-1");
      await linesOf(lines, "grpc-trace-2");
    } finally {
      session.close();
    }
  });

  it("two service instances make different ids", async () => {
    const other = await startLogged(database.db);
    try {
      const a = await send(url, "GET", "/healthz", {});
      const b = await send(other.service.url, "GET", "/healthz", {});
      const [ia, ib] = [a.headers["x-request-id"] as string, b.headers["x-request-id"] as string];
      expect(ia).not.toBe(ib);
      // Per-instance prefixes: the counters of two instances never meet.
      expect(ia.slice(0, 17)).not.toBe(ib.slice(0, 17));
      expect(await linesOf(other.lines, ib)).toHaveLength(1);
      expect(requestLines(other.lines).some((l) => l.requestId === ia)).toBe(false);
    } finally {
      await other.service.close();
    }
  });
});

describe("request lines off above info", () => {
  it("LOG_LEVEL=warn writes no request line, and ids still go back", async () => {
    const database = await createTestDatabase("pglite");
    const text: string[] = [];
    const log = pino({ level: "warn" }, { write: (s: string) => void text.push(s) });
    const service = await startPortcullis(testConfig({ logLevel: "warn" }), { db: database.db, log });
    try {
      await service.ready;
      const answers = [await send(service.url, "GET", "/healthz", {}), await send(service.url, "POST", "/api/v1/authorization/check", { "content-type": "application/json" }, "{}")];
      for (const answer of answers) expect(answer.headers["x-request-id"]).toMatch(/^req_/);
      await send(service.url, "GET", "/readyz", {});
      expect(text.filter((l) => l.includes('"msg":"request"'))).toEqual([]);
    } finally {
      await service.close();
      await database.dispose();
    }
  });
});
