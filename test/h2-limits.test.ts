/**
 * The HTTP/2 limits, each seen on the wire of a real port with raw frames:
 * the SETTINGS the server advertises, concurrent streams, the header list,
 * SETTINGS and PING floods, too many settings in one frame, rapid reset,
 * malformed requests (nghttp2's invalid frames), nghttp2's memory per
 * connection, and the service's own cap on calls in progress per
 * connection (reset streams included). After each, a new connection is
 * served as usual.
 */
import http2, { type IncomingHttpHeaders, type ServerHttp2Stream } from "node:http2";
import { setTimeout as delay } from "node:timers/promises";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { StreamServer, StreamWork } from "../src/transport/grpc/stream-server.js";
import { H2Server, MAX_HEADER_LIST_BYTES } from "../src/transport/http/h2-server.js";
import { createTestDatabase, type TestDatabase } from "./support/engines.js";
import { encodeHeaders, ErrorCode, Flag, frame, FrameType, RawH2, Setting, settingsPayload, u32 } from "./support/raw-h2.js";
import { ADMIN_KEY, startTestService, type TestService } from "./support/service.js";

const MAX_STREAMS = 8;

const get = (path = "/healthz"): [string, string][] => [
  [":method", "GET"],
  [":path", path],
  [":scheme", "http"],
  [":authority", "localhost"],
];
/** A unary gRPC call whose message has not ended: its stream stays open. */
const openCall: [string, string][] = [
  [":method", "POST"],
  [":path", "/authz.v1.CheckService/Check"],
  [":scheme", "http"],
  [":authority", "localhost"],
  ["content-type", "application/grpc"],
  ["te", "trailers"],
];

/** GET /healthz over a new node:http2 connection. */
async function healthy(url: string): Promise<number> {
  const session = http2.connect(url);
  session.on("error", () => undefined);
  try {
    return await new Promise<number>((resolve, reject) => {
      const req = session.request({ ":path": "/healthz" });
      req.on("response", (h) => resolve(Number(h[":status"])));
      req.on("error", reject);
      req.resume();
    });
  } finally {
    session.close();
  }
}

/** A header block in HEADERS and CONTINUATION frames of at most 16 KiB (the default frame size). */
function fragmented(streamId: number, fields: [string, string][], endStream: boolean): Buffer {
  const block = encodeHeaders(fields);
  const parts: Buffer[] = [];
  for (let i = 0; i < block.length; i += 16_384) parts.push(block.subarray(i, i + 16_384));
  return Buffer.concat(
    parts.map((part, i) => {
      const last = i === parts.length - 1 ? Flag.END_HEADERS : 0;
      return i === 0 ? frame(FrameType.HEADERS, last | (endStream ? Flag.END_STREAM : 0), streamId, part) : frame(FrameType.CONTINUATION, last, streamId, part);
    }),
  );
}

describe("HTTP/2 limits", () => {
  let database: TestDatabase;
  let service: TestService;

  beforeAll(async () => {
    database = await createTestDatabase("pglite");
    service = await startTestService(database.db, { h2MaxConcurrentStreams: MAX_STREAMS, h2MaxSessionMemoryMb: 1 });
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  it("advertises its limits in SETTINGS", async () => {
    const client = await RawH2.connect(service.port);
    try {
      const settings = await client.serverSettings();
      expect(settings.get(Setting.MAX_CONCURRENT_STREAMS)).toBe(MAX_STREAMS);
      expect(settings.get(Setting.MAX_HEADER_LIST_SIZE)).toBe(MAX_HEADER_LIST_BYTES);
      expect(settings.get(Setting.ENABLE_PUSH)).toBe(0);
    } finally {
      client.close();
    }
  });

  it("refuses streams over the limit with REFUSED_STREAM until the client has acknowledged it", async () => {
    const client = await RawH2.connect(service.port);
    try {
      for (let i = 0; i < MAX_STREAMS + 2; i++) await client.request(1 + 2 * i, openCall, false);
      expect(await client.reset(1 + 2 * MAX_STREAMS)).toBe(ErrorCode.REFUSED_STREAM);
      expect(await client.reset(3 + 2 * MAX_STREAMS)).toBe(ErrorCode.REFUSED_STREAM);
      await delay(100);
      expect(client.frames.some((f) => f.type === FrameType.RST_STREAM && f.streamId < 1 + 2 * MAX_STREAMS)).toBe(false);
    } finally {
      client.close();
    }
    expect(await healthy(service.url)).toBe(200);
  });

  it("ends the connection of a client that opens more streams than it acknowledged", async () => {
    const client = await RawH2.connect(service.port);
    try {
      await client.serverSettings();
      await client.settingsAck();
      await delay(50);
      for (let i = 0; i < MAX_STREAMS + 1; i++) await client.request(1 + 2 * i, openCall, false);
      await client.goaway();
      expect(await client.whenClosed(2_000)).toBe(true);
    } finally {
      client.close();
    }
    expect(await healthy(service.url)).toBe(200);
  });

  it("answers a request of 60 KB of headers, and ends the connection over the 64 KiB list", async () => {
    const client = await RawH2.connect(service.port);
    try {
      await client.settingsAck();
      await client.write(fragmented(1, [...get(), ["x-large", "a".repeat(60_000)]], true));
      await client.next((f) => f.type === FrameType.HEADERS && f.streamId === 1);
      await client.write(fragmented(3, [...get(), ["x-large", "a".repeat(70_000)]], true));
      // The HPACK state is shared by the connection: a block cut short ends it,
      // and promptly: a client that waits for the close (grpc's C core does)
      // must not hang until the idle timeout.
      expect((await client.goaway()).code).toBe(ErrorCode.COMPRESSION_ERROR);
      expect(await client.whenClosed(4_000), "the connection closed within 4 s of its GOAWAY (not the idle timeout)").toBe(true);
    } finally {
      client.close();
    }
    expect(await healthy(service.url)).toBe(200);
  });

  it.each([
    ["SETTINGS", frame(FrameType.SETTINGS, 0, 0)],
    ["PING", frame(FrameType.PING, 0, 0, Buffer.alloc(8))],
  ])("ends the connection of a %s flood whose acknowledgements the client does not read", async (_name, one) => {
    const client = await RawH2.connect(service.port);
    try {
      client.socket.pause();
      await client.write(Buffer.concat(Array.from({ length: 5_000 }, () => one)));
      await delay(200);
      client.socket.resume();
      await client.goaway();
      expect(await client.whenClosed(2_000)).toBe(true);
      // Far fewer acknowledgements than frames were queued for it.
      expect(client.frames.filter((f) => (f.flags & Flag.ACK) !== 0).length).toBeLessThan(2_000);
    } finally {
      client.close();
    }
    expect(await healthy(service.url)).toBe(200);
  });

  it("ends the connection of a SETTINGS frame with more than 32 entries (ENHANCE_YOUR_CALM)", async () => {
    const client = await RawH2.connect(service.port);
    try {
      await client.send(FrameType.SETTINGS, 0, 0, settingsPayload(Array.from({ length: 40 }, () => [Setting.HEADER_TABLE_SIZE, 4096] as [number, number])));
      expect((await client.goaway()).code).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    } finally {
      client.close();
    }
  });

  it("ends the connection of a rapid reset after nghttp2's burst of 1,000 resets", async () => {
    const client = await RawH2.connect(service.port);
    try {
      await client.settingsAck();
      const frames: Buffer[] = [];
      for (let i = 0; i < 1_500; i++) {
        const id = 1 + 2 * i;
        frames.push(frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, id, encodeHeaders(get())));
        frames.push(frame(FrameType.RST_STREAM, 0, id, u32(ErrorCode.CANCEL)));
      }
      await client.write(Buffer.concat(frames));
      const goaway = await client.goaway();
      // nghttp2 1.61 says INTERNAL_ERROR here; newer ones ENHANCE_YOUR_CALM.
      expect([ErrorCode.INTERNAL_ERROR, ErrorCode.ENHANCE_YOUR_CALM]).toContain(goaway.code);
      expect(goaway.lastStreamId).toBeGreaterThan(1_000);
      expect(goaway.lastStreamId).toBeLessThan(2 * 1_500);
    } finally {
      client.close();
    }
    expect(await healthy(service.url)).toBe(200);
  });

  it("resets malformed requests, and ends the connection after 16 of them", async () => {
    const client = await RawH2.connect(service.port);
    try {
      await client.settingsAck();
      let sent = 0;
      for (; sent < 40 && !client.closed; sent++) {
        await client.request(1 + 2 * sent, [...get(), ["X-Upper-Case", "not allowed in HTTP/2"]], true);
        await delay(10);
      }
      expect(await client.reset(1)).toBe(ErrorCode.PROTOCOL_ERROR);
      await client.goaway();
      const resets = client.frames.filter((f) => f.type === FrameType.RST_STREAM).length;
      expect(resets).toBeGreaterThanOrEqual(16);
      expect(resets).toBeLessThanOrEqual(18);
    } finally {
      client.close();
    }
    expect(await healthy(service.url)).toBe(200);
  });

  it("refuses new streams once answers the client does not read fill nghttp2's memory for the connection", async () => {
    // A catalog of about 100 KB to read back, many times, into a window of 0.
    const resources = Array.from({ length: 50 }, (_, i) => ({ resource: `r${i}`, description: "d".repeat(2_000), actions: ["read"] }));
    expect((await service.call("POST", "/api/v1/applications", { body: { appId: "memory" } })).status).toBe(201);
    expect((await service.call("PUT", "/api/v1/applications/memory/resources", { body: { resources } })).status).toBe(200);
    const client = await RawH2.connect(service.port, [[Setting.INITIAL_WINDOW_SIZE, 0]]);
    try {
      await client.settingsAck();
      for (let i = 0; i < 40 && !client.closed; i++) {
        await client.request(1 + 2 * i, [...get("/api/v1/applications/memory/resources"), ["x-api-key", ADMIN_KEY]], true);
        await delay(20);
        // Keep at most a few streams open, so the stream limit is not what refuses them.
        if (i >= 4) await client.send(FrameType.RST_STREAM, 0, 1 + 2 * (i - 4), u32(ErrorCode.CANCEL));
      }
      const refused = client.frames.filter((f) => f.type === FrameType.RST_STREAM && f.payload.readUInt32BE(0) === ErrorCode.ENHANCE_YOUR_CALM);
      // The first streams are answered (their HEADERS go out; their DATA waits), later ones refused.
      expect(client.frames.filter((f) => f.type === FrameType.HEADERS).length).toBeGreaterThanOrEqual(5);
      expect(refused.length).toBeGreaterThan(0);
    } finally {
      client.close();
    }
    expect(await healthy(service.url)).toBe(200);
  });
});

describe("calls in progress per connection", () => {
  /** Calls that run until released; reset or not, they count until then. */
  class HeldCalls implements StreamServer {
    readonly running: { release(): void }[] = [];
    serve(stream: ServerHttp2Stream, _headers: IncomingHttpHeaders, work: StreamWork): boolean {
      stream.on("close", () => work.streamClosed(stream));
      stream.resume();
      this.running.push({ release: () => work.finished() });
      return true;
    }
  }
  const calls = new HeldCalls();
  const h2 = new H2Server({ maxConcurrentStreams: 4, maxSessionMemoryMb: 10, requestTimeoutMs: 30_000, idleTimeoutMs: 30_000 }, calls, pino({ level: "silent" }));
  let port = 0;

  beforeAll(async () => {
    await new Promise<void>((resolve) => h2.server.listen(0, "127.0.0.1", resolve));
    port = (h2.server.address() as { port: number }).port;
  });
  afterAll(async () => {
    h2.destroy();
    await new Promise((resolve) => h2.server.close(resolve));
  });

  it("refuses new streams while twice the stream limit of calls still run, reset streams included", async () => {
    const client = await RawH2.connect(port);
    try {
      await client.settingsAck();
      // Eight calls whose streams the client resets at once: their handlers still run.
      for (let i = 0; i < 8; i++) {
        const id = 1 + 2 * i;
        await client.request(id, openCall, true);
        await delay(5);
        await client.send(FrameType.RST_STREAM, 0, id, u32(ErrorCode.CANCEL));
      }
      await delay(50);
      expect(calls.running).toHaveLength(8);
      await client.request(17, openCall, true);
      expect(await client.reset(17)).toBe(ErrorCode.REFUSED_STREAM);
      expect(calls.running).toHaveLength(8);

      calls.running.shift()!.release();
      await client.request(19, openCall, true);
      await delay(50);
      expect(calls.running).toHaveLength(8);
      expect(client.frames.some((f) => f.type === FrameType.RST_STREAM && f.streamId === 19)).toBe(false);
    } finally {
      client.close();
    }
  });
});
