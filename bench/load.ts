/**
 * The load generator, run as its own process so it does not share an event
 * loop with the service: REST through autocannon, gRPC through @grpc/grpc-js,
 * each with a fixed number of requests in flight for a fixed time.
 * Reads a LoadSpec as JSON from argv[2]; prints a LoadResult as JSON.
 */
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import autocannon from "autocannon";
import { fileURLToPath } from "node:url";

export interface LoadSpec {
  kind: "rest" | "grpc";
  url: string;
  /** REST: method and path; gRPC: "Service/Method". */
  method: string;
  path: string;
  key: string;
  /** Bodies (REST) or request objects (gRPC), sent in turn. */
  bodies: unknown[];
  connections: number;
  seconds: number;
}

export interface LoadResult {
  requests: number;
  errors: number;
  rps: number;
  p50: number;
  p99: number;
}

async function rest(spec: LoadSpec): Promise<LoadResult> {
  const result = await autocannon({
    url: spec.url,
    connections: spec.connections,
    duration: spec.seconds,
    requests: spec.bodies.map((b) => ({
      method: spec.method as "POST",
      path: typeof b === "string" ? b : spec.path,
      headers: { "content-type": "application/json", "x-api-key": spec.key },
      ...(typeof b === "string" ? {} : { body: JSON.stringify(b) }),
    })),
  });
  const bad = result.non2xx + result.errors + result.timeouts;
  return {
    requests: result.requests.total,
    errors: bad,
    rps: result.requests.total / spec.seconds,
    p50: result.latency.p50,
    p99: result.latency.p99,
  };
}

async function grpcLoad(spec: LoadSpec): Promise<LoadResult> {
  const protoDir = fileURLToPath(new URL("../proto/", import.meta.url));
  const definition = protoLoader.loadSync(["authz/v1/check.proto"], { includeDirs: [protoDir], keepCase: false, defaults: true });
  const pkg = grpc.loadPackageDefinition(definition) as unknown as {
    authz: { v1: Record<string, grpc.ServiceClientConstructor> };
  };
  const [service, method] = spec.method.split("/") as [string, string];
  const client = new pkg.authz.v1[service]!(new URL(spec.url).host, grpc.credentials.createInsecure()) as unknown as Record<
    string,
    (req: unknown, md: grpc.Metadata, cb: (err: Error | null) => void) => void
  >;
  const fn = client[method.charAt(0).toLowerCase() + method.slice(1)]!.bind(client);
  const metadata = new grpc.Metadata();
  metadata.set("x-api-key", spec.key);
  const latencies: number[] = [];
  let errors = 0;
  let next = 0;
  const end = Date.now() + spec.seconds * 1000;
  const worker = async () => {
    while (Date.now() < end) {
      const body = spec.bodies[next++ % spec.bodies.length];
      const t0 = performance.now();
      await new Promise<void>((resolve) =>
        fn(body, metadata, (err) => {
          if (err) errors++;
          resolve();
        }),
      );
      latencies.push(performance.now() - t0);
    }
  };
  await Promise.all(Array.from({ length: spec.connections }, worker));
  (client as unknown as grpc.Client).close();
  latencies.sort((a, b) => a - b);
  const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? 0;
  return { requests: latencies.length, errors, rps: latencies.length / spec.seconds, p50: at(0.5), p99: at(0.99) };
}

const spec = JSON.parse(process.argv[2]!) as LoadSpec;
const result = spec.kind === "rest" ? await rest(spec) : await grpcLoad(spec);
process.stdout.write(`${JSON.stringify(result)}\n`);
