/**
 * A server-side HTTP/2 connection (RFC 9113) over a plain socket, written for
 * unary gRPC: the check is the call every request of every client makes, and
 * Node's HTTP/2 (an Http2Stream duplex, header objects and a deferred
 * trailers step per stream) cost more than the check itself. Here a stream is
 * a small record; frames are parsed from the socket's chunks, and what a
 * burst of answers writes goes out in one socket write.
 *
 * The connection does framing, HPACK, stream states, flow control in both
 * directions, SETTINGS, PING, RST_STREAM and GOAWAY. What a stream means is
 * the `open` callback's business: the service answers unary gRPC itself and
 * relays every other stream to Node's HTTP/2 server (see proxy.ts).
 */
import type { IncomingHttpHeaders } from "node:http2";
import type { Socket } from "node:net";
import { ErrorCode, Flag, FrameType, DEFAULT_MAX_FRAME, DEFAULT_WINDOW, MAX_WINDOW, PREFACE, Setting, frame, goawayPayload, settingsPayload, u32 } from "./frames.js";
import { HpackDecoder, HpackError, encodeHeaders, type HeaderList } from "./hpack.js";

export interface H2Limits {
  /** SETTINGS_MAX_CONCURRENT_STREAMS: streams beyond it are refused. */
  maxConcurrentStreams: number;
  /** SETTINGS_INITIAL_WINDOW_SIZE: what a client may send on a stream before we take it. */
  streamWindow: number;
  /** The connection's receive window. */
  connectionWindow: number;
  /** SETTINGS_MAX_HEADER_LIST_SIZE: larger request headers get a 431. */
  maxHeaderListSize: number;
  /** Bytes streams may hold unprocessed before the connection stops granting window. */
  maxRetainedBytes: number;
  /** Past this much unsent output, the connection stops reading until the socket drains. */
  maxPendingOutput: number;
  /** Streams in progress a client may reset in one second before the connection is closed. */
  maxResetsPerSecond: number;
}

export const DEFAULT_LIMITS: H2Limits = {
  maxConcurrentStreams: 1000,
  streamWindow: 1 << 20,
  connectionWindow: 16 << 20,
  maxHeaderListSize: 64 << 10,
  maxRetainedBytes: 64 << 20,
  maxPendingOutput: 4 << 20,
  maxResetsPerSecond: 500,
};

/** What the connection tells a stream's owner. */
export interface StreamSink {
  /** A DATA payload (padding removed). The owner calls `consumed` when it has taken it. */
  data(chunk: Buffer): void;
  /** The client ended its side (END_STREAM). */
  end(): void;
  /** The stream is gone: reset by the client (its code) or the connection closed. */
  reset(code: number): void;
}

/** Opens a stream for a request's headers; the returned sink receives the rest. */
export type OpenStream = (stream: H2Stream, headers: IncomingHttpHeaders) => StreamSink;

const State = {
  Open: 0,
  /** The client sent END_STREAM. */
  HalfClosedRemote: 1,
  Closed: 2,
} as const;
type State = (typeof State)[keyof typeof State];

/** A response header block: encoded once (a constant) or fields to encode. */
export type HeaderBlock = Buffer | Iterable<readonly [string, string]>;

export class H2Stream {
  state: State = State.Open;
  sink: StreamSink | undefined;
  /** How much DATA we may still send (the client's window for this stream). */
  sendWindow: number;
  /** Output not yet sent for lack of window, in order. */
  queue: Buffer[] = [];
  queued = 0;
  /** After the queue: the trailers to send (or END_STREAM alone), once `end` was called. */
  ending: { trailers: Buffer | undefined } | undefined;
  responded = false;
  localEnded = false;
  /** Received bytes the owner has consumed but that are not yet granted back. */
  unacked = 0;
  retained = 0;
  /** Called when queued output has gone out, for owners that pause their source. */
  onDrain: (() => void) | undefined;

  constructor(
    readonly id: number,
    private readonly conn: H2Connection,
    sendWindow: number,
  ) {
    this.sendWindow = sendWindow;
  }

  /** The response headers; with endStream, the whole response (trailers-only or headers-only). */
  respond(headers: HeaderBlock, endStream = false): void {
    if (this.state === State.Closed || this.responded) return;
    this.responded = true;
    this.conn.sendHeaders(this, headers, endStream);
    if (endStream) this.conn.localEnd(this);
    else this.conn.pump(this);
  }

  /** An informational (1xx) response, before `respond`. */
  informational(status: number): void {
    if (this.state === State.Closed || this.responded) return;
    this.conn.sendHeaders(this, [[":status", String(status)]], false);
  }

  /** Response body bytes, sent as the client's windows allow (and not before the headers). */
  write(data: Uint8Array): void {
    if (this.state === State.Closed || this.localEnded || data.length === 0) return;
    const buf = Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.length);
    this.queue.push(buf);
    this.queued += buf.length;
    this.conn.pump(this);
  }

  /** Ends the response: trailers (if any) after the body. */
  end(trailers?: HeaderBlock): void {
    if (this.state === State.Closed || this.localEnded || this.ending !== undefined) return;
    this.ending = { trailers: trailers === undefined ? undefined : Buffer.isBuffer(trailers) ? trailers : encodeHeaders(trailers) };
    this.conn.pump(this);
  }

  /** Resets the stream (RST_STREAM). */
  reset(code: number): void {
    if (this.state === State.Closed) return;
    this.conn.resetStream(this, code, false);
  }

  /** The owner has taken `n` received bytes: they may be granted back to the client. */
  consumed(n: number): void {
    this.conn.consumed(this, n);
  }

  /** Bytes the owner holds unprocessed (counted against the connection's limit). */
  retain(n: number): void {
    this.retained += n;
    this.conn.retained += n;
  }

  release(): void {
    this.conn.retained -= this.retained;
    this.retained = 0;
    this.conn.maybeGrantConnection();
  }

  get closed(): boolean {
    return this.state === State.Closed;
  }
}

class ConnectionError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

const CONNECTION_HEADERS = new Set(["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"]);
const PSEUDO_REQUEST = new Set([":method", ":scheme", ":authority", ":path"]);
/** Headers Node keeps the first of rather than joining (its kSingleValueHeaders, for the ones a request carries). */
const SINGLE = new Set([
  ":authority",
  ":method",
  ":path",
  ":scheme",
  "authorization",
  "content-length",
  "content-type",
  "from",
  "host",
  "if-modified-since",
  "if-unmodified-since",
  "max-forwards",
  "proxy-authorization",
  "referer",
  "user-agent",
]);
const BAD_VALUE = /[\0\r\n]/;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9a-z]+$/;

export class H2Connection {
  private readonly decoder: HpackDecoder;
  private readonly streams = new Map<number, H2Stream>();
  private pending: Buffer | undefined;
  private prefaceSeen = false;
  private settingsSeen = false;
  private lastStreamId = 0;
  /** A header block being continued by CONTINUATION frames. */
  private continuing: { streamId: number; endStream: boolean; selfDependent: boolean; parts: Buffer[]; size: number } | undefined;
  private peerWindow = DEFAULT_WINDOW;
  private peerMaxFrame = DEFAULT_MAX_FRAME;
  private connSendWindow = DEFAULT_WINDOW;
  private connUnacked = 0;
  retained = 0;
  private readonly blocked = new Set<H2Stream>();
  private out: Buffer[] = [];
  private outBytes = 0;
  private flushScheduled = false;
  private goawaySent = false;
  private dead = false;
  private readingPaused = false;
  private resetWindowStart = 0;
  private resetsInWindow = 0;

  constructor(
    private readonly socket: Socket,
    private readonly open: OpenStream,
    private readonly limits: H2Limits = DEFAULT_LIMITS,
  ) {
    this.decoder = new HpackDecoder({ tableSize: 4096, maxListSize: limits.maxHeaderListSize });
    this.emit(
      frame(
        FrameType.SETTINGS,
        0,
        0,
        settingsPayload([
          [Setting.MAX_CONCURRENT_STREAMS, limits.maxConcurrentStreams],
          [Setting.INITIAL_WINDOW_SIZE, limits.streamWindow],
          [Setting.MAX_HEADER_LIST_SIZE, limits.maxHeaderListSize],
          [Setting.ENABLE_PUSH, 0],
        ]),
      ),
    );
    if (limits.connectionWindow > DEFAULT_WINDOW) {
      this.emit(frame(FrameType.WINDOW_UPDATE, 0, 0, u32(limits.connectionWindow - DEFAULT_WINDOW)));
    }
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("close", () => this.teardown());
    socket.on("error", () => socket.destroy());
    socket.on("drain", () => {
      if (this.readingPaused && !this.dead) {
        this.readingPaused = false;
        socket.resume();
      }
    });
  }

  /** Graceful close: GOAWAY, let running streams finish, then end the connection. */
  close(): void {
    if (this.dead) return;
    if (!this.goawaySent) {
      this.goawaySent = true;
      this.emit(frame(FrameType.GOAWAY, 0, 0, goawayPayload(this.lastStreamId, ErrorCode.NO_ERROR)));
    }
    if (this.streams.size === 0) this.finish();
  }

  destroy(): void {
    this.socket.destroy();
  }

  // -------------------------------------------------------------- reading

  private onData(chunk: Buffer): void {
    if (this.dead) return;
    const buf = this.pending === undefined ? chunk : Buffer.concat([this.pending, chunk]);
    this.pending = undefined;
    try {
      let at = 0;
      if (!this.prefaceSeen) {
        if (buf.length < PREFACE.length) {
          if (!PREFACE.subarray(0, buf.length).equals(buf)) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "bad connection preface");
          this.pending = buf;
          return;
        }
        if (!PREFACE.equals(buf.subarray(0, PREFACE.length))) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "bad connection preface");
        this.prefaceSeen = true;
        at = PREFACE.length;
      }
      while (buf.length - at >= 9 && !this.dead) {
        const length = buf.readUIntBE(at, 3);
        if (length > DEFAULT_MAX_FRAME) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, `frame of ${length} octets`);
        if (buf.length - at < 9 + length) break;
        const type = buf[at + 3]!;
        const flags = buf[at + 4]!;
        const streamId = buf.readUInt32BE(at + 5) & 0x7fffffff;
        const payload = buf.subarray(at + 9, at + 9 + length);
        at += 9 + length;
        this.onFrame(type, flags, streamId, payload);
      }
      if (at < buf.length && !this.dead) this.pending = buf.subarray(at);
    } catch (error) {
      // Whatever went wrong ends this connection only, never the process.
      this.fail(error instanceof ConnectionError ? error.code : error instanceof HpackError ? ErrorCode.COMPRESSION_ERROR : ErrorCode.INTERNAL_ERROR);
    }
    this.maybeGrantConnection();
  }

  private onFrame(type: number, flags: number, streamId: number, payload: Buffer): void {
    if (!this.settingsSeen && type !== FrameType.SETTINGS) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "the first frame must be SETTINGS");
    if (this.continuing !== undefined && (type !== FrameType.CONTINUATION || streamId !== this.continuing.streamId)) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "a header block was interrupted");
    }
    switch (type) {
      case FrameType.DATA:
        return this.onDataFrame(flags, streamId, payload);
      case FrameType.HEADERS:
        return this.onHeaders(flags, streamId, payload);
      case FrameType.PRIORITY:
        if (streamId === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "PRIORITY on stream 0");
        if (payload.length !== 5) this.resetById(streamId, ErrorCode.FRAME_SIZE_ERROR);
        return;
      case FrameType.RST_STREAM:
        return this.onReset(streamId, payload);
      case FrameType.SETTINGS:
        return this.onSettings(flags, streamId, payload);
      case FrameType.PUSH_PROMISE:
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "PUSH_PROMISE from a client");
      case FrameType.PING:
        if (streamId !== 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "PING on a stream");
        if (payload.length !== 8) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "PING of the wrong size");
        if ((flags & Flag.ACK) === 0) this.emit(frame(FrameType.PING, Flag.ACK, 0, payload));
        return;
      case FrameType.GOAWAY:
        if (streamId !== 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "GOAWAY on a stream");
        // The client will open no more streams; those it has run to their end.
        this.close();
        return;
      case FrameType.WINDOW_UPDATE:
        return this.onWindowUpdate(streamId, payload);
      case FrameType.CONTINUATION:
        return this.onContinuation(flags, streamId, payload);
      default:
        return; // unknown frame types are ignored (RFC 9113 4.1)
    }
  }

  /** The payload without its padding (PADDED flag). */
  private unpad(flags: number, payload: Buffer): Buffer {
    if ((flags & Flag.PADDED) === 0) return payload;
    if (payload.length < 1) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "padded frame without a pad length");
    const pad = payload[0]!;
    if (pad >= payload.length) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "padding longer than the frame");
    return payload.subarray(1, payload.length - pad);
  }

  private onDataFrame(flags: number, streamId: number, payload: Buffer): void {
    if (streamId === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "DATA on stream 0");
    // Flow control counts the whole payload, padding included, whatever the stream's state.
    this.connUnacked += payload.length;
    const stream = this.streams.get(streamId);
    if (stream === undefined) {
      if (streamId > this.lastStreamId) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "DATA on an idle stream");
      return; // a stream we closed: its late frames are dropped
    }
    if (stream.state !== State.Open) {
      this.resetStream(stream, ErrorCode.STREAM_CLOSED, true);
      return;
    }
    const data = this.unpad(flags, payload);
    // Padding is granted back at once; the data when its owner has taken it.
    stream.unacked += payload.length - data.length;
    if (data.length > 0) stream.sink!.data(data);
    if (flags & Flag.END_STREAM) this.remoteEnd(stream);
  }

  private onHeaders(flags: number, streamId: number, payload: Buffer): void {
    if (streamId === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "HEADERS on stream 0");
    let block = this.unpad(flags, payload);
    let selfDependent = false;
    if (flags & Flag.PRIORITY) {
      if (block.length < 5) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "HEADERS too short for its priority");
      selfDependent = (block.readUInt32BE(0) & 0x7fffffff) === streamId;
      block = block.subarray(5);
    }
    const endStream = (flags & Flag.END_STREAM) !== 0;
    if (flags & Flag.END_HEADERS) this.onHeaderBlock(streamId, endStream, block, selfDependent);
    else this.continuing = { streamId, endStream, selfDependent, parts: [Buffer.from(block)], size: block.length };
  }

  private onContinuation(flags: number, streamId: number, payload: Buffer): void {
    const c = this.continuing;
    if (c === undefined || streamId !== c.streamId) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "CONTINUATION without HEADERS");
    c.size += payload.length;
    if (c.size > 4 * this.limits.maxHeaderListSize) throw new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "header block too large");
    c.parts.push(Buffer.from(payload));
    if (flags & Flag.END_HEADERS) {
      this.continuing = undefined;
      this.onHeaderBlock(streamId, c.endStream, Buffer.concat(c.parts, c.size), c.selfDependent);
    }
  }

  private onHeaderBlock(streamId: number, endStream: boolean, block: Buffer, selfDependent: boolean): void {
    // Decoded first, whatever happens to the stream: the table must stay in step with the client's.
    const { headers: list, tooLarge } = this.decoder.decode(block);
    const existing = this.streams.get(streamId);
    if (existing !== undefined) {
      // Trailers: they must end the stream. Their fields are not passed on.
      if (existing.state !== State.Open) return this.resetStream(existing, ErrorCode.STREAM_CLOSED, true);
      if (!endStream) return this.resetStream(existing, ErrorCode.PROTOCOL_ERROR, true);
      this.remoteEnd(existing);
      return;
    }
    if (streamId <= this.lastStreamId || streamId % 2 === 0) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, `stream ${streamId} cannot be opened`);
    }
    this.lastStreamId = streamId;
    if (this.goawaySent) return; // opened after our GOAWAY: ignored, the client retries elsewhere
    if (this.streams.size >= this.limits.maxConcurrentStreams) {
      this.emit(frame(FrameType.RST_STREAM, 0, streamId, u32(ErrorCode.REFUSED_STREAM)));
      return;
    }
    const stream = new H2Stream(streamId, this, this.peerWindow);
    this.streams.set(streamId, stream);
    if (selfDependent) return this.resetStream(stream, ErrorCode.PROTOCOL_ERROR, false);
    if (tooLarge) {
      stream.state = endStream ? State.HalfClosedRemote : State.Open;
      stream.sink = DISCARD;
      stream.respond([[":status", "431"]], true);
      return;
    }
    const headers = toHeaderObject(list);
    if (headers === undefined) return this.resetStream(stream, ErrorCode.PROTOCOL_ERROR, true);
    stream.sink = this.open(stream, headers);
    if (endStream && stream.state === State.Open) this.remoteEnd(stream);
  }

  private onReset(streamId: number, payload: Buffer): void {
    if (streamId === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on stream 0");
    if (payload.length !== 4) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "RST_STREAM of the wrong size");
    if (streamId > this.lastStreamId) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on an idle stream");
    const stream = this.streams.get(streamId);
    if (stream === undefined) return;
    // A client that opens and resets streams as fast as it can (the "rapid
    // reset" attack) would have us start work it never waits for.
    const now = Date.now();
    if (now - this.resetWindowStart > 1000) {
      this.resetWindowStart = now;
      this.resetsInWindow = 0;
    }
    if (++this.resetsInWindow > this.limits.maxResetsPerSecond) throw new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "too many streams reset");
    this.closeStream(stream, payload.readUInt32BE(0));
  }

  private onSettings(flags: number, streamId: number, payload: Buffer): void {
    if (streamId !== 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "SETTINGS on a stream");
    if (flags & Flag.ACK) {
      if (payload.length !== 0) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload");
      return;
    }
    if (payload.length % 6 !== 0) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS of the wrong size");
    this.settingsSeen = true;
    for (let at = 0; at < payload.length; at += 6) {
      const id = payload.readUInt16BE(at);
      const value = payload.readUInt32BE(at + 2);
      if (id === Setting.ENABLE_PUSH && value > 1) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "ENABLE_PUSH above 1");
      if (id === Setting.INITIAL_WINDOW_SIZE) {
        if (value > MAX_WINDOW) throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE too large");
        const delta = value - this.peerWindow;
        this.peerWindow = value;
        for (const stream of this.streams.values()) {
          stream.sendWindow += delta;
          if (stream.sendWindow > MAX_WINDOW) throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "a stream window overflowed");
        }
      }
      if (id === Setting.MAX_FRAME_SIZE) {
        if (value < DEFAULT_MAX_FRAME || value > 0xffffff) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "MAX_FRAME_SIZE out of range");
        this.peerMaxFrame = value;
      }
      // HEADER_TABLE_SIZE needs nothing: our encoder never uses the dynamic table.
    }
    this.emit(frame(FrameType.SETTINGS, Flag.ACK, 0));
    for (const stream of this.streams.values()) this.pump(stream);
  }

  private onWindowUpdate(streamId: number, payload: Buffer): void {
    if (payload.length !== 4) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "WINDOW_UPDATE of the wrong size");
    const increment = payload.readUInt32BE(0) & 0x7fffffff;
    if (streamId === 0) {
      if (increment === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE of 0");
      this.connSendWindow += increment;
      if (this.connSendWindow > MAX_WINDOW) throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "connection window overflowed");
      for (const stream of [...this.blocked]) this.pump(stream);
      return;
    }
    const stream = this.streams.get(streamId);
    if (stream === undefined) {
      if (streamId > this.lastStreamId) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream");
      return;
    }
    if (increment === 0) return this.resetStream(stream, ErrorCode.PROTOCOL_ERROR, true);
    stream.sendWindow += increment;
    if (stream.sendWindow > MAX_WINDOW) return this.resetStream(stream, ErrorCode.FLOW_CONTROL_ERROR, true);
    this.pump(stream);
  }

  // -------------------------------------------------------------- streams

  private remoteEnd(stream: H2Stream): void {
    stream.state = stream.localEnded ? State.Closed : State.HalfClosedRemote;
    if (stream.state === State.Closed) this.forget(stream);
    stream.sink!.end();
  }

  /** We sent END_STREAM. */
  localEnd(stream: H2Stream): void {
    stream.localEnded = true;
    if (stream.state === State.HalfClosedRemote) {
      stream.state = State.Closed;
      this.forget(stream);
    } else if (stream.state === State.Open) {
      // The answer is complete before the request (a refusal): the rest of the request is not wanted.
      this.emit(frame(FrameType.RST_STREAM, 0, stream.id, u32(ErrorCode.NO_ERROR)));
      stream.state = State.Closed;
      this.forget(stream);
    }
  }

  /** Closes a stream the client reset, or that dies with the connection. */
  private closeStream(stream: H2Stream, code: number): void {
    if (stream.state === State.Closed) return;
    stream.state = State.Closed;
    this.forget(stream);
    stream.sink?.reset(code);
  }

  resetStream(stream: H2Stream, code: number, tellOwner: boolean): void {
    if (stream.state === State.Closed) return;
    this.emit(frame(FrameType.RST_STREAM, 0, stream.id, u32(code)));
    stream.state = State.Closed;
    this.forget(stream);
    if (tellOwner) stream.sink?.reset(code);
  }

  private resetById(streamId: number, code: number): void {
    const stream = this.streams.get(streamId);
    if (stream !== undefined) this.resetStream(stream, code, true);
    else this.emit(frame(FrameType.RST_STREAM, 0, streamId, u32(code)));
  }

  private forget(stream: H2Stream): void {
    this.streams.delete(stream.id);
    this.blocked.delete(stream);
    stream.queue = [];
    stream.queued = 0;
    if (stream.retained > 0) stream.release();
    if (this.goawaySent && this.streams.size === 0) this.finish();
  }

  // -------------------------------------------------------------- writing

  sendHeaders(stream: H2Stream, headers: HeaderBlock, endStream: boolean): void {
    const block = Buffer.isBuffer(headers) ? headers : encodeHeaders(headers);
    this.emitHeaderBlock(stream.id, block, endStream ? Flag.END_STREAM : 0);
  }

  private emitHeaderBlock(streamId: number, block: Buffer, flags: number): void {
    if (block.length <= this.peerMaxFrame) {
      this.emit(frame(FrameType.HEADERS, flags | Flag.END_HEADERS, streamId, block));
      return;
    }
    let at = 0;
    let type: number = FrameType.HEADERS;
    while (at < block.length) {
      const part = block.subarray(at, at + this.peerMaxFrame);
      at += part.length;
      const last = at >= block.length;
      this.emit(frame(type, (type === FrameType.HEADERS ? flags : 0) | (last ? Flag.END_HEADERS : 0), streamId, part));
      type = FrameType.CONTINUATION;
    }
  }

  /** Sends what the windows allow of a stream's queue, then its end once the queue is empty. */
  pump(stream: H2Stream): void {
    if (stream.state === State.Closed || stream.localEnded || !stream.responded) return;
    while (stream.queued > 0) {
      const room = Math.min(stream.sendWindow, this.connSendWindow, this.peerMaxFrame);
      if (room <= 0) {
        this.blocked.add(stream);
        return;
      }
      const head = stream.queue[0]!;
      let chunk: Buffer;
      if (head.length <= room) {
        chunk = head;
        stream.queue.shift();
      } else {
        chunk = head.subarray(0, room);
        stream.queue[0] = head.subarray(room);
      }
      stream.queued -= chunk.length;
      stream.sendWindow -= chunk.length;
      this.connSendWindow -= chunk.length;
      const last = stream.queued === 0 && stream.ending !== undefined && stream.ending.trailers === undefined;
      this.emit(frame(FrameType.DATA, last ? Flag.END_STREAM : 0, stream.id, chunk));
      if (last) {
        this.blocked.delete(stream);
        this.localEnd(stream);
        return;
      }
    }
    this.blocked.delete(stream);
    if (stream.ending !== undefined) {
      if (stream.ending.trailers === undefined) this.emit(frame(FrameType.DATA, Flag.END_STREAM, stream.id));
      else this.emitHeaderBlock(stream.id, stream.ending.trailers, Flag.END_STREAM);
      this.localEnd(stream);
    } else {
      stream.onDrain?.();
    }
  }

  consumed(stream: H2Stream, n: number): void {
    if (stream.state !== State.Open) return;
    stream.unacked += n;
    if (stream.unacked >= this.limits.streamWindow / 2) {
      this.emit(frame(FrameType.WINDOW_UPDATE, 0, stream.id, u32(stream.unacked)));
      stream.unacked = 0;
    }
  }

  /** Grants the connection window back, unless streams hold too much unprocessed. */
  maybeGrantConnection(): void {
    if (this.dead || this.connUnacked < this.limits.connectionWindow / 2 || this.retained > this.limits.maxRetainedBytes) return;
    this.emit(frame(FrameType.WINDOW_UPDATE, 0, 0, u32(this.connUnacked)));
    this.connUnacked = 0;
  }

  private emit(buf: Buffer): void {
    if (this.dead) return;
    this.out.push(buf);
    this.outBytes += buf.length;
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      // After the current burst: the answers one Postgres round trip released go out together.
      process.nextTick(() => this.flush());
    }
  }

  private flush(): void {
    this.flushScheduled = false;
    if (this.out.length === 0 || this.socket.destroyed) return;
    const data = this.out.length === 1 ? this.out[0]! : Buffer.concat(this.out, this.outBytes);
    this.out = [];
    this.outBytes = 0;
    this.socket.write(data);
    // A client that sends requests and does not read the answers is read no further until it does.
    if (this.socket.writableLength > this.limits.maxPendingOutput && !this.readingPaused) {
      this.readingPaused = true;
      this.socket.pause();
    }
  }

  /** Connection error: GOAWAY with the code, and the connection ends. */
  private fail(code: number): void {
    if (this.dead) return;
    this.emit(frame(FrameType.GOAWAY, 0, 0, goawayPayload(this.lastStreamId, code)));
    this.flush();
    this.dead = true;
    this.socket.end();
    this.teardown();
  }

  private finish(): void {
    this.flush();
    this.dead = true;
    this.socket.end();
    this.teardown();
  }

  private teardown(): void {
    this.dead = true;
    for (const stream of [...this.streams.values()]) this.closeStream(stream, ErrorCode.CANCEL);
    this.pending = undefined;
  }
}

const DISCARD: StreamSink = { data() {}, end() {}, reset() {} };

/**
 * The request's header fields as Node presents them (see its toHeaderObject),
 * or undefined when the request is malformed (RFC 9113 8.2, 8.3).
 */
function toHeaderObject(list: HeaderList): IncomingHttpHeaders | undefined {
  const headers: Record<string, string | string[]> = Object.create(null) as Record<string, string | string[]>;
  let regularSeen = false;
  for (const [name, value] of list) {
    if (BAD_VALUE.test(value)) return undefined;
    if (name.charCodeAt(0) === 0x3a) {
      if (regularSeen || !PSEUDO_REQUEST.has(name) || headers[name] !== undefined) return undefined;
    } else {
      regularSeen = true;
      if (!TOKEN.test(name) || CONNECTION_HEADERS.has(name)) return undefined;
      if (name === "te" && value !== "trailers") return undefined;
    }
    const existing = headers[name];
    if (existing === undefined) headers[name] = name === "set-cookie" ? [value] : value;
    else if (SINGLE.has(name)) continue;
    else if (name === "cookie") headers[name] = `${existing as string}; ${value}`;
    else if (Array.isArray(existing)) existing.push(value);
    else headers[name] = `${existing}, ${value}`;
  }
  const method = headers[":method"];
  if (method === undefined) return undefined;
  if (method !== "CONNECT" && (headers[":scheme"] === undefined || !headers[":path"])) return undefined;
  return headers as IncomingHttpHeaders;
}
