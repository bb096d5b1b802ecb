/**
 * The unary gRPC path at the protocol's edges, with real clients: gzip
 * request compression, the JSON codec, metadata, errors with details, and
 * malformed envelopes sent by hand over node:http2.
 */
import { StructSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { compressionGzip, createGrpcTransport } from "@connectrpc/connect-node";
import http2 from "node:http2";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CatalogService } from "../gen/authz/v1/catalog_pb.js";
import { BatchCheckRequestSchema, BatchCheckResponseSchema, CheckRequestSchema, CheckService } from "../gen/authz/v1/check_pb.js";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { createTestDatabase, type TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, createAppWithKey, startTestService, type TestService } from "./support/service.js";

const catalog = { resources: [{ resource: "doc", description: "", actions: ["read", "update"] }] };

/** One raw HTTP/2 gRPC exchange: the answer's status, headers and trailers. */
function rawCall(url: string, path: string, body: Buffer, headers: Record<string, string>, endRequest = true) {
  return new Promise<{ headers: http2.IncomingHttpHeaders; trailers: http2.IncomingHttpHeaders; data: Buffer }>((resolve, reject) => {
    const session = http2.connect(url);
    session.on("error", reject);
    const stream = session.request({ ":method": "POST", ":path": path, "content-type": "application/grpc", te: "trailers", ...headers });
    const chunks: Buffer[] = [];
    let responseHeaders: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    stream.on("response", (h) => (responseHeaders = h));
    stream.on("trailers", (t) => (trailers = t));
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("end", () => {
      session.destroy();
      resolve({ headers: responseHeaders, trailers: { ...responseHeaders, ...trailers }, data: Buffer.concat(chunks) });
    });
    stream.on("error", reject);
    if (endRequest) stream.end(body);
    else stream.write(body);
  });
}

const frame = (payload: Buffer, flags = 0) => {
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
};

describe("unary gRPC on pglite", () => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;

  beforeAll(async () => {
    database = await createTestDatabase("pglite");
    service = await startTestService(database.db);
    key = await createAppWithKey(service, "wire");
    await service.call("PUT", "/api/v1/applications/wire/resources", { body: catalog });
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  it.each([
    { name: "binary, gzip-compressed request", options: { sendCompression: compressionGzip, compressMinBytes: 0 } },
    { name: "JSON codec", options: { useBinaryFormat: false } },
    { name: "JSON codec, gzip-compressed request", options: { useBinaryFormat: false, sendCompression: compressionGzip, compressMinBytes: 0 } },
  ])("answers over $name", async ({ options }) => {
    const transport = createGrpcTransport({ baseUrl: service.url, ...options });
    const check = createClient(CheckService, transport);
    const answer = await check.check({ userId: "u", resource: "doc", resourceId: "d", action: "read" }, { headers: { "x-api-key": key } });
    expect(answer.allowed).toBe(false);
    const catalogClient = createClient(CatalogService, transport);
    const got = await catalogClient.getCatalog({ appId: "wire" }, { headers: { "x-api-key": ADMIN_KEY } });
    expect(got.resources.map((r) => r.resource)).toEqual(["doc"]);
  });

  it("errors carry code, readable message and details", async () => {
    const client = createClient(CatalogService, createGrpcTransport({ baseUrl: service.url }));
    const error = await client
      .putCatalog({ appId: "wire", resources: [{ resource: "Bad Name", description: "", actions: [] }] }, { headers: { "x-api-key": ADMIN_KEY } })
      .then(() => undefined, (e: unknown) => ConnectError.from(e));
    expect(error?.code).toBe(Code.InvalidArgument);
    expect(error?.rawMessage).toContain('resources[0].resource: "Bad Name"');
    expect(error?.findDetails(StructSchema)[0]).toMatchObject({ fields: { field: { kind: { case: "stringValue", value: "resources[0].resource" } } } });
  });

  it("spec-encodes grpc-message: only bytes outside printable ASCII, and %, are escaped", async () => {
    const answer = await rawCall(service.url, "/authz.v1.CatalogService/GetCatalog", frame(Buffer.from([0x0a, 0x03, 0x6e, 0x6f, 0x70])), { "x-api-key": ADMIN_KEY });
    expect(answer.trailers["grpc-status"]).toBe("5");
    expect(answer.trailers["grpc-message"]).toBe('application "nop" does not exist');
  });

  it.each([
    { name: "a body shorter than the envelope", body: Buffer.from([0, 0, 0]), status: "3" },
    { name: "a length that does not match the body", body: Buffer.concat([frame(Buffer.from([0x0a, 0x01, 0x78])), Buffer.from([1, 2])]), status: "3" },
    { name: "bytes that are not the request message", body: frame(Buffer.from([0xff, 0xff, 0xff])), status: "3" },
    { name: "a compressed message without grpc-encoding", body: frame(Buffer.from([1, 2, 3]), 1), status: "12" },
  ])("refuses $name", async ({ body, status }) => {
    const answer = await rawCall(service.url, "/authz.v1.CatalogService/GetCatalog", body, { "x-api-key": ADMIN_KEY });
    expect(answer.headers[":status"]).toBe(200);
    expect(answer.trailers["grpc-status"]).toBe(status);
    expect(answer.data.length).toBe(0);
  });

  it.each([
    { name: "", endRequest: true },
    { name: ", without waiting for the rest of it", endRequest: false },
  ])("refuses a message over 8 MiB with RESOURCE_EXHAUSTED$name", async ({ endRequest }) => {
    const big = frame(Buffer.alloc(8 * 1024 * 1024 + 10, 0x20));
    const answer = await rawCall(service.url, "/authz.v1.CatalogService/GetCatalog", big, { "x-api-key": ADMIN_KEY }, endRequest);
    expect(answer.trailers["grpc-status"]).toBe("8");
  });

  it.each([
    {
      name: "a gzip bomb (16 MiB of zeros in 16 KiB) with RESOURCE_EXHAUSTED",
      body: () => frame(gzipSync(Buffer.alloc(16 * 1024 * 1024)), 1),
      encoding: "gzip",
      status: "8",
      message: /decompressed message is larger than the limit/,
    },
    { name: "broken gzip with INVALID_ARGUMENT", body: () => frame(Buffer.from("not gzip at all"), 1), encoding: "gzip", status: "3", message: /not valid gzip/ },
    {
      name: "gzip cut short with INVALID_ARGUMENT",
      body: () => frame(gzipSync(Buffer.from(JSON.stringify({ a: "x".repeat(1000) }))).subarray(0, 20), 1),
      encoding: "gzip",
      status: "3",
      message: /not valid gzip/,
    },
    { name: "a compression it does not take with UNIMPLEMENTED", body: () => frame(Buffer.from([1, 2, 3]), 1), encoding: "br", status: "12", message: /unsupported grpc-encoding "br"/ },
  ])("refuses $name, and serves the next call", async ({ body, encoding, status, message }) => {
    const answer = await rawCall(service.url, "/authz.v1.CheckService/Check", body(), { "x-api-key": key, "grpc-encoding": encoding });
    expect(answer.headers[":status"]).toBe(200);
    expect(answer.trailers["grpc-status"]).toBe(status);
    expect(decodeURIComponent(String(answer.trailers["grpc-message"]))).toMatch(message);
    const client = createClient(CheckService, createGrpcTransport({ baseUrl: service.url }));
    const next = await client.check({ userId: "u", resource: "doc", resourceId: "d", action: "read" }, { headers: { "x-api-key": key } });
    expect(next.allowed).toBe(false);
  });

  it("reads a message that arrives in many DATA frames", async () => {
    const checks = Array.from({ length: 1000 }, (_, i) => ({ userId: `user-${i}`, resource: "doc", resourceId: `d-${i}-${"x".repeat(40)}`, action: "read" }));
    const message = Buffer.from(toBinary(BatchCheckRequestSchema, create(BatchCheckRequestSchema, { checks })));
    expect(message.length).toBeGreaterThan(3 * 16_384); // HTTP/2's default frame size
    const answer = await rawCall(service.url, "/authz.v1.CheckService/BatchCheck", frame(message), { "x-api-key": key });
    expect(answer.trailers["grpc-status"]).toBe("0");
    expect(answer.headers["content-type"]).toBe("application/grpc+proto");
    const results = fromBinary(BatchCheckResponseSchema, answer.data.subarray(5)).results;
    expect(results).toHaveLength(1000);
    expect(results.every((r) => !r.allowed)).toBe(true);
  });

  it("a deadline shorter than a millisecond has passed by the time the answer is ready: DEADLINE_EXCEEDED, never OK", async () => {
    const message = frame(Buffer.from(toBinary(CheckRequestSchema, create(CheckRequestSchema, { userId: "u", resource: "doc", resourceId: "d", action: "read" }))));
    const path = "/authz.v1.CheckService/Check";
    // The same question first with time to spare: the answers below come from memory, well within a millisecond.
    expect((await rawCall(service.url, path, message, { "x-api-key": key, "grpc-timeout": "10S" })).trailers["grpc-status"]).toBe("0");
    const statuses = new Set<unknown>();
    for (let i = 0; i < 100; i++) {
      const answer = await rawCall(service.url, path, message, { "x-api-key": key, "grpc-timeout": i % 2 === 0 ? "1u" : "2n" });
      statuses.add(answer.trailers["grpc-status"]);
    }
    expect([...statuses]).toEqual(["4"]);
  });

  it("survives clients that reset a call before its message ends, and answers the next", async () => {
    const session = http2.connect(service.url);
    const closed = Array.from({ length: 20 }, () => {
      const stream = session.request({ ":method": "POST", ":path": "/authz.v1.CheckService/Check", "content-type": "application/grpc", te: "trailers", "x-api-key": key });
      stream.on("error", () => undefined);
      stream.write(Buffer.from([0, 0, 0, 0, 40, 0x0a])); // an envelope promising 40 bytes, and one
      return new Promise<void>((resolve) => {
        stream.once("close", resolve);
        setTimeout(() => stream.close(http2.constants.NGHTTP2_CANCEL), 5);
      });
    });
    await Promise.all(closed);
    session.close();
    const client = createClient(CheckService, createGrpcTransport({ baseUrl: service.url }));
    const answer = await client.check({ userId: "u", resource: "doc", resourceId: "d", action: "read" }, { headers: { "x-api-key": key } });
    expect(answer.allowed).toBe(false);
  });

  it("leaves unknown methods and streaming reflection to the router", async () => {
    const answer = await rawCall(service.url, "/authz.v1.CheckService/Nope", frame(Buffer.alloc(0)), { "x-api-key": key });
    expect(answer.trailers["grpc-status"]).toBe("12");
  });
});
