/**
 * Driving the service: the load generator (bench/load.ts, its own process)
 * at a spec, with the CPU per request of the server and of other processes
 * over the run, and the report's rows made of what it measured.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { LoadResult, LoadSpec } from "../load.js";
import { cpuMicros } from "./meters.js";
import { CONNECTIONS, SECONDS, WARMUP } from "./options.js";
import { say, progress } from "./output.js";
import { EXT, firstLine, node, TREE } from "./processes.js";


const warmed = new Set<string>();

/** A load phase's result, with the CPU the server spent on it per request. */
export interface Measured extends LoadResult {
  serverCpuUs: number | undefined;
  /** CPU µs per request of other processes (see drive's `others`). */
  othersCpuUs?: Record<string, number>;
}

/**
 * One run of the load generator (bench/load.ts, its own process): `spec`
 * at `connections` in flight for `seconds`, with the CPU per request of the
 * server of process `serverPid` and of `others` over the run.
 */
export async function loadOnce(
  spec: Omit<LoadSpec, "connections" | "seconds">,
  seconds: number,
  connections: number,
  serverPid: number | undefined,
  others: Record<string, () => number> = {},
): Promise<Measured> {
  const child = node([join(TREE, `bench/load${EXT}`), specArgument({ ...spec, connections, seconds })], {});
  const before = cpuMicros(serverPid);
  const othersBefore = Object.entries(others).map(([name, cpu]) => [name, cpu()] as const);
  const result = JSON.parse(await firstLine(child)) as LoadResult;
  const after = cpuMicros(serverPid);
  const requests = Math.max(1, result.requests);
  const othersCpuUs = Object.fromEntries(othersBefore.map(([name, b]) => [name, (others[name]!() - b) / requests]));
  const serverCpuUs = before === undefined || after === undefined ? undefined : (after - before) / requests;
  return { ...result, serverCpuUs, othersCpuUs };
}

/**
 * The load generator's argument: the spec's JSON, or "@" and a file holding
 * it when it is longer than Linux takes in one argument (128 KiB: bodies
 * with properties).
 */
const specDirs = new Set<string>();
export function specArgument(spec: LoadSpec): string {
  const json = JSON.stringify(spec);
  if (json.length < 100_000) return json;
  const dir = mkdtempSync(join(tmpdir(), "portcullis-load-"));
  const file = join(dir, "spec.json");
  writeFileSync(file, json);
  // One exit listener for all of them (a run writes one per long spec).
  if (specDirs.size === 0) process.on("exit", () => specDirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
  specDirs.add(dir);
  return `@${file}`;
}

/**
 * Drives `spec` at the server of process `serverPid`. Besides throughput and
 * latency, the server's CPU time per request is taken from /proc over the
 * measured run, and the generator reports its own: on a shared 2-core
 * machine these say where a figure's CPU went, whatever else ran.
 */
export async function drive(
  spec: Omit<LoadSpec, "connections" | "seconds">,
  label: string,
  serverPid: number | undefined,
  /** CPU microseconds used so far by other processes to account, by name (the Postgres servers). */
  others: Record<string, () => number> = {},
): Promise<Measured> {
  const run = (seconds: number) => loadOnce(spec, seconds, CONNECTIONS, serverPid, others);
  // A server's first load runs longer: its JIT is still settling, which
  // otherwise lands on whichever figure comes first.
  const warmUp = warmed.has(spec.url) ? WARMUP : 3 * WARMUP;
  warmed.add(spec.url);
  progress(`running: ${label} (warm-up ${warmUp} s)`);
  await run(warmUp);
  progress(`running: ${label} (${SECONDS} s, ${CONNECTIONS} in flight)`);
  const result = await run(SECONDS);
  if (result.errors > 0) say(`warning: ${label}: ${result.errors} failed requests`);
  return result;
}

export interface Row {
  figure: string;
  rps: number;
  unit: string;
  p50: number;
  p99: number;
  /** CPU microseconds per request (per check for checks/s): the server's, and the load generator's. */
  serverUs?: number | undefined;
  generatorUs?: number | undefined;
  /** CPU microseconds per request of the whole Postgres server, where the group measured it (hierarchy). */
  databaseUs?: number | undefined;
  /** A REST figure, reported also as a share of the ceiling. */
  versusCeiling?: boolean;
  ofCeiling?: number;
}

/** A row of the main table from a measured run: `perRequest` items a request (checks of a batch). */
export const row = (figure: string, r: Measured, unit = "req/s", perRequest = 1, versusCeiling = false): Row => ({
  figure,
  rps: r.rps * perRequest,
  serverUs: r.serverCpuUs === undefined ? undefined : r.serverCpuUs / perRequest,
  ...(r.othersCpuUs?.postgres === undefined ? {} : { databaseUs: r.othersCpuUs.postgres / perRequest }),
  generatorUs: r.generatorCpuUs / perRequest,
  unit,
  p50: r.p50,
  p99: r.p99,
  ...(versusCeiling ? { versusCeiling } : {}),
});
