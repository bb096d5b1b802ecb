/**
 * Streams the service does not answer itself on its HTTP/2 connection
 * (reflection's bidirectional stream, Connect and gRPC-Web over h2c, REST
 * over h2c) are relayed to Node's HTTP/2 server, where Fastify and the
 * connect-fastify routes serve them as before. Each client connection that
 * has such a stream gets one in-process HTTP/2 session to that server, over a
 * pair of in-memory streams; a relayed stream is a request on it.
 *
 * Flow control holds end to end: a request's bytes are granted back to the
 * client when the inner stream has taken them, and the inner response is
 * paused while the client's window keeps its bytes queued here.
 */
import http2, { type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders, type OutgoingHttpHeaders } from "node:http2";
import { Duplex } from "node:stream";
import type { H2Stream, StreamSink } from "./connection.js";
import { ErrorCode } from "./frames.js";

/** Queued response bytes past which the inner response is paused. */
const HIGH_WATER = 256 << 10;

/** Two streams, each writing into the other: an in-memory connection. */
function duplexPair(): [Duplex, Duplex] {
  const sides: Duplex[] = [];
  const make = (peer: () => Duplex) =>
    new Duplex({
      read() {},
      write(chunk: Buffer, _encoding, done) {
        peer().push(chunk);
        done();
      },
      final(done) {
        peer().push(null);
        done();
      },
      destroy(error, done) {
        const other = peer();
        if (!other.destroyed) other.destroy();
        done(error);
      },
    });
  sides.push(make(() => sides[1]!), make(() => sides[0]!));
  return [sides[0]!, sides[1]!];
}

export class H2Relay {
  private session: ClientHttp2Session | undefined;

  constructor(private readonly server: http2.Http2Server) {}

  private inner(): ClientHttp2Session {
    if (this.session !== undefined && !this.session.destroyed && !this.session.closed) return this.session;
    const [client, server] = duplexPair();
    this.server.emit("connection", server);
    const session = http2.connect("http://relay.invalid", { createConnection: () => client });
    session.on("error", () => undefined); // its streams report their own failures
    this.session = session;
    return session;
  }

  open(stream: H2Stream, headers: IncomingHttpHeaders): StreamSink {
    const outgoing: OutgoingHttpHeaders = {};
    for (const [name, value] of Object.entries(headers)) outgoing[name] = value;
    let req: ClientHttp2Stream;
    try {
      req = this.inner().request(outgoing);
    } catch {
      stream.reset(ErrorCode.INTERNAL_ERROR);
      return { data() {}, end() {}, reset() {} };
    }
    let trailers: IncomingHttpHeaders | undefined;
    let ended = false;
    req.on("continue", () => stream.informational(100));
    req.on("response", (responseHeaders: IncomingHttpHeaders, flags: number) => {
      const endStream = (flags & 0x1) !== 0;
      stream.respond(fields(responseHeaders), endStream);
      if (endStream) ended = true;
    });
    req.on("data", (chunk: Buffer) => {
      stream.write(chunk);
      if (stream.queued > HIGH_WATER) req.pause();
    });
    stream.onDrain = () => req.resume();
    req.on("trailers", (t: IncomingHttpHeaders) => (trailers = t));
    req.on("end", () => {
      if (ended) return;
      ended = true;
      stream.end(trailers === undefined ? undefined : fields(trailers));
    });
    req.on("error", () => undefined);
    req.on("close", () => {
      if (!ended && !stream.closed) stream.reset(req.rstCode && req.rstCode !== ErrorCode.NO_ERROR ? req.rstCode : ErrorCode.INTERNAL_ERROR);
    });
    return {
      data(chunk) {
        req.write(chunk, () => stream.consumed(chunk.length));
      },
      end() {
        req.end();
      },
      reset() {
        ended = true;
        if (!req.destroyed) req.close(http2.constants.NGHTTP2_CANCEL);
      },
    };
  }

  /** The client's connection is gone: so are its relayed streams. */
  close(): void {
    this.session?.destroy();
  }
}

/** Node's header object as fields to encode: lowercase names, arrays as repeated fields. */
function fields(headers: IncomingHttpHeaders): [string, string][] {
  const out: [string, string][] = [];
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    if (Array.isArray(value)) for (const v of value) out.push([name, v]);
    else out.push([name, String(value)]);
  }
  // Pseudo-headers first (RFC 9113 8.3).
  out.sort((a, b) => Number(b[0].startsWith(":")) - Number(a[0].startsWith(":")));
  return out;
}
