/**
 * The service's HTTP/2 (cleartext, prior knowledge): Node's `node:http2`,
 * that is nghttp2, with its limits set, and what nghttp2 does not bound
 * itself bounded here.
 *
 * Every stream either is a unary gRPC call, answered on the core stream API
 * (grpc-unary.ts: no request and response objects per call), or goes to
 * Fastify through the compatibility layer's request and response objects
 * (reflection's bidirectional stream, Connect, gRPC-Web, REST over h2c).
 *
 * nghttp2 bounds the protocol: concurrent streams (SETTINGS; a client that
 * opens more than it was told ends its connection), header lists, its own
 * memory per connection, SETTINGS and PING floods (acknowledgements the
 * client does not read), CONTINUATION floods, rapid reset (1,000 resets,
 * then 33 a second), content-length against the DATA received, and frames
 * that make the server reset a stream ("MadeYouReset": a WINDOW_UPDATE of 0
 * or one overflowing the window, DATA after END_STREAM, a stream depending
 * on itself end the whole connection in nghttp2 1.61). Here:
 *
 * - Work per connection. A stream nghttp2 closed (reset by the client, or by
 *   the server for the client's error) leaves its handler running; such
 *   calls still count. Above twice the concurrent-stream limit of calls in
 *   progress on one connection, new streams are refused (REFUSED_STREAM,
 *   which clients retry). A stream that closes before its answer aborts its
 *   call's signal, so the database stops the work.
 * - Time. A stream open longer than the request timeout (a body that stops
 *   coming, an answer the client never opens its window for) is reset; a
 *   connection with no stream in progress and none started for the idle
 *   timeout is closed with GOAWAY (PINGs do not keep it). Both are checked
 *   by one timer for all connections, a few times per timeout, not by a
 *   timer per stream: a stream costs two Set operations.
 */
import http2, {
  type Http2ServerRequest,
  type Http2ServerResponse,
  type Http2Session,
  type IncomingHttpHeaders,
  type ServerHttp2Stream,
} from "node:http2";
import { performance } from "node:perf_hooks";
import type { Logger } from "pino";
import { restErrorBody } from "../call/errors.js";
import { expectationFailedBody, refuse } from "./http-errors.js";
import { RequestLog } from "../call/request-log.js";
import type { StreamServer, StreamWork } from "../grpc/stream-server.js";

export interface H2Limits {
  /** SETTINGS_MAX_CONCURRENT_STREAMS; calls in progress per connection are capped at twice this. */
  readonly maxConcurrentStreams: number;
  /** nghttp2's memory per connection, MiB. */
  readonly maxSessionMemoryMb: number;
  /** A stream still open this long after its headers is reset. */
  readonly requestTimeoutMs: number;
  /** A connection with no stream for this long is closed. */
  readonly idleTimeoutMs: number;
  /**
   * The paths of server streams (the change feed's Watch), which may stay
   * open for as long as their client reads: not reset at the request
   * timeout, but when what they send waits that long for the client's window.
   */
  readonly streamingPaths?: ReadonlySet<string>;
}

/** Request headers, as the HTTP/1.1 server allows (431 there above it; here the stream is reset). */
export const MAX_HEADER_LIST_BYTES = 64 << 10;


type CompatHandler = (req: Http2ServerRequest, res: Http2ServerResponse) => void;

/**
 * Ring of stream generations for the request timeout: a stream joins the
 * newest, leaves when it closes, and is reset if it is still in the oldest
 * when the ring turns. With GENERATIONS sets turned every timeout/(N-1), a
 * stream lives at least the timeout and at most N/(N-1) of it.
 */
const GENERATIONS = 5;

/** How long a connection has to acknowledge the PING that asks whether nghttp2 still serves it. */
const PROBE_MS = 1_000;

/** One HTTP/2 connection's bookkeeping. */
export class SessionWork implements StreamWork {
  /** Calls started on this connection whose handler has not finished, reset streams included. */
  inFlight = 0;
  /** The sweep tick at which the last stream started (or the connection did). */
  lastStreamTick: number;
  /** The highest stream id that reached this server as a stream, or that a probe found the connection alive past. */
  seenStreamId = 0;
  /** performance.now() when a PING probe was sent and is not yet acknowledged. */
  probeSince: number | undefined;

  constructor(
    private readonly server: H2Server,
    readonly session: Http2Session,
  ) {
    this.lastStreamTick = server.tick;
  }

  /** A call's handler finished. */
  finished(): void {
    this.inFlight--;
  }

  /** The stream closed: it no longer needs its timeout. */
  streamClosed(stream: ServerHttp2Stream): void {
    this.server.forget(stream);
  }
}

const kWork = Symbol("portcullis.h2.work");

function ignore(): void {}
type WithWork = Http2Session & { [kWork]?: SessionWork };

export class H2Server {
  readonly server: http2.Http2Server;
  /** Sweep ticks since start: the clock of idle connections. */
  tick = 0;
  private readonly sessions = new Set<Http2Session>();
  private readonly generations: Set<ServerHttp2Stream>[] = [];
  /** Open server streams, with the tick since which each has had bytes its client's window does not take (undefined: none). */
  private readonly streaming = new Map<ServerHttp2Stream, number | undefined>();
  private readonly streamingPaths: ReadonlySet<string>;
  private readonly maxCallsPerSession: number;
  private readonly sweepMs: number;
  private readonly idleTicks: number;
  private readonly streamTicks: number;
  private streamTick = 0;
  private readonly sweeper: NodeJS.Timeout;
  private compat: CompatHandler | undefined;
  private draining = false;
  private onSessionsClosed: (() => void) | undefined;

  constructor(
    limits: H2Limits,
    private readonly unary: StreamServer | undefined,
    private readonly log: Logger,
    /** Records the requests refused here, before Fastify (a request log of its own when not given). */
    private readonly requestLog: RequestLog = new RequestLog(log),
  ) {
    this.maxCallsPerSession = 2 * limits.maxConcurrentStreams;
    this.streamingPaths = limits.streamingPaths ?? new Set();
    for (let i = 0; i < GENERATIONS; i++) this.generations.push(new Set());
    // Turn the stream ring every timeout/(N-1); check idle connections on the same timer.
    this.sweepMs = Math.max(10, Math.min(1_000, Math.floor(limits.requestTimeoutMs / (GENERATIONS - 1)), Math.floor(limits.idleTimeoutMs / 4)));
    this.streamTicks = Math.max(1, Math.round(limits.requestTimeoutMs / (GENERATIONS - 1) / this.sweepMs));
    this.idleTicks = Math.max(1, Math.ceil(limits.idleTimeoutMs / this.sweepMs));
    this.server = http2.createServer({
      settings: {
        maxConcurrentStreams: limits.maxConcurrentStreams,
        maxHeaderListSize: MAX_HEADER_LIST_BYTES,
        enablePush: false,
      },
      maxSessionMemory: limits.maxSessionMemoryMb,
      // SETTINGS entries per frame, PINGs awaiting their ACK: Node's defaults, said here.
      maxSettings: 32,
      maxOutstandingPings: 10,
      // Frames nghttp2 rejects (a stream's protocol error, a frame on a
      // closed stream) end the connection after this many; Node's 1,000 lets
      // a client make the server do a thousand resets per connection.
      maxSessionInvalidFrames: 16,
      // Streams refused (over the memory limit) before the connection ends.
      maxSessionRejectedStreams: 32,
      // Only for TLS connections whose ALPN fails; set for completeness (this server is cleartext).
      unknownProtocolTimeout: 5_000,
    });
    this.server.on("session", (session: Http2Session) => this.onSession(session));
    this.server.on("stream", (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, _flags: number, rawHeaders: string[]) =>
      this.onStream(stream, headers, rawHeaders),
    );
    this.server.on("sessionError", (error: Error) => this.log.debug({ err: error }, "HTTP/2 connection error"));
    this.sweeper = setInterval(() => this.sweep(), this.sweepMs).unref();
  }

  /** Fastify's handler, for every stream the unary path does not take. */
  serveOthersWith(handler: CompatHandler): void {
    this.compat = handler;
  }

  /** A connection whose first bytes were the HTTP/2 preface. */
  accept(socket: import("node:net").Socket): void {
    this.server.emit("connection", socket);
  }

  get connections(): number {
    return this.sessions.size;
  }

  /** GOAWAY on every connection (and on those that arrive from now on): streams in progress finish. */
  drain(): Promise<void> {
    this.draining = true;
    for (const session of this.sessions) session.close();
    if (this.sessions.size === 0) return Promise.resolve();
    return new Promise((resolve) => (this.onSessionsClosed = resolve));
  }

  /** Ends every connection now, and the timer. */
  destroy(): void {
    clearInterval(this.sweeper);
    for (const session of this.sessions) session.destroy();
  }

  forget(stream: ServerHttp2Stream): void {
    if (this.streaming.delete(stream)) return;
    for (const generation of this.generations) if (generation.delete(stream)) return;
  }

  private onSession(session: Http2Session): void {
    const work = new SessionWork(this, session);
    (session as WithWork)[kWork] = work;
    this.sessions.add(session);
    session.on("error", (error: Error) => this.log.debug({ err: error }, "HTTP/2 connection error"));
    session.once("close", () => {
      this.sessions.delete(session);
      if (this.draining && this.sessions.size === 0) this.onSessionsClosed?.();
    });
    if (this.draining) session.close();
  }

  private onStream(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, rawHeaders: string[]): void {
    // Node emits "stream" on the next tick: a stream the client reset at once
    // (rapid reset) is already destroyed, and has no session any more.
    // A stream can still emit an error (a reset with an error code, a
    // content-length that disagrees with its DATA); with nobody listening
    // that would end the process.
    stream.on("error", ignore);
    const session = stream.session as WithWork | undefined;
    if (session === undefined || stream.destroyed) return;
    const work = session[kWork]!;
    if (work.inFlight >= this.maxCallsPerSession) {
      stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
      return;
    }
    work.inFlight++;
    work.lastStreamTick = this.tick;
    work.seenStreamId = stream.id ?? work.seenStreamId;
    if (this.streamingPaths.has(headers[":path"] ?? "")) this.streaming.set(stream, undefined);
    else this.generations[0]!.add(stream);
    if (this.unary?.serve(stream, headers, work)) return;
    this.serveCompat(stream, headers, rawHeaders, work);
  }

  /**
   * Node's compatibility request and response, made here as the layer
   * itself would: a "request" listener on the server would switch that
   * layer on for every stream, unary gRPC calls included.
   */
  private serveCompat(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, rawHeaders: string[], work: SessionWork): void {
    stream.once("close", () => {
      work.finished();
      work.streamClosed(stream);
    });
    const req = new http2.Http2ServerRequest(stream, headers, {}, rawHeaders);
    const res = new http2.Http2ServerResponse(stream);
    // Refused before Fastify, in the documented error body all the same (http-errors.ts).
    const request = { method: headers[":method"], headers };
    if (headers[":method"] === "CONNECT") {
      refuse(this.requestLog, request, res, 405, (id) => restErrorBody(id, "invalid_argument", "CONNECT is not supported"), false);
      return;
    }
    if (headers.expect !== undefined) {
      if (headers.expect !== "100-continue") {
        refuse(this.requestLog, request, res, 417, (id) => expectationFailedBody(id, headers.expect), false);
        return;
      }
      res.writeContinue();
    }
    if (this.compat === undefined) {
      refuse(this.requestLog, request, res, 503, (id) => restErrorBody(id, "unavailable", "the service is not ready yet"), false);
      return;
    }
    this.compat(req, res);
  }

  /**
   * A connection nghttp2 has given up on is closed at once. When nghttp2
   * finds a connection error itself (a header field over its 64 KiB HPACK
   * limit is a COMPRESSION_ERROR), it sends GOAWAY and stops reading, and
   * Node neither closes the socket nor tells anyone: the client (grpc's C
   * core waits for the close) would hang until the idle timeout. What shows
   * it: nghttp2 processed a stream's headers (lastProcStreamID) that never
   * reached this server as a stream. A PING then asks whether the connection
   * is still served; nghttp2 sends nothing more on a connection it ended, so
   * no acknowledgement within PROBE_MS means it is gone, and it is destroyed.
   * (A stream nghttp2 refused without a connection error is acknowledged,
   * and the connection lives on.)
   */
  private watchForTermination(session: Http2Session, work: SessionWork): void {
    if (work.probeSince !== undefined) {
      if (performance.now() - work.probeSince >= PROBE_MS) session.destroy();
      return;
    }
    const processed = session.state.lastProcStreamID ?? 0;
    if (processed <= work.seenStreamId) return;
    work.probeSince = performance.now();
    const sent = session.ping((error) => {
      if (error !== null) return; // the session ended meanwhile
      work.probeSince = undefined;
      work.seenStreamId = Math.max(work.seenStreamId, processed);
    });
    if (!sent) session.destroy();
  }

  /**
   * A server stream whose client stopped reading: its answer's bytes wait in
   * the stream's buffer for the client's window. Once they have waited the
   * request timeout, the stream is reset (its call is aborted on close and
   * frees what it held); the client resumes from the last message it read.
   * An idle stream, with nothing to send, has nothing buffered and stays.
   */
  private sweepStreaming(): void {
    const limit = this.streamTicks * (GENERATIONS - 1);
    for (const [stream, since] of this.streaming) {
      if (stream.closed || stream.destroyed) {
        this.streaming.delete(stream);
      } else if (stream.writableLength === 0) {
        if (since !== undefined) this.streaming.set(stream, undefined);
      } else if (since === undefined) {
        this.streaming.set(stream, this.tick);
      } else if (this.tick - since >= limit) {
        stream.close(http2.constants.NGHTTP2_CANCEL);
      }
    }
  }

  private sweep(): void {
    this.tick++;
    if (++this.streamTick >= this.streamTicks) {
      this.streamTick = 0;
      const oldest = this.generations.pop()!;
      for (const stream of oldest) {
        // Still open a whole timeout after its headers: reset it (its call is aborted on close).
        if (!stream.closed && !stream.destroyed) stream.close(http2.constants.NGHTTP2_CANCEL);
      }
      oldest.clear();
      this.generations.unshift(oldest);
    }
    this.sweepStreaming();
    for (const session of this.sessions) {
      const work = (session as WithWork)[kWork]!;
      if (!session.closed && !session.destroyed) this.watchForTermination(session, work);
      // More than idleTicks whole ticks: at least the idle timeout, whatever the phase of the timer.
      if (work.inFlight === 0 && this.tick - work.lastStreamTick > this.idleTicks && !session.closed) {
        // GOAWAY (NO_ERROR): the client reconnects when it has a call to make.
        session.close();
      } else if (session.closed && !session.destroyed && this.tick - work.lastStreamTick > 2 * this.idleTicks) {
        session.destroy(); // a closed connection whose client never lets it finish
      }
    }
  }
}
