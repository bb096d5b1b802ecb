/**
 * One port for every protocol: each new connection's first bytes say whether
 * it is HTTP/2 with prior knowledge (gRPC, which needs HTTP/2 without TLS) or
 * HTTP/1.1 (REST, Connect, gRPC-Web). HTTP/1.1 goes to its server; HTTP/2 to
 * the service's own connection (h2/), which answers unary gRPC itself and
 * relays every other stream to the HTTP/2 server.
 * Also owns graceful shutdown: stop accepting, let in-flight requests finish,
 * then close what is left.
 */
import type http from "node:http";
import type http2 from "node:http2";
import net from "node:net";
import type { UnaryGrpc } from "./grpc-unary.js";
import { H2Connection } from "./h2/connection.js";
import { H2Relay } from "./h2/proxy.js";

const H2_PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

export interface Listener {
  readonly port: number;
  /** Stops accepting, waits up to graceMs for in-flight requests, then closes every connection. */
  close(graceMs: number): Promise<void>;
}

export async function listen(host: string, port: number, h1: http.Server, h2: http2.Http2Server, unary: UnaryGrpc): Promise<Listener> {
  const sockets = new Set<net.Socket>();
  const sessions = new Set<http2.Http2Session>();
  const connections = new Set<H2Connection>();
  let inFlight = 0;
  let draining = false;
  let drained: (() => void) | undefined;

  const settled = () => {
    if (draining && inFlight === 0 && connections.size === 0) drained?.();
  };
  const finished = () => {
    inFlight--;
    if (draining) h1.closeIdleConnections();
    settled();
  };
  h1.on("request", (_req: http.IncomingMessage, res: http.ServerResponse) => {
    inFlight++;
    if (draining) res.setHeader("connection", "close");
    res.once("close", finished);
  });
  // Streams relayed from our own connections. Streams, not requests: a
  // "request" listener would switch on the HTTP/2 compatibility layer for
  // every stream (see fastify-app).
  h2.on("stream", (stream: http2.ServerHttp2Stream) => {
    inFlight++;
    stream.once("close", finished);
  });
  h2.on("session", (session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
    if (draining) session.close();
  });

  const server = net.createServer((socket) => {
    // Small request/answer exchanges: without this, Nagle's algorithm meets
    // the peer's delayed ACK and HTTP/2 answers wait ~40 ms.
    socket.setNoDelay(true);
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      const n = Math.min(head.length, H2_PREFACE.length);
      const isH2 = head.subarray(0, n).equals(H2_PREFACE.subarray(0, n));
      if (isH2 && head.length < H2_PREFACE.length) return; // need more bytes to decide
      socket.removeListener("data", onData);
      socket.pause();
      socket.unshift(head);
      if (isH2) {
        const relay = new H2Relay(h2);
        const connection = new H2Connection(socket, (stream, headers) => unary.open(stream, headers) ?? relay.open(stream, headers));
        connections.add(connection);
        socket.once("close", () => {
          connections.delete(connection);
          relay.close();
          settled();
        });
        if (draining) connection.close();
      } else {
        h1.emit("connection", socket);
      }
      socket.resume();
    };
    socket.on("data", onData);
    socket.on("error", () => socket.destroy()); // a reset client must not crash the process
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const address = server.address() as net.AddressInfo;

  return {
    port: address.port,
    async close(graceMs) {
      draining = true;
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const session of sessions) session.close(); // GOAWAY: running streams finish
      for (const connection of connections) connection.close();
      h1.closeIdleConnections();
      if (inFlight > 0 || connections.size > 0) {
        await new Promise<void>((resolve) => {
          drained = resolve;
          setTimeout(resolve, graceMs).unref();
        });
      }
      for (const session of sessions) session.destroy();
      for (const socket of sockets) socket.destroy();
      await closed;
    },
  };
}
