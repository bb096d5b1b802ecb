/**
 * The external group: the check driven by independent generators, wrk (REST)
 * and h2load (gRPC), when both are installed, alternated twice each; their
 * ratio (h2load ÷ wrk) besides the rows.
 */
import { fromJson, toBinary, type JsonValue } from "@bufbuild/protobuf";
import { CheckRequestSchema } from "../../gen/authz/v1/check_pb.js";
import * as data from "../dataset.js";
import { h2loadCheck, installed, wrkCheck, type ExternalResult } from "../external.js";
import type { Bench } from "../harness/bench.js";
import { row, type Measured } from "../harness/drive.js";
import { cpuMicros } from "../harness/meters.js";
import { CONNECTIONS, SECONDS } from "../harness/options.js";
import { progress, say } from "../harness/output.js";

export async function external(b: Bench): Promise<void> {
  if (!(installed("wrk") && installed("h2load"))) {
    say("wrk or h2load is not installed: no figures from independent generators (apt-get install wrk nghttp2-client)");
    return;
  }
  const check = data.grantChecks(b.grants, 1)[0]!;
  const message = toBinary(CheckRequestSchema, fromJson(CheckRequestSchema, check as unknown as JsonValue));
  // Alternated, twice each: the machine's speed drifts within minutes.
  const run = async (tool: "wrk" | "h2load", round: number): Promise<Measured> => {
    progress(`running: ${tool} check, round ${round} (${SECONDS} s, ${CONNECTIONS} in flight)`);
    const before = cpuMicros(b.service.pid);
    const r: ExternalResult =
      tool === "wrk" ? await wrkCheck(b.tmp, b.url, b.key, check, SECONDS, CONNECTIONS) : await h2loadCheck(b.tmp, b.url, b.key, message, SECONDS, CONNECTIONS);
    const after = cpuMicros(b.service.pid);
    if (r.errors > 0) say(`warning: ${tool}: ${r.errors} failed requests`);
    const serverCpuUs = before === undefined || after === undefined ? undefined : (after - before) / Math.max(1, r.requests);
    return { ...r, generatorCpuUs: Number.NaN, serverCpuUs };
  };
  await run("wrk", 0); // warm-up for both paths
  await run("h2load", 0);
  const runs = { wrk: [] as Measured[], h2load: [] as Measured[] };
  for (const round of [1, 2]) {
    runs.wrk.push(await run("wrk", round));
    runs.h2load.push(await run("h2load", round));
  }
  const mean = (rs: Measured[]): Measured => ({
    ...rs[0]!,
    rps: rs.reduce((n, r) => n + r.rps, 0) / rs.length,
    p50: rs.reduce((n, r) => n + r.p50, 0) / rs.length,
    p99: rs.reduce((n, r) => n + r.p99, 0) / rs.length,
    serverCpuUs: rs.every((r) => r.serverCpuUs !== undefined) ? rs.reduce((n, r) => n + r.serverCpuUs!, 0) / rs.length : undefined,
  });
  const wrk = mean(runs.wrk);
  const h2load = mean(runs.h2load);
  b.rows.push(row("REST check, wrk (one body, mean of 2)", wrk, "req/s", 1, true));
  b.rows.push(row("gRPC check, h2load (one body, mean of 2)", h2load));
  const ratio = h2load.rps / wrk.rps;
  b.sections.set("external", {
    figures: () => ratio,
    lines: () => ["", `gRPC ÷ REST, independent generators (h2load ÷ wrk): ${ratio.toFixed(2)}`],
  });
}
