/**
 * What the bench reads of a process and of a Postgres server while it
 * measures: CPU time and memory from /proc (Linux), and the service's own
 * figures from its /metrics.
 */
import { readFileSync } from "node:fs";
import pg from "pg";
import { clusterCpuSeconds } from "../pg-cluster.js";

/** Peak resident set size of a process so far (the kernel's high-water mark), from /proc (Linux). */
export function peakRssMb(pid: number): number | undefined {
  return statusMb(pid, "VmHWM");
}

export function statusMb(pid: number, field: "VmHWM" | "VmRSS"): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const match = new RegExp(`${field}:\\s+(\\d+) kB`).exec(status);
    return match ? Number(match[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** The service's memory at the end of a phase: its peak so far and its resident size then. */
export interface MemoryMark {
  phase: string;
  peakMb: number | undefined;
  rssMb: number | undefined;
}

export function memoryMark(pid: number | undefined, phase: string): MemoryMark {
  return { phase, peakMb: pid === undefined ? undefined : peakRssMb(pid), rssMb: pid === undefined ? undefined : statusMb(pid, "VmRSS") };
}

/** The service's /metrics page; undefined when metrics are off or it does not answer. */
async function metricsText(url: string): Promise<string | undefined> {
  try {
    const res = await fetch(`${url}/metrics`);
    return res.status === 200 ? await res.text() : undefined;
  } catch {
    return undefined;
  }
}

/** Node's split of the service's memory, from its /metrics (prom-client's default metrics); undefined when metrics are off. */
export async function nodeMemory(url: string): Promise<Record<string, number> | undefined> {
  const text = await metricsText(url);
  if (text === undefined) return undefined;
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
}

/**
 * The CPU the Postgres server of `databaseUrl` has used so far, every
 * process of it (clusterCpuSeconds), as an `others` entry for drive: found
 * through a backend's parent, the postmaster, in /proc. Undefined when the
 * server is not on this machine (or /proc is not there). The server is the
 * machine's: whatever else uses it meanwhile is counted too.
 */
export async function postgresCpuOf(databaseUrl: string): Promise<Record<string, () => number> | undefined> {
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
export async function meterBackends(databaseUrl: string): Promise<{ stop: () => Promise<number> }> {
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
export async function gcTotals(url: string): Promise<{ major: number; ms: number } | undefined> {
  const text = await metricsText(url);
  if (text === undefined) return undefined;
  // A kind appears once a collection of it happened: none yet is 0.
  const major = Number(/^nodejs_gc_duration_seconds_count\{kind="major"\} (\S+)$/m.exec(text)?.[1] ?? 0);
  let seconds = 0;
  for (const m of text.matchAll(/^nodejs_gc_duration_seconds_sum\{kind="\w+"\} (\S+)$/gm)) seconds += Number(m[1]);
  return { major, ms: seconds * 1000 };
}

/**
 * The service's event-loop delay since the last read, its p99 and its
 * longest, in ms, from its /metrics (prom-client resets the delay histogram
 * at each collection); undefined when metrics are off.
 */
export async function eventLoopDelay(url: string): Promise<{ p99Ms: number; maxMs: number } | undefined> {
  const text = await metricsText(url);
  if (text === undefined) return undefined;
  const pick = (name: string) => Number(new RegExp(`^nodejs_eventloop_lag_${name}_seconds (\\S+)$`, "m").exec(text)?.[1] ?? Number.NaN) * 1000;
  return { p99Ms: pick("p99"), maxMs: pick("max") };
}

/** CPU time a process has used so far, in microseconds, from /proc (Linux); undefined elsewhere. */
export function cpuMicros(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    // utime and stime, in clock ticks of 10 ms (USER_HZ is 100 on Linux).
    return (Number(fields[11]) + Number(fields[12])) * 10_000;
  } catch {
    return undefined;
  }
}
