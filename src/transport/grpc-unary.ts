/**
 * Unary gRPC, answered on the service's own HTTP/2 connection (h2/). connect-
 * node's handler runs every call through async-iterable pipelines built for
 * streaming, and Node's HTTP/2 builds a duplex stream, header objects and a
 * deferred trailers step per call; for unary calls (all of Portcullis's RPCs
 * but reflection) together they cost several times the check itself. Here a
 * unary call's message is read whole, decoded, given to the same guarded
 * implementations, and the answer written as HEADERS, DATA and trailers
 * (constant header blocks on success). Every other stream (reflection's,
 * Connect, gRPC-Web, REST over h2c) is left to the next owner.
 *
 * Supported: proto and JSON codecs, identity and gzip request compression
 * (answers are not compressed), grpc-status-details-bin on errors. A
 * grpc-timeout is accepted and not enforced: every RPC here is one short
 * statement or transaction.
 */
import { create, fromBinary, fromJsonString, isMessage, toBinary, toJsonString, type DescMethodUnary } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import type { IncomingHttpHeaders } from "node:http2";
import { gunzipSync } from "node:zlib";
import type { Logger } from "pino";
import { LIMITS } from "../domain/formats.js";
import type { RequestLog } from "./request-log.js";
import { CallContext } from "./call-context.js";
import { toConnectError } from "./errors.js";
import type { ServiceBinding } from "./guard.js";
import { specEncodeGrpcMessage } from "./grpc-message.js";
import type { H2Stream, StreamSink } from "./h2/connection.js";
import { encodeHeaders } from "./h2/hpack.js";

type UnaryFn = (request: unknown, ctx: HandlerContext) => Promise<unknown>;
type Codec = "proto" | "json";

interface Route {
  method: DescMethodUnary;
  call: UnaryFn;
}

const GRPC = /^application\/grpc(\+(proto|json))?(;.*)?$/i;

/** Success: the header blocks of every answered call that set no headers or trailers of its own. */
const RESPONSE_FIELDS: Record<Codec, [string, string][]> = {
  proto: [
    [":status", "200"],
    ["content-type", "application/grpc+proto"],
    ["grpc-accept-encoding", "gzip"],
  ],
  json: [
    [":status", "200"],
    ["content-type", "application/grpc+json"],
    ["grpc-accept-encoding", "gzip"],
  ],
};
const OK_HEADERS: Record<Codec, Buffer> = { proto: encodeHeaders(RESPONSE_FIELDS.proto), json: encodeHeaders(RESPONSE_FIELDS.json) };
const OK_TRAILERS = encodeHeaders([["grpc-status", "0"]]);

export class UnaryGrpc {
  private readonly routes = new Map<string, Route>();

  constructor(
    bindings: ServiceBinding[],
    private readonly log: Logger,
    /** Not written to yet: the HTTP/2 rework writes one line per call. */
    readonly requestLog: RequestLog,
  ) {
    for (const { service, impl } of bindings) {
      for (const method of service.methods) {
        if (method.methodKind !== "unary") continue;
        const call = (impl as unknown as Record<string, UnaryFn>)[method.localName]!;
        this.routes.set(`/${service.typeName}/${method.name}`, { method: method as DescMethodUnary, call });
      }
    }
  }

  /**
   * Takes the stream when it is a unary gRPC call (a POST of
   * application/grpc[+proto|+json] to a unary method); undefined leaves it to
   * the next owner.
   */
  open(stream: H2Stream, headers: IncomingHttpHeaders): StreamSink | undefined {
    if (headers[":method"] !== "POST") return undefined;
    const type = GRPC.exec(headers["content-type"] ?? "");
    const route = type === null ? undefined : this.routes.get(headers[":path"] ?? "");
    if (route === undefined || type === null) return undefined;
    return new UnaryCall(route, type[2] === "json" ? "json" : "proto", stream, headers, this.log);
  }
}

/**
 * One call: the message is collected from the DATA frames and the call starts
 * when the client ends its side, or as soon as the message passes the size
 * limit (to refuse it without waiting for the rest). A call the client
 * resets is still run if it had started, and its answer dropped.
 */
class UnaryCall implements StreamSink {
  private chunks: Buffer[] = [];
  private size = 0;
  private tooLarge = false;

  constructor(
    private readonly route: Route,
    private readonly codec: Codec,
    private readonly stream: H2Stream,
    private readonly headers: IncomingHttpHeaders,
    private readonly log: Logger,
  ) {}

  data(chunk: Buffer): void {
    this.stream.consumed(chunk.length);
    if (this.tooLarge) return;
    this.size += chunk.length;
    if (this.size > LIMITS.bodyBytes + 5) {
      this.tooLarge = true;
      this.chunks = [];
      this.stream.release();
      void this.answer();
      return;
    }
    this.stream.retain(chunk.length);
    this.chunks.push(chunk);
  }

  end(): void {
    if (!this.tooLarge) void this.answer();
  }

  reset(): void {}

  private async answer(): Promise<void> {
    const { route, codec, stream, headers } = this;
    const ctx = new CallContext(route.method, "grpc", "POST", headers[":path"] ?? "", headers);
    let out: Uint8Array | undefined;
    let failure: ConnectError | undefined;
    try {
      const input = decode(route.method, codec, this.unwrap(), headers["grpc-encoding"]);
      const result = await route.call(input, ctx);
      const output = isMessage(result, route.method.output) ? result : create(route.method.output, result as never);
      out =
        codec === "json"
          ? new TextEncoder().encode(toJsonString(route.method.output, output, { alwaysEmitImplicit: true }))
          : toBinary(route.method.output, output);
    } catch (error) {
      failure = error instanceof ConnectError ? error : toConnectError(error, this.log);
    }
    if (stream.closed) return;
    const setHeaders = ctx.setResponseHeaders();
    const setTrailers = ctx.setResponseTrailers();
    if (failure === undefined && setHeaders === undefined && setTrailers === undefined) {
      stream.respond(OK_HEADERS[codec]);
      stream.write(envelope(out!));
      stream.end(OK_TRAILERS);
      return;
    }
    const responseFields: [string, string][] = [...RESPONSE_FIELDS[codec]];
    setHeaders?.forEach((value, key) => responseFields.push([key, value]));
    const trailers: [string, string][] = [];
    setTrailers?.forEach((value, key) => trailers.push([key, value]));
    if (failure === undefined) {
      trailers.push(["grpc-status", "0"]);
      stream.respond(responseFields);
      stream.write(envelope(out!));
      stream.end(trailers);
      return;
    }
    setTrailerStatus(new Headers(), failure).forEach((value, key) => {
      trailers.push([key, key === "grpc-message" ? specEncodeGrpcMessage(value) : value]);
    });
    // Trailers-only: an error has no message, so headers and trailers go in one block.
    stream.respond([...responseFields, ...trailers], true);
  }

  /** The one length-prefixed message of a unary call. */
  private unwrap(): { compressed: boolean; data: Uint8Array } {
    if (this.tooLarge) throw new ConnectError(`message is larger than the limit of ${LIMITS.bodyBytes} bytes`, Code.ResourceExhausted);
    const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.size);
    this.chunks = [];
    this.stream.release();
    if (all.length < 5) throw new ConnectError("protocol error: missing the message envelope", Code.InvalidArgument);
    if (all.length !== 5 + all.readUInt32BE(1)) {
      throw new ConnectError("protocol error: a unary call takes exactly one message", Code.InvalidArgument);
    }
    return { compressed: (all[0]! & 1) === 1, data: all.subarray(5) };
  }
}

function decode(method: DescMethodUnary, codec: Codec, message: { compressed: boolean; data: Uint8Array }, encoding: unknown): unknown {
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
