/**
 * One port, every protocol, on each engine: HTTP/1.1 and HTTP/2 with prior
 * knowledge are told apart from the first bytes of a connection, however
 * they are split; keep-alive and pipelining work; and a graceful shutdown
 * lets in-flight requests finish, then refuses new connections.
 */
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { Duplex } from "node:stream";
import { setTimeout as delay } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, createAppWithKey, startTestService, type TestService } from "./support/service.js";

// ---------------------------------------------------------------------------
// Helpers: raw sockets, HTTP/2 with prior knowledge, slow uploads.

const HOST = "127.0.0.1";

/** Opens a TCP connection; resolves once it is connected. */
function connectTcp(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, HOST);
    socket.setNoDelay(true);
    socket.once("connect", () => {
      socket.off("error", reject);
      resolve(socket);
    });
    socket.once("error", reject);
  });
}

/** Whether a new TCP connection to the port is accepted or refused. */
async function tcpOutcome(port: number): Promise<"accepted" | "refused"> {
  try {
    const socket = await connectTcp(port);
    socket.destroy();
    return "accepted";
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ECONNREFUSED") return "refused";
    throw error;
  }
}

/**
 * Writes `data` on a fresh connection in chunks of `chunkSize` bytes with a
 * pause between them (each its own TCP segment), and returns everything the
 * server sent until it closed the connection.
 */
async function rawExchange(port: number, data: string, chunkSize: number, pauseMs = 2): Promise<string> {
  const socket = await connectTcp(port);
  const received: Buffer[] = [];
  const ended = new Promise<void>((resolve, reject) => {
    socket.on("data", (chunk: Buffer) => received.push(chunk));
    socket.once("end", () => resolve());
    socket.once("error", reject);
  });
  const bytes = Buffer.from(data);
  for (let i = 0; i < bytes.length; i += chunkSize) {
    await new Promise<void>((resolve, reject) => socket.write(bytes.subarray(i, i + chunkSize), (e) => (e ? reject(e) : resolve())));
    await delay(pauseMs);
  }
  await ended;
  socket.destroy();
  return Buffer.concat(received).toString("utf8");
}

interface ParsedResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Splits a raw HTTP/1.1 byte stream into its responses (Content-Length bodies only). */
function parseHttp1Responses(raw: string): ParsedResponse[] {
  const responses: ParsedResponse[] = [];
  let rest = raw;
  while (rest.length > 0) {
    const headEnd = rest.indexOf("\r\n\r\n");
    if (headEnd < 0) throw new Error(`incomplete response head: ${JSON.stringify(rest)}`);
    const [statusLine, ...headerLines] = rest.slice(0, headEnd).split("\r\n");
    const status = /^HTTP\/1\.1 (\d{3}) /.exec(statusLine ?? "");
    if (status === null) throw new Error(`not an HTTP/1.1 status line: ${JSON.stringify(statusLine)}`);
    const headers: Record<string, string> = {};
    for (const line of headerLines) {
      const colon = line.indexOf(":");
      headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
    }
    const length = Number(headers["content-length"] ?? "0");
    const bodyStart = headEnd + 4;
    responses.push({ status: Number(status[1]), headers, body: rest.slice(bodyStart, bodyStart + length) });
    rest = rest.slice(bodyStart + length);
  }
  return responses;
}

/**
 * A client connection whose first `throttledBytes` bytes go out `chunkSize`
 * at a time with a pause in between, then at full speed: for node:http2's
 * `createConnection`, so the HTTP/2 preface reaches the server in pieces.
 */
function throttledConnection(
  port: number,
  throttledBytes: number,
  chunkSize: number,
  stats: { throttledWrites: number },
  pauseMs = 3,
): Duplex {
  const socket = net.connect(port, HOST);
  socket.setNoDelay(true);
  let sent = 0;
  const writeNow = (chunk: Buffer) => new Promise<void>((resolve, reject) => socket.write(chunk, (e) => (e ? reject(e) : resolve())));
  const duplex = new Duplex({
    write(chunk: Buffer, _encoding, callback) {
      void (async () => {
        let rest = chunk;
        while (rest.length > 0 && sent < throttledBytes) {
          const n = Math.min(chunkSize, throttledBytes - sent, rest.length);
          await writeNow(rest.subarray(0, n));
          stats.throttledWrites++;
          sent += n;
          rest = rest.subarray(n);
          await delay(pauseMs);
        }
        if (rest.length > 0) await writeNow(rest);
      })().then(() => callback(), callback);
    },
    read() {
      socket.resume();
    },
    final(callback) {
      socket.end(callback);
    },
    destroy(error, callback) {
      socket.destroy();
      callback(error);
    },
  });
  socket.on("data", (data: Buffer) => {
    if (!duplex.push(data)) socket.pause();
  });
  socket.on("end", () => duplex.push(null));
  socket.on("error", (error) => duplex.destroy(error));
  return duplex;
}

/** One HTTP/2 request on a session; resolves with the status and the body text. */
function h2Request(
  session: http2.ClientHttp2Session,
  headers: http2.OutgoingHttpHeaders,
  body?: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const stream = session.request(headers, { endStream: body === undefined });
    let status = 0;
    let text = "";
    stream.setEncoding("utf8");
    stream.on("response", (h) => (status = Number(h[":status"])));
    stream.on("data", (chunk: string) => (text += chunk));
    stream.on("end", () => resolve({ status, body: text }));
    stream.on("error", reject);
    if (body !== undefined) stream.end(body);
  });
}

function h2Connect(url: string, options: http2.ClientSessionOptions = {}): Promise<http2.ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(url, options);
    session.once("connect", () => {
      session.off("error", reject);
      resolve(session);
    });
    session.once("error", reject);
  });
}

const closeSession = (session: http2.ClientHttp2Session) => new Promise<void>((resolve) => session.close(() => resolve()));

/** A GET over an HTTP/1.1 agent; reports whether the request reused a kept-alive socket. */
function agentGet(
  port: number,
  agent: http.Agent,
  path: string,
  key?: string,
): Promise<{ status: number; body: string; reusedSocket: boolean; localPort: number | undefined }> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: HOST, port, path, agent, headers: key === undefined ? {} : { "x-api-key": key } }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (body += chunk));
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, body, reusedSocket: req.reusedSocket, localPort: req.socket?.localPort }),
      );
    });
    req.on("error", reject);
  });
}

const catalogBody = JSON.stringify({
  resources: [
    { resource: "document", description: "A text document ".repeat(20).trim(), actions: ["read", "update", "comment"] },
    { resource: "invoice", description: "", actions: ["read", "approve"] },
  ],
});

/**
 * A request whose body goes out in two halves: the function that starts it
 * returns once the headers and the first half are written; `finish` writes
 * the rest and resolves with the answer.
 */
interface SlowUpload {
  finish(): Promise<{ status: number; body: string }>;
}

async function slowHttp1Put(port: number, path: string, key: string, body: string): Promise<SlowUpload> {
  const half = Math.floor(body.length / 2);
  const req = http.request({
    host: HOST,
    port,
    method: "PUT",
    path,
    agent: false,
    headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body), "x-api-key": key },
  });
  const answer = new Promise<{ status: number; body: string }>((resolve, reject) => {
    req.on("response", (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (text += chunk));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text }));
      res.on("error", reject);
    });
    req.on("error", reject);
  });
  await new Promise<void>((resolve, reject) => req.write(body.slice(0, half), (e) => (e ? reject(e) : resolve())));
  return {
    finish() {
      req.end(body.slice(half));
      return answer;
    },
  };
}

/** Like slowHttp1Put, over HTTP/2 with prior knowledge (any method, path and headers). */
async function slowHttp2Request(url: string, headers: http2.OutgoingHttpHeaders, body: string): Promise<SlowUpload> {
  const half = Math.floor(body.length / 2);
  const session = await h2Connect(url);
  const stream = session.request({ ...headers, "content-length": Buffer.byteLength(body) });
  const answer = new Promise<{ status: number; body: string }>((resolve, reject) => {
    let status = 0;
    let text = "";
    stream.setEncoding("utf8");
    stream.on("response", (h) => (status = Number(h[":status"])));
    stream.on("data", (chunk: string) => (text += chunk));
    stream.on("end", () => resolve({ status, body: text }));
    stream.on("error", reject);
  });
  await new Promise<void>((resolve, reject) => stream.write(body.slice(0, half), (e?: Error | null) => (e ? reject(e) : resolve())));
  return {
    async finish() {
      stream.end(body.slice(half));
      try {
        return await answer;
      } finally {
        session.destroy();
      }
    },
  };
}

// ---------------------------------------------------------------------------

describe.each(oneEngine(import.meta.url))("one port on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let appKey: string;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    appKey = await createAppWithKey(service, "shop");
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  describe("HTTP/1.1", () => {
    it("GET /healthz answers 200 without a key", async () => {
      const res = await fetch(`${service.url}/healthz`);
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ status: "ok" });
    });

    it("GET /readyz answers ready with the database engine", async () => {
      const res = await fetch(`${service.url}/readyz`);
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ status: "ready", database: engine });
    });

    it("serves several requests on one kept-alive connection", async () => {
      const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
      try {
        const answers = [];
        for (const [path, key] of [
          ["/healthz", undefined],
          ["/readyz", undefined],
          ["/api/v1/applications/shop", appKey],
          ["/api/v1/applications/shop/resources", appKey],
          ["/healthz", undefined],
        ] as const) {
          answers.push(await agentGet(service.port, agent, path, key));
        }
        expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200]);
        expect(answers.map((a) => a.reusedSocket)).toEqual([false, true, true, true, true]);
        expect(new Set(answers.map((a) => a.localPort)).size).toBe(1);
        expect(JSON.parse(answers[2]!.body)).toMatchObject({ appId: "shop" });
      } finally {
        agent.destroy();
      }
    });

    it("answers pipelined requests in order", async () => {
      const raw = await rawExchange(
        service.port,
        "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" +
          `GET /api/v1/applications/shop HTTP/1.1\r\nHost: x\r\nX-API-Key: ${appKey}\r\n\r\n` +
          "GET /api/v1/applications/shop HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        64 * 1024,
      );
      const responses = parseHttp1Responses(raw);
      expect(responses.map((r) => r.status)).toEqual([200, 200, 401]);
      expect(JSON.parse(responses[0]!.body)).toEqual({ status: "ok" });
      expect(JSON.parse(responses[1]!.body)).toMatchObject({ appId: "shop", name: "shop" });
      expect(JSON.parse(responses[2]!.body)).toMatchObject({ code: "unauthenticated" });
    });

    it("recognises a request sent one byte at a time", async () => {
      const raw = await rawExchange(service.port, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 1);
      const [response, ...more] = parseHttp1Responses(raw);
      expect(more).toEqual([]);
      expect(response!.status).toBe(200);
      expect(JSON.parse(response!.body)).toEqual({ status: "ok" });
    });

    it("recognises a byte-at-a-time request whose method starts like the HTTP/2 preface (P…)", async () => {
      const body = JSON.stringify({ resources: [{ resource: "note", actions: ["read"] }] });
      const raw = await rawExchange(
        service.port,
        "PUT /api/v1/applications/shop/resources HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" +
          `X-API-Key: ${appKey}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
        1,
        1,
      );
      const [response] = parseHttp1Responses(raw);
      expect(response!.status).toBe(200);
      expect(JSON.parse(response!.body).resources.map((r: { resource: string }) => r.resource)).toEqual(["note"]);
    });

    it("survives a client that sends part of the HTTP/2 preface and hangs up", async () => {
      const socket = await connectTcp(service.port);
      socket.write("PRI * HT");
      await delay(20);
      socket.destroy();
      await delay(20);
      const res = await fetch(`${service.url}/healthz`);
      expect(res.status).toBe(200);
    });
  });

  describe("HTTP/2 with prior knowledge", () => {
    it("GET /healthz and /readyz answer 200 on the same port", async () => {
      const session = await h2Connect(service.url);
      try {
        expect(session.alpnProtocol).toBe("h2c");
        const health = await h2Request(session, { ":path": "/healthz" });
        expect(health).toEqual({ status: 200, body: JSON.stringify({ status: "ok" }) });
        const ready = await h2Request(session, { ":path": "/readyz" });
        expect(ready.status).toBe(200);
        expect(JSON.parse(ready.body)).toEqual({ status: "ready", database: engine });
      } finally {
        await closeSession(session);
      }
    });

    it("serves several concurrent streams on one session (health checks and Connect calls)", async () => {
      const session = await h2Connect(service.url);
      try {
        const connectGet = (key?: string) =>
          h2Request(
            session,
            {
              ":method": "POST",
              ":path": "/authz.v1.ApplicationService/GetApplication",
              "content-type": "application/json",
              ...(key === undefined ? {} : { "x-api-key": key }),
            },
            JSON.stringify({ appId: "shop" }),
          );
        const answers = await Promise.all([
          connectGet(appKey),
          connectGet(ADMIN_KEY),
          connectGet(),
          h2Request(session, { ":path": "/healthz" }),
          h2Request(session, { ":path": "/readyz" }),
        ]);
        expect(answers.map((a) => a.status)).toEqual([200, 200, 401, 200, 200]);
        expect(JSON.parse(answers[0]!.body).application).toMatchObject({ appId: "shop" });
        expect(JSON.parse(answers[1]!.body)).toEqual(JSON.parse(answers[0]!.body));
        expect(JSON.parse(answers[2]!.body)).toEqual({ code: "unauthenticated", message: "the X-API-Key header is missing" });
      } finally {
        await closeSession(session);
      }
    });

    // API.md: one port serves the REST API; the HTTP/2 Fastify app registers
    // the same gateway, so REST must answer over h2c exactly as over HTTP/1.1.
    it("serves the REST API under /api/v1 as over HTTP/1.1", async () => {
      const session = await h2Connect(service.url);
      try {
        for (const [path, key] of [
          ["/api/v1/applications/shop", appKey],
          ["/api/v1/applications/shop", null],
          ["/api/v1/applications/no-such-app", ADMIN_KEY],
          ["/api/v1/applications/shop/resources", appKey],
        ] as const) {
          const overH1 = await service.call("GET", path, { key });
          const overH2 = await h2Request(session, { ":path": path, ...(key === null ? {} : { "x-api-key": key }) });
          // The same answer, but for the request id an error body carries (each request has its own).
          const { requestId: id1, ...body1 } = overH1.body;
          const { requestId: id2, ...body2 } = JSON.parse(overH2.body);
          expect({ path, status: overH2.status, body: body2 }).toEqual({ path, status: overH1.status, body: body1 });
          expect(typeof id2).toBe(typeof id1);
        }
        const created = await h2Request(
          session,
          { ":method": "POST", ":path": "/api/v1/applications", "x-api-key": ADMIN_KEY, "content-type": "application/json" },
          JSON.stringify({ appId: "over-h2" }),
        );
        expect(created.status).toBe(201);
        expect(JSON.parse(created.body)).toMatchObject({ appId: "over-h2", name: "over-h2" });
      } finally {
        await closeSession(session);
      }
    });

    // REST over h2c is relayed to Node's HTTP/2 server (src/transport/http/h2-server.ts):
    // bodies larger than every flow-control window must pass through whole.
    it("relays REST bodies larger than the HTTP/2 windows, and refuses one over the limit with 413", async () => {
      const session = await h2Connect(service.url);
      try {
        const headers = { ":method": "POST", ":path": "/api/v1/applications", "x-api-key": ADMIN_KEY, "content-type": "application/json" };
        const big = await h2Request(session, headers, JSON.stringify({ appId: "big-h2", name: "n".repeat(3 << 20) }));
        expect(big.status).toBe(400);
        expect(JSON.parse(big.body).message).toMatch(/name/);
        const over = await h2Request(session, headers, JSON.stringify({ appId: "x", name: "n".repeat(9 << 20) }));
        expect(over.status).toBe(413);
        const after = await h2Request(session, { ":path": "/healthz" });
        expect(after.status).toBe(200);
        // Expect: 100-continue: the 100 comes back through the relay before the body is sent.
        const continued = await new Promise<number>((resolve, reject) => {
          const req = session.request({ ...headers, expect: "100-continue" });
          req.on("continue", () => req.end(JSON.stringify({ appId: "continued-h2" })));
          req.on("response", (h) => resolve(Number(h[":status"])));
          req.on("error", reject);
          req.resume();
        });
        expect(continued).toBe(201);
      } finally {
        await closeSession(session);
      }
    });

    it.each([
      ["one byte at a time", 1],
      ["8 bytes at a time (\"PRI * HT\", ...)", 8],
      ["23 bytes, then the rest", 23],
    ])("recognises the preface sent %s", async (_name, chunkSize) => {
      const stats = { throttledWrites: 0 };
      const session = await h2Connect(service.url, {
        createConnection: () => throttledConnection(service.port, 24, chunkSize, stats),
      });
      try {
        const health = await h2Request(session, { ":path": "/healthz" });
        expect(health).toEqual({ status: 200, body: JSON.stringify({ status: "ok" }) });
        const ready = await h2Request(session, { ":path": "/readyz" });
        expect(ready.status).toBe(200);
        // The 24-byte preface really went out in pieces.
        expect(stats.throttledWrites).toBe(Math.ceil(24 / chunkSize));
      } finally {
        await closeSession(session);
      }
    });
  });

  describe("graceful shutdown", () => {
    it.each([
      ["HTTP/1.1", "drain-h1"],
      ["HTTP/2", "drain-h2"],
    ])("lets an in-flight %s request finish, then refuses new connections", async (version, appId) => {
      // A separate instance on the same database, so closing it leaves the others running.
      const draining = await startTestService(database.db);
      let upload: SlowUpload | undefined;
      let closing: Promise<void> | undefined;
      try {
        const key = await createAppWithKey(draining, appId);
        const path = `/api/v1/applications/${appId}/resources`;
        // Over HTTP/1.1 a REST PUT; over HTTP/2 the same write as a Connect call.
        upload =
          version === "HTTP/1.1"
            ? await slowHttp1Put(draining.port, path, key, catalogBody)
            : await slowHttp2Request(
                draining.url,
                {
                  ":method": "POST",
                  ":path": "/authz.v1.CatalogService/PutCatalog",
                  "content-type": "application/json",
                  "x-api-key": key,
                },
                JSON.stringify({ appId, ...JSON.parse(catalogBody) }),
              );
        await delay(100); // the server has the headers and half the body

        let closed = false;
        closing = draining.close().then(() => {
          closed = true;
        });
        await delay(100);
        expect(closed).toBe(false); // waits for the in-flight request
        expect(await tcpOutcome(draining.port)).toBe("refused"); // no longer accepting

        const answer = await upload.finish();
        upload = undefined;
        expect(answer.status).toBe(200);
        expect(JSON.parse(answer.body).resources.map((r: { resource: string }) => r.resource)).toEqual(["document", "invoice"]);

        await closing;
        expect(closed).toBe(true);
        expect(await tcpOutcome(draining.port)).toBe("refused");

        // The write was committed: the service still running reads it.
        const stored = await service.call("GET", path);
        expect(stored.status).toBe(200);
        expect(stored.body.resources.map((r: { resource: string }) => r.resource)).toEqual(["document", "invoice"]);
      } finally {
        if (upload !== undefined) await upload.finish().catch(() => undefined);
        await (closing ?? draining.close());
      }
    });
  });
});
