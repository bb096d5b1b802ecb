/**
 * A raw HTTP/2 client for protocol tests: sends frames exactly as given and
 * collects the frames the server sends, with their header blocks decoded.
 */
import net from "node:net";
import { ErrorCode, Flag, FrameType, PREFACE, frame, settingsPayload, u32 } from "../../src/transport/h2/frames.js";
import { HpackDecoder, encodeHeaders } from "../../src/transport/h2/hpack.js";

export interface Frame {
  type: number;
  flags: number;
  streamId: number;
  payload: Buffer;
  /** HEADERS (with its CONTINUATIONs): the decoded fields. */
  headers?: Record<string, string>;
}

export class RawH2 {
  readonly frames: Frame[] = [];
  closed = false;
  private buf = Buffer.alloc(0);
  private readonly decoder = new HpackDecoder({ tableSize: 4096, maxListSize: 1 << 20 });
  private headerParts: { streamId: number; flags: number; parts: Buffer[] } | undefined;
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

  write(bytes: Buffer): void {
    this.socket.write(bytes);
  }

  send(type: number, flags: number, streamId: number, payload?: Uint8Array): void {
    this.write(frame(type, flags, streamId, payload));
  }

  /** A request's HEADERS (END_HEADERS), with END_STREAM when it has no body. */
  request(streamId: number, headers: [string, string][], endStream: boolean): void {
    this.send(FrameType.HEADERS, Flag.END_HEADERS | (endStream ? Flag.END_STREAM : 0), streamId, encodeHeaders(headers));
  }

  data(streamId: number, body: Uint8Array, endStream: boolean): void {
    this.send(FrameType.DATA, endStream ? Flag.END_STREAM : 0, streamId, body);
  }

  windowUpdate(streamId: number, increment: number): void {
    this.send(FrameType.WINDOW_UPDATE, 0, streamId, u32(increment));
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
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** The GOAWAY the server sent, once it closed the connection. */
  async goaway(ms = 2000): Promise<{ lastStreamId: number; code: number }> {
    const f = await this.next((x) => x.type === FrameType.GOAWAY, ms);
    return { lastStreamId: f.payload.readUInt32BE(0), code: f.payload.readUInt32BE(4) };
  }

  /** Waits for the end of a stream: its frames, the response headers, body, trailers and any reset. */
  async response(streamId: number, ms = 2000): Promise<{ headers?: Record<string, string>; body: Buffer; trailers?: Record<string, string>; reset?: number }> {
    await this.next((f) => f.streamId === streamId && ((f.flags & Flag.END_STREAM) !== 0 || f.type === FrameType.RST_STREAM) && f.type !== FrameType.PING, ms);
    const mine = this.frames.filter((f) => f.streamId === streamId);
    const headerFrames = mine.filter((f) => f.type === FrameType.HEADERS && !f.headers?.[":status"]?.startsWith("1"));
    const reset = mine.find((f) => f.type === FrameType.RST_STREAM);
    return {
      headers: headerFrames[0]?.headers,
      body: Buffer.concat(mine.filter((f) => f.type === FrameType.DATA).map((f) => f.payload)),
      trailers: headerFrames.length > 1 ? headerFrames[1]!.headers : undefined,
      reset: reset?.payload.readUInt32BE(0),
    };
  }

  close(): void {
    this.socket.destroy();
  }

  describe(): string {
    return this.frames.map((f) => `${f.type}/${f.flags}/${f.streamId}(${f.payload.length})`).join(" ");
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  private onData(chunk: Buffer): void {
    this.buf = Buffer.concat([this.buf, chunk]);
    while (this.buf.length >= 9) {
      const length = this.buf.readUIntBE(0, 3);
      if (this.buf.length < 9 + length) break;
      const f: Frame = { type: this.buf[3]!, flags: this.buf[4]!, streamId: this.buf.readUInt32BE(5) & 0x7fffffff, payload: Buffer.from(this.buf.subarray(9, 9 + length)) };
      this.buf = this.buf.subarray(9 + length);
      if (f.type === FrameType.HEADERS || f.type === FrameType.CONTINUATION) {
        const parts = f.type === FrameType.HEADERS ? { streamId: f.streamId, flags: f.flags, parts: [f.payload] } : this.headerParts!;
        if (f.type === FrameType.CONTINUATION) parts.parts.push(f.payload);
        if ((f.flags & Flag.END_HEADERS) === 0) {
          this.headerParts = parts;
          continue;
        }
        this.headerParts = undefined;
        const { headers } = this.decoder.decode(Buffer.concat(parts.parts));
        this.frames.push({ type: FrameType.HEADERS, flags: parts.flags | Flag.END_HEADERS, streamId: parts.streamId, payload: Buffer.concat(parts.parts), headers: Object.fromEntries(headers) });
      } else {
        this.frames.push(f);
      }
    }
    this.wake();
  }
}

export { ErrorCode, Flag, FrameType };
