/**
 * No connection is held open for free: on a real port, with small timeouts,
 * each kind of stall is closed once its own timeout passes (not before),
 * on both protocols, and connections above the cap are closed as they
 * arrive. The HTTP/1.1 cases also prove that Node's headersTimeout and
 * requestTimeout apply to the connections the listener hands to the
 * HTTP/1.1 server (its checker starts only on a "listening" event).
 */
import net from "node:net";
import { setTimeout as delay } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "./support/engines.js";
import { ErrorCode, Flag, FrameType, RawH2, Setting } from "./support/raw-h2.js";
import { startTestService, type TestService } from "./support/service.js";

const HEADERS_MS = 300;
const REQUEST_MS = 600;
const IDLE_MS = 900;
/** Timers are checked a few times per timeout; allow that and a busy machine. */
const SLACK_MS = 600;

interface Stall {
  /** Milliseconds from the end of the client's bytes to the server closing. */
  ms: number;
  /** What the server sent. */
  received: string;
}

/** Connects, writes `bytes` (if any), and waits for the server to close the connection. */
async function stall(port: number, bytes: string, within: number): Promise<Stall> {
  const socket = net.connect(port, "127.0.0.1");
  socket.setNoDelay(true);
  await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject));
  const chunks: Buffer[] = [];
  socket.on("data", (c: Buffer) => chunks.push(c));
  socket.on("error", () => undefined);
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  if (bytes !== "") await new Promise<void>((resolve) => socket.write(bytes, () => resolve()));
  const started = Date.now();
  const outcome = await Promise.race([closed.then(() => "closed"), delay(within).then(() => "open")]);
  socket.destroy();
  if (outcome === "open") throw new Error(`still open after ${within} ms; received ${JSON.stringify(Buffer.concat(chunks).toString("latin1"))}`);
  return { ms: Date.now() - started, received: Buffer.concat(chunks).toString("latin1") };
}

const h2Request = (path: string, method = "GET"): [string, string][] => [
  [":method", method],
  [":path", path],
  [":scheme", "http"],
  [":authority", "localhost"],
];

describe("connection timeouts", () => {
  let database: TestDatabase;
  let service: TestService;

  beforeAll(async () => {
    database = await createTestDatabase("pglite");
    service = await startTestService(database.db, { headersTimeoutMs: HEADERS_MS, requestTimeoutMs: REQUEST_MS, idleTimeoutMs: IDLE_MS });
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  it.each([
    { name: "a connection that sends nothing", bytes: "", timeout: HEADERS_MS, answer: "" },
    { name: "half an HTTP/2 preface", bytes: "PRI * HTTP/2.0\r\n", timeout: HEADERS_MS, answer: "" },
    { name: "half a request line", bytes: "GET /heal", timeout: HEADERS_MS, answer: "408" },
    { name: "half the headers", bytes: "GET /healthz HTTP/1.1\r\nHost: x\r\n", timeout: HEADERS_MS, answer: "408" },
    {
      name: "half a body",
      bytes: 'POST /api/v1/applications HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"appId":',
      timeout: REQUEST_MS,
      answer: "408",
    },
  ])("closes $name when its timeout passes", async ({ bytes, timeout, answer }) => {
    const result = await stall(service.port, bytes, timeout + SLACK_MS + 1_000);
    expect(result.ms).toBeGreaterThanOrEqual(timeout - 50);
    expect(result.ms).toBeLessThanOrEqual(timeout + SLACK_MS);
    if (answer === "") expect(result.received).toBe("");
    else expect(result.received).toMatch(new RegExp(`^HTTP/1.1 ${answer} `));
  });

  // Node closes an idle keep-alive connection a second after the timeout it
  // advertises (Keep-Alive: timeout=...), so that clients close first.
  it("closes an HTTP/1.1 keep-alive connection idle for the idle timeout (and Node's second of grace)", async () => {
    const result = await stall(service.port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", IDLE_MS + 1_000 + SLACK_MS + 1_000);
    expect(result.received).toMatch(/^HTTP\/1.1 200 /);
    expect(result.received).toMatch(new RegExp(`\r\nKeep-Alive: timeout=${Math.floor(IDLE_MS / 1000)}\r\n`, "i"));
    expect(result.ms).toBeGreaterThanOrEqual(IDLE_MS - 50);
    expect(result.ms).toBeLessThanOrEqual(IDLE_MS + 1_000 + SLACK_MS);
  });

  it("keeps an HTTP/1.1 connection that sends its request in time", async () => {
    const socket = net.connect(service.port, "127.0.0.1");
    await new Promise<void>((resolve) => socket.once("connect", resolve));
    let received = "";
    socket.on("data", (c: Buffer) => (received += c.toString("latin1")));
    socket.write("GET /healthz HTTP/1.1\r\n");
    await delay(HEADERS_MS / 2);
    socket.write("Host: x\r\n\r\n");
    await delay(HEADERS_MS);
    expect(received).toMatch(/^HTTP\/1.1 200 /);
    expect(socket.destroyed).toBe(false);
    socket.destroy();
  });

  it("answers a request that arrived in time though the loop was busy past the deadline", async () => {
    const socket = net.connect(service.port, "127.0.0.1");
    await new Promise<void>((resolve) => socket.once("connect", resolve));
    await delay(50); // the listener has taken the connection and started its deadline
    let received = "";
    socket.on("data", (c: Buffer) => (received += c.toString("latin1")));
    socket.on("error", () => undefined);
    const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
    socket.write("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    // The service runs in this process: hold its loop past the deadline
    // while the request waits, unread, in the socket.
    const until = Date.now() + HEADERS_MS + 300;
    while (Date.now() < until) {
      // busy
    }
    await Promise.race([closed, delay(HEADERS_MS + SLACK_MS)]);
    expect(received).toMatch(/^HTTP\/1.1 200 /);
    socket.destroy();
  });

  it("closes a silent HTTP/2 connection with GOAWAY after the idle timeout", async () => {
    const client = await RawH2.connect(service.port);
    await client.settingsAck();
    const started = Date.now();
    expect(await client.whenClosed(IDLE_MS + SLACK_MS + 1_000)).toBe(true);
    const ms = Date.now() - started;
    expect(ms).toBeGreaterThanOrEqual(IDLE_MS - 50);
    expect(ms).toBeLessThanOrEqual(IDLE_MS + SLACK_MS);
    expect((await client.goaway(0)).code).toBe(ErrorCode.NO_ERROR);
  });

  it("does not count PINGs as activity on an HTTP/2 connection", async () => {
    const client = await RawH2.connect(service.port);
    await client.settingsAck();
    const started = Date.now();
    const pinging = setInterval(() => void client.send(FrameType.PING, 0, 0, Buffer.alloc(8)), 100);
    try {
      expect(await client.whenClosed(IDLE_MS + SLACK_MS + 1_000)).toBe(true);
    } finally {
      clearInterval(pinging);
    }
    expect(Date.now() - started).toBeLessThanOrEqual(IDLE_MS + SLACK_MS);
    expect(client.frames.some((f) => f.type === FrameType.PING && (f.flags & Flag.ACK) !== 0)).toBe(true);
  });

  it.each([
    {
      name: "a request whose body stops coming",
      settings: [] as [number, number][],
      send: (c: RawH2) => c.request(1, [...h2Request("/api/v1/applications", "POST"), ["content-type", "application/json"]], false),
    },
    {
      name: "an answer the client never opens its window for",
      settings: [[Setting.INITIAL_WINDOW_SIZE, 0]] as [number, number][],
      send: (c: RawH2) => c.request(1, h2Request("/healthz"), true),
    },
    {
      name: "a unary gRPC call whose message never ends",
      settings: [] as [number, number][],
      send: async (c: RawH2) => {
        await c.request(1, [...h2Request("/authz.v1.CheckService/Check", "POST"), ["content-type", "application/grpc"], ["te", "trailers"]], false);
        return c.data(1, Buffer.from([0, 0, 0, 0, 40, 0x0a]), false);
      },
    },
  ])("resets an HTTP/2 stream with $name after the request timeout", async ({ settings, send }) => {
    const client = await RawH2.connect(service.port, settings);
    try {
      await client.settingsAck();
      await send(client);
      const started = Date.now();
      expect(await client.reset(1, REQUEST_MS + SLACK_MS + 1_000)).toBe(ErrorCode.CANCEL);
      const ms = Date.now() - started;
      expect(ms).toBeGreaterThanOrEqual(REQUEST_MS - 50);
      expect(ms).toBeLessThanOrEqual(REQUEST_MS + SLACK_MS);
      // The connection itself stays usable until it is idle.
      expect(client.closed).toBe(false);
    } finally {
      client.close();
    }
  });
});

describe("connection cap", () => {
  let database: TestDatabase;
  let service: TestService;
  const CAP = 4;

  beforeAll(async () => {
    database = await createTestDatabase("pglite");
    service = await startTestService(database.db, { maxConnections: CAP });
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  /** Resolves with "closed" when the server closes a new connection within `ms`, else "open". */
  async function fate(socket: net.Socket, ms: number): Promise<"closed" | "open"> {
    return Promise.race([new Promise<"closed">((resolve) => socket.once("close", () => resolve("closed"))), delay(ms).then(() => "open" as const)]);
  }

  it("closes connections above the cap at once, on both protocols, and takes new ones when one ends", async () => {
    const held: net.Socket[] = [];
    const h2 = await RawH2.connect(service.port);
    held.push(h2.socket);
    for (let i = 1; i < CAP; i++) {
      const socket = net.connect(service.port, "127.0.0.1");
      socket.on("error", () => undefined);
      await new Promise<void>((resolve) => socket.once("connect", resolve));
      socket.write("GET /heal"); // half a request line
      held.push(socket);
    }
    await delay(100);
    const over = net.connect(service.port, "127.0.0.1");
    over.on("error", () => undefined);
    expect(await fate(over, 1_000)).toBe("closed");
    for (const socket of held) expect(socket.destroyed).toBe(false);

    held.pop()!.destroy();
    await delay(100);
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(service.port, "127.0.0.1", () => socket.write("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
      let text = "";
      socket.on("data", (c: Buffer) => (text += c.toString("latin1")));
      socket.on("close", () => resolve(text));
      socket.on("error", reject);
    });
    expect(answer).toMatch(/^HTTP\/1.1 200 /);
    for (const socket of held) socket.destroy();
  });
});
