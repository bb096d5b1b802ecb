/**
 * /metrics on a port of its own (METRICS_PORT), so that it can be bound to
 * an interface Prometheus reaches and the API's clients do not (the main
 * port then answers 404 there). A bare node:http server: it answers one
 * route, GET (or HEAD) /metrics, with Node's own limits on slow or idle
 * connections; anything else is a 404.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import type { Logger } from "pino";
import type { Metrics } from "../../lib/metrics.js";

export interface MetricsServer {
  readonly port: number;
  close(): Promise<void>;
}

export async function serveMetrics(metrics: Metrics, options: { host: string; port: number }, log: Logger): Promise<MetricsServer> {
  const server = http.createServer({ headersTimeout: 10_000, requestTimeout: 30_000, keepAliveTimeout: 65_000 }, (req, res) => {
    const path = (req.url ?? "").split("?")[0];
    if (path !== "/metrics" || (req.method !== "GET" && req.method !== "HEAD")) {
      res.writeHead(404, { "content-type": "text/plain; charset=utf-8" }).end("not found: this port serves GET /metrics only\n");
      return;
    }
    metrics.text().then(
      (text) => {
        res.writeHead(200, { "content-type": metrics.contentType, "content-length": Buffer.byteLength(text) });
        res.end(req.method === "HEAD" ? undefined : text);
      },
      (error: unknown) => {
        log.error({ err: error }, "metrics could not be collected");
        res.writeHead(500, { "content-type": "text/plain; charset=utf-8" }).end("metrics could not be collected; the server log has the details\n");
      },
    );
  });
  server.on("clientError", (_error, socket) => socket.destroy());
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
