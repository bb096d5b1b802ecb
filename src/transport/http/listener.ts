/**
 * One port for every protocol: each new connection's first bytes say whether
 * it is HTTP/2 with prior knowledge (gRPC, which needs HTTP/2 without TLS) or
 * HTTP/1.1 (REST, Connect, gRPC-Web), and it is handed to that server with
 * `emit("connection")`.
 *
 * No connection is held for free: one that has not shown its protocol within
 * the headers timeout (nothing sent, half an HTTP/2 preface) is closed;
 * after that the HTTP/1.1 server's header, request and keep-alive timeouts
 * and the HTTP/2 server's stream and idle timeouts (h2-server.ts) apply; and
 * connections above the cap are closed as they arrive, before they cost more
 * than a descriptor for a moment.
 *
 * Also owns graceful shutdown: stop accepting, GOAWAY on HTTP/2 connections,
 * let in-flight requests finish, then close what is left.
 */
import type http from "node:http";
import net from "node:net";
import type { H2Server } from "./h2-server.js";

const H2_PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

export interface Listener {
  readonly port: number;
  /** Stops accepting, waits up to graceMs for in-flight requests, then closes every connection. */
  close(graceMs: number): Promise<void>;
}

export interface ListenOptions {
  host: string;
  port: number;
  /** A connection must show its protocol (its first request line, or the whole HTTP/2 preface) within this. */
  headersTimeoutMs: number;
  /** Open connections above which new ones are closed at once. */
  maxConnections: number;
}

export async function listen(options: ListenOptions, h1: http.Server, h2: H2Server): Promise<Listener> {
  const sockets = new Set<net.Socket>();
  let inFlight = 0;
  let draining = false;
  let drained: (() => void) | undefined;

  const finished = () => {
    inFlight--;
    if (draining) {
      h1.closeIdleConnections();
      if (inFlight === 0) drained?.();
    }
  };
  h1.on("request", (_req: http.IncomingMessage, res: http.ServerResponse) => {
    inFlight++;
    if (draining) res.setHeader("connection", "close");
    res.once("close", finished);
  });
  // Node's HTTP/1.1 server starts the checker of headersTimeout and
  // requestTimeout (and the list of its connections, which
  // closeIdleConnections reads) on its own "listening" event, which a server
  // that is handed its connections never emits. This server does listen, on
  // its behalf: say so.
  h1.emit("listening");

  const server = net.createServer((socket) => {
    // Small request/answer exchanges: without this, Nagle's algorithm meets
    // the peer's delayed ACK and HTTP/2 answers wait ~40 ms.
    socket.setNoDelay(true);
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    socket.on("error", () => socket.destroy()); // a reset client must not crash the process
    // A fixed deadline, not an idle timer: a preface sent a byte at a time
    // must not buy time. When it passes, what has already arrived is read
    // first (the loop's poll phase comes between the timer and setImmediate):
    // a loop kept busy past the deadline, not the client, would otherwise
    // reset a connection whose request is waiting in the socket.
    let decided = false;
    const sniffing = setTimeout(() => setImmediate(() => {
      if (!decided) socket.destroy();
    }), options.headersTimeoutMs);
    let head: Buffer = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      head = head.length === 0 ? chunk : Buffer.concat([head, chunk]);
      const n = Math.min(head.length, H2_PREFACE.length);
      const isH2 = head.subarray(0, n).equals(H2_PREFACE.subarray(0, n));
      if (isH2 && head.length < H2_PREFACE.length) return; // need more bytes to decide
      decided = true;
      clearTimeout(sniffing);
      socket.removeListener("data", onData);
      socket.pause();
      socket.unshift(head);
      if (isH2) {
        // The HTTP/2 session reads what is buffered, then takes the socket's
        // handle over; resuming the JS stream here would race it for bytes.
        h2.accept(socket);
      } else {
        h1.emit("connection", socket);
        socket.resume();
      }
    };
    socket.on("data", onData);
    socket.once("close", () => clearTimeout(sniffing));
  });
  server.maxConnections = options.maxConnections;

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => {
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
      const h2Drained = h2.drain(); // GOAWAY: running streams finish
      h1.closeIdleConnections();
      await Promise.race([
        Promise.all([
          h2Drained,
          inFlight === 0 ? undefined : new Promise<void>((resolve) => (drained = resolve)),
        ]),
        new Promise<void>((resolve) => setTimeout(resolve, graceMs).unref()),
      ]);
      h2.destroy();
      for (const socket of sockets) socket.destroy();
      // Stops the HTTP/1.1 server's timeout checker; it never listened, so its callback reports that.
      h1.close(() => undefined);
      await closed;
    },
  };
}
