/**
 * A TCP pass-through whose connections can be cut at will, and whose
 * target can change: a network failure, or an address that comes to reach
 * another server (a DNS name or a load balancer moved to another standby).
 */
import { connect, createServer, type AddressInfo, type Socket } from "node:net";

export interface TcpProxy {
  readonly port: number;
  /** Destroys every open connection, as a network failure would. */
  dropAll(): void;
  /** New connections reach this port from now on; open ones are cut. */
  retarget(port: number, host?: string): void;
  close(): Promise<void>;
}

export async function startTcpProxy(targetPort: number, targetHost = "127.0.0.1"): Promise<TcpProxy> {
  let target = { port: targetPort, host: targetHost };
  const sockets = new Set<Socket>();
  const server = createServer((inbound) => {
    const outbound = connect(target.port, target.host);
    for (const [a, b] of [[inbound, outbound], [outbound, inbound]] as const) {
      sockets.add(a);
      a.on("error", () => b.destroy());
      a.on("close", () => {
        sockets.delete(a);
        b.destroy();
      });
      a.pipe(b);
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const dropAll = () => {
    for (const socket of sockets) socket.destroy();
  };
  return {
    port: (server.address() as AddressInfo).port,
    dropAll,
    retarget(port, host = "127.0.0.1") {
      target = { port, host };
      dropAll();
    },
    close() {
      dropAll();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
