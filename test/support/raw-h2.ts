/**
 * A raw HTTP/2 client for attack and limit tests: it sends frames exactly as
 * given (including ones a real client never would) and records the frames
 * the server sends: type, flags, stream id and payload. Header blocks it
 * sends are HPACK literals without indexing and without Huffman coding (RFC
 * 7541 6.2.2), which every decoder must accept; the server's header blocks
 * are not decoded (tests that need decoded answers use node:http2's client):
 * what these tests look at is frame types, flags, stream ids and the error
 * codes of RST_STREAM and GOAWAY.
 */
import net from "node:net";

export const FrameType = {
  DATA: 0x0,
  HEADERS: 0x1,
  PRIORITY: 0x2,
  RST_STREAM: 0x3,
  SETTINGS: 0x4,
  PUSH_PROMISE: 0x5,
  PING: 0x6,
  GOAWAY: 0x7,
  WINDOW_UPDATE: 0x8,
  CONTINUATION: 0x9,
} as const;

export const Flag = {
  END_STREAM: 0x1,
  ACK: 0x1,
  END_HEADERS: 0x4,
  PADDED: 0x8,
  PRIORITY: 0x20,
} as const;

export const ErrorCode = {
  NO_ERROR: 0x0,
  PROTOCOL_ERROR: 0x1,
  INTERNAL_ERROR: 0x2,
  FLOW_CONTROL_ERROR: 0x3,
  SETTINGS_TIMEOUT: 0x4,
  STREAM_CLOSED: 0x5,
  FRAME_SIZE_ERROR: 0x6,
  REFUSED_STREAM: 0x7,
  CANCEL: 0x8,
  COMPRESSION_ERROR: 0x9,
  ENHANCE_YOUR_CALM: 0xb,
} as const;

export const Setting = {
  HEADER_TABLE_SIZE: 0x1,
  ENABLE_PUSH: 0x2,
  MAX_CONCURRENT_STREAMS: 0x3,
  INITIAL_WINDOW_SIZE: 0x4,
  MAX_FRAME_SIZE: 0x5,
  MAX_HEADER_LIST_SIZE: 0x6,
} as const;

export const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");

/** One frame: the 9-octet header and the payload. */
export function frame(type: number, flags: number, streamId: number, payload: Uint8Array = Buffer.alloc(0)): Buffer {
  const out = Buffer.allocUnsafe(9 + payload.length);
  out.writeUIntBE(payload.length, 0, 3);
  out[3] = type;
  out[4] = flags;
  out.writeUInt32BE(streamId, 5);
  out.set(payload, 9);
  return out;
}

export function u32(value: number): Buffer {
  const out = Buffer.allocUnsafe(4);
  out.writeUInt32BE(value >>> 0, 0);
  return out;
}

export function settingsPayload(settings: [id: number, value: number][]): Buffer {
  const out = Buffer.allocUnsafe(6 * settings.length);
  settings.forEach(([id, value], i) => {
    out.writeUInt16BE(id, 6 * i);
    out.writeUInt32BE(value, 6 * i + 2);
  });
  return out;
}

/** An HPACK integer with an N-bit prefix (RFC 7541 5.1); `first` holds the bits above the prefix. */
function hpackInt(value: number, prefixBits: number, first: number): number[] {
  const max = (1 << prefixBits) - 1;
  if (value < max) return [first | value];
  const out = [first | max];
  let rest = value - max;
  while (rest >= 128) {
    out.push((rest % 128) + 128);
    rest = Math.floor(rest / 128);
  }
  out.push(rest);
  return out;
}

function hpackString(text: string): Buffer {
  const bytes = Buffer.from(text, "latin1");
  return Buffer.concat([Buffer.from(hpackInt(bytes.length, 7, 0)), bytes]);
}

/** A header block of literal fields without indexing, new names, no Huffman. */
export function encodeHeaders(fields: [string, string][]): Buffer {
  return Buffer.concat(fields.flatMap(([name, value]) => [Buffer.from([0x00]), hpackString(name), hpackString(value)]));
}

export interface Frame {
  type: number;
  flags: number;
  streamId: number;
  payload: Buffer;
}

export class RawH2 {
  readonly frames: Frame[] = [];
  closed = false;
  /** Bytes received in all. */
  received = 0;
  private buf: Buffer = Buffer.alloc(0);
  private waiters: (() => void)[] = [];

  private constructor(readonly socket: net.Socket) {
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("close", () => {
      this.closed = true;
      this.wake();
    });
    socket.on("error", () => undefined);
  }

  /** Connects; with `handshake`, sends the preface and SETTINGS (these settings). */
  static async connect(port: number, handshake: [number, number][] | false = []): Promise<RawH2> {
    const socket = net.connect(port, "127.0.0.1");
    await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject));
    socket.setNoDelay(true);
    const client = new RawH2(socket);
    if (handshake !== false) client.write(Buffer.concat([PREFACE, frame(FrameType.SETTINGS, 0, 0, settingsPayload(handshake))]));
    return client;
  }

  /** Writes bytes; resolves once the kernel took them (false if the socket is gone). */
  write(bytes: Buffer): Promise<boolean> {
    if (this.socket.destroyed) return Promise.resolve(false);
    return new Promise((resolve) => this.socket.write(bytes, (error) => resolve(error == null)));
  }

  send(type: number, flags: number, streamId: number, payload?: Uint8Array): Promise<boolean> {
    return this.write(frame(type, flags, streamId, payload));
  }

  /** A request's HEADERS (END_HEADERS), with END_STREAM when it has no body. */
  request(streamId: number, headers: [string, string][], endStream: boolean): Promise<boolean> {
    return this.send(FrameType.HEADERS, Flag.END_HEADERS | (endStream ? Flag.END_STREAM : 0), streamId, encodeHeaders(headers));
  }

  data(streamId: number, body: Uint8Array, endStream: boolean): Promise<boolean> {
    return this.send(FrameType.DATA, endStream ? Flag.END_STREAM : 0, streamId, body);
  }

  windowUpdate(streamId: number, increment: number): Promise<boolean> {
    return this.send(FrameType.WINDOW_UPDATE, 0, streamId, u32(increment));
  }

  /** Acknowledges the server's SETTINGS. */
  settingsAck(): Promise<boolean> {
    return this.send(FrameType.SETTINGS, Flag.ACK, 0);
  }

  /** Waits until a frame matches (checking those already received), or fails after `ms`. */
  async next(match: (f: Frame) => boolean, ms = 2000): Promise<Frame> {
    const deadline = Date.now() + ms;
    for (;;) {
      const found = this.frames.find(match);
      if (found !== undefined) return found;
      if (this.closed) throw new Error(`connection closed; frames: ${this.describe()}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no matching frame within ${ms} ms; frames: ${this.describe()}`);
      await this.wait(left);
    }
  }

  /** Resolves when the server has closed the connection (true), or false after `ms`. */
  async whenClosed(ms: number): Promise<boolean> {
    const deadline = Date.now() + ms;
    while (!this.closed) {
      const left = deadline - Date.now();
      if (left <= 0) return false;
      await this.wait(left);
    }
    return true;
  }

  /** The GOAWAY the server sent. */
  async goaway(ms = 2000): Promise<{ lastStreamId: number; code: number }> {
    const f = await this.next((x) => x.type === FrameType.GOAWAY, ms);
    return { lastStreamId: f.payload.readUInt32BE(0) & 0x7fffffff, code: f.payload.readUInt32BE(4) };
  }

  /** The error code of the server's RST_STREAM on a stream. */
  async reset(streamId: number, ms = 2000): Promise<number> {
    const f = await this.next((x) => x.type === FrameType.RST_STREAM && x.streamId === streamId, ms);
    return f.payload.readUInt32BE(0);
  }

  /** The server's SETTINGS (not the ACK) as id → value. */
  async serverSettings(ms = 2000): Promise<Map<number, number>> {
    const f = await this.next((x) => x.type === FrameType.SETTINGS && (x.flags & Flag.ACK) === 0, ms);
    const out = new Map<number, number>();
    for (let i = 0; i + 6 <= f.payload.length; i += 6) out.set(f.payload.readUInt16BE(i), f.payload.readUInt32BE(i + 2));
    return out;
  }

  close(): void {
    this.socket.destroy();
  }

  describe(): string {
    const shown = this.frames.length > 40 ? [...this.frames.slice(0, 20), ...this.frames.slice(-20)] : this.frames;
    return shown.map((f) => `${f.type}/${f.flags}/${f.streamId}(${f.payload.length})`).join(" ");
  }

  private wait(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.waiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  private onData(chunk: Buffer): void {
    this.received += chunk.length;
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    while (this.buf.length >= 9) {
      const length = this.buf.readUIntBE(0, 3);
      if (this.buf.length < 9 + length) break;
      this.frames.push({
        type: this.buf[3]!,
        flags: this.buf[4]!,
        streamId: this.buf.readUInt32BE(5) & 0x7fffffff,
        payload: Buffer.from(this.buf.subarray(9, 9 + length)),
      });
      this.buf = this.buf.subarray(9 + length);
    }
    this.wake();
  }
}
