/**
 * The seam between the HTTP/2 server (http/h2-server.ts) and what answers
 * streams on it directly (unary gRPC): declared here, below both, so the
 * server depends on it and unary gRPC does not depend on the server.
 */
import type { IncomingHttpHeaders, ServerHttp2Stream } from "node:http2";

/** The connection's bookkeeping a stream's owner reports to. */
export interface StreamWork {
  /** The call's handler finished. */
  finished(): void;
  /** The stream closed: it no longer needs its timeout. */
  streamClosed(stream: ServerHttp2Stream): void;
}

/** Takes a stream when it is a call it answers; false leaves it to the next owner. */
export interface StreamServer {
  serve(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, work: StreamWork): boolean;
}
