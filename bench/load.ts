/**
 * The load generator, run as its own process so it does not share an event
 * loop with the service: REST through autocannon, gRPC through @grpc/grpc-js,
 * each with a fixed number of requests in flight for a fixed time.
 * Reads a LoadSpec as JSON from argv[2], or from the file argv[2] names
 * after an "@" (a spec too long for one argument); prints a LoadResult as
 * JSON.
 */
import { readFileSync } from "node:fs";
import * as grpc from "@grpc/grpc-js";
import { fromJson, toBinary, type JsonValue } from "@bufbuild/protobuf";
import autocannon from "autocannon";
import { CheckService } from "../gen/authz/v1/check_pb.js";

const GRPC_CHANNELS = Number(process.env.BENCH_GRPC_CHANNELS ?? 4);

// grpc-js captures a stack trace (new Error()) for every call it starts, in
// case the call fails; a generator has no use for one, and the capture was
// about 5% of its CPU per call (node --cpu-prof, makeUnaryRequest's own time).
Error.stackTraceLimit = 0;

export interface LoadSpec {
  kind: "rest" | "grpc";
  url: string;
  /** REST: method and path; gRPC: "Service/Method". */
  method: string;
  path: string;
  key: string;
  /** Bodies (REST) or request objects (gRPC), sent in turn. */
  bodies: unknown[];
  /**
   * REST: each `[<id>]` in a body replaced by an id of its own per request
   * (autocannon's idReplacement), so that every write is a new grant: a
   * write that changes nothing costs less and records no change.
   */
  idReplacement?: boolean;
  connections: number;
  seconds: number;
}

export interface LoadResult {
  requests: number;
  /** This process's CPU time per request while it ran the load, in microseconds. */
  generatorCpuUs: number;
  errors: number;
  rps: number;
  p50: number;
  p99: number;
}

type Load = Omit<LoadResult, "generatorCpuUs">;

async function rest(spec: LoadSpec): Promise<Load> {
  // Latencies from each response, in fractional milliseconds: autocannon's
  // own percentiles are whole milliseconds, too coarse for a 1.3x ratio of
  // one-to-three-millisecond figures.
  const latencies: number[] = [];
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon(
      {
        url: spec.url,
        connections: spec.connections,
        duration: spec.seconds,
        idReplacement: spec.idReplacement === true,
        requests: spec.bodies.map((b) => ({
          method: spec.method as "POST",
          path: typeof b === "string" ? b : spec.path,
          headers: { "content-type": "application/json", "x-api-key": spec.key },
          ...(typeof b === "string" ? {} : { body: JSON.stringify(b) }),
        })),
      },
      (error, res) => (error ? reject(error) : resolve(res)),
    );
    instance.on("response", (_client: unknown, status: number, _bytes: number, ms: number) => {
      if (status < 300) latencies.push(ms);
    });
  });
  const bad = result.non2xx + result.errors + result.timeouts;
  return { requests: result.requests.total, errors: bad, rps: result.requests.total / spec.seconds, ...percentiles(latencies) };
}

function percentiles(latencies: number[]): { p50: number; p99: number } {
  const sorted = Float64Array.from(latencies).sort();
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
  return { p50: at(0.5), p99: at(0.99) };
}

/**
 * gRPC through @grpc/grpc-js. Requests are encoded once up front (with the
 * service's own generated schema) and sent through the client's generic
 * makeUnaryRequest, so the generator spends its time on gRPC, not on
 * encoding; the calls are spread over several channels (each its own HTTP/2
 * connection), as a real client pool would, with channelz and retries off.
 */
async function grpcLoad(spec: LoadSpec): Promise<Load> {
  const [service, method] = spec.method.split("/") as [string, string];
  const desc = [CheckService].find((s) => s.name === service)?.methods.find((m) => m.name === method);
  if (desc === undefined || desc.methodKind !== "unary") throw new Error(`unknown unary method ${spec.method}`);
  const path = `/${desc.parent.typeName}/${desc.name}`;
  const requests = spec.bodies.map((b) => Buffer.from(toBinary(desc.input, fromJson(desc.input, b as JsonValue))));
  const clients = Array.from(
    { length: GRPC_CHANNELS },
    () =>
      new grpc.Client(new URL(spec.url).host, grpc.credentials.createInsecure(), {
        "grpc.use_local_subchannel_pool": 1, // a connection per channel
        // Per-call bookkeeping a load generator has no use for: channelz
        // statistics and retry buffering cost it about a fifth of its CPU.
        "grpc.enable_channelz": 0,
        "grpc.enable_retries": 0,
      }),
  );
  const metadata = new grpc.Metadata();
  metadata.set("x-api-key", spec.key);
  const same = (b: Buffer) => b;
  const latencies: number[] = [];
  let errors = 0;
  let next = 0;
  const end = Date.now() + spec.seconds * 1000;
  const worker = async (w: number) => {
    const client = clients[w % clients.length]!;
    while (Date.now() < end) {
      const body = requests[next++ % requests.length]!;
      const t0 = performance.now();
      await new Promise<void>((resolve) =>
        client.makeUnaryRequest(path, same, same, body, metadata, (err) => {
          if (err) errors++;
          resolve();
        }),
      );
      latencies.push(performance.now() - t0);
    }
  };
  await Promise.all(Array.from({ length: spec.connections }, (_, w) => worker(w)));
  for (const client of clients) client.close();
  return { requests: latencies.length, errors, rps: latencies.length / spec.seconds, ...percentiles(latencies) };
}

const argument = process.argv[2]!;
const spec = JSON.parse(argument.startsWith("@") ? readFileSync(argument.slice(1), "utf8") : argument) as LoadSpec;
const cpu = process.cpuUsage();
const load = spec.kind === "rest" ? await rest(spec) : await grpcLoad(spec);
const used = process.cpuUsage(cpu);
const result: LoadResult = { ...load, generatorCpuUs: (used.user + used.system) / Math.max(1, load.requests) };
process.stdout.write(`${JSON.stringify(result)}\n`);
