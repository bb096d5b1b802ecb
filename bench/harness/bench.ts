/**
 * One bench run's state, shared by its groups: the service it started (on
 * the Postgres of DATABASE_URL, in a fresh database there; with --citus on a
 * Citus cluster of its own; else on embedded PGlite in a fresh data folder),
 * the ceiling server, the bench application's
 * key, the report's rows, and each group's section of the report.
 */
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import type { CpuMeter } from "../changes.js";
import { startCitusCluster, type CitusCluster } from "../citus-cluster.js";
import { freePort } from "../pg-cluster.js";
import { pgQuery } from "../pg-server.js";
import { copyForTree } from "./copy-for-tree.js";
import { ADMIN_KEY } from "./api.js";
import { drive, type Measured, type Row } from "./drive.js";
import { cpuMicros, memoryMark, meterBackends, nodeMemory, peakRssMb, postgresCpuOf, type MemoryMark } from "./meters.js";
import { BENCH_APP, CITUS, COMPARE_TREE, CONNECTIONS, GRANT_STEPS, KEEP, MODEL_CONNECTIONS, MODEL_GRANTS, ONLY, PROFILE, REPLICAS, SECONDS, SERVICE_ENV, STATEMENT_STATS } from "./options.js";
import { reportStatementStats } from "./statement-stats.js";
import { say } from "./output.js";
import { COMPILED, EXT, firstLine, node, ROOT, stopProcess, TREE, waitReady } from "./processes.js";

/** A group's part of the report: its figures in the JSON file, its table, and what it holds as failed. */
export interface Section {
  figures: () => unknown;
  /** Its table, after the main one (report.ts orders them). */
  lines?: () => string[];
  /** Printed after the figures are written. */
  after?: () => string[];
  /** Why the run fails (its exit code 1), when it does. */
  failure?: () => string | undefined;
}

export interface Bench {
  engine: "postgres" | "pglite" | "citus";
  tmp: string;
  /** The service's environment (its DATABASE_URL or AUTHZ_DATA_DIR, and --service-env). */
  env: Record<string, string>;
  url: string;
  service: ChildProcess;
  serviceArgs: string[];
  /** The arguments of the compared service: the other tree's with --compare-tree, else serviceArgs. */
  otherArgs: string[];
  ceilingUrl: string;
  ceilingServer: ChildProcess;
  /** The bench application's key ("" when no group selected measures it). */
  key: string;
  /** The grants loaded (the last step's, once the steps are done). */
  grants: number;
  rows: Row[];
  ceilings: Measured[];
  scale: { grants: number; grantP50: number; roleP50: number; deniedP50: number }[];
  memory: MemoryMark[];
  sections: Map<string, Section>;
  /** The CPU of the Postgres server of DATABASE_URL, all its processes, when it runs on this machine (with --citus, of its three servers). */
  postgresCpu: Record<string, () => number> | undefined;
  /** The service's peak RSS and Node's split, read when it stops. */
  peak: number | undefined;
  nodeSplit: Record<string, number> | undefined;
  stoppedOnPurpose: boolean;
  serviceLog: string;
  benchDb: { admin: string; name: string } | undefined;
  /** The cluster of --citus, stopped with the run. */
  citus: CitusCluster | undefined;
  /** Copies of the bench database (--compare-tree), dropped with it. */
  copies: { name: string; url: string }[];
  otherEnv: Record<string, string> | undefined;
}

/** REST calls at the bench service, with the bench application's key. */
export const rest = (b: Bench, bodies: unknown[], label: string, path = "/api/v1/authorization/check", method = "POST") =>
  drive({ kind: "rest", url: b.url, method, path, key: b.key, bodies }, label, b.service.pid);

/** The service's memory at the end of a phase, for the report. */
export const mark = (b: Bench, phase: string) => b.memory.push(memoryMark(b.service.pid, phase));

/** A meter of the CPU of a service process and of its Postgres backends on the database of `databaseUrl` (none on PGlite). */
export const cpuMeter = (b: Bench, pid: number | undefined, databaseUrl: string | undefined) => async (): Promise<CpuMeter> => {
  const backends = b.postgresCpu === undefined || databaseUrl === undefined ? undefined : await meterBackends(databaseUrl);
  const before = cpuMicros(pid);
  return {
    stop: async () => {
      const after = cpuMicros(pid);
      return { service: before === undefined || after === undefined ? undefined : after - before, postgres: await backends?.stop() };
    },
  };
};

/** Reads the service's peak and Node's split, then stops it (the groups that restart it call this first). */
export async function stopService(b: Bench): Promise<void> {
  if (b.stoppedOnPurpose) return;
  b.stoppedOnPurpose = true;
  b.peak = peakRssMb(b.service.pid!);
  b.memory.push(memoryMark(b.service.pid, "end"));
  b.nodeSplit = await nodeMemory(b.url);
  await stopProcess(b.service);
}

/**
 * The environment of the other tree's service: another tree may know fewer
 * migrations, so it runs on a copy of the loaded database cut to those, made
 * once (after this service stopped: a database is copied with no one
 * connected to it).
 */
export async function otherTreeEnv(b: Bench): Promise<Record<string, string>> {
  if (b.otherEnv !== undefined) return b.otherEnv;
  const otherDb = COMPARE_TREE !== undefined && b.benchDb !== undefined ? await copyForTree(b.benchDb, COMPARE_TREE) : undefined;
  if (otherDb !== undefined) b.copies.push(otherDb);
  return (b.otherEnv = otherDb === undefined ? {} : { DATABASE_URL: otherDb.url });
}

/** Creates the database (or data folder), starts the ceiling and the service, and waits for the service. */
export async function startBench(): Promise<Bench> {
  const tmp = mkdtempSync(join(tmpdir(), "portcullis-bench-"));
  let benchDb: { admin: string; name: string } | undefined;
  // No sweep: the upkeep figures keep expired grants in the data set on purpose.
  const env: Record<string, string> = { AUTHZ_ADMIN_KEY: ADMIN_KEY, LOG_LEVEL: "warn", PORT: String(await freePort()), GRANT_SWEEP_INTERVAL_MS: "0" };
  const baseUrl = process.env.DATABASE_URL;
  let citus: CitusCluster | undefined;
  if (STATEMENT_STATS && !CITUS) throw new Error("--statement-stats runs with --citus (pg_stat_statements on the cluster's servers)");
  if (CITUS) {
    // Both copy or replicate one Postgres database; a cluster's is three.
    if (REPLICAS > 0 || COMPARE_TREE !== undefined) throw new Error("--citus runs without --replicas and --compare-tree");
    citus = await startCitusCluster({ statementStats: STATEMENT_STATS });
    env.DATABASE_URL = await citus.createDatabase(`portcullis_bench_${Date.now()}`);
    // Made on the coordinator, Citus makes it on the workers too.
    if (STATEMENT_STATS) await pgQuery(env.DATABASE_URL, "CREATE EXTENSION pg_stat_statements");
    env.AUTHZ_DISTRIBUTE = "citus";
  } else if (baseUrl !== undefined && baseUrl !== "") {
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
  const engine = citus ? "citus" : benchDb ? "postgres" : "pglite";
  const postgresCpu = citus ? await citusCpuOf(env.DATABASE_URL!, citus) : env.DATABASE_URL === undefined ? undefined : await postgresCpuOf(env.DATABASE_URL);
  say(
    `portcullis bench: ${engine}, ${BENCH_APP ? `grants ${GRANT_STEPS.join(" → ")}` : "the bench application not loaded (no group selected measures it)"}, ${SECONDS} s per figure, ${CONNECTIONS} in flight` +
      (ONLY.has("models") ? `; models: ${MODEL_GRANTS.toLocaleString("en-US")} grants of its own, checks ${MODEL_CONNECTIONS} in flight` : ""),
  );

  const ceilingServer = node([join(TREE, `bench/ceiling-server${EXT}`)], { PORT: String(await freePort()) });
  const ceilingUrl = (JSON.parse(await firstLine(ceilingServer)) as { url: string }).url;

  const serviceMain = join(TREE, `src/main${EXT}`);
  const serviceArgs = [...(PROFILE ? ["--cpu-prof", `--cpu-prof-dir=${join(ROOT, "bench", "results")}`] : []), serviceMain];
  const otherMain = COMPARE_TREE === undefined ? serviceMain : COMPILED ? join(COMPARE_TREE, "dist", "src", "main.js") : join(COMPARE_TREE, "src", "main.ts");
  Object.assign(env, SERVICE_ENV);
  const service = node(serviceArgs, env);
  const url = `http://127.0.0.1:${env.PORT}`;
  const b: Bench = {
    engine,
    tmp,
    env,
    url,
    service,
    serviceArgs,
    otherArgs: serviceArgs.map((a) => (a === serviceMain ? otherMain : a)),
    ceilingUrl,
    ceilingServer,
    key: "",
    grants: 0,
    rows: [],
    ceilings: [],
    scale: [],
    memory: [],
    sections: new Map(),
    postgresCpu,
    peak: undefined,
    nodeSplit: undefined,
    stoppedOnPurpose: false,
    serviceLog: "",
    benchDb,
    citus,
    copies: [],
    otherEnv: undefined,
  };
  service.stderr!.on("data", (c: Buffer) => (b.serviceLog += c.toString()));
  await waitReady(url, service);
  mark(b, "started");
  return b;
}

/** Stops what the run started, drops its database (unless --keep) and removes its folder. */
export async function stopBench(b: Bench): Promise<void> {
  await stopService(b);
  b.ceilingServer.kill("SIGKILL");
  if (b.benchDb && KEEP) say(`kept database ${[b.benchDb.name, ...b.copies.map((c) => c.name)].join(", ")}`);
  else if (b.benchDb) {
    const admin = new pg.Client({ connectionString: b.benchDb.admin });
    await admin.connect();
    for (const name of [b.benchDb.name, ...b.copies.map((c) => c.name)]) await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
  }
  if (b.citus !== undefined && STATEMENT_STATS) await reportStatementStats(b.citus, b.env.DATABASE_URL!);
  await b.citus?.close();
  rmSync(b.tmp, { recursive: true, force: true });
}

/** The CPU of a Citus cluster's three servers, all their processes, as one Postgres's. */
async function citusCpuOf(coordinatorUrl: string, cluster: CitusCluster): Promise<Record<string, () => number> | undefined> {
  const servers = await Promise.all([coordinatorUrl, ...cluster.workers.map((w) => w.url())].map(postgresCpuOf));
  if (servers.some((s) => s === undefined)) return undefined;
  return { postgres: () => servers.reduce((sum, s) => sum + s!.postgres!(), 0) };
}
