/**
 * The telemetry group (last but compare, as it restarts the service): the
 * REST check on the same data with the service started three ways,
 * alternated twice: as by default (metrics on, tracing off), with
 * METRICS_ENABLED=false, and with tracing on (OTEL_EXPORTER_OTLP_ENDPOINT at
 * a sink in this process that takes the spans and drops them), as ratios.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import * as data from "../dataset.js";
import { stopService, type Bench } from "../harness/bench.js";
import { drive, row, type Measured } from "../harness/drive.js";
import { micros } from "../harness/output.js";
import { startOnFreePort, stopProcess } from "../harness/processes.js";

export async function telemetry(b: Bench): Promise<void> {
  await stopService(b);
  const figures = await measureTelemetry(b);
  b.sections.set("telemetry", { figures: () => figures, lines: () => telemetryLines(figures) });
}

/** The REST check with metrics on and off, tracing off and on: ratios of one run. */
interface TelemetryFigures {
  /** Metrics on (the default) ÷ METRICS_ENABLED=false, req/s, mean of the rounds. */
  metricsOnOverOff: number;
  /** Tracing on, sampled as by default (1 in 100), ÷ off (metrics on in both), req/s, mean of the rounds. */
  tracingOnOverOff: number;
  /** Tracing on with every request kept (OTEL_TRACES_SAMPLER=always_on) ÷ off, req/s, mean of the rounds. */
  tracingAllOverOff: number;
  /** Service CPU µs per check, mean of the rounds, by variant. */
  cpuUs: Record<TelemetryVariant, number | undefined>;
  /** Spans the sink received per check answered, by tracing variant (the batch processor drops what its queue cannot hold). */
  spansPerCheck: { sampled: number; all: number };
  rounds: number;
}

type TelemetryVariant = "default" | "metrics off" | "tracing on" | "tracing every request";

/**
 * Starts the service on the data set loaded by the main run (the same
 * Postgres database, or the same PGlite folder) three ways in turn,
 * alternated twice, and drives REST checks allowed by a grant at each.
 */
async function measureTelemetry({ env, serviceArgs, key, grants, rows }: Bench): Promise<TelemetryFigures> {
  // An OTLP/HTTP sink: takes each export and drops it, counting the spans.
  let spans = 0;
  const sink = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      // One "kind" per span (links carry span ids, not kinds).
      spans += (Buffer.concat(chunks).toString("utf8").match(/"kind":/g) ?? []).length;
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((resolve) => sink.listen(0, "127.0.0.1", resolve));
  const sinkUrl = `http://127.0.0.1:${(sink.address() as AddressInfo).port}`;
  const variants: Record<TelemetryVariant, Record<string, string>> = {
    default: {},
    "metrics off": { METRICS_ENABLED: "false" },
    "tracing on": { OTEL_EXPORTER_OTLP_ENDPOINT: sinkUrl },
    "tracing every request": { OTEL_EXPORTER_OTLP_ENDPOINT: sinkUrl, OTEL_TRACES_SAMPLER: "always_on" },
  };
  const bodies = data.grantChecks(grants, 1000);
  const results: Record<TelemetryVariant, Measured[]> = { default: [], "metrics off": [], "tracing on": [], "tracing every request": [] };
  const traced = { "tracing on": { checks: 0, spans: 0 }, "tracing every request": { checks: 0, spans: 0 } };
  try {
    for (const round of [1, 2]) {
      for (const [variant, extra] of Object.entries(variants) as [TelemetryVariant, Record<string, string>][]) {
        const { child, url } = await startOnFreePort(serviceArgs, { ...env, ...extra });
        try {
          const spansBefore = spans;
          const result = await drive({ kind: "rest", url, method: "POST", path: "/api/v1/authorization/check", key, bodies }, `telemetry: REST check, ${variant} (${round})`, child.pid);
          results[variant].push(result);
          if (variant === "tracing on" || variant === "tracing every request") {
            // Every check this process answered (the warm-up's too), from its own metrics.
            const metrics = await (await fetch(`${url}/metrics`)).text();
            const checks = /^portcullis_requests_total\{protocol="rest",rpc="\/authz\.v1\.CheckService\/Check",code="200"\} (\d+)$/m.exec(metrics);
            await stopProcess(child); // flushes the last spans
            traced[variant].checks += Number(checks?.[1] ?? 0);
            traced[variant].spans += spans - spansBefore;
          }
        } finally {
          await stopProcess(child);
        }
      }
    }
  } finally {
    sink.close();
  }
  const mean = (rs: Measured[], pick: (r: Measured) => number | undefined) => {
    const values = rs.map(pick);
    return values.some((v) => v === undefined) ? undefined : values.reduce((a, b) => a! + b!, 0)! / values.length;
  };
  const rps = (v: TelemetryVariant) => mean(results[v], (r) => r.rps)!;
  for (const variant of Object.keys(variants) as TelemetryVariant[]) {
    const named = variant === "default" ? "metrics on, tracing off (default)" : variant === "tracing on" ? "tracing on, sampled 1 in 100 (its default)" : variant;
    rows.push(row(`REST check, allowed by a grant, ${named} (1st of 2)`, results[variant][0]!));
  }
  return {
    metricsOnOverOff: rps("default") / rps("metrics off"),
    tracingOnOverOff: rps("tracing on") / rps("default"),
    tracingAllOverOff: rps("tracing every request") / rps("default"),
    cpuUs: {
      default: mean(results.default, (r) => r.serverCpuUs),
      "metrics off": mean(results["metrics off"], (r) => r.serverCpuUs),
      "tracing on": mean(results["tracing on"], (r) => r.serverCpuUs),
      "tracing every request": mean(results["tracing every request"], (r) => r.serverCpuUs),
    },
    spansPerCheck: {
      sampled: traced["tracing on"].checks === 0 ? 0 : traced["tracing on"].spans / traced["tracing on"].checks,
      all: traced["tracing every request"].checks === 0 ? 0 : traced["tracing every request"].spans / traced["tracing every request"].checks,
    },
    rounds: 2,
  };
}


function telemetryLines(telemetry: TelemetryFigures): string[] {
  const cpu = telemetry.cpuUs;
  return [
    "",
    `| REST check, allowed by a grant, the service started each way in turn (alternated, mean of ${telemetry.rounds}) | req/s ratio | service CPU µs/check |`,
    "|---|---:|---|",
    `| metrics on (default) ÷ METRICS_ENABLED=false | ${telemetry.metricsOnOverOff.toFixed(2)} | ${micros(cpu.default)} against ${micros(cpu["metrics off"])} |`,
    `| tracing on, sampled as by default (1 in 100) ÷ tracing off (metrics on in both) | ${telemetry.tracingOnOverOff.toFixed(2)} | ${micros(cpu["tracing on"])} against ${micros(cpu.default)} |`,
    `| tracing on, every request kept (OTEL_TRACES_SAMPLER=always_on) ÷ tracing off | ${telemetry.tracingAllOverOff.toFixed(2)} | ${micros(cpu["tracing every request"])} against ${micros(cpu.default)} |`,
    `| spans received per check, sampled 1 in 100 / every request kept (the batch processor drops what its queue cannot hold) | ${telemetry.spansPerCheck.sampled.toFixed(3)} / ${telemetry.spansPerCheck.all.toFixed(2)} | |`,
  ];
}
