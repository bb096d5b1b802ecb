/**
 * The service's HTTP/2 connection (src/transport/h2) on a real port, with a
 * small test owner behind it: frames sent by hand for the protocol's rules
 * (connection errors, malformed requests, flow control both ways, padding,
 * CONTINUATION, limits, graceful close), and Node's own HTTP/2 client for
 * many concurrent streams and bodies larger than every window.
 */
import http2 from "node:http2";
import net from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_LIMITS, H2Connection, type H2Limits, type H2Stream, type StreamSink } from "../src/transport/h2/connection.js";
import { Setting, u32 } from "../src/transport/h2/frames.js";
import { encodeHeaders } from "../src/transport/h2/hpack.js";
import { ErrorCode, Flag, FrameType, RawH2 } from "./support/raw-h2.js";

/**
 * The test owner, by path: /echo answers the body back with a trailer;
 * /big/N answers N bytes; /hold answers when `release` is called; /early
 * answers (and ends) on its headers, before the request's body.
 */
const held: (() => void)[] = [];
const resets: { streamId: number; code: number }[] = [];

function owner(stream: H2Stream, headers: http2.IncomingHttpHeaders): StreamSink {
  const path = headers[":path"]!;
  const chunks: Buffer[] = [];
  if (path === "/early") stream.respond([[":status", "413"]], true);
  return {
    data(chunk) {
      chunks.push(Buffer.from(chunk));
      stream.consumed(chunk.length);
    },
    end() {
      if (path === "/echo") {
        stream.respond([
          [":status", "200"],
          ["x-method", String(headers[":method"])],
          ["x-seen", String(headers["x-test"] ?? "")],
        ]);
        stream.write(Buffer.concat(chunks));
        stream.end([["x-end", "1"]]);
      } else if (path.startsWith("/big/")) {
        stream.respond([[":status", "200"]]);
        stream.write(Buffer.alloc(Number(path.slice(5)), 0x78));
        stream.end();
      } else if (path === "/hold") {
        held.push(() => {
          stream.respond([[":status", "204"]], true);
        });
      }
    },
    reset(code) {
      resets.push({ streamId: stream.id, code });
    },
  };
}

interface Server {
  port: number;
  connections: H2Connection[];
  close(): Promise<void>;
}

async function serve(limits: Partial<H2Limits> = {}): Promise<Server> {
  const connections: H2Connection[] = [];
  const server = net.createServer((socket) => {
    connections.push(new H2Connection(socket, owner, { ...DEFAULT_LIMITS, ...limits }));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    connections,
    close: async () => {
      for (const c of connections) c.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const GET = (path: string, extra: [string, string][] = []): [string, string][] => [
  [":method", "GET"],
  [":scheme", "http"],
  [":path", path],
  [":authority", "test"],
  ...extra,
];
const POST = (path: string, extra: [string, string][] = []): [string, string][] => [[":method", "POST"], ...GET(path).slice(1), ...extra];

let server: Server;
const clients: RawH2[] = [];
async function client(settings: [number, number][] | false = []): Promise<RawH2> {
  const c = await RawH2.connect(server.port, settings);
  clients.push(c);
  return c;
}

beforeAll(async () => {
  server = await serve();
});
afterAll(async () => {
  await server.close();
});
afterEach(() => {
  for (const c of clients.splice(0)) c.close();
});

describe("the connection's start", () => {
  it("announces its settings and a larger connection window, and acknowledges the client's", async () => {
    const c = await client([[Setting.INITIAL_WINDOW_SIZE, 1000]]);
    const settings = await c.next((f) => f.type === FrameType.SETTINGS && f.flags === 0);
    const values = new Map<number, number>();
    for (let at = 0; at < settings.payload.length; at += 6) values.set(settings.payload.readUInt16BE(at), settings.payload.readUInt32BE(at + 2));
    expect(values.get(Setting.MAX_CONCURRENT_STREAMS)).toBe(DEFAULT_LIMITS.maxConcurrentStreams);
    expect(values.get(Setting.INITIAL_WINDOW_SIZE)).toBe(DEFAULT_LIMITS.streamWindow);
    expect(values.get(Setting.MAX_HEADER_LIST_SIZE)).toBe(DEFAULT_LIMITS.maxHeaderListSize);
    const update = await c.next((f) => f.type === FrameType.WINDOW_UPDATE && f.streamId === 0);
    expect(update.payload.readUInt32BE(0)).toBe(DEFAULT_LIMITS.connectionWindow - 65_535);
    await c.next((f) => f.type === FrameType.SETTINGS && f.flags === Flag.ACK);
  });

  it("answers a PING with the same eight octets", async () => {
    const c = await client();
    c.send(FrameType.PING, 0, 0, Buffer.from("12345678"));
    const pong = await c.next((f) => f.type === FrameType.PING);
    expect(pong.flags).toBe(Flag.ACK);
    expect(pong.payload.toString()).toBe("12345678");
  });
});

/** Frames (after a good handshake unless `raw`) that end the connection, and the GOAWAY code expected. */
const connectionErrors: { name: string; raw?: Buffer; send?: (c: RawH2) => void; code: number }[] = [
  { name: "a wrong preface", raw: Buffer.from("PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"), code: ErrorCode.PROTOCOL_ERROR },
  {
    name: "a first frame other than SETTINGS",
    raw: Buffer.concat([Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), Buffer.from([0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8])]),
    code: ErrorCode.PROTOCOL_ERROR,
  },
  { name: "a frame over 16,384 octets", send: (c) => c.send(FrameType.DATA, 0, 1, Buffer.alloc(16_385)), code: ErrorCode.FRAME_SIZE_ERROR },
  { name: "a stream with an even id", send: (c) => c.request(2, GET("/echo"), true), code: ErrorCode.PROTOCOL_ERROR },
  {
    name: "a stream id lower than one already used",
    send: (c) => {
      c.request(5, GET("/echo"), true);
      c.request(3, GET("/echo"), true);
    },
    code: ErrorCode.PROTOCOL_ERROR,
  },
  { name: "DATA on a stream never opened", send: (c) => c.data(7, Buffer.from("x"), true), code: ErrorCode.PROTOCOL_ERROR },
  { name: "DATA on stream 0", send: (c) => c.data(0, Buffer.from("x"), true), code: ErrorCode.PROTOCOL_ERROR },
  { name: "CONTINUATION without HEADERS", send: (c) => c.send(FrameType.CONTINUATION, Flag.END_HEADERS, 1, encodeHeaders(GET("/echo"))), code: ErrorCode.PROTOCOL_ERROR },
  {
    name: "a header block interrupted by another frame",
    send: (c) => {
      c.send(FrameType.HEADERS, Flag.END_STREAM, 1, encodeHeaders(GET("/echo")));
      c.send(FrameType.PING, 0, 0, Buffer.alloc(8));
    },
    code: ErrorCode.PROTOCOL_ERROR,
  },
  { name: "PUSH_PROMISE from the client", send: (c) => c.send(FrameType.PUSH_PROMISE, Flag.END_HEADERS, 1, Buffer.alloc(4)), code: ErrorCode.PROTOCOL_ERROR },
  { name: "an undecodable header block", send: (c) => c.send(FrameType.HEADERS, Flag.END_HEADERS, 1, Buffer.from([0x80])), code: ErrorCode.COMPRESSION_ERROR },
  { name: "SETTINGS of a length not a multiple of 6", send: (c) => c.send(FrameType.SETTINGS, 0, 0, Buffer.alloc(5)), code: ErrorCode.FRAME_SIZE_ERROR },
  { name: "SETTINGS on a stream", send: (c) => c.send(FrameType.SETTINGS, 0, 1), code: ErrorCode.PROTOCOL_ERROR },
  {
    name: "an INITIAL_WINDOW_SIZE over 2^31-1",
    send: (c) => c.send(FrameType.SETTINGS, 0, 0, Buffer.from([0, Setting.INITIAL_WINDOW_SIZE, 0x80, 0, 0, 0])),
    code: ErrorCode.FLOW_CONTROL_ERROR,
  },
  {
    name: "a MAX_FRAME_SIZE under 16,384",
    send: (c) => c.send(FrameType.SETTINGS, 0, 0, Buffer.from([0, Setting.MAX_FRAME_SIZE, 0, 0, 0x10, 0])),
    code: ErrorCode.PROTOCOL_ERROR,
  },
  { name: "a connection window over 2^31-1", send: (c) => c.windowUpdate(0, 0x7fffffff), code: ErrorCode.FLOW_CONTROL_ERROR },
  { name: "a connection WINDOW_UPDATE of 0", send: (c) => c.windowUpdate(0, 0), code: ErrorCode.PROTOCOL_ERROR },
  { name: "a PING on a stream", send: (c) => c.send(FrameType.PING, 0, 1, Buffer.alloc(8)), code: ErrorCode.PROTOCOL_ERROR },
  { name: "a PING of 7 octets", send: (c) => c.send(FrameType.PING, 0, 0, Buffer.alloc(7)), code: ErrorCode.FRAME_SIZE_ERROR },
  { name: "RST_STREAM on a stream never opened", send: (c) => c.send(FrameType.RST_STREAM, 0, 9, u32(8)), code: ErrorCode.PROTOCOL_ERROR },
];

describe("connection errors: GOAWAY with the code, then the connection closes", () => {
  it.each(connectionErrors)("$name", async ({ raw, send, code }) => {
    const c = await client(raw === undefined ? [] : false);
    if (raw !== undefined) c.write(raw);
    else send!(c);
    expect((await c.goaway()).code).toBe(code);
    await expect.poll(() => c.closed).toBe(true);
  });
});

/** Requests that are malformed (RFC 9113 8.2, 8.3): the stream is reset with PROTOCOL_ERROR, the connection lives on. */
const malformed: { name: string; headers: [string, string][] }[] = [
  { name: "an uppercase header name", headers: GET("/echo", [["X-Test", "1"]]) },
  { name: "a connection-specific header", headers: GET("/echo", [["connection", "keep-alive"]]) },
  { name: "TE other than trailers", headers: GET("/echo", [["te", "gzip"]]) },
  { name: "no :path", headers: GET("/echo").filter(([n]) => n !== ":path") },
  { name: "no :method", headers: GET("/echo").filter(([n]) => n !== ":method") },
  { name: "an empty :path", headers: GET("") },
  { name: "a pseudo-header after a regular one", headers: [...GET("/echo").slice(1), ["x-test", "1"], [":method", "GET"]] },
  { name: "an unknown pseudo-header", headers: GET("/echo", [[":status", "200"]]) },
  { name: "a pseudo-header twice", headers: [...GET("/echo"), [":path", "/other"]] },
  { name: "a value with a NUL", headers: GET("/echo", [["x-test", "a\0b"]]) },
  { name: "a value with a line feed", headers: GET("/echo", [["x-test", "a\nb"]]) },
];

describe("malformed requests", () => {
  it.each(malformed)("$name: RST_STREAM PROTOCOL_ERROR, and the next stream is answered", async ({ headers }) => {
    const c = await client();
    c.request(1, headers, true);
    expect((await c.response(1)).reset).toBe(ErrorCode.PROTOCOL_ERROR);
    c.request(3, GET("/echo"), true);
    expect((await c.response(3)).headers?.[":status"]).toBe("200");
  });
});

describe("requests and answers", () => {
  it("a request with a body gets headers, the body back and trailers; TE: trailers is allowed", async () => {
    const c = await client();
    c.request(1, POST("/echo", [["x-test", "yes"], ["te", "trailers"]]), false);
    c.data(1, Buffer.from("hello "), false);
    c.data(1, Buffer.from("world"), true);
    const r = await c.response(1);
    expect(r.headers).toMatchObject({ ":status": "200", "x-method": "POST", "x-seen": "yes" });
    expect(r.body.toString()).toBe("hello world");
    expect(r.trailers).toEqual({ "x-end": "1" });
  });

  it("padded HEADERS with a priority, a CONTINUATION and padded DATA", async () => {
    const c = await client();
    const block = encodeHeaders(POST("/echo", [["x-test", "padded"]]));
    const priority = Buffer.from([0, 0, 0, 0, 16]);
    const head = Buffer.concat([Buffer.from([3]), priority, block.subarray(0, 10), Buffer.alloc(3)]);
    c.send(FrameType.HEADERS, Flag.PADDED | Flag.PRIORITY, 1, head);
    c.send(FrameType.CONTINUATION, Flag.END_HEADERS, 1, block.subarray(10));
    c.send(FrameType.DATA, Flag.PADDED | Flag.END_STREAM, 1, Buffer.concat([Buffer.from([4]), Buffer.from("abc"), Buffer.alloc(4)]));
    const r = await c.response(1);
    expect(r.headers?.["x-seen"]).toBe("padded");
    expect(r.body.toString()).toBe("abc");
  });

  it("request trailers end the stream", async () => {
    const c = await client();
    c.request(1, POST("/echo"), false);
    c.data(1, Buffer.from("x"), false);
    c.send(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, encodeHeaders([["x-trailer", "1"]]));
    expect((await c.response(1)).body.toString()).toBe("x");
  });

  it("an answer sent before the request's end is followed by RST_STREAM NO_ERROR", async () => {
    const c = await client();
    c.request(1, POST("/early"), false);
    const r = await c.response(1);
    expect(r.headers?.[":status"]).toBe("413");
    await c.next((f) => f.type === FrameType.RST_STREAM && f.streamId === 1);
    expect((await c.response(1)).reset).toBe(ErrorCode.NO_ERROR);
    c.data(1, Buffer.from("late"), true); // dropped, not an error
    c.request(3, GET("/echo"), true);
    expect((await c.response(3)).headers?.[":status"]).toBe("200");
  });

  it("DATA after the client's END_STREAM resets the stream with STREAM_CLOSED", async () => {
    const c = await client();
    c.request(1, POST("/hold"), true);
    c.data(1, Buffer.from("x"), false);
    expect((await c.response(1)).reset).toBe(ErrorCode.STREAM_CLOSED);
    held.splice(0).forEach((release) => release()); // its answer is dropped
    c.request(3, GET("/echo"), true);
    expect((await c.response(3)).headers?.[":status"]).toBe("200");
  });

  it("a client's RST_STREAM reaches the stream's owner with its code", async () => {
    const c = await client();
    c.request(1, POST("/echo"), false);
    c.send(FrameType.RST_STREAM, 0, 1, u32(ErrorCode.CANCEL));
    await expect.poll(() => resets.some((r) => r.code === ErrorCode.CANCEL)).toBe(true);
    c.request(3, GET("/echo"), true);
    expect((await c.response(3)).headers?.[":status"]).toBe("200");
  });

  it("headers over SETTINGS_MAX_HEADER_LIST_SIZE, sent in CONTINUATIONs, get a 431", async () => {
    const c = await client();
    const block = encodeHeaders(GET("/echo", [["x-big", "v".repeat(70_000)]]));
    c.send(FrameType.HEADERS, Flag.END_STREAM, 1, block.subarray(0, 16_000));
    for (let at = 16_000; at < block.length; at += 16_000) {
      c.send(FrameType.CONTINUATION, at + 16_000 >= block.length ? Flag.END_HEADERS : 0, 1, block.subarray(at, at + 16_000));
    }
    expect((await c.response(1)).headers?.[":status"]).toBe("431");
    c.request(3, GET("/echo"), true);
    expect((await c.response(3)).headers?.[":status"]).toBe("200");
  });
});

describe("flow control on answers", () => {
  it("sends no more than the stream's window, and the rest after WINDOW_UPDATE", async () => {
    const c = await client([[Setting.INITIAL_WINDOW_SIZE, 10]]);
    await c.next((f) => f.type === FrameType.SETTINGS && f.flags === Flag.ACK);
    c.request(1, GET("/big/100"), true);
    await c.next((f) => f.type === FrameType.DATA && f.streamId === 1);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const sent = () => c.frames.filter((f) => f.type === FrameType.DATA && f.streamId === 1).reduce((n, f) => n + f.payload.length, 0);
    expect(sent()).toBe(10);
    c.windowUpdate(1, 90);
    const r = await c.response(1);
    expect(r.body.length).toBe(100);
  });

  it("a SETTINGS change of the initial window applies to streams already open", async () => {
    const c = await client([[Setting.INITIAL_WINDOW_SIZE, 0]]);
    await c.next((f) => f.type === FrameType.SETTINGS && f.flags === Flag.ACK);
    c.request(1, GET("/big/50"), true);
    await c.next((f) => f.type === FrameType.HEADERS && f.streamId === 1);
    c.send(FrameType.SETTINGS, 0, 0, Buffer.from([0, Setting.INITIAL_WINDOW_SIZE, 0, 0, 0, 50]));
    expect((await c.response(1)).body.length).toBe(50);
  });

  it("holds to the connection's window across streams, and to the client's MAX_FRAME_SIZE", async () => {
    const c = await client([[Setting.INITIAL_WINDOW_SIZE, 1 << 20]]);
    await c.next((f) => f.type === FrameType.SETTINGS && f.flags === Flag.ACK);
    c.request(1, GET("/big/50000"), true);
    c.request(3, GET("/big/50000"), true);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const data = c.frames.filter((f) => f.type === FrameType.DATA);
    expect(data.reduce((n, f) => n + f.payload.length, 0)).toBe(65_535);
    expect(Math.max(...data.map((f) => f.payload.length))).toBeLessThanOrEqual(16_384);
    c.windowUpdate(0, 100_000);
    const [a, b] = [await c.response(1), await c.response(3)];
    expect(a.body.length + b.body.length).toBe(100_000);
  });

  it("answers in frames up to a larger MAX_FRAME_SIZE the client allows", async () => {
    const c = await client([
      [Setting.MAX_FRAME_SIZE, 40_000],
      [Setting.INITIAL_WINDOW_SIZE, 1 << 20],
    ]);
    c.windowUpdate(0, 1 << 20);
    c.request(1, GET("/big/100000"), true);
    const r = await c.response(1);
    expect(r.body.length).toBe(100_000);
    const sizes = c.frames.filter((f) => f.type === FrameType.DATA).map((f) => f.payload.length);
    expect(Math.max(...sizes)).toBe(40_000);
  });
});

describe("limits", () => {
  let limited: Server;
  beforeAll(async () => {
    limited = await serve({ maxConcurrentStreams: 2 });
  });
  afterAll(async () => {
    await limited.close();
  });

  it("a stream over SETTINGS_MAX_CONCURRENT_STREAMS is refused; one more fits once a stream ends", async () => {
    const c = await RawH2.connect(limited.port);
    clients.push(c);
    c.request(1, GET("/hold"), true);
    c.request(3, GET("/hold"), true);
    c.request(5, GET("/echo"), true);
    expect((await c.response(5)).reset).toBe(ErrorCode.REFUSED_STREAM);
    await expect.poll(() => held.length).toBe(2);
    held.splice(0).forEach((release) => release());
    await c.response(1);
    c.request(7, GET("/echo"), true);
    expect((await c.response(7)).headers?.[":status"]).toBe("200");
  });
});

describe("resets", () => {
  it("a stream that depends on itself is reset with PROTOCOL_ERROR", async () => {
    const c = await client();
    const priority = Buffer.from([0, 0, 0, 1, 16]);
    c.send(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM | Flag.PRIORITY, 1, Buffer.concat([priority, encodeHeaders(GET("/echo"))]));
    expect((await c.response(1)).reset).toBe(ErrorCode.PROTOCOL_ERROR);
    c.request(3, GET("/echo"), true);
    expect((await c.response(3)).headers?.[":status"]).toBe("200");
  });

  it("a client resetting streams in progress faster than the limit gets GOAWAY ENHANCE_YOUR_CALM", async () => {
    const s = await serve({ maxResetsPerSecond: 5 });
    try {
      const c = await RawH2.connect(s.port);
      clients.push(c);
      for (let id = 1; id <= 13; id += 2) {
        c.request(id, POST("/echo"), false);
        c.send(FrameType.RST_STREAM, 0, id, u32(ErrorCode.CANCEL));
      }
      expect((await c.goaway()).code).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    } finally {
      await s.close();
    }
  });
});

describe("graceful close", () => {
  it("GOAWAY names the last stream; it is still answered, later streams are not; then the connection ends", async () => {
    const s = await serve();
    try {
      const c = await RawH2.connect(s.port);
      clients.push(c);
      c.request(1, GET("/hold"), true);
      await expect.poll(() => held.length).toBe(1);
      s.connections[0]!.close();
      const goaway = await c.goaway();
      expect(goaway).toEqual({ lastStreamId: 1, code: ErrorCode.NO_ERROR });
      c.request(3, GET("/echo"), true);
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(c.frames.some((f) => f.streamId === 3)).toBe(false);
      expect(c.closed).toBe(false);
      held.splice(0).forEach((release) => release());
      expect((await c.response(1)).headers?.[":status"]).toBe("204");
      await expect.poll(() => c.closed).toBe(true);
    } finally {
      await s.close();
    }
  });
});

describe("with Node's HTTP/2 client", () => {
  it("1,200 concurrent requests on one connection, over the stream limit, each with its own body", async () => {
    const session = http2.connect(`http://127.0.0.1:${server.port}`);
    try {
      const bodies = await Promise.all(
        Array.from({ length: 1200 }, (_, i) =>
          new Promise<string>((resolve, reject) => {
            const req = session.request({ ":method": "POST", ":path": "/echo" });
            let out = "";
            req.setEncoding("utf8");
            req.on("data", (d: string) => (out += d));
            req.on("end", () => resolve(out));
            req.on("error", reject);
            req.end(`body-${i}`);
          }),
        ),
      );
      expect(bodies).toEqual(Array.from({ length: 1200 }, (_, i) => `body-${i}`));
    } finally {
      session.destroy();
    }
  });

  it("a 3 MiB body each way: the server grants its windows back as it reads, and waits on the client's", async () => {
    const session = http2.connect(`http://127.0.0.1:${server.port}`);
    try {
      const body = Buffer.alloc(3 << 20);
      for (let i = 0; i < body.length; i++) body[i] = (i * 7) & 0xff;
      const echoed = await new Promise<Buffer>((resolve, reject) => {
        const req = session.request({ ":method": "POST", ":path": "/echo" });
        const chunks: Buffer[] = [];
        req.on("data", (d: Buffer) => chunks.push(d));
        req.on("end", () => resolve(Buffer.concat(chunks)));
        req.on("error", reject);
        req.end(body);
      });
      expect(echoed.equals(body)).toBe(true);
    } finally {
      session.destroy();
    }
  });
});
