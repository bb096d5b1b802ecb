/**
 * Unary gRPC, served directly. connect-node's handler runs every call through
 * async-iterable pipelines built for streaming; for unary calls (all of
 * Portcullis's RPCs but reflection) that cost several times the CPU of the
 * check itself. This hook answers unary gRPC calls on the HTTP/2 app with the
 * same guarded implementations: the envelope is read whole, decoded, the
 * implementation called, and the answer written as HEADERS, DATA, trailers.
 * Everything else (reflection's stream, Connect, gRPC-Web) goes on to the
 * connect-fastify routes untouched.
 *
 * Supported: proto and JSON codecs, identity and gzip request compression
 * (answers are not compressed), grpc-status-details-bin on errors. A
 * grpc-timeout is accepted and not enforced: every RPC here is one short
 * statement or transaction.
 */
import { create, fromBinary, fromJsonString, isMessage, toBinary, toJsonString, type DescMethodUnary } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { gunzipSync } from "node:zlib";
import type { Logger } from "pino";
import { LIMITS } from "../domain/formats.js";
import { CallContext } from "./call-context.js";
import { toConnectError } from "./errors.js";
import type { ServiceBinding } from "./guard.js";
import { specEncodeGrpcMessage } from "./grpc-message.js";

type UnaryFn = (request: unknown, ctx: HandlerContext) => Promise<unknown>;

interface Route {
  method: DescMethodUnary;
  call: UnaryFn;
}

const GRPC = /^application\/grpc(\+(proto|json))?(;.*)?$/i;

export function registerGrpcUnary(app: FastifyInstance, bindings: ServiceBinding[], log: Logger): void {
  const routes = new Map<string, Route>();
  for (const { service, impl } of bindings) {
    for (const method of service.methods) {
      if (method.methodKind !== "unary") continue;
      const call = (impl as unknown as Record<string, UnaryFn>)[method.localName]!;
      routes.set(`/${service.typeName}/${method.name}`, { method: method as DescMethodUnary, call });
    }
  }
  app.addHook("onRequest", async (req, reply) => {
    const type = GRPC.exec(req.headers["content-type"] ?? "");
    const route = type === null || req.method !== "POST" ? undefined : routes.get(req.url);
    if (route === undefined || type === null) return;
    reply.hijack();
    await serve(route, type[2] === "json" ? "json" : "proto", req, reply, log);
  });
}

async function serve(route: Route, codec: "proto" | "json", req: FastifyRequest, reply: FastifyReply, log: Logger): Promise<void> {
  const raw = req.raw as unknown as Http2ServerRequest;
  const res = reply.raw as unknown as Http2ServerResponse;
  const contentType = `application/grpc+${codec}`;
  const ctx = new CallContext(route.method, "grpc", "POST", req.url, raw.headers);
  let body: Uint8Array | undefined;
  let failure: ConnectError | undefined;
  try {
    const input = decode(route.method, codec, await readEnvelope(raw), raw.headers["grpc-encoding"]);
    const result = await route.call(input, ctx);
    const output = isMessage(result, route.method.output) ? result : create(route.method.output, result as never);
    body =
      codec === "json"
        ? new TextEncoder().encode(toJsonString(route.method.output, output, { alwaysEmitImplicit: true }))
        : toBinary(route.method.output, output);
  } catch (error) {
    failure = error instanceof ConnectError ? error : toConnectError(error, log);
  }
  const headers: Record<string, string> = { "content-type": contentType, "grpc-accept-encoding": "gzip" };
  ctx.setResponseHeaders()?.forEach((value, key) => (headers[key] = value));
  const trailers: Record<string, string> = {};
  ctx.setResponseTrailers()?.forEach((value, key) => (trailers[key] = value));
  if (failure === undefined) trailers["grpc-status"] = "0";
  else {
    setTrailerStatus(new Headers(), failure).forEach((value, key) => {
      trailers[key] = key === "grpc-message" ? specEncodeGrpcMessage(value) : value;
    });
  }
  if (res.destroyed) return;
  res.writeHead(200, headers);
  res.addTrailers(trailers);
  if (body === undefined) res.end();
  else res.end(envelope(body));
}

/** Reads the one length-prefixed message of a unary call. */
async function readEnvelope(raw: Http2ServerRequest): Promise<{ compressed: boolean; data: Uint8Array }> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of raw as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > LIMITS.bodyBytes + 5) {
      throw new ConnectError(`message is larger than the limit of ${LIMITS.bodyBytes} bytes`, Code.ResourceExhausted);
    }
    chunks.push(chunk);
  }
  const all = Buffer.concat(chunks, size);
  if (all.length < 5) throw new ConnectError("protocol error: missing the message envelope", Code.InvalidArgument);
  const length = all.readUInt32BE(1);
  if (all.length !== 5 + length) {
    throw new ConnectError("protocol error: a unary call takes exactly one message", Code.InvalidArgument);
  }
  return { compressed: (all[0]! & 1) === 1, data: all.subarray(5) };
}

function decode(method: DescMethodUnary, codec: "proto" | "json", message: { compressed: boolean; data: Uint8Array }, encoding: unknown): unknown {
  let data = message.data;
  if (message.compressed) {
    if (encoding !== "gzip") {
      throw new ConnectError(`unsupported grpc-encoding "${String(encoding)}" (accepted: gzip)`, Code.Unimplemented);
    }
    data = gunzipSync(data, { maxOutputLength: LIMITS.bodyBytes });
  }
  try {
    return codec === "json"
      ? fromJsonString(method.input, new TextDecoder().decode(data), { ignoreUnknownFields: false })
      : fromBinary(method.input, data);
  } catch (error) {
    throw new ConnectError(`cannot decode ${method.input.typeName}: ${error instanceof Error ? error.message : String(error)}`, Code.InvalidArgument);
  }
}

function envelope(body: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + body.length);
  out[0] = 0;
  out.writeUInt32BE(body.length, 1);
  out.set(body, 5);
  return out;
}
