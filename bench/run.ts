/**
 * `npm run bench`: starts the service as its own process (on the Postgres of
 * DATABASE_URL, in a fresh database there; else on embedded PGlite in a fresh
 * data folder), loads the data set through the public API, drives it from a
 * separate load-generator process, and measures the same way a bare Fastify
 * route (the ceiling). Prints a table and writes the figures as JSON.
 *
 *   npm run bench -- [--grants 100000 | --grants 10000,1000000] [--seconds 10]
 *                    [--connections 50] [--profile] [--out FILE] [--keep]
 *                    [--only ceiling,rest,grpc,external,batch,list,hierarchy,models,changes,isolation,conditions,bulk,questions,upkeep,telemetry]
 *                    [--model-grants 1000000] [--model-connections 10] [--model-cycles 6] [--model-test-runs 3]
 *                    [--changes-rate 1000] [--changes-idle-seconds 20] [--changes-streams 100] [--changes-connections 32]
 *                    [--service-env NAME=VALUE]... (added to the service's environment)
 *                    [--compare NAME=VALUE[,NAME=VALUE...] [--compare-rounds 2]] [--compare-tree DIR]
 *
 * With `--compare`, last of all, it restarts the service on the loaded data
 * as it was started and with those variables added, alternated (twice by
 * default), and drives the three REST checks at each: on a shared machine
 * whose speed drifts, a setting's cost in checks/s is read from one run,
 * minutes apart at most, not from runs on different hours. With
 * `--compare-tree DIR` the compared service is the one built in DIR (a
 * worktree of the commit before a change): before and after in one run.
 *
 * It reports the service's peak RSS over the whole run (the kernel's
 * high-water mark, which covers the start and the loading too), with the
 * peak and the resident size read at each phase's end, and Node's own split
 * (heap, external) from the service's /metrics at the end.
 *
 * The hierarchy group loads an application of its own whose catalog has
 * teams, folders and documents (bench/hierarchy.ts) and measures the check
 * through the graph (4 hops allowed, 6 levels denied) against the direct
 * check of the bench application, alternated, and lookup and who can
 * through it, with a pass through every page of each (exactly once).
 *
 * The models group (issue 27) loads an application of its own, its model
 * applied as one document (bench/models.ts): 20 resources, 200 policies, 50
 * roles, 10,000 users holding roles, 1,000,000 grants; it measures plan and
 * apply of a real change, alternated A → B → A, while REST checks of that
 * application run, the same checks alone, and `portcullis model test` of
 * 200 assertions from a cold start. With `--only models` the bench
 * application's data set is not loaded (nothing else is measured on it).
 *
 * The changes group (issue 28, the change feed: bench/changes.ts) measures,
 * on an application of its own, the delay from a write's commit to a Watch
 * client at 1,000 single writes a second, and 100 idle Watch streams' CPU
 * and memory on the service; and, with --compare-tree DIR (the commit before
 * the feed's capture, built), single and bulk grant writes with the feed on
 * (this tree) and off (DIR), each service restarted on the loaded data in
 * turn, alternated --compare-rounds times. With `--only changes` the bench
 * application is not loaded and the compare group's REST checks do not run.
 *
 * The telemetry group (last, as it restarts the service) measures the REST
 * check on the same data with the service started three ways, alternated
 * twice: as by default (metrics on, tracing off), with METRICS_ENABLED=false,
 * and with tracing on (OTEL_EXPORTER_OTLP_ENDPOINT at a sink in this
 * process that takes the spans and drops them), and reports the ratios.
 *
 * With `--replicas 1` it measures read replicas instead: it starts a Postgres
 * primary and a hot standby of its own (bench/pg-cluster.ts; DATABASE_URL
 * is not used), and two services over them, one on the primary alone and
 * one sending checks to the standby, and drives REST checks at each in turn,
 * with the CPU per check of the service and of each Postgres server.
 */
import { spawn, type ChildProcess } from "node:child_process";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { fromJson, toBinary, type JsonValue } from "@bufbuild/protobuf";
import pg from "pg";
import { CheckRequestSchema } from "../gen/authz/v1/check_pb.js";
import * as data from "./dataset.js";
import * as graph from "./hierarchy.js";
import * as models from "./models.js";
import * as changes from "./changes.js";
import * as isolation from "./isolation.js";
import * as conditionAttacks from "./condition-attacks.js";
import { clusterCpuSeconds, createDatabase, freePort, startPgCluster } from "./pg-cluster.js";
import { h2loadCheck, installed, wrkCheck, type ExternalResult } from "./external.js";
import type { LoadResult, LoadSpec } from "./load.js";

/**
 * `npm run bench` runs the compiled harness from dist/bench, and it starts the
 * compiled service and ceiling from dist/ too, as `npm start` runs the
 * service; run from source (node --import tsx bench/run.ts), it starts them
 * from source, under tsx.
 */
const COMPILED = import.meta.url.endsWith(".js");
const EXT = COMPILED ? ".js" : ".ts";
/** The tree the harness runs from: dist/ when compiled, else the repository. */
const TREE = fileURLToPath(new URL("../", import.meta.url));
const ROOT = COMPILED ? join(TREE, "..") : TREE;

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1]! : fallback;
}
const GRANT_STEPS = arg("grants", "100000").split(",").map((x) => Number(x.replace(/_/g, "")));
const SECONDS = Number(arg("seconds", "10"));
const WARMUP = Math.min(3, Math.max(1, Math.round(SECONDS / 4)));
const CONNECTIONS = Number(arg("connections", "50"));
/** How many times the figures of a ratio are driven in turn (issue 29's). */
const ROUNDS = Number(arg("ratio-rounds", "3"));
const PROFILE = process.argv.includes("--profile");
/** Keep the bench database afterwards (Postgres only), to look into it. */
const KEEP = process.argv.includes("--keep");
/**
 * Figure groups to measure (default all): ceiling, rest, grpc, external (wrk
 * and h2load, when installed), batch, list, bulk, questions (permissions,
 * explain and lookup, as ratios to a single check measured in the same run),
 * hierarchy (groups and hierarchy: see measureHierarchy), models (models as
 * files: bench/models.ts), changes (the change feed: bench/changes.ts),
 * upkeep, telemetry.
 */
const ONLY = new Set(arg("only", "ceiling,rest,grpc,external,batch,list,hierarchy,models,changes,isolation,conditions,bulk,questions,upkeep,telemetry").split(","));
/**
 * Whether any group selected measures the bench application (its catalog,
 * roles, users and grants): the ceiling needs no data and the models and
 * changes groups load applications of their own, so `--only models` skips
 * minutes of loading.
 */
const BENCH_APP = [...ONLY].some((g) => g !== "ceiling" && g !== "models" && g !== "changes" && g !== "isolation" && g !== "conditions");
/**
 * The models group's sizes are the issue's, not --grants's: 1,000,000 grants
 * of its own application (`--model-grants N` to shrink it while developing),
 * its checks at a moderate 10 in flight (a service answering its usual load
 * while someone applies a model, not one saturated), and 6 cycles of two
 * plans and an apply while they run; `model test` run 3 times.
 */
const MODEL_GRANTS = Number(arg("model-grants", String(models.MODEL_GRANTS)).replace(/_/g, ""));
const MODEL_CONNECTIONS = Number(arg("model-connections", "10"));
const MODEL_CYCLES = Number(arg("model-cycles", "6"));
const MODEL_TEST_RUNS = Number(arg("model-test-runs", "3"));
/**
 * The changes group's sizes are the issue's: the Watch delay at 1,000 single
 * writes a second (open loop), 100 idle streams (10 per HTTP/2 connection)
 * over windows of 20 s with and without them (below the 52 s after which a
 * Watch with nothing to send ends), and single writes at 32 in flight for
 * the feed on ÷ off ratio (a busy writer, not the checks' 50).
 */
const CHANGES_RATE = Number(arg("changes-rate", "1000"));
const CHANGES_IDLE_SECONDS = Number(arg("changes-idle-seconds", "20"));
const CHANGES_STREAMS = Number(arg("changes-streams", "100"));
const CHANGES_CONNECTIONS = Number(arg("changes-connections", "32"));
const OUT = arg("out", join(ROOT, "bench", "results", `bench-${new Date().toISOString().replace(/[:.]/g, "-")}.json`));
const ADMIN_KEY = `bench-${randomBytes(16).toString("hex")}`;
/** Hot standbys to measure checks on (0: the usual figures). */
const REPLICAS = Number(arg("replicas", "0"));
/**
 * `--service-env NAME=VALUE`, repeatable: set in the service's environment
 * (the services the telemetry, compare and replica runs start too), to
 * measure a setting against the defaults, e.g. PGLITE_SHARED_BUFFERS_MB or
 * NODE_OPTIONS.
 */
const SERVICE_ENV: Record<string, string> = Object.fromEntries(
  process.argv.flatMap((a, i) => {
    if (a !== "--service-env") return [];
    const pair = process.argv[i + 1] ?? "";
    const eq = pair.indexOf("=");
    if (eq <= 0) throw new Error(`--service-env takes NAME=VALUE, got "${pair}"`);
    return [[pair.slice(0, eq), pair.slice(eq + 1)]];
  }),
);

/** `--compare NAME=VALUE[,NAME=VALUE...]`: the variables the compare group adds (undefined: no compare group). */
const COMPARE: Record<string, string> | undefined = (() => {
  const spec = arg("compare", "");
  if (spec === "") return undefined;
  return Object.fromEntries(
    spec.split(",").map((pair) => {
      const eq = pair.indexOf("=");
      if (eq <= 0) throw new Error(`--compare takes NAME=VALUE[,NAME=VALUE...], got "${pair}"`);
      return [pair.slice(0, eq), pair.slice(eq + 1)];
    }),
  );
})();

/**
 * `--compare-tree DIR`: the compare group runs the service built in DIR (a
 * checkout of another commit, `npm run build` done there) instead of this
 * tree's, on the same data: before/after figures alternated in one run.
 */
const COMPARE_TREE: string | undefined = arg("compare-tree", "") === "" ? undefined : resolve(arg("compare-tree", ""));

const COMPARE_ROUNDS = Number(arg("compare-rounds", "2"));

const SERVICE_ENV_TEXT = Object.entries(SERVICE_ENV)
  .map(([k, v]) => `${k}=${v}`)
  .join(" ");

// A progress line is redrawn in place on a terminal only; into a file or a
// pipe (CI logs, `| tee`) go the finished lines, with no escape codes.
const TTY = process.stderr.isTTY === true;
const progress = (text: string) => {
  if (TTY) process.stderr.write(`\r\x1b[K${text}`);
};
const say = (text: string) => process.stderr.write(TTY ? `\r\x1b[K${text}\n` : `${text}\n`);

// ---------------------------------------------------------------- processes

const children: ChildProcess[] = [];
process.on("exit", () => children.forEach((c) => c.kill("SIGKILL")));

function node(args: string[], env: Record<string, string>): ChildProcess {
  const loader = COMPILED ? ["--enable-source-maps"] : ["--import", "tsx"];
  const child = spawn(process.execPath, [...loader, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  return child;
}

function firstLine(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout!.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      const nl = out.indexOf("\n");
      if (nl >= 0) resolve(out.slice(0, nl));
    });
    child.once("exit", (code) => reject(new Error(`process exited (${code}) before answering: ${out}`)));
  });
}

async function waitReady(url: string, child: ChildProcess): Promise<void> {
  const until = Date.now() + 60_000;
  while (Date.now() < until) {
    if (child.exitCode !== null) throw new Error(`the service exited with ${child.exitCode}`);
    try {
      if ((await fetch(`${url}/readyz`)).status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("the service was not ready within 60 s");
}

/** A service process started with `args` and `env` on a free loopback port, once it is ready. */
async function startOnFreePort(args: string[], env: Record<string, string>): Promise<{ child: ChildProcess; url: string }> {
  const port = String(await freePort());
  const child = node(args, { ...env, PORT: port });
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitReady(url, child);
  } catch (error) {
    child.kill("SIGKILL");
    throw error;
  }
  return { child, url };
}

/** Peak resident set size of a process so far (the kernel's high-water mark), from /proc (Linux). */
function peakRssMb(pid: number): number | undefined {
  return statusMb(pid, "VmHWM");
}

function statusMb(pid: number, field: "VmHWM" | "VmRSS"): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const match = new RegExp(`${field}:\\s+(\\d+) kB`).exec(status);
    return match ? Number(match[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** The service's memory at the end of a phase: its peak so far and its resident size then. */
interface MemoryMark {
  phase: string;
  peakMb: number | undefined;
  rssMb: number | undefined;
}

function memoryMark(pid: number | undefined, phase: string): MemoryMark {
  return { phase, peakMb: pid === undefined ? undefined : peakRssMb(pid), rssMb: pid === undefined ? undefined : statusMb(pid, "VmRSS") };
}

/** Node's split of the service's memory, from its /metrics (prom-client's default metrics); undefined when metrics are off. */
async function nodeMemory(url: string): Promise<Record<string, number> | undefined> {
  try {
    const res = await fetch(`${url}/metrics`);
    if (res.status !== 200) return undefined;
    const text = await res.text();
    const pick = (name: string) => {
      const match = new RegExp(`^${name} (\\S+)$`, "m").exec(text);
      return match ? Number(match[1]) / 1048576 : Number.NaN;
    };
    const space = (name: string) => {
      const match = new RegExp(`^nodejs_heap_space_size_total_bytes\\{space="${name}"\\} (\\S+)$`, "m").exec(text);
      return match ? Number(match[1]) / 1048576 : Number.NaN;
    };
    return {
      rssMb: pick("process_resident_memory_bytes"),
      heapTotalMb: pick("nodejs_heap_size_total_bytes"),
      heapUsedMb: pick("nodejs_heap_size_used_bytes"),
      newSpaceMb: space("new"),
      externalMb: pick("nodejs_external_memory_bytes"),
    };
  } catch {
    return undefined;
  }
}

/**
 * The CPU the Postgres server of `databaseUrl` has used so far, every
 * process of it (clusterCpuSeconds), as an `others` entry for drive: found
 * through a backend's parent, the postmaster, in /proc. Undefined when the
 * server is not on this machine (or /proc is not there). The server is the
 * machine's: whatever else uses it meanwhile is counted too.
 */
async function postgresCpuOf(databaseUrl: string): Promise<Record<string, () => number> | undefined> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
    const backend = readFileSync(`/proc/${rows[0]!.pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    const postmaster = Number(backend[1]);
    if (!readFileSync(`/proc/${postmaster}/cmdline`, "utf8").includes("postgres")) return undefined;
    return { postgres: () => clusterCpuSeconds(postmaster) * 1e6 };
  } catch {
    return undefined;
  } finally {
    await client.end();
  }
}

/** How often meterBackends reads the backends' CPU. */
const BACKENDS_EVERY_MS = 100;

/**
 * The CPU the Postgres backends connected to the database of `databaseUrl`
 * use from now until `stop`, in µs, from /proc (the meter's own connection
 * left out): what a service's statements cost the server, apart from what
 * others using the same server meanwhile cost it. Each backend's CPU is read
 * every BACKENDS_EVERY_MS, so one that exits meanwhile counts up to its last
 * reading: the service drops a connection whose caller went away mid-statement
 * (the load generator's at the end of each run), which a reading at the end
 * alone would miss. Only for a server on this machine (see postgresCpuOf).
 */
async function meterBackends(databaseUrl: string): Promise<{ stop: () => Promise<number> }> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  const first = new Map<number, number>();
  const last = new Map<number, number>();
  let started = false;
  const read = async () => {
    const { rows } = await client.query<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()");
    for (const { pid } of rows) {
      const us = cpuMicros(pid);
      if (us === undefined) continue;
      // A backend first seen after the start began meanwhile: all its CPU counts.
      if (!first.has(pid)) first.set(pid, started ? 0 : us);
      last.set(pid, us);
    }
  };
  await read();
  started = true;
  let reading: Promise<void> = Promise.resolve();
  const timer = setInterval(() => {
    reading = reading.then(read);
  }, BACKENDS_EVERY_MS);
  return {
    stop: async () => {
      clearInterval(timer);
      await reading;
      await read();
      await client.end();
      let us = 0;
      for (const [pid, at] of last) us += at - first.get(pid)!;
      return us;
    },
  };
}

/** The service's garbage collections so far, from its /metrics (prom-client's default metrics); undefined when metrics are off. */
async function gcTotals(url: string): Promise<{ major: number; ms: number } | undefined> {
  try {
    const res = await fetch(`${url}/metrics`);
    if (res.status !== 200) return undefined;
    const text = await res.text();
    // A kind appears once a collection of it happened: none yet is 0.
    const major = Number(/^nodejs_gc_duration_seconds_count\{kind="major"\} (\S+)$/m.exec(text)?.[1] ?? 0);
    let seconds = 0;
    for (const m of text.matchAll(/^nodejs_gc_duration_seconds_sum\{kind="\w+"\} (\S+)$/gm)) seconds += Number(m[1]);
    return { major, ms: seconds * 1000 };
  } catch {
    return undefined;
  }
}

/**
 * The service's event-loop delay since the last read, its p99 and its
 * longest, in ms, from its /metrics (prom-client resets the delay histogram
 * at each collection); undefined when metrics are off.
 */
async function eventLoopDelay(url: string): Promise<{ p99Ms: number; maxMs: number } | undefined> {
  try {
    const res = await fetch(`${url}/metrics`);
    if (res.status !== 200) return undefined;
    const text = await res.text();
    const pick = (name: string) => Number(new RegExp(`^nodejs_eventloop_lag_${name}_seconds (\\S+)$`, "m").exec(text)?.[1] ?? Number.NaN) * 1000;
    return { p99Ms: pick("p99"), maxMs: pick("max") };
  } catch {
    return undefined;
  }
}

/** CPU time a process has used so far, in microseconds, from /proc (Linux); undefined elsewhere. */
function cpuMicros(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    // utime and stime, in clock ticks of 10 ms (USER_HZ is 100 on Linux).
    return (Number(fields[11]) + Number(fields[12])) * 10_000;
  } catch {
    return undefined;
  }
}

// ---------------------------------------------------------------- loading

async function api(url: string, method: string, path: string, body: unknown, key: string): Promise<any> {
  const res = await fetch(url + path, {
    method,
    headers: { "content-type": "application/json", "x-api-key": key },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text.slice(0, 300)}`);
  return text === "" ? undefined : JSON.parse(text);
}

async function inParallel<T>(items: T[], width: number, fn: (item: T, i: number) => Promise<void>, label: string) {
  let next = 0;
  let done = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < items.length) {
        const i = next++;
        await fn(items[i]!, i);
        if (++done % 200 === 0 || done === items.length) progress(`loading: ${label} ${done}/${items.length}`);
      }
    }),
  );
}

async function loadBase(url: string): Promise<string> {
  const base = `/api/v1/applications/${data.APP_ID}`;
  await api(url, "POST", "/api/v1/applications", { appId: data.APP_ID }, ADMIN_KEY);
  const { key } = await api(url, "POST", `${base}/api-keys`, { name: "bench" }, ADMIN_KEY);
  await api(url, "PUT", `${base}/resources`, data.catalog, ADMIN_KEY);
  const policyIds: string[] = [];
  await inParallel(data.policies(), 8, async (p, i) => {
    policyIds[i] = (await api(url, "POST", `${base}/policies`, p, ADMIN_KEY)).policyId;
  }, "policies");
  const roleIds: string[] = [];
  await inParallel(data.roles(), 8, async (r, i) => {
    roleIds[i] = (await api(url, "POST", `${base}/roles`, { name: r.name, policyIds: r.policies.map((p) => policyIds[p]) }, ADMIN_KEY)).roleId;
  }, "roles");
  await inParallel([...Array(data.USERS).keys()], 32, async (u) => {
    await api(url, "POST", `${base}/roles/${roleIds[data.roleOfUser(u)]}/assignments`, { userId: data.userId(u) }, ADMIN_KEY);
  }, "role assignments");
  return key as string;
}

async function loadGrants(url: string, key: string, from: number, to: number): Promise<void> {
  for (let start = from; start < to; start += 5000) {
    const writes = Array.from({ length: Math.min(5000, to - start) }, (_, k) => data.grant(start + k));
    await api(url, "POST", "/api/v1/authorization/relationships/bulk", { writes }, key);
    progress(`loading: grants ${Math.min(to, start + 5000)}/${to}`);
  }
}

// ---------------------------------------------------------------- measuring

const warmed = new Set<string>();

/** A load phase's result, with the CPU the server spent on it per request. */
interface Measured extends LoadResult {
  serverCpuUs: number | undefined;
  /** CPU µs per request of other processes (see drive's `others`). */
  othersCpuUs?: Record<string, number>;
}

/**
 * One run of the load generator (bench/load.ts, its own process): `spec`
 * at `connections` in flight for `seconds`, with the CPU per request of the
 * server of process `serverPid` and of `others` over the run.
 */
async function loadOnce(
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
function specArgument(spec: LoadSpec): string {
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
async function drive(
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

interface Row {
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

async function main(): Promise<void> {
  const tmp = mkdtempSync(join(tmpdir(), "portcullis-bench-"));
  let benchDb: { admin: string; name: string } | undefined;
  /** Copies of the bench database (--compare-tree), dropped with it. */
  const copies: { name: string; url: string }[] = [];
  // No sweep: the upkeep figures keep expired grants in the data set on purpose.
  const env: Record<string, string> = { AUTHZ_ADMIN_KEY: ADMIN_KEY, LOG_LEVEL: "warn", PORT: String(await freePort()), GRANT_SWEEP_INTERVAL_MS: "0" };
  const baseUrl = process.env.DATABASE_URL;
  if (baseUrl !== undefined && baseUrl !== "") {
    const name = `portcullis_bench_${Date.now()}`;
    const admin = new pg.Client({ connectionString: baseUrl });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${name}`);
    await admin.end();
    const u = new URL(baseUrl);
    u.pathname = `/${name}`;
    env.DATABASE_URL = u.toString();
    benchDb = { admin: baseUrl, name };
  } else {
    env.AUTHZ_DATA_DIR = join(tmp, "data");
  }
  const engine = benchDb ? "postgres" : "pglite";
  /** The CPU of the Postgres server of DATABASE_URL, all its processes, when it runs on this machine (the hierarchy group reports it per request). */
  const postgresCpu = env.DATABASE_URL === undefined ? undefined : await postgresCpuOf(env.DATABASE_URL);
  /** A meter of the CPU of a service process and of its Postgres backends on the database of `databaseUrl` (the changes group's; none on PGlite). */
  const cpuMeter = (pid: number | undefined, databaseUrl: string | undefined) => async (): Promise<changes.CpuMeter> => {
    const backends = postgresCpu === undefined || databaseUrl === undefined ? undefined : await meterBackends(databaseUrl);
    const before = cpuMicros(pid);
    return {
      stop: async () => {
        const after = cpuMicros(pid);
        return { service: before === undefined || after === undefined ? undefined : after - before, postgres: await backends?.stop() };
      },
    };
  };
  say(
    `portcullis bench: ${engine}, ${BENCH_APP ? `grants ${GRANT_STEPS.join(" → ")}` : "the bench application not loaded (no group selected measures it)"}, ${SECONDS} s per figure, ${CONNECTIONS} in flight` +
      (ONLY.has("models") ? `; models: ${MODEL_GRANTS.toLocaleString("en-US")} grants of its own, checks ${MODEL_CONNECTIONS} in flight` : ""),
  );

  const ceilingServer = node([join(TREE, `bench/ceiling-server${EXT}`)], { PORT: String(await freePort()) });
  const ceilingUrl = (JSON.parse(await firstLine(ceilingServer)) as { url: string }).url;

  const serviceMain = join(TREE, `src/main${EXT}`);
  const serviceArgs = [...(PROFILE ? ["--cpu-prof", `--cpu-prof-dir=${join(ROOT, "bench", "results")}`] : []), serviceMain];
  Object.assign(env, SERVICE_ENV);
  const service = node(serviceArgs, env);
  let serviceLog = "";
  service.stderr!.on("data", (c: Buffer) => (serviceLog += c.toString()));
  const url = `http://127.0.0.1:${env.PORT}`;
  await waitReady(url, service);
  const memory: MemoryMark[] = [memoryMark(service.pid, "started")];
  let nodeSplit: Record<string, number> | undefined;

  const rows: Row[] = [];
  const ceilings: Measured[] = [];
  const scale: { grants: number; grantP50: number; roleP50: number; deniedP50: number }[] = [];
  let externalRatio: number | undefined;
  let questions: QuestionFigures | undefined;
  let hierarchy: HierarchyFigures | undefined;
  let modelFigures: models.ModelFigures | undefined;
  let upkeep: UpkeepFigures | undefined;
  let telemetry: TelemetryFigures | undefined;
  let compared: CompareRun[] | undefined;
  /** The changes group's parts: the delay and idle streams on this service, the writes on services restarted last. */
  let changesKey: string | undefined;
  let changeDelay: changes.DelayFigures | undefined;
  let changeIdle: changes.IdleFigures | undefined;
  let changeWrites: changes.WriteFigures | undefined;
  /** The isolation group's (bench/isolation.ts): one application attacking through the feed, another measured. */
  let isolationFigures: isolation.IsolationFigures | undefined;
  /** The conditions group's (bench/condition-attacks.ts): one application attacking with dear conditions, another measured. */
  let conditionFigures: conditionAttacks.ConditionFigures | undefined;
  /** The service's peak RSS, read before the telemetry or compare group stops it. */
  let peak: number | undefined;
  let stoppedOnPurpose = false;
  /** Reads the service's peak and Node's split, then stops it. */
  const stopService = async () => {
    if (stoppedOnPurpose) return;
    stoppedOnPurpose = true;
    peak = peakRssMb(service.pid!);
    memory.push(memoryMark(service.pid, "end"));
    nodeSplit = await nodeMemory(url);
    await stopProcess(service);
  };
  try {
    const t0 = Date.now();
    // No group measures the bench application: no key is needed (the ceiling ignores it).
    const key = BENCH_APP ? await loadBase(url) : "";
    if (BENCH_APP) {
      say(`loaded catalog, 200 policies, 50 roles, ${data.USERS} users in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      memory.push(memoryMark(service.pid, "loaded the catalog, roles and users"));
    }

    const rest = (bodies: unknown[], label: string, path = "/api/v1/authorization/check", method = "POST") =>
      drive({ kind: "rest", url, method, path, key, bodies }, label, service.pid);
    const grpcCheck = (bodies: unknown[], label: string) =>
      drive({ kind: "grpc", url, method: "CheckService/Check", path: "", key, bodies }, label, service.pid);

    // The ceiling is measured right before and right after the last step's
    // REST checks, and their shares are of the mean of the two: on a shared
    // machine a ceiling taken minutes apart from the figures drifts with them.
    const ceiling = async (when: string) => {
      if (!ONLY.has("ceiling")) return;
      const label = `ceiling: bare Fastify, same body (${when})`;
      const result = await drive(
        { kind: "rest", url: ceilingUrl, method: "POST", path: "/api/v1/authorization/check", key, bodies: data.deniedChecks(1000) },
        label,
        ceilingServer.pid,
      );
      ceilings.push(result);
      rows.push(row(label, result, "req/s", 1, true));
    };
    const row = (figure: string, r: Measured, unit = "req/s", perRequest = 1, versusCeiling = false): Row => ({
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

    let loaded = 0;
    for (const [step, grants] of GRANT_STEPS.entries()) {
      const t1 = Date.now();
      if (BENCH_APP) {
        await loadGrants(url, key, loaded, grants);
        loaded = grants;
        say(`loaded ${grants} grants in ${((Date.now() - t1) / 1000).toFixed(1)} s`);
        memory.push(memoryMark(service.pid, `loaded ${grants} grants`));
      }
      const last = step === GRANT_STEPS.length - 1;
      if (last) await ceiling("before");
      if (ONLY.has("rest")) {
        const byGrant = await rest(data.grantChecks(grants, 1000), `REST check, allowed by a grant (${grants} grants)`);
        const byRole = await rest(data.roleChecks(1000), `REST check, allowed by a role (${grants} grants)`);
        const denied = await rest(data.deniedChecks(1000), `REST check, denied (${grants} grants)`);
        scale.push({ grants, grantP50: byGrant.p50, roleP50: byRole.p50, deniedP50: denied.p50 });
        if (last) {
          rows.push(row(`REST check, allowed by a grant`, byGrant, "req/s", 1, true));
          rows.push(row(`REST check, allowed by a role`, byRole, "req/s", 1, true));
          rows.push(row(`REST check, denied`, denied, "req/s", 1, true));
          // Issue 29's two ratios: AuthZEN's evaluation of the very questions
          // of the check by a grant (target ≥ 0.9 of its rate), and a check
          // whose answer passes one condition (target ≥ 0.7). A ratio of two
          // windows minutes apart measures the machine's drift as much as
          // the service, so the three are driven in turn, ROUNDS times, and
          // each ratio is of their means (rates, and service CPU per request).
          const authzen = data.grantChecks(grants, 1000).map((c) => ({
            subject: { type: "user", id: c.userId },
            resource: { type: c.resource, id: c.resourceId },
            action: { name: c.action },
          }));
          const writes = Array.from({ length: data.CONDITIONAL_GRANTS }, (_, i) => data.conditionalGrant(i));
          await api(url, "POST", "/api/v1/authorization/relationships/bulk", { writes }, key);
          // The check by a grant measured again in each round: the figure above came first after the
          // loading, with the caches of the service and of Postgres still filling.
          const turns = { grant: [] as Measured[], authzen: [] as Measured[], condition: [] as Measured[] };
          for (let round = 1; round <= ROUNDS; round++) {
            turns.grant.push(await rest(data.grantChecks(grants, 1000), `REST check, allowed by a grant (round ${round})`));
            turns.authzen.push(
              await drive(
                { kind: "rest", url, method: "POST", path: "/access/v1/evaluation", key, bodies: authzen },
                `AuthZEN evaluation, allowed by a grant (round ${round})`,
                service.pid,
              ),
            );
            turns.condition.push(await rest(data.conditionChecks(1000), `REST check, allowed through one condition (round ${round})`));
          }
          const mean = (ms: Measured[], key: "rps" | "serverCpuUs") => ms.reduce((sum, m) => sum + (m[key] ?? Number.NaN), 0) / ms.length;
          const meanOf = (ms: Measured[]): Measured => ({ ...ms[0]!, rps: mean(ms, "rps"), serverCpuUs: mean(ms, "serverCpuUs") });
          rows.push(row(`AuthZEN evaluation, allowed by a grant (mean of ${ROUNDS})`, meanOf(turns.authzen), "req/s", 1, true));
          rows.push(row(`REST check, allowed through one condition (mean of ${ROUNDS})`, meanOf(turns.condition), "req/s", 1, true));
          const ratio = (of: Measured[], target: number, what: string) => {
            const rate = mean(of, "rps") / mean(turns.grant, "rps");
            const cpu = mean(of, "serverCpuUs") / mean(turns.grant, "serverCpuUs");
            const rounds = of.map((m, i) => (m.rps / turns.grant[i]!.rps).toFixed(2)).join(", ");
            say(`${what} ÷ REST check by a grant, ${ROUNDS} alternated rounds: rate ${rate.toFixed(2)} (rounds ${rounds}; target ≥ ${target}), service CPU per request ${cpu.toFixed(2)}`);
          };
          ratio(turns.authzen, 0.9, "AuthZEN evaluation");
          ratio(turns.condition, 0.7, "REST check through one condition");
        }
      }
      if (last && ONLY.has("rest")) await ceiling("after");
      if (ONLY.has("rest")) memory.push(memoryMark(service.pid, `REST checks at ${grants} grants`));
      if (!last) continue;

      if (ONLY.has("grpc")) {
        rows.push(row("gRPC check, allowed by a grant", await grpcCheck(data.grantChecks(grants, 1000), "gRPC check, grant")));
        rows.push(row("gRPC check, allowed by a role", await grpcCheck(data.roleChecks(1000), "gRPC check, role")));
        rows.push(row("gRPC check, denied", await grpcCheck(data.deniedChecks(1000), "gRPC check, denied")));
      }

      if (ONLY.has("external")) {
        if (installed("wrk") && installed("h2load")) {
          const check = data.grantChecks(grants, 1)[0]!;
          const message = toBinary(CheckRequestSchema, fromJson(CheckRequestSchema, check as unknown as JsonValue));
          // Alternated, twice each: the machine's speed drifts within minutes.
          const external = async (tool: "wrk" | "h2load", round: number): Promise<Measured> => {
            progress(`running: ${tool} check, round ${round} (${SECONDS} s, ${CONNECTIONS} in flight)`);
            const before = cpuMicros(service.pid);
            const r: ExternalResult =
              tool === "wrk" ? await wrkCheck(tmp, url, key, check, SECONDS, CONNECTIONS) : await h2loadCheck(tmp, url, key, message, SECONDS, CONNECTIONS);
            const after = cpuMicros(service.pid);
            if (r.errors > 0) say(`warning: ${tool}: ${r.errors} failed requests`);
            const serverCpuUs = before === undefined || after === undefined ? undefined : (after - before) / Math.max(1, r.requests);
            return { ...r, generatorCpuUs: Number.NaN, serverCpuUs };
          };
          await external("wrk", 0); // warm-up for both paths
          await external("h2load", 0);
          const runs = { wrk: [] as Measured[], h2load: [] as Measured[] };
          for (const round of [1, 2]) {
            runs.wrk.push(await external("wrk", round));
            runs.h2load.push(await external("h2load", round));
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
          rows.push(row("REST check, wrk (one body, mean of 2)", wrk, "req/s", 1, true));
          rows.push(row("gRPC check, h2load (one body, mean of 2)", h2load));
          externalRatio = h2load.rps / wrk.rps;
        } else {
          say("wrk or h2load is not installed: no figures from independent generators (apt-get install wrk nghttp2-client)");
        }
      }

      if (ONLY.has("batch")) {
        const mixed = [...data.grantChecks(grants, 400), ...data.roleChecks(300), ...data.deniedChecks(300)];
        const batches = Array.from({ length: 10 }, (_, b) => ({ checks: mixed.slice(b * 100, b * 100 + 100) }));
        const batch = await rest(batches, "batch check of 100", "/api/v1/authorization/check/batch");
        rows.push(row("REST batch check of 100 (checks/s)", batch, "checks/s", 100));
      }
      if (ONLY.has("list")) {
        const listPaths = data.grantChecks(grants, 500).map(
          (c) => `/api/v1/authorization/relationships?resource=${c.resource}&resourceId=${encodeURIComponent(c.resourceId)}`,
        );
        rows.push(row("REST list an instance's grants", await rest(listPaths, "list grants", "", "GET"), "req/s", 1, true));
      }
      if (ONLY.has("hierarchy")) {
        const restAs = (k: string) => (bodies: unknown[], label: string, path = "/api/v1/authorization/check") =>
          drive({ kind: "rest", url, method: "POST", path, key: k, bodies }, label, service.pid, postgresCpu);
        hierarchy = await measureHierarchy({ url, key, grants, rest: restAs(key), row, rows }, restAs, postgresCpu !== undefined);
        memory.push(memoryMark(service.pid, "hierarchy"));
      }
      if (ONLY.has("models")) {
        modelFigures = await models.measureModels({
          url,
          adminKey: ADMIN_KEY,
          api: (method, path, body, k) => api(url, method, path, body, k),
          load: (bodies, k, seconds, connections) => loadOnce({ kind: "rest", url, method: "POST", path: "/api/v1/authorization/check", key: k, bodies }, seconds, connections, service.pid),
          progress,
          say,
          cpu: () => ({ service: cpuMicros(service.pid), postgres: postgresCpu?.postgres?.() }),
          eventLoopDelay: () => eventLoopDelay(url),
          root: ROOT,
          tmp,
          seconds: SECONDS,
          grants: MODEL_GRANTS,
          connections: MODEL_CONNECTIONS,
          cycles: MODEL_CYCLES,
          testRuns: MODEL_TEST_RUNS,
        });
        memory.push(memoryMark(service.pid, "models"));
      }
      if (ONLY.has("changes")) {
        // The delay here; the idle streams and the writes below, on services started for them.
        const h: changes.ChangesHarness = {
          url,
          adminKey: ADMIN_KEY,
          api: (method, path, body, k) => api(url, method, path, body, k),
          progress,
          say,
          meter: cpuMeter(service.pid, env.DATABASE_URL),
          seconds: SECONDS,
          warmup: WARMUP,
          rate: CHANGES_RATE,
        };
        changesKey = await changes.createDelayApp(h);
        changeDelay = await changes.measureDelay(h, changesKey);
        memory.push(memoryMark(service.pid, "changes: Watch delay"));
      }
      if (ONLY.has("isolation")) {
        isolationFigures = await isolation.measureIsolation({
          url,
          adminKey: ADMIN_KEY,
          api: (method, path, body, k) => api(url, method, path, body, k),
          load: (spec, seconds, connections) => loadOnce(spec, seconds, connections, service.pid),
          rssMb: () => (service.pid === undefined ? undefined : statusMb(service.pid, "VmRSS")),
          heapMb: async () => (await nodeMemory(url))?.heapUsedMb,
          progress,
          seconds: SECONDS,
          rounds: COMPARE_ROUNDS,
        });
        memory.push(memoryMark(service.pid, "isolation"));
      }
      if (ONLY.has("conditions")) {
        conditionFigures = await conditionAttacks.measureConditionAttacks({
          url,
          adminKey: ADMIN_KEY,
          api: (method, path, body, k) => api(url, method, path, body, k),
          progress,
          seconds: SECONDS,
        });
        memory.push(memoryMark(service.pid, "conditions"));
      }
      if (ONLY.has("questions")) questions = await measureQuestions({ url, key, grants, rest, row, rows });
      if (ONLY.has("upkeep")) upkeep = await measureUpkeep({ url, key, grants, rest, row, rows });
      if (ONLY.has("bulk")) {
        // Bulk write of 5,000 new grants, one call at a time: the median of several.
        const times: number[] = [];
        for (let k = 0; k < 7; k++) {
          const start = grants + k * 5000;
          const writes = Array.from({ length: 5000 }, (_, j) => data.grant(start + j));
          const t = performance.now();
          await api(url, "POST", "/api/v1/authorization/relationships/bulk", { writes }, key);
          times.push(performance.now() - t);
          progress(`running: bulk write of 5,000 (${k + 1}/7)`);
        }
        times.sort((a, b) => a - b);
        rows.push({ figure: "bulk write of 5,000 (median of 7 calls)", rps: 5000 / (times[3]! / 1000), unit: "grants/s", p50: times[3]!, p99: times[6]! });
        rows.push(await measureCliImport(url, key, grants + 2_000_000, tmp));
      }
      // Last: these stop this service (PGlite's data folder takes one process) and start others on its data.
      const otherArgs = COMPARE_TREE === undefined ? serviceArgs : serviceArgs.map((a) => (a === serviceMain ? (COMPILED ? join(COMPARE_TREE, "dist", "src", "main.js") : join(COMPARE_TREE, "src", "main.ts")) : a));
      // Another tree may know fewer migrations: it runs on a copy of the loaded database cut to those,
      // made once (after this service stopped: a database is copied with no one connected to it).
      let otherEnv: Record<string, string> | undefined;
      const otherTreeEnv = async (): Promise<Record<string, string>> => {
        if (otherEnv !== undefined) return otherEnv;
        const otherDb = COMPARE_TREE !== undefined && benchDb !== undefined ? await copyForTree(benchDb, COMPARE_TREE) : undefined;
        if (otherDb !== undefined) copies.push(otherDb);
        return (otherEnv = otherDb === undefined ? {} : { DATABASE_URL: otherDb.url });
      };
      /** A service of this tree (on) or the compared one (off) on the loaded data, for the changes group, with `nodeFlags` for node. */
      const startFeed = async (variant: changes.FeedVariant, nodeFlags: string[] = []): Promise<changes.StartedService> => {
        const extra = variant === "off" ? await otherTreeEnv() : {};
        const { child, url: at } = await startOnFreePort([...nodeFlags, ...(variant === "on" ? serviceArgs : otherArgs)], { ...env, ...extra });
        return {
          url: at,
          pid: child.pid,
          meter: cpuMeter(child.pid, extra.DATABASE_URL ?? env.DATABASE_URL),
          rssMb: () => (child.pid === undefined ? undefined : statusMb(child.pid, "VmRSS")),
          gc: () => gcTotals(at),
          heapMb: async () => {
            const split = await nodeMemory(at);
            return split === undefined ? undefined : { used: split.heapUsedMb!, total: split.heapTotalMb! };
          },
          stop: () => stopProcess(child),
        };
      };
      if (changesKey !== undefined) {
        await stopService();
        changeIdle = await changes.measureIdle({
          start: (nodeFlags) => startFeed("on", nodeFlags),
          adminKey: ADMIN_KEY,
          api,
          progress,
          seconds: CHANGES_IDLE_SECONDS,
          streams: CHANGES_STREAMS,
          streamsPerConnection: 10,
        });
      }
      if (changesKey !== undefined && COMPARE_TREE !== undefined) {
        changeWrites = await changes.measureWrites(
          {
            start: (variant) => startFeed(variant),
            load: (spec, seconds, connections, pid) => loadOnce(spec, seconds, connections, pid),
            api,
            progress,
            rounds: COMPARE_ROUNDS,
            connections: CHANGES_CONNECTIONS,
            seconds: SECONDS,
            warmup: WARMUP,
            tree: COMPARE_TREE,
          },
          changesKey,
        );
      }
      if (ONLY.has("telemetry")) {
        await stopService();
        telemetry = await measureTelemetry({ env, serviceArgs, key, grants, row, rows });
      }
      // The compare group drives the bench application's checks: not when no group loaded it (--only models, changes).
      if ((COMPARE !== undefined || COMPARE_TREE !== undefined) && BENCH_APP) {
        await stopService();
        compared = await measureCompare({ env, serviceArgs, otherArgs, key, grants, extra: { ...(await otherTreeEnv()), ...COMPARE } });
      }
    }
  } finally {
    // The service ended on its own (a crash): its last words go with the report.
    const died = !stoppedOnPurpose && (service.exitCode !== null || service.signalCode !== null);
    await stopService();
    ceilingServer.kill("SIGKILL");
    if (benchDb && KEEP) say(`kept database ${[benchDb.name, ...copies.map((c) => c.name)].join(", ")}`);
    else if (benchDb) {
      const admin = new pg.Client({ connectionString: benchDb.admin });
      await admin.connect();
      for (const name of [benchDb.name, ...copies.map((c) => c.name)]) await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.end();
    }
    rmSync(tmp, { recursive: true, force: true });
    const ceilingRps = ceilings.reduce((sum, c) => sum + c.rps, 0) / ceilings.length;
    for (const r of rows) {
      if (r.versusCeiling && ceilings.length > 0) r.ofCeiling = r.rps / ceilingRps;
    }
    const changeFigures = changeDelay === undefined ? undefined : { delay: changeDelay, idle: changeIdle, writes: changeWrites };
    report(rows, scale, { peakMb: peak, marks: memory, node: nodeSplit }, engine, externalRatio, questions, upkeep, telemetry, compared, hierarchy, modelFigures, changeFigures);
    if (isolationFigures !== undefined) {
      process.stdout.write(`${isolation.isolationLines(isolationFigures).join("\n")}\n`);
      if (!isolation.isolationMet(isolationFigures)) {
        say("FAILED: isolation: another application's checks passed their p99 target, or a revoked key's stream did not end unauthenticated (the tables above say which)");
        process.exitCode = 1;
      }
    }
    if (conditionFigures !== undefined) {
      process.stdout.write(`${conditionAttacks.conditionAttackLines(conditionFigures).join("\n")}\n`);
      if (!conditionAttacks.conditionAttacksMet(conditionFigures)) {
        say("FAILED: conditions: another application's checks passed their p99 target during an attack, or an attacker's request failed (the table above says which)");
        process.exitCode = 1;
      }
    }
    if (changeFigures !== undefined && !changes.changesExact(changeFigures)) {
      say("FAILED: changes: a write was not delivered exactly once, a write failed, or an idle stream did not stay open (the tables above say which)");
      process.exitCode = 1;
    }
    if (died) say(`the service exited early (${service.exitCode ?? service.signalCode}):\n${serviceLog.slice(-2000)}`);
    else if (serviceLog.includes('"level":50')) say(`the service logged errors:\n${serviceLog.slice(-2000)}`);
  }
}

/** Grants the CLI import figure writes. */
const CLI_IMPORT_ROWS = 50_000;

/**
 * The bulk route through the command line, next to the route's own figure:
 * a generated CSV file of new grants imported by the CLI as its own process
 * (compiled, as `npx portcullis` runs it), in its default batches of 5,000,
 * one call at a time. Wall time from the process's start to its exit, so the
 * figure includes starting Node, reading the file and writing the state file.
 */
async function measureCliImport(url: string, key: string, first: number, tmp: string): Promise<Row> {
  const file = join(tmp, "cli-import.csv");
  const lines = Array.from({ length: CLI_IMPORT_ROWS }, (_, j) => {
    const g = data.grant(first + j);
    return `${g.userId},${g.resource},${g.resourceId},${g.relation}`;
  });
  writeFileSync(file, `userId,resource,resourceId,relation\n${lines.join("\n")}\n`);
  progress(`running: import of ${CLI_IMPORT_ROWS.toLocaleString("en-US")} grants through the CLI`);
  const t = performance.now();
  const cli = node([join(TREE, `src/cli/main${EXT}`), "grants", "import", file, "--json", "--no-progress"], { PORTCULLIS_KEY: key, PORTCULLIS_URL: url });
  let stderr = "";
  cli.stderr!.on("data", (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<number | null>((resolve) => cli.once("exit", resolve));
  const summary = JSON.parse(await firstLine(cli)) as { rows: number; refused: number };
  const code = await exited;
  const wallMs = performance.now() - t;
  if (code !== 0 || summary.rows !== CLI_IMPORT_ROWS || summary.refused !== 0) {
    throw new Error(`the CLI import ended with ${code}: ${JSON.stringify(summary)} ${stderr.slice(-500)}`);
  }
  return {
    figure: `import of ${CLI_IMPORT_ROWS.toLocaleString("en-US")} grants through the CLI (a CSV file, one process; p50: its wall time)`,
    rps: CLI_IMPORT_ROWS / (wallMs / 1000),
    unit: "grants/s",
    p50: wallMs,
    p99: Number.NaN,
  };
}

/** SIGTERM, and the process's exit (at once when it already exited). */
async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  await exited;
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
async function measureTelemetry({
  env,
  serviceArgs,
  key,
  grants,
  row,
  rows,
}: {
  env: Record<string, string>;
  serviceArgs: string[];
  key: string;
  grants: number;
  row: GroupRun["row"];
  rows: Row[];
}): Promise<TelemetryFigures> {
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

/** One service process of the compare group: the three REST checks, and its peak RSS. */
interface CompareRun {
  variant: "as started" | "compared";
  round: number;
  grant: Measured;
  role: Measured;
  denied: Measured;
  /** Of this process, restarted on the loaded data: the loading is not in it. */
  peakMb: number | undefined;
}

/**
 * Starts the service on the data set loaded by the main run as it was
 * started, then with `extra` added, alternated COMPARE_ROUNDS times, and
 * drives the three REST checks at each, the order flipped every other round.
 * With --compare-tree the compared service is the other tree's (otherArgs).
 */
async function measureCompare({
  env,
  serviceArgs,
  otherArgs,
  key,
  grants,
  extra,
}: {
  env: Record<string, string>;
  serviceArgs: string[];
  otherArgs: string[];
  key: string;
  grants: number;
  extra: Record<string, string>;
}): Promise<CompareRun[]> {
  const runs: CompareRun[] = [];
  // The Postgres server's CPU too (both databases are on it): a change that
  // moves work into or out of the statement shows there, not in the service's.
  const postgres = env.DATABASE_URL === undefined ? undefined : await postgresCpuOf(env.DATABASE_URL);
  const check = (url: string, bodies: unknown[], label: string, pid: number | undefined) =>
    drive({ kind: "rest", url, method: "POST", path: "/api/v1/authorization/check", key, bodies }, label, pid, postgres);
  const variants = [["as started", {}], ["compared", extra]] as const;
  for (let round = 1; round <= COMPARE_ROUNDS; round++) {
    // ABBA: each variant goes first in every other round, so neither always
    // runs just after the machine's other work or always second.
    for (const [variant, added] of round % 2 === 1 ? variants : [...variants].reverse()) {
      const { child, url } = await startOnFreePort(variant === "compared" ? otherArgs : serviceArgs, { ...env, ...added });
      try {
        const grant = await check(url, data.grantChecks(grants, 1000), `compare: REST check, allowed by a grant, ${variant} (${round})`, child.pid);
        const role = await check(url, data.roleChecks(1000), `compare: REST check, allowed by a role, ${variant} (${round})`, child.pid);
        const denied = await check(url, data.deniedChecks(1000), `compare: REST check, denied, ${variant} (${round})`, child.pid);
        runs.push({ variant, round, grant, role, denied, peakMb: peakRssMb(child.pid!) });
      } finally {
        await stopProcess(child);
      }
    }
  }
  return runs;
}

/**
 * A copy of the loaded bench database for the service of another tree
 * (--compare-tree), its schema_migrations cut to the migrations that tree
 * has: a build refuses a database migrated by a newer one. What a later
 * migration added stays in the copy, unread by the older build (a column,
 * an index); the functions it replaced are the tree's own again.
 */
async function copyForTree(db: { admin: string; name: string }, tree: string): Promise<{ name: string; url: string }> {
  const known = readdirSync(join(tree, "src", "store", "migrations")).filter((f) => /^\d+_.*\.sql$/.test(f)).length;
  const name = `${db.name}_tree`;
  const admin = new pg.Client({ connectionString: db.admin });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name} TEMPLATE ${db.name}`);
  } finally {
    await admin.end();
  }
  const u = new URL(db.admin);
  u.pathname = `/${name}`;
  const copy = new pg.Client({ connectionString: u.toString() });
  await copy.connect();
  try {
    await copy.query("DELETE FROM schema_migrations WHERE version > $1", [known]);
    // A later migration may have replaced a function the tree's statements
    // call (the check's, planned once): the copy gets the tree's own back,
    // its migrations' function definitions run again in order, so the
    // tree's figures are of its own SQL.
    for (const file of readdirSync(join(tree, "src", "store", "migrations")).filter((f) => /^\d+_.*\.sql$/.test(f)).sort()) {
      const sql = readFileSync(join(tree, "src", "store", "migrations", file), "utf8");
      for (const [definition] of sql.matchAll(/CREATE (?:OR REPLACE )?FUNCTION[\s\S]*?\$\$[\s\S]*?\$\$;/g)) {
        await copy.query(definition.replace(/^CREATE (?:OR REPLACE )?FUNCTION/, "CREATE OR REPLACE FUNCTION"));
      }
    }
  } finally {
    await copy.end();
  }
  return { name, url: u.toString() };
}

/** The questions' figures as ratios to the single REST check, all measured in one run. */
interface QuestionFigures {
  permissions: number;
  permissionsBatch: number;
  explain: number;
  lookupP99: number;
  lookupGrants: number;
}

/** What a group of figures measured after the REST checks works with. */
interface GroupRun {
  url: string;
  key: string;
  /** The grants loaded (the last step). */
  grants: number;
  rest: (bodies: unknown[], label: string, path?: string) => Promise<Measured>;
  row: (figure: string, r: Measured, unit?: string, perRequest?: number, versusCeiling?: boolean) => Row;
  /** The report's rows, which the group appends to. */
  rows: Row[];
}

/** The user whose grants lookup pages through. */
const LOOKUP_USER = "lookup-user";
const LOOKUP_GRANTS = 100_000;

/**
 * Permissions (one instance, and batches of 100), explain and lookup, each
 * against a single REST check allowed by a grant measured right before them,
 * so every ratio comes from one run on one machine state.
 */
async function measureQuestions(
  { url, key, grants, rest, row, rows }: GroupRun,
): Promise<QuestionFigures> {
  const t0 = Date.now();
  const relations = ["viewer", "editor", "owner", "commenter"];
  for (let start = 0; start < LOOKUP_GRANTS; start += 5000) {
    const writes = Array.from({ length: 5000 }, (_, k) => ({
      userId: LOOKUP_USER,
      resource: "document",
      resourceId: `lookup-${String(start + k).padStart(6, "0")}`,
      relation: relations[(start + k) % relations.length]!,
    }));
    await api(url, "POST", "/api/v1/authorization/relationships/bulk", { writes }, key);
    progress(`loading: ${LOOKUP_USER}'s grants ${start + 5000}/${LOOKUP_GRANTS}`);
  }
  say(`loaded ${LOOKUP_GRANTS} grants of one user in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

  const checks = data.grantChecks(grants, 1000);
  const instances = checks.map(({ action: _, ...instance }) => instance);
  const mixed = [...data.grantChecks(grants, 400), ...data.roleChecks(300), ...data.deniedChecks(300)].map(({ action: _, ...instance }) => instance);
  const batches = Array.from({ length: 10 }, (_, b) => ({ requests: mixed.slice(b * 100, b * 100 + 100) }));

  const check = await rest(checks, "questions: REST check, allowed by a grant");
  const permissions = await rest(instances, "questions: permissions, one instance", "/api/v1/authorization/permissions");
  const batch = await rest(batches, "questions: permissions/batch of 100", "/api/v1/authorization/permissions/batch");
  const explain = await rest(checks, "questions: explain", "/api/v1/authorization/check/explain");
  const lookup = await rest(
    [{ userId: LOOKUP_USER, resource: "document", action: "read", pageSize: 100 }],
    "questions: lookup, first page of 100",
    "/api/v1/authorization/lookup",
  );
  rows.push(row("REST check, allowed by a grant (questions' reference)", check));
  rows.push(row("REST permissions, one instance", permissions));
  rows.push(row("REST permissions/batch of 100 (instances/s)", batch, "instances/s", 100));
  rows.push(row("REST explain", explain));
  rows.push(row(`REST lookup, first page of 100, a user with ${LOOKUP_GRANTS.toLocaleString("en-US")} grants`, lookup));
  return {
    permissions: permissions.rps / check.rps,
    permissionsBatch: (batch.rps * 100) / check.rps,
    explain: explain.rps / check.rps,
    lookupP99: lookup.p99,
    lookupGrants: LOOKUP_GRANTS,
  };
}

/** A pass through every page of lookup or who can, and whether each id came exactly once. */
interface Paging {
  pageSize: number;
  pages: number;
  /** Ids returned, over all pages. */
  ids: number;
  expected: number;
  /** Every expected id once, none other, in ascending order across pages. */
  exact: boolean;
  /** Wall time of the whole pass, one page at a time, and of its slowest page. */
  ms: number;
  slowestPageMs: number;
}

/** Latencies of calls made one at a time (no other load). */
interface Serial {
  calls: number;
  p50: number;
  p99: number;
}

/** Groups and hierarchy (issue 26), one run: the checks as ratios to the direct check alternated with them. */
interface HierarchyFigures {
  /** Grants of the hierarchical application, and the time their load took. */
  grants: number;
  loadSeconds: number;
  rounds: number;
  /** By round: the direct check of the bench application (allowed by a grant), the graph's statement at 0 hops, 4 hops allowed, 6 levels denied. */
  direct: Measured[];
  zeroHops: Measured[];
  hops4: Measured[];
  denied: Measured[];
  /** req/s over the direct check's, mean of the rounds. */
  zeroHopsRatio: number;
  hops4Ratio: number;
  deniedRatio: number;
  /** At CONNECTIONS in flight; undefined when one call alone was too slow for any to be answered within a run (see measureHierarchy). */
  lookup: Measured | undefined;
  whoCan: Measured | undefined;
  lookupSerial: Serial;
  whoCanSerial: Serial;
  lookupPaging: Paging[];
  whoCanPaging: Paging;
  /** Whether Postgres's CPU per request was measured (its server on this machine). */
  databaseCpu: boolean;
}

const HIERARCHY_ROUNDS = Number(arg("hierarchy-rounds", "2"));
/** Page sizes of the pass through all of lookup's 100,000 documents (each a pass of its own). */
const HIERARCHY_LOOKUP_PAGES = arg("hierarchy-pages", "1000").split(",").map(Number);

/**
 * Groups and hierarchy: an application of its own (bench/hierarchy.ts),
 * loaded through the bulk endpoint, its answers verified (batch checks: the
 * 4-hop questions all allowed, the 6-level ones all denied), then:
 * - alternated, HIERARCHY_ROUNDS times: the direct check of the bench
 *   application (allowed by a grant, the same bodies as the rest group's),
 *   the hierarchical application's check allowed by a grant on the document
 *   itself (its statement at 0 hops), allowed through 4 hops, denied after
 *   6 levels and a team of 1,000: each at CONNECTIONS in flight, with the
 *   service's and Postgres's CPU per request;
 * - lookup (the first page of 100 of a user's 100,000 documents through
 *   1,000 folders and 3 nested teams) and who can (the first page of 100 of
 *   a document's 10,000 users through teams) at CONNECTIONS in flight, then
 *   one at a time;
 * - a pass through every page of each, one page at a time: each id exactly
 *   once, in order (a failure is reported and fails the run's exit code).
 */
async function measureHierarchy(
  { url, key, grants, rows, row }: GroupRun,
  restAs: (key: string) => (bodies: unknown[], label: string, path?: string) => Promise<Measured>,
  databaseCpu: boolean,
): Promise<HierarchyFigures> {
  const t0 = Date.now();
  const base = `/api/v1/applications/${graph.GRAPH_APP_ID}`;
  await api(url, "POST", "/api/v1/applications", { appId: graph.GRAPH_APP_ID }, ADMIN_KEY);
  const { key: graphKey } = (await api(url, "POST", `${base}/api-keys`, { name: "bench" }, ADMIN_KEY)) as { key: string };
  await api(url, "PUT", `${base}/resources`, graph.graphCatalog, ADMIN_KEY);
  let loaded = 0;
  for (const writes of graph.chunks(graph.graphGrants(), 5000)) {
    await api(url, "POST", "/api/v1/authorization/relationships/bulk", { writes }, graphKey);
    loaded += writes.length;
    progress(`loading: the hierarchy's grants ${loaded}`);
  }
  const loadSeconds = (Date.now() - t0) / 1000;
  say(`loaded the hierarchy's application, ${loaded} grants (teams, folders, documents) in ${loadSeconds.toFixed(1)} s`);

  const directRest = restAs(key);
  const graphRest = restAs(graphKey);
  const direct = data.grantChecks(grants, 1000);
  const zero = graph.directChecks(1000);
  const hops4 = graph.hops4Checks(1000);
  const denied = graph.deniedChecks(1000);
  // The answers first: a figure of wrong answers would measure nothing.
  const expectAnswers = async (name: string, checks: unknown[], callKey: string, allowed: boolean) => {
    const { results } = (await api(url, "POST", "/api/v1/authorization/check/batch", { checks }, callKey)) as { results: { allowed: boolean }[] };
    const wrong = results.filter((r) => r.allowed !== allowed).length;
    if (wrong > 0) throw new Error(`hierarchy: ${wrong} of ${results.length} ${name} checks were answered ${!allowed}`);
  };
  await expectAnswers("direct", direct, key, true);
  await expectAnswers("0-hop", zero, graphKey, true);
  await expectAnswers("4-hop", hops4, graphKey, true);
  await expectAnswers("6-level", denied, graphKey, false);

  const runs = { direct: [] as Measured[], zeroHops: [] as Measured[], hops4: [] as Measured[], denied: [] as Measured[] };
  for (let round = 1; round <= HIERARCHY_ROUNDS; round++) {
    runs.direct.push(await directRest(direct, `hierarchy: REST check, direct, allowed by a grant (${round})`));
    runs.zeroHops.push(await graphRest(zero, `hierarchy: REST check, graph, 0 hops (${round})`));
    runs.hops4.push(await graphRest(hops4, `hierarchy: REST check, graph, 4 hops (${round})`));
    runs.denied.push(await graphRest(denied, `hierarchy: REST check, graph, denied after 6 levels (${round})`));
  }
  const mean = (rs: Measured[]) => rs.reduce((n, r) => n + r.rps, 0) / rs.length;

  const LOOKUP = "/api/v1/authorization/lookup";
  const SUBJECTS = "/api/v1/authorization/subjects";
  const lookupBody = { ...graph.lookupQuestion, pageSize: 100 };
  const whoCanBodies = graph.whoCanQuestions(100);

  // One at a time first: 3 calls to warm, then up to 200 measured, for 30 s at most (10 at least).
  const serial = async (label: string, path: string, bodies: unknown[]): Promise<Serial> => {
    const times: number[] = [];
    const until = performance.now() + 30_000;
    for (let k = 0; times.length < 200 && (times.length < 10 || performance.now() < until); k++) {
      const t = performance.now();
      await api(url, "POST", path, bodies[k % bodies.length], graphKey);
      if (k >= 3) times.push(performance.now() - t);
      progress(`running: ${label}, one at a time (${k + 1})`);
    }
    times.sort((a, b) => a - b);
    return { calls: times.length, p50: times[Math.floor(times.length / 2)]!, p99: times[Math.min(times.length - 1, Math.floor(times.length * 0.99))]! };
  };
  const lookupSerial = await serial("hierarchy: lookup", LOOKUP, [lookupBody]);
  const whoCanSerial = await serial("hierarchy: who can", SUBJECTS, whoCanBodies);

  // Then CONNECTIONS in flight, unless one call alone is so slow that none
  // would be answered within the run: pages asked together share a
  // statement, each page as dear in it as alone, so CONNECTIONS in flight
  // need about CONNECTIONS times one page's time per round, and p99 can
  // only be above the one-at-a-time figure. The service is let finish what
  // the load left queued before anything else is measured.
  const loaded50 = async (label: string, path: string, bodies: unknown[], alone: Serial): Promise<Measured | undefined> => {
    if (alone.p50 * CONNECTIONS > SECONDS * 1000) {
      say(`${label}: not driven at ${CONNECTIONS} in flight: one call alone takes ${alone.p50.toFixed(0)} ms (p50), ${CONNECTIONS} of them about ${((alone.p50 * CONNECTIONS) / 1000).toFixed(0)} s, over the ${SECONDS} s of a run`);
      return undefined;
    }
    const result = await graphRest(bodies, label, path);
    for (let attempt = 1; ; attempt++) {
      try {
        await api(url, "POST", path, bodies[0], graphKey);
        break;
      } catch (error) {
        if (attempt >= 20) throw error;
        await new Promise((r) => setTimeout(r, 5_000));
      }
    }
    return result;
  };
  const lookup = await loaded50("hierarchy: lookup, first page of 100 of 100,000", LOOKUP, [lookupBody], lookupSerial);
  const whoCan = await loaded50("hierarchy: who can, first page of 100 of 10,000", SUBJECTS, whoCanBodies, whoCanSerial);

  // Every page, one at a time: each id exactly once, ascending across pages.
  const pageThrough = async (label: string, path: string, body: Record<string, unknown>, field: string, expected: Set<string>, pageSize: number): Promise<Paging> => {
    let pageToken = "";
    let pages = 0;
    let ids = 0;
    let last = "";
    let ordered = true;
    let slowest = 0;
    const seen = new Set<string>();
    const t = performance.now();
    do {
      const tp = performance.now();
      const page = (await api(url, "POST", path, { ...body, pageSize, pageToken }, graphKey)) as Record<string, unknown>;
      slowest = Math.max(slowest, performance.now() - tp);
      pages++;
      for (const id of page[field] as string[]) {
        if (!(id > last)) ordered = false;
        last = id;
        ids++;
        seen.add(id);
      }
      pageToken = page.nextPageToken as string;
      progress(`running: ${label}, every page of ${pageSize} (${ids} ids)`);
    } while (pageToken !== "" && pages <= expected.size + 1);
    const ms = performance.now() - t;
    const exact = ordered && ids === expected.size && seen.size === expected.size && [...expected].every((id) => seen.has(id));
    if (!exact) {
      say(`FAILED: ${label}: ${ids} ids in ${pages} pages (${seen.size} distinct, ${ordered ? "in order" : "out of order"}), expected each of ${expected.size} once`);
      process.exitCode = 1;
    }
    return { pageSize, pages, ids, expected: expected.size, exact, ms, slowestPageMs: slowest };
  };
  const documents = new Set(Array.from({ length: graph.LOOKUP_DOCS }, (_, i) => graph.lookupDoc(i)));
  const lookupPaging: Paging[] = [];
  for (const pageSize of HIERARCHY_LOOKUP_PAGES) {
    lookupPaging.push(await pageThrough("hierarchy: lookup", LOOKUP, graph.lookupQuestion, "resourceIds", documents, pageSize));
  }
  const users = new Set(Array.from({ length: graph.WHO_TEAMS * graph.WHO_USERS_PER_TEAM }, (_, i) => graph.whoUser(Math.floor(i / graph.WHO_USERS_PER_TEAM), i % graph.WHO_USERS_PER_TEAM)));
  const whoCanPaging = await pageThrough("hierarchy: who can", SUBJECTS, { resource: "document", resourceId: "wc-doc-00", action: "read" }, "userIds", users, 100);

  rows.push(row("hierarchy: REST check, direct, allowed by a grant (reference, 1st round)", runs.direct[0]!, "req/s", 1, true));
  rows.push(row("hierarchy: REST check, graph's statement, allowed by a grant on the document (0 hops, 1st round)", runs.zeroHops[0]!, "req/s", 1, true));
  rows.push(row("hierarchy: REST check, allowed through 4 hops (1st round)", runs.hops4[0]!, "req/s", 1, true));
  rows.push(row("hierarchy: REST check, denied after 6 levels and a team of 1,000 (1st round)", runs.denied[0]!, "req/s", 1, true));
  if (lookup !== undefined) rows.push(row("hierarchy: lookup, first page of 100 of 100,000 documents", lookup));
  if (whoCan !== undefined) rows.push(row("hierarchy: who can, first page of 100 of 10,000 users", whoCan));
  return {
    grants: loaded,
    loadSeconds,
    rounds: HIERARCHY_ROUNDS,
    ...runs,
    zeroHopsRatio: mean(runs.zeroHops) / mean(runs.direct),
    hops4Ratio: mean(runs.hops4) / mean(runs.direct),
    deniedRatio: mean(runs.denied) / mean(runs.direct),
    lookup,
    whoCan,
    lookupSerial,
    whoCanSerial,
    lookupPaging,
    whoCanPaging,
    databaseCpu,
  };
}

/** Keeping the model: expiring grants, delete by filter, the impact preview. */
interface UpkeepFigures {
  /** The check's rate with expiring and expired grants in the data set, over its rate without (alternated, mean of 2 each). */
  expiringRatio: number;
  deleteUserMs: number;
  deleteUserGrants: number;
  previewP50: number;
  previewP99: number;
  previewUsers: number;
  previewRoles: number;
}

const DELETE_USER_GRANTS = 10_000;

/**
 * - The check, allowed by a grant, on the data set as loaded and on the same
 *   data set with an expiry a day ahead on every other grant and 10,000
 *   grants that expired (no sweep runs in the bench), alternated twice.
 * - Delete by filter of a user holding 10,000 grants: the median of 5 calls.
 * - The impact preview of an edit of a policy attached to all 50 roles (each
 *   user holds one role: every user is reached), one call at a time.
 */
async function measureUpkeep(
  { url, key, grants, rest, row, rows }: GroupRun,
): Promise<UpkeepFigures> {
  const checks = data.grantChecks(grants, 1000);
  const rewrite = async (expiresAt: (i: number) => string | undefined) => {
    for (let start = 0; start < grants; start += 5000) {
      const writes = Array.from({ length: Math.min(5000, grants - start) }, (_, k) => {
        const at = expiresAt(start + k);
        return { ...data.grant(start + k), ...(at === undefined ? {} : { expiresAt: at }) };
      });
      await api(url, "POST", "/api/v1/authorization/relationships/bulk", { writes }, key);
    }
  };
  // 10,000 grants that expire in 2 s and stay, expired, for the rest of the run.
  const soon = new Date(Date.now() + 2_000).toISOString();
  for (let start = 0; start < 10_000; start += 5000) {
    const writes = Array.from({ length: 5000 }, (_, k) => ({ ...data.grant(grants + 1_000_000 + start + k), expiresAt: soon }));
    await api(url, "POST", "/api/v1/authorization/relationships/bulk", { writes }, key);
  }
  await new Promise((resolve) => setTimeout(resolve, 2_500));
  const tomorrow = new Date(Date.now() + 86_400_000).toISOString();
  const plain: Measured[] = [];
  const expiring: Measured[] = [];
  for (const round of [1, 2]) {
    await rewrite(() => undefined);
    plain.push(await rest(checks, `upkeep: REST check, no expiring grants (${round})`));
    await rewrite((i) => (i % 2 === 0 ? tomorrow : undefined));
    expiring.push(await rest(checks, `upkeep: REST check, expiring and expired grants (${round})`));
  }
  const mean = (rs: Measured[]) => rs.reduce((n, r) => n + r.rps, 0) / rs.length;
  rows.push(row("REST check, allowed by a grant, no expiring grants (1st of 2)", plain[0]!));
  rows.push(row("REST check, allowed by a grant, half expiring + 10,000 expired (1st of 2)", expiring[0]!));

  // Delete by filter: a user with 10,000 grants, five times.
  const deletes: number[] = [];
  for (let k = 0; k < 5; k++) {
    const userId = `leaver-${k}`;
    for (let start = 0; start < DELETE_USER_GRANTS; start += 5000) {
      const writes = Array.from({ length: 5000 }, (_, j) => ({ userId, resource: "document", resourceId: `leaver-doc-${start + j}`, relation: "viewer" }));
      await api(url, "POST", "/api/v1/authorization/relationships/bulk", { writes }, key);
    }
    const t = performance.now();
    const { deleted } = await api(url, "POST", "/api/v1/authorization/relationships/delete", { userId }, key);
    deletes.push(performance.now() - t);
    if (deleted !== DELETE_USER_GRANTS) throw new Error(`delete by filter removed ${deleted} grants, not ${DELETE_USER_GRANTS}`);
    progress(`running: delete by filter of ${DELETE_USER_GRANTS} grants (${k + 1}/5)`);
  }
  deletes.sort((a, b) => a - b);
  rows.push({ figure: `delete by filter, a user with ${DELETE_USER_GRANTS.toLocaleString("en-US")} grants (median of 5)`, rps: DELETE_USER_GRANTS / (deletes[2]! / 1000), unit: "grants/s", p50: deletes[2]!, p99: deletes[4]! });

  // The impact preview: a policy attached to every role.
  const base = `/api/v1/applications/${data.APP_ID}`;
  const permissions = data.catalog.resources.slice(0, 2).flatMap((r) => r.actions.slice(0, 2).map((a) => `${r.resource}:${a}`));
  const { policyId } = await api(url, "POST", `${base}/policies`, { name: "impact", permissions }, ADMIN_KEY);
  const { roles } = await api(url, "GET", `${base}/roles?pageSize=1000`, undefined, ADMIN_KEY);
  for (const role of roles as { roleId: string; policyIds: string[] }[]) {
    await api(url, "PATCH", `${base}/roles/${role.roleId}`, { policyIds: [...role.policyIds, policyId] }, ADMIN_KEY);
  }
  const edit = { permissions: [...permissions.slice(1), `${data.catalog.resources[2]!.resource}:${data.catalog.resources[2]!.actions[0]}`] };
  const times: number[] = [];
  let users = 0;
  for (let k = 0; k < 40; k++) {
    const t = performance.now();
    const answer = await api(url, "POST", `${base}/policies/${policyId}/preview`, edit, ADMIN_KEY);
    if (k >= 5) times.push(performance.now() - t); // the first ones warm the plans
    // Each user holds one role: the users the policy reaches are its roles' assignments.
    users = (answer.roles as { assignmentCount: number }[]).reduce((n, r) => n + r.assignmentCount, 0);
    if (answer.users.gaining + answer.users.losing === 0) throw new Error("the impact preview's edit changes no user's access");
    progress(`running: impact preview (${k + 1}/40)`);
  }
  times.sort((a, b) => a - b);
  const p50 = times[Math.floor(times.length / 2)]!;
  const p99 = times[times.length - 1]!;
  rows.push({ figure: `impact preview, a policy on ${roles.length} roles, ${users.toLocaleString("en-US")} users (one at a time)`, rps: 1000 / p50, unit: "calls/s", p50, p99 });
  return {
    expiringRatio: mean(expiring) / mean(plain),
    deleteUserMs: deletes[2]!,
    deleteUserGrants: DELETE_USER_GRANTS,
    previewP50: p50,
    previewP99: p99,
    previewUsers: users,
    previewRoles: roles.length,
  };
}

const micros = (us: number | undefined) => (us === undefined || Number.isNaN(us) ? "" : us.toFixed(1));
const ms = (value: number) => (Number.isNaN(value) ? "" : value.toFixed(2));

function report(
  rows: Row[],
  scale: { grants: number; grantP50: number; roleP50: number; deniedP50: number }[],
  { peakMb: peakRss, marks, node: nodeSplit }: { peakMb: number | undefined; marks: MemoryMark[]; node: Record<string, number> | undefined },
  engine: string,
  externalRatio: number | undefined,
  questions: QuestionFigures | undefined,
  upkeep: UpkeepFigures | undefined,
  telemetry: TelemetryFigures | undefined,
  compared: CompareRun[] | undefined,
  hierarchy?: HierarchyFigures,
  modelFigures?: models.ModelFigures,
  changeFigures?: changes.ChangeFigures,
) {
  progress("");
  const lines = [
    `| figure | throughput | p50 ms | p99 ms | share of ceiling | server CPU µs | generator CPU µs |`,
    `|---|---:|---:|---:|---:|---:|---:|`,
    ...rows.map(
      (r) =>
        `| ${r.figure} | ${Math.round(r.rps).toLocaleString("en-US")} ${r.unit} | ${ms(r.p50)} | ${ms(r.p99)} | ${r.ofCeiling === undefined ? "" : `${Math.round(r.ofCeiling * 100)}%`} | ${micros(r.serverUs)} | ${micros(r.generatorUs)} |`,
    ),
  ];
  if (scale.length > 1) {
    const first = scale[0]!;
    const last = scale[scale.length - 1]!;
    lines.push("", `| REST check p50 (ms) | ${scale.map((s) => `${s.grants.toLocaleString("en-US")} grants`).join(" | ")} | last ÷ first |`);
    lines.push(`|---|${scale.map(() => "---:").join("|")}|---:|`);
    for (const [name, k] of [["allowed by a grant", "grantP50"], ["allowed by a role", "roleP50"], ["denied", "deniedP50"]] as const) {
      lines.push(`| ${name} | ${scale.map((s) => s[k].toFixed(2)).join(" | ")} | ${(last[k] / first[k]).toFixed(2)} |`);
    }
  }
  if (externalRatio !== undefined) lines.push("", `gRPC ÷ REST, independent generators (h2load ÷ wrk): ${externalRatio.toFixed(2)}`);
  if (questions !== undefined) {
    const ratio = (name: string, value: number, target: string) => `| ${name} | ${value.toFixed(2)} | ${target} |`;
    lines.push(
      "",
      "| questions, ratio to the single REST check of the same run | ratio | target |",
      "|---|---:|---|",
      ratio("permissions, one instance (req/s)", questions.permissions, "≥ 0.8"),
      ratio("permissions/batch of 100 (instances/s)", questions.permissionsBatch, "≥ 5"),
      ratio("explain (req/s)", questions.explain, "≥ 0.3"),
      `| lookup, first page of 100 of ${questions.lookupGrants.toLocaleString("en-US")} grants: p99 | ${questions.lookupP99.toFixed(2)} ms | < 20 ms |`,
    );
  }
  if (upkeep !== undefined) {
    lines.push(
      "",
      "| keeping the model | figure | target |",
      "|---|---:|---|",
      `| check with half the grants expiring and 10,000 expired, over without (req/s, alternated, mean of 2) | ${upkeep.expiringRatio.toFixed(2)} | within noise of 1 |`,
      `| delete by filter of a user with ${upkeep.deleteUserGrants.toLocaleString("en-US")} grants (median of 5) | ${upkeep.deleteUserMs.toFixed(1)} ms | < 500 ms |`,
      `| impact preview, policy on ${upkeep.previewRoles} roles, ${upkeep.previewUsers.toLocaleString("en-US")} users: p50 (p99) | ${upkeep.previewP50.toFixed(1)} ms (${upkeep.previewP99.toFixed(1)}) | p50 < 100 ms |`,
    );
  }
  if (telemetry !== undefined) {
    const cpu = telemetry.cpuUs;
    lines.push(
      "",
      `| REST check, allowed by a grant, the service started each way in turn (alternated, mean of ${telemetry.rounds}) | req/s ratio | service CPU µs/check |`,
      "|---|---:|---|",
      `| metrics on (default) ÷ METRICS_ENABLED=false | ${telemetry.metricsOnOverOff.toFixed(2)} | ${micros(cpu.default)} against ${micros(cpu["metrics off"])} |`,
      `| tracing on, sampled as by default (1 in 100) ÷ tracing off (metrics on in both) | ${telemetry.tracingOnOverOff.toFixed(2)} | ${micros(cpu["tracing on"])} against ${micros(cpu.default)} |`,
      `| tracing on, every request kept (OTEL_TRACES_SAMPLER=always_on) ÷ tracing off | ${telemetry.tracingAllOverOff.toFixed(2)} | ${micros(cpu["tracing every request"])} against ${micros(cpu.default)} |`,
      `| spans received per check, sampled 1 in 100 / every request kept (the batch processor drops what its queue cannot hold) | ${telemetry.spansPerCheck.sampled.toFixed(3)} / ${telemetry.spansPerCheck.all.toFixed(2)} | |`,
    );
  }
  if (hierarchy !== undefined) lines.push(...hierarchyLines(hierarchy, rows));
  if (modelFigures !== undefined) lines.push(...models.modelLines(modelFigures, engine));
  if (changeFigures !== undefined) lines.push(...changes.changesLines(changeFigures, engine));
  if (compared !== undefined) {
    const settings = Object.entries(COMPARE ?? {}).map(([k, v]) => `${k}=${v}`);
    const other = [...(COMPARE_TREE === undefined ? [] : [`the service of ${COMPARE_TREE}`]), ...(settings.length === 0 ? [] : [settings.join(" ")])].join(", ");
    const name = (variant: CompareRun["variant"]) => (variant === "as started" ? "as started" : `with ${other}`);
    const rate = (r: Measured) => Math.round(r.rps).toLocaleString("en-US");
    const mean = (variant: CompareRun["variant"], pick: (c: CompareRun) => Measured) => {
      const rs = compared.filter((c) => c.variant === variant).map((c) => pick(c).rps);
      return rs.reduce((a, b) => a + b, 0) / rs.length;
    };
    const ratio = (pick: (c: CompareRun) => Measured) => (mean("compared", pick) / mean("as started", pick)).toFixed(2);
    const cpu = (c: CompareRun) => [c.grant, c.role, c.denied].map((r) => micros(r.serverCpuUs)).join(" / ");
    const pgCpu = (c: CompareRun) => [c.grant, c.role, c.denied].map((r) => micros(r.othersCpuUs?.postgres)).join(" / ");
    const meanPg = (variant: CompareRun["variant"]) => {
      const us = compared.filter((c) => c.variant === variant).flatMap((c) => [c.grant, c.role, c.denied].map((r) => r.othersCpuUs?.postgres ?? Number.NaN));
      return us.reduce((a, b) => a + b, 0) / us.length;
    };
    const meanCpu = (variant: CompareRun["variant"]) => {
      const us = compared.filter((c) => c.variant === variant).flatMap((c) => [c.grant, c.role, c.denied].map((r) => r.serverCpuUs ?? Number.NaN));
      return us.reduce((a, b) => a + b, 0) / us.length;
    };
    lines.push(
      "",
      "| REST checks/s, the service restarted on the loaded data each way in turn (order flipped every other round) | allowed by a grant | allowed by a role | denied | service CPU µs/check (grant / role / denied) | Postgres CPU µs/check (grant / role / denied) | that process's peak RSS |",
      "|---|---:|---:|---:|---:|---:|---:|",
      ...compared.map(
        (c) =>
          `| ${name(c.variant)} (${c.round}) | ${rate(c.grant)} | ${rate(c.role)} | ${rate(c.denied)} | ${cpu(c)} | ${pgCpu(c)} | ${c.peakMb === undefined ? "n/a" : `${Math.round(c.peakMb)} MB`} |`,
      ),
      `| ${name("compared")} ÷ as started (mean of the rounds) | ${ratio((c) => c.grant)} | ${ratio((c) => c.role)} | ${ratio((c) => c.denied)} | ${(meanCpu("compared") / meanCpu("as started")).toFixed(2)} | ${(meanPg("compared") / meanPg("as started")).toFixed(2)} | |`,
    );
  }
  const mb = (value: number | undefined) => (value === undefined || Number.isNaN(value) ? "n/a" : `${Math.round(value)} MB`);
  lines.push("", `service peak RSS: ${mb(peakRss)} (${engine}; over the whole run, the start and the loading included)`);
  if (marks.length > 0) lines.push(`  peak (RSS) at the end of each phase: ${marks.map((m) => `${m.phase} ${mb(m.peakMb)} (${mb(m.rssMb)})`).join("; ")}`);
  if (SERVICE_ENV_TEXT !== "") lines.push(`  service environment added: ${SERVICE_ENV_TEXT}`);
  if (nodeSplit !== undefined) {
    lines.push(
      `  at the end, from its /metrics: RSS ${mb(nodeSplit.rssMb)}, V8 heap ${mb(nodeSplit.heapUsedMb)} used of ${mb(nodeSplit.heapTotalMb)} (young generation ${mb(nodeSplit.newSpaceMb)}), external ${mb(nodeSplit.externalMb)} (WebAssembly memory included)`,
    );
  }
  process.stdout.write(`\n${lines.join("\n")}\n`);
  mkdirSync(join(ROOT, "bench", "results"), { recursive: true });
  writeFileSync(
    OUT,
    JSON.stringify(
      {
        engine,
        grants: GRANT_STEPS,
        seconds: SECONDS,
        connections: CONNECTIONS,
        serviceEnv: SERVICE_ENV,
        rows,
        scale,
        externalRatio,
        questions,
        upkeep,
        telemetry,
        hierarchy,
        models: modelFigures,
        changes: changeFigures,
        compare: compared === undefined ? undefined : { variables: COMPARE, tree: COMPARE_TREE, runs: compared },
        peakRssMb: peakRss,
        memory: marks,
        nodeMemory: nodeSplit,
        at: new Date().toISOString(),
      },
      null,
      2,
    ),
  );
  say(`figures written to ${OUT}`);
}

/** The hierarchy group's tables: every run of the alternated checks, then the issue's targets, each met or not. */
function hierarchyLines(h: HierarchyFigures, rows: Row[]): string[] {
  const rate = (r: Measured) => Math.round(r.rps).toLocaleString("en-US");
  const db = (r: Measured) => (h.databaseCpu ? micros(r.othersCpuUs?.postgres) : "n/a");
  const met = (ok: boolean) => (ok ? "met" : "**not met**");
  const worstP99 = Math.max(...h.hops4.map((r) => r.p99));
  const share = (figure: string) => {
    const r = rows.find((x) => x.figure === figure);
    return r?.ofCeiling === undefined ? "n/a" : `${Math.round(r.ofCeiling * 100)}%`;
  };
  const lines = [
    "",
    `| groups and hierarchy: REST checks, alternated (${h.rounds} rounds), ${CONNECTIONS} in flight | req/s | p50 ms | p99 ms | service CPU µs | Postgres CPU µs |`,
    "|---|---:|---:|---:|---:|---:|",
  ];
  for (let k = 0; k < h.rounds; k++) {
    for (const [name, r] of [
      ["direct check, allowed by a grant (bench application)", h.direct[k]!],
      ["graph's statement, allowed by a grant on the document (0 hops)", h.zeroHops[k]!],
      ["allowed through 4 hops (user → team → parent team → folder → document)", h.hops4[k]!],
      ["denied after a 6-level folder tree and a team of 1,000", h.denied[k]!],
    ] as const) {
      lines.push(`| ${name} (${k + 1}) | ${rate(r)} | ${ms(r.p50)} | ${ms(r.p99)} | ${micros(r.serverCpuUs)} | ${db(r)} |`);
    }
  }
  const loadedRow = (name: string, r: Measured | undefined) =>
    r === undefined
      ? `| ${name} | not driven: one call alone was too slow (below) | | | | |`
      : `| ${name} | ${rate(r)}${r.errors > 0 ? ` (${r.errors} failed)` : ""} | ${ms(r.p50)} | ${ms(r.p99)} | ${micros(r.serverCpuUs)} | ${db(r)} |`;
  lines.push(
    loadedRow("lookup, first page of 100 of 100,000 documents (1,000 folders, 3 nested teams)", h.lookup),
    loadedRow("who can, first page of 100 of 10,000 users (through teams)", h.whoCan),
  );
  // At CONNECTIONS in flight; when not driven, the one-at-a-time p50 is already above what p99 could be.
  const p99Line = (name: string, r: Measured | undefined, alone: Serial) =>
    r === undefined
      ? `| ${name}, ${CONNECTIONS} in flight: p99 | not driven (one alone: p50 ${ms(alone.p50)} ms) | < 50 ms | ${met(false)} |`
      : `| ${name}, ${CONNECTIONS} in flight: p99${r.errors > 0 ? ` (${r.errors} failed)` : ""} | ${ms(r.p99)} ms | < 50 ms | ${met(r.p99 < 50 && r.errors === 0)} |`;
  const paging = (p: Paging) =>
    `${p.ids.toLocaleString("en-US")} ids in ${p.pages} pages of ${p.pageSize}, ${p.exact ? "each exactly once, in order" : "NOT each exactly once"}; ${(p.ms / 1000).toFixed(1)} s, slowest page ${p.slowestPageMs.toFixed(1)} ms`;
  lines.push(
    "",
    `| groups and hierarchy: the targets (${h.grants.toLocaleString("en-US")} grants of its own, loaded in ${h.loadSeconds.toFixed(1)} s) | figure | target | |`,
    "|---|---:|---|---|",
    `| check allowed through 4 hops ÷ direct check, req/s (mean of ${h.rounds} rounds) | ${h.hops4Ratio.toFixed(2)} | ≥ 0.5 | ${met(h.hops4Ratio >= 0.5)} |`,
    `| check allowed through 4 hops: p99, worst round (${h.hops4.map((r) => ms(r.p99)).join(" / ")}; the direct check's in the same rounds: ${h.direct.map((r) => ms(r.p99)).join(" / ")}) | ${ms(worstP99)} ms | < 15 ms | ${met(worstP99 < 15)} |`,
    `| check denied after 6 levels and a team of 1,000 ÷ direct check, req/s | ${h.deniedRatio.toFixed(2)} | ≥ 0.3 | ${met(h.deniedRatio >= 0.3)} |`,
    `| (for reading) the graph's statement at 0 hops ÷ direct check, req/s | ${h.zeroHopsRatio.toFixed(2)} | | |`,
    p99Line("lookup, first page of 100 of 100,000", h.lookup, h.lookupSerial),
    `| lookup, one at a time: p50 / p99 (${h.lookupSerial.calls} calls) | ${ms(h.lookupSerial.p50)} / ${ms(h.lookupSerial.p99)} ms | | |`,
    ...h.lookupPaging.map((p) => `| lookup, every page: ${paging(p)} | ${p.exact ? "exact" : "FAILED"} | each exactly once | ${met(p.exact)} |`),
    p99Line("who can, first page of 100 of 10,000", h.whoCan, h.whoCanSerial),
    `| who can, one at a time: p50 / p99 (${h.whoCanSerial.calls} calls) | ${ms(h.whoCanSerial.p50)} / ${ms(h.whoCanSerial.p99)} ms | | |`,
    `| who can, every page: ${paging(h.whoCanPaging)} | ${h.whoCanPaging.exact ? "exact" : "FAILED"} | each exactly once | ${met(h.whoCanPaging.exact)} |`,
    `| direct check's share of the ceiling: rest group / the hierarchy's reference (1st round) | ${share("REST check, allowed by a grant")} / ${share("hierarchy: REST check, direct, allowed by a grant (reference, 1st round)")} | not lower than before (--compare-tree) | |`,
  );
  return lines;
}

/**
 * `--replicas 1`: REST checks on a service over the primary alone against a
 * service sending checks to a hot standby, alternated, same data, same run.
 */
async function replicaMain(): Promise<void> {
  if (REPLICAS !== 1) throw new Error("--replicas: the bench starts one standby; use --replicas 1");
  const cluster = await startPgCluster();
  const tmp = mkdtempSync(join(tmpdir(), "portcullis-bench-"));
  try {
    const db = await createDatabase(cluster, "portcullis_bench");
    const grants = GRANT_STEPS[GRANT_STEPS.length - 1]!;
    say(`portcullis bench: read replicas, ${grants} grants, ${SECONDS} s per figure, ${CONNECTIONS} in flight`);
    const start = (extra: Record<string, string>) =>
      startOnFreePort([join(TREE, `src/main${EXT}`)], { AUTHZ_ADMIN_KEY: ADMIN_KEY, LOG_LEVEL: "warn", DATABASE_URL: db.primaryUrl, ...SERVICE_ENV, ...extra });
    const alone = await start({});
    const replicated = await start({ DATABASE_READ_URLS: db.standbyUrl });
    const key = await loadBase(alone.url);
    await loadGrants(alone.url, key, 0, grants);
    say(`loaded ${grants} grants`);
    const pgCpu = (which: "primary" | "standby") => () => {
      const pid = cluster.pids()[which];
      return pid === undefined ? 0 : clusterCpuSeconds(pid) * 1e6;
    };
    const others = { primary: pgCpu("primary"), standby: pgCpu("standby") };
    const bodies = data.grantChecks(grants, 1000);
    const runs: { label: string; result: Measured }[] = [];
    for (const round of [1, 2]) {
      for (const [label, s] of [["primary alone", alone], ["primary + 1 standby", replicated]] as const) {
        const result = await drive({ kind: "rest", url: s.url, method: "POST", path: "/api/v1/authorization/check", key, bodies }, `${label}, round ${round}`, s.child.pid, others);
        if (result.errors > 0) say(`warning: ${label}: ${result.errors} failed requests`);
        runs.push({ label: `${label}, round ${round}`, result });
      }
    }
    const status = (await (await fetch(`${replicated.url}/readyz`)).json()) as { replicas: unknown[] };
    progress("");
    const lines = [
      "| REST check, allowed by a grant | checks/s | p50 ms | p99 ms | service CPU µs/check | primary Postgres CPU µs/check | standby Postgres CPU µs/check |",
      "|---|---:|---:|---:|---:|---:|---:|",
      ...runs.map(
        ({ label, result: r }) =>
          `| ${label} | ${Math.round(r.rps).toLocaleString("en-US")} | ${ms(r.p50)} | ${ms(r.p99)} | ${micros(r.serverCpuUs)} | ${micros(r.othersCpuUs?.primary)} | ${micros(r.othersCpuUs?.standby)} |`,
      ),
    ];
    const mean = (label: string) => {
      const rs = runs.filter((r) => r.label.startsWith(label)).map((r) => r.result.rps);
      return rs.reduce((a, b) => a + b, 0) / rs.length;
    };
    lines.push("", `primary + 1 standby ÷ primary alone, checks/s (mean of 2 rounds each): ${(mean("primary + 1 standby") / mean("primary alone")).toFixed(2)}`);
    lines.push(`standby as /readyz reports it: ${JSON.stringify(status.replicas)}`);
    lines.push("", "All servers, the services and the load generator share this machine's cores: the standby adds no CPU, so throughput cannot scale here; the CPU per check on each server shows where the work moved.");
    process.stdout.write(`\n${lines.join("\n")}\n`);
    mkdirSync(join(ROOT, "bench", "results"), { recursive: true });
    writeFileSync(OUT, JSON.stringify({ kind: "replicas", grants, seconds: SECONDS, connections: CONNECTIONS, runs, at: new Date().toISOString() }, null, 2));
    say(`figures written to ${OUT}`);
    for (const s of [alone, replicated]) {
      s.child.kill("SIGTERM");
      await new Promise((r) => s.child.once("exit", r));
    }
  } finally {
    await cluster.close();
    rmSync(tmp, { recursive: true, force: true });
  }
}

if (REPLICAS > 0) await replicaMain();
else await main();
// Without a code: a group that failed (hierarchy's pages, changes' deliveries) set process.exitCode.
process.exit();
