/**
 * Unary gRPC, answered on node:http2's core stream API. connect-node's
 * handler runs every call through async-iterable pipelines built for
 * streaming, and the HTTP/2 compatibility layer (which Fastify needs) makes
 * a request and a response object per stream; for unary calls (every RPC of
 * Portcullis but reflection) together they cost more than the check itself.
 * Here a unary call's message is read whole, decoded, given to the same
 * guarded implementations, and the answer written as HEADERS, DATA and
 * trailers. Every other stream (reflection's, Connect, gRPC-Web, REST over
 * h2c) is left to Fastify (see h2-server.ts).
 *
 * Per call: one small record, shared listener functions (the stream points
 * to its call), constant trailer objects on success; no promise chain
 * beyond the implementation's, no timer unless the client sent a deadline.
 * The request id goes back in x-request-id on every answer; each call is
 * recorded by the request log (its line, metrics and span: request-log.ts).
 *
 * Supported: proto and JSON codecs; identity and gzip request compression
 * (answers are not compressed); grpc-status-details-bin on errors;
 * grpc-timeout (the call's signal aborts and DEADLINE_EXCEEDED is answered
 * when it passes); a stream that closes before its answer (the client
 * cancelled, or went away) aborts the call's signal, so the database stops
 * its work and rolls back.
 */
import { create, fromBinary, fromJsonString, isMessage, toBinary, toJsonString, type DescMethodUnary, type Message } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import type { IncomingHttpHeaders, ServerHttp2Stream } from "node:http2";
import { performance } from "node:perf_hooks";
import { gunzip } from "node:zlib";
import type { Logger } from "pino";
import { LIMITS } from "../../domain/formats.js";
import { callerOf } from "../../services/call-values.js";
import { CallContext, deadlineExceeded } from "../call/call-context.js";
import { toConnectError } from "../call/errors.js";
import type { ServiceBinding } from "../call/guard.js";
import { flatProtoReader, flatProtoWriter } from "./flat-proto.js";
import type { StreamServer, StreamWork } from "./stream-server.js";
import { specEncodeGrpcMessage } from "./grpc-message.js";
import { rpcName, Tracing, type RpcName, type Span } from "../../lib/tracing.js";
import type { RequestLog } from "../call/request-log.js";
import { strictJsonDecoder } from "../call/utf8.js";

type UnaryFn = (request: unknown, ctx: HandlerContext) => Promise<unknown>;
type Codec = "proto" | "json";

interface Route {
  path: string;
  rpc: RpcName;
  method: DescMethodUnary;
  call: UnaryFn;
  /** Table-driven protobuf for flat messages (flat-proto.ts), when the types are flat. */
  readInput: ((bytes: Uint8Array) => Message | undefined) | undefined;
  writeOutput: ((message: object, offset: number) => Buffer) | undefined;
}

const GRPC = /^application\/grpc(\+(proto|json))?(;.*)?$/i;

/** Success: the trailers of every answered call; the headers, to which each answer adds its request id. */
const OK_TRAILERS = { "grpc-status": "0" };
const HEADERS = {
  proto: { ":status": 200, "content-type": "application/grpc+proto", "grpc-accept-encoding": "gzip" },
  json: { ":status": 200, "content-type": "application/grpc+json", "grpc-accept-encoding": "gzip" },
} as const;
/** gRPC clients read no Date header; Node would format and HPACK-encode one per call. */
const RESPOND_WITH_TRAILERS = { waitForTrailers: true, sendDate: false };
const RESPOND_TRAILERS_ONLY = { endStream: true, sendDate: false };

/** gRPC's grpc-timeout: up to 8 digits and a unit (RFC-free, from the gRPC HTTP/2 spec). */
const TIMEOUT = /^(\d{1,8})([HMSmun])$/;
const TIMEOUT_UNIT_MS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1_000, m: 1, u: 0.001, n: 0.000_001 };

/**
 * The call's deadline (Date.now() milliseconds) from its grpc-timeout.
 * Malformed: INVALID_ARGUMENT, as connect-node answers (grpc-go answers
 * INTERNAL, but no client input may read as a server fault here).
 */
export function deadlineOf(header: string | string[] | undefined, now: number): number | undefined {
  if (header === undefined) return undefined;
  const match = TIMEOUT.exec(Array.isArray(header) ? (header[0] ?? "") : header);
  if (match === null) throw new ConnectError(`malformed grpc-timeout "${String(header)}"`, Code.InvalidArgument);
  return now + Number(match[1]) * TIMEOUT_UNIT_MS[match[2]!]!;
}

export class UnaryGrpc implements StreamServer {
  private readonly routes = new Map<string, Route>();

  constructor(
    bindings: ServiceBinding[],
    readonly log: Logger,
    readonly requestLog: RequestLog,
    readonly tracing: Tracing = Tracing.off,
  ) {
    for (const { service, impl } of bindings) {
      for (const method of service.methods) {
        if (method.methodKind !== "unary") continue;
        const call = (impl as unknown as Record<string, UnaryFn>)[method.localName]!;
        const path = `/${service.typeName}/${method.name}`;
        this.routes.set(path, {
          path,
          rpc: rpcName(service.typeName, method.name),
          method: method as DescMethodUnary,
          call,
          readInput: flatProtoReader(method.input),
          writeOutput: flatProtoWriter(method.output),
        });
      }
    }
  }

  /**
   * Takes the stream when it is a unary gRPC call (a POST of
   * application/grpc[+proto|+json] to a unary method); false leaves it to
   * the next owner.
   */
  serve(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, work: StreamWork): boolean {
    if (headers[":method"] !== "POST") return false;
    const route = this.routes.get(headers[":path"] ?? "");
    if (route === undefined) return false;
    const codec = codecOf(headers["content-type"]);
    if (codec === undefined) return false;
    const call = new UnaryCall(this, route, codec, stream, headers, work);
    (stream as CallStream)[kCall] = call;
    // Shared functions, not closures: the stream points to its call.
    stream.on("data", onData);
    stream.on("end", onEnd);
    stream.on("close", onClose);
    return true;
  }
}

function codecOf(type: string | undefined): Codec | undefined {
  if (type === "application/grpc" || type === "application/grpc+proto") return "proto";
  if (type === "application/grpc+json") return "json";
  const match = GRPC.exec(type ?? "");
  if (match === null) return undefined;
  return match[2]?.toLowerCase() === "json" ? "json" : "proto";
}

const kCall = Symbol("portcullis.grpc.call");
type CallStream = ServerHttp2Stream & { [kCall]: UnaryCall | undefined };

function onData(this: CallStream, chunk: Buffer): void {
  this[kCall]?.data(chunk);
}

function onEnd(this: CallStream): void {
  this[kCall]?.end();
}

function onClose(this: CallStream): void {
  const call = this[kCall];
  // Node may keep a closed stream's object for a while (its native side is
  // released later): it must not keep the call, its context and headers.
  this[kCall] = undefined;
  call?.closed();
}

/** Shared by every successful call: a listener bound by `this`, not a closure made per call. */
function sendOkTrailers(this: ServerHttp2Stream): void {
  if (!this.closed) this.sendTrailers(OK_TRAILERS);
}

/**
 * One call: the message is collected from the DATA frames and the call
 * starts when the client ends its side, or as soon as the message passes
 * the size limit (to refuse it without waiting for the rest).
 */
class UnaryCall {
  private chunks: Buffer[] = [];
  private size = 0;
  private tooLarge = false;
  private ctx: CallContext | undefined;
  /** The handler is running (counted in the connection's calls in progress until it settles). */
  private running = false;
  /** The answer, or a reset, went out: nothing more is written. */
  private answered = false;
  /** performance.now() at arrival, when requests are recorded. */
  private readonly started: number;
  /** Date.now() at arrival, when the client sent a deadline (it counts from there). */
  private readonly arrived: number;
  /** performance.now() at arrival, when the client sent a deadline: a deadline may be shorter than Date.now()'s millisecond. */
  private readonly arrivedPrecisely: number;
  private readonly requestId: string;
  /** The call's span, when tracing is on. */
  private readonly span: Span | undefined;

  constructor(
    private readonly owner: UnaryGrpc,
    private readonly route: Route,
    private readonly codec: Codec,
    private readonly stream: ServerHttp2Stream,
    private readonly headers: IncomingHttpHeaders,
    private readonly work: StreamWork,
  ) {
    this.started = owner.requestLog.recording ? performance.now() : 0;
    this.arrived = headers["grpc-timeout"] === undefined ? 0 : Date.now();
    this.arrivedPrecisely = headers["grpc-timeout"] === undefined ? 0 : performance.now();
    this.requestId = owner.requestLog.requestId(headers);
    this.span = owner.tracing.enabled ? owner.tracing.startRpc(headers, "grpc", route.rpc, this.requestId) : undefined;
  }

  data(chunk: Buffer): void {
    if (this.tooLarge || this.running) return;
    this.size += chunk.length;
    if (this.size > LIMITS.bodyBytes + 5) {
      this.tooLarge = true;
      this.chunks = [];
      this.start();
      return;
    }
    this.chunks.push(chunk);
  }

  end(): void {
    if (!this.tooLarge) this.start();
  }

  /**
   * The stream closed before the answer: the client cancelled. A call still
   * running is aborted; one never started (its message was still arriving)
   * frees its slot. Either way the call is recorded as CANCELLED.
   */
  closed(): void {
    this.work.streamClosed(this.stream);
    if (this.answered) return;
    this.answered = true;
    if (this.running) this.ctx?.abort();
    else this.work.finished();
    this.record(Code.Canceled);
  }

  private start(): void {
    if (this.running || this.answered) return;
    this.running = true;
    void this.run();
  }

  private async run(): Promise<void> {
    const { route, headers } = this;
    let out: Buffer | undefined;
    let failure: ConnectError | undefined;
    try {
      const deadline = deadlineOf(headers["grpc-timeout"], this.arrived);
      const ctx = (this.ctx = new CallContext(route.method, "grpc", "POST", route.path, headers, deadline, this.requestId, this.span));
      if (deadline !== undefined) this.watchDeadline(ctx);
      const decoded = decode(route, this.codec, this.unwrap(), headers["grpc-encoding"]);
      // Only a compressed message waits for zlib; awaiting a plain value would still cost a turn.
      const input = decoded instanceof Promise ? await decoded : decoded;
      const result = await route.call(input, ctx);
      // The deadline's timer fires a millisecond at the earliest: an answer
      // ready after a shorter deadline (grpc-timeout "1u") is not sent as OK.
      if (deadline !== undefined && performance.now() - this.arrivedPrecisely >= deadline - this.arrived) throw deadlineExceeded();
      // Nobody is left to read an answer to a call whose stream closed: no encoding it.
      if (!this.answered) out = this.encode(result);
    } catch (error) {
      failure = error instanceof ConnectError ? error : toConnectError(error, this.owner.log, this.requestId);
    }
    this.work.finished();
    this.ctx?.done();
    if (this.answered) return;
    try {
      this.answer(out, failure);
    } catch (error) {
      // The stream went away between the check and the write: nobody is left to answer.
      this.owner.log.debug({ err: error, requestId: this.requestId }, "gRPC answer not written");
    }
  }

  /** The answer's message, in its envelope. */
  private encode(result: unknown): Buffer {
    const { method, writeOutput } = this.route;
    if (this.codec === "proto" && writeOutput !== undefined) {
      const out = writeOutput(result as object, 5);
      out[0] = 0;
      out.writeUInt32BE(out.length - 5, 1);
      return out;
    }
    const output = isMessage(result, method.output) ? result : create(method.output, result as never);
    return envelope(
      this.codec === "json"
        ? new TextEncoder().encode(toJsonString(method.output, output, { alwaysEmitImplicit: true }))
        : toBinary(method.output, output),
    );
  }

  /** Answers DEADLINE_EXCEEDED when the deadline passes, whatever the implementation is doing. */
  private watchDeadline(ctx: CallContext): void {
    const signal = ctx.signal;
    const onAbort = () => {
      if (this.answered || !(signal.reason instanceof ConnectError) || signal.reason.code !== Code.DeadlineExceeded) return;
      this.answer(undefined, signal.reason);
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
  }

  private answer(out: Buffer | undefined, failure: ConnectError | undefined): void {
    this.answered = true;
    const stream = this.stream;
    if (stream.destroyed || stream.closed) return;
    const setHeaders = this.ctx?.setResponseHeaders();
    const setTrailers = this.ctx?.setResponseTrailers();
    // The request id goes back on every answer, as on every path.
    const responseHeaders: Record<string, string | number> = { ...HEADERS[this.codec], "x-request-id": this.requestId };
    setHeaders?.forEach((value, key) => (responseHeaders[key] = value));
    if (failure === undefined && setTrailers === undefined) {
      stream.respond(responseHeaders, RESPOND_WITH_TRAILERS);
      stream.on("wantTrailers", sendOkTrailers);
      stream.end(out);
      this.record(0);
      return;
    }
    const trailers: Record<string, string> = {};
    setTrailers?.forEach((value, key) => (trailers[key] = value));
    if (failure === undefined) {
      trailers["grpc-status"] = "0";
      stream.respond(responseHeaders, RESPOND_WITH_TRAILERS);
      stream.on("wantTrailers", () => {
        if (!stream.closed) stream.sendTrailers(trailers);
      });
      stream.end(out);
      this.record(0);
      return;
    }
    setTrailerStatus(new Headers(), failure).forEach((value, key) => {
      trailers[key] = key === "grpc-message" ? specEncodeGrpcMessage(value) : value;
    });
    // Trailers-only: an error has no message, so headers and trailers go in one block.
    stream.respond({ ...responseHeaders, ...trailers }, RESPOND_TRAILERS_ONLY);
    this.record(failure.code);
  }

  /** The call's outcome, to the request log (its line, metrics and span). */
  private record(status: number): void {
    const log = this.owner.requestLog;
    if (!log.recording) return;
    log.write({
      protocol: "grpc",
      method: "POST",
      route: this.route.path,
      status,
      ms: performance.now() - this.started,
      requestId: this.requestId,
      keyId: this.ctx === undefined ? undefined : callerOf(this.ctx)?.keyId,
      span: this.span,
    });
  }

  /** The one length-prefixed message of a unary call. */
  private unwrap(): { compressed: boolean; data: Uint8Array } {
    if (this.tooLarge) throw new ConnectError(`message is larger than the limit of ${LIMITS.bodyBytes} bytes`, Code.ResourceExhausted);
    const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.size);
    this.chunks = [];
    if (all.length < 5) throw new ConnectError("protocol error: missing the message envelope", Code.InvalidArgument);
    if (all.length !== 5 + all.readUInt32BE(1)) {
      throw new ConnectError("protocol error: a unary call takes exactly one message", Code.InvalidArgument);
    }
    return { compressed: (all[0]! & 1) === 1, data: all.subarray(5) };
  }
}

/** Decodes the message; a compressed one is inflated off the event loop, up to the size limit. */
function decode(route: Route, codec: Codec, message: { compressed: boolean; data: Uint8Array }, encoding: unknown): unknown {
  if (!message.compressed) return parse(route, codec, message.data);
  if (encoding !== "gzip") {
    throw new ConnectError(`unsupported grpc-encoding "${String(encoding)}" (accepted: gzip)`, Code.Unimplemented);
  }
  return new Promise((resolve, reject) => {
    gunzip(message.data, { maxOutputLength: LIMITS.bodyBytes }, (error, data) => {
      if (error === null) {
        try {
          resolve(parse(route, codec, data));
        } catch (parseError) {
          reject(parseError);
        }
        return;
      }
      // By zlib's error code, not its message: over the limit, or not gzip.
      const code = (error as NodeJS.ErrnoException).code;
      reject(
        code === "ERR_BUFFER_TOO_LARGE"
          ? new ConnectError(`decompressed message is larger than the limit of ${LIMITS.bodyBytes} bytes`, Code.ResourceExhausted)
          : new ConnectError(`message is not valid gzip (${code ?? "unknown error"})`, Code.InvalidArgument),
      );
    });
  });
}

function parse(route: Route, codec: Codec, data: Uint8Array): unknown {
  const method = route.method;
  if (codec === "proto") {
    const flat = route.readInput?.(data);
    if (flat !== undefined) return flat;
  }
  try {
    return codec === "json"
      ? fromJsonString(method.input, strictJsonDecoder.decode(data), { ignoreUnknownFields: false }) // not UTF-8: refused, not U+FFFD
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
