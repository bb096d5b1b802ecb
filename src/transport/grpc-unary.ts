/**
 * Unary gRPC, served directly on the HTTP/2 core API. connect-node's handler
 * runs every call through async-iterable pipelines built for streaming, and
 * Node's HTTP/2 compatibility layer (which Fastify needs) builds a request
 * and a response object per stream; for unary calls (all of Portcullis's
 * RPCs but reflection) together they cost several times the check itself.
 * Here a unary call's stream is answered with the same guarded
 * implementations: the envelope read whole, decoded, the implementation
 * called, and the answer written as HEADERS, DATA, trailers. Every other
 * stream (reflection's, Connect, gRPC-Web, REST over h2c) goes on to Fastify
 * and the connect-fastify routes.
 *
 * Supported: proto and JSON codecs, identity and gzip request compression
 * (answers are not compressed), grpc-status-details-bin on errors. A
 * grpc-timeout is accepted and not enforced: every RPC here is one short
 * statement or transaction.
 */
import { create, fromBinary, fromJsonString, isMessage, toBinary, toJsonString, type DescMethodUnary } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import type { IncomingHttpHeaders, ServerHttp2Stream } from "node:http2";
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

/**
 * A stream handler for unary gRPC calls: answers true when it took the
 * stream (a POST of application/grpc[+proto|+json] to a unary method), false
 * to leave it to the next handler.
 */
export function grpcUnaryHandler(bindings: ServiceBinding[], log: Logger): (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => boolean {
  const routes = new Map<string, Route>();
  for (const { service, impl } of bindings) {
    for (const method of service.methods) {
      if (method.methodKind !== "unary") continue;
      const call = (impl as unknown as Record<string, UnaryFn>)[method.localName]!;
      routes.set(`/${service.typeName}/${method.name}`, { method: method as DescMethodUnary, call });
    }
  }
  return (stream, headers) => {
    const type = GRPC.exec(headers["content-type"] ?? "");
    const route = type === null || headers[":method"] !== "POST" ? undefined : routes.get(headers[":path"] ?? "");
    if (route === undefined || type === null) return false;
    serve(route, type[2] === "json" ? "json" : "proto", stream, headers, log);
    return true;
  };
}

/** Success: the trailers of every answered call, and the headers of calls that set none. */
const OK_TRAILERS = { "grpc-status": "0" };
const HEADERS = {
  proto: { ":status": 200, "content-type": "application/grpc+proto", "grpc-accept-encoding": "gzip" },
  json: { ":status": 200, "content-type": "application/grpc+json", "grpc-accept-encoding": "gzip" },
} as const;
/** gRPC clients read no Date header; Node would format and HPACK-encode one per call. */
const RESPOND = { waitForTrailers: true, sendDate: false };

/**
 * The message is collected from "data" events and the call starts on "end",
 * or as soon as the message passes the size limit (to refuse it without
 * waiting for the rest). A stream the client resets before its end never
 * starts: nothing waits on it, so nothing needs its "close".
 */
function serve(route: Route, codec: "proto" | "json", stream: ServerHttp2Stream, headers: IncomingHttpHeaders, log: Logger): void {
  // A client that resets the stream must not crash the process; there is nobody left to answer.
  stream.on("error", ignore);
  const body: Body = { chunks: [], size: 0, tooLarge: false };
  stream.on("data", (chunk: Buffer) => {
    if (collect(body, chunk)) void answer(route, codec, stream, headers, log, body);
  });
  stream.once("end", () => {
    if (!body.tooLarge) void answer(route, codec, stream, headers, log, body);
  });
}

interface Body {
  chunks: Buffer[];
  size: number;
  /** Past the limit: refused as soon as that was seen, and what else comes is dropped. */
  tooLarge: boolean;
}

function ignore(): void {}

/** Adds a chunk; true when this chunk took the message past the limit. */
function collect(body: Body, chunk: Buffer): boolean {
  if (body.tooLarge) return false;
  body.size += chunk.length;
  if (body.size > LIMITS.bodyBytes + 5) {
    body.tooLarge = true;
    body.chunks = [];
    return true;
  }
  body.chunks.push(chunk);
  return false;
}

async function answer(route: Route, codec: "proto" | "json", stream: ServerHttp2Stream, headers: IncomingHttpHeaders, log: Logger, body: Body): Promise<void> {
  const ctx = new CallContext(route.method, "grpc", "POST", headers[":path"] ?? "", headers);
  let out: Uint8Array | undefined;
  let failure: ConnectError | undefined;
  try {
    const input = decode(route.method, codec, unwrap(body), headers["grpc-encoding"]);
    const result = await route.call(input, ctx);
    const output = isMessage(result, route.method.output) ? result : create(route.method.output, result as never);
    out =
      codec === "json"
        ? new TextEncoder().encode(toJsonString(route.method.output, output, { alwaysEmitImplicit: true }))
        : toBinary(route.method.output, output);
  } catch (error) {
    failure = error instanceof ConnectError ? error : toConnectError(error, log);
  }
  if (stream.destroyed || stream.closed) return;
  const setHeaders = ctx.setResponseHeaders();
  const setTrailers = ctx.setResponseTrailers();
  let responseHeaders: Record<string, string | number> = HEADERS[codec];
  if (setHeaders !== undefined) {
    responseHeaders = { ...responseHeaders };
    setHeaders.forEach((value, key) => (responseHeaders[key] = value));
  }
  let trailers: Record<string, string> = OK_TRAILERS;
  if (failure !== undefined || setTrailers !== undefined) {
    trailers = {};
    setTrailers?.forEach((value, key) => (trailers[key] = value));
    if (failure === undefined) trailers["grpc-status"] = "0";
    else {
      setTrailerStatus(new Headers(), failure).forEach((value, key) => {
        trailers[key] = key === "grpc-message" ? specEncodeGrpcMessage(value) : value;
      });
    }
  }
  stream.respond(responseHeaders, RESPOND);
  if (trailers === OK_TRAILERS) stream.once("wantTrailers", sendOkTrailers);
  else stream.once("wantTrailers", () => stream.sendTrailers(trailers));
  if (out === undefined) stream.end();
  else stream.end(envelope(out));
}

/** Shared by every successful call: a listener bound by `this`, not a closure made per call. */
function sendOkTrailers(this: ServerHttp2Stream): void {
  this.sendTrailers(OK_TRAILERS);
}

/** The one length-prefixed message of a unary call. */
function unwrap(body: Body): { compressed: boolean; data: Uint8Array } {
  if (body.tooLarge) throw new ConnectError(`message is larger than the limit of ${LIMITS.bodyBytes} bytes`, Code.ResourceExhausted);
  const all = body.chunks.length === 1 ? body.chunks[0]! : Buffer.concat(body.chunks, body.size);
  if (all.length < 5) throw new ConnectError("protocol error: missing the message envelope", Code.InvalidArgument);
  if (all.length !== 5 + all.readUInt32BE(1)) {
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
