/**
 * The changes group, the change feed (bench/changes.ts and its parts): the
 * delay from a write's commit to a Watch client on the bench service; then,
 * on services started for them on the loaded data, idle Watch streams' CPU
 * and memory and, with --compare-tree DIR, single and bulk writes with the
 * feed on (this tree) and off (DIR), alternated --compare-rounds times.
 */
import * as changes from "../changes.js";
import { measureIdle } from "../changes-idle.js";
import { changesExact, changesLines } from "../changes-report.js";
import { measureWrites, type WriteFigures } from "../changes-writes.js";
import type { IdleFigures } from "../changes-idle.js";
import { ADMIN_KEY, api } from "../harness/api.js";
import { cpuMeter, mark, otherTreeEnv, stopService, type Bench } from "../harness/bench.js";
import { loadOnce } from "../harness/drive.js";
import { gcTotals, nodeMemory, statusMb } from "../harness/meters.js";
import { CHANGES_CONNECTIONS, CHANGES_IDLE_SECONDS, CHANGES_RATE, CHANGES_STREAMS, COMPARE_ROUNDS, COMPARE_TREE, SECONDS, WARMUP } from "../harness/options.js";
import { progress, say } from "../harness/output.js";
import { startOnFreePort, stopProcess } from "../harness/processes.js";

/** The group's figures, kept from its first part (on the bench service) to its second (on services restarted last). */
interface ChangesRun {
  key: string;
  delay: changes.DelayFigures;
  idle?: IdleFigures;
  writes?: WriteFigures;
}

const runs = new WeakMap<Bench, ChangesRun>();

/** The delay, on the bench service. */
export async function changesDelay(b: Bench): Promise<void> {
  const h: changes.ChangesHarness = {
    url: b.url,
    adminKey: ADMIN_KEY,
    api: (method, path, body, k) => api(b.url, method, path, body, k),
    progress,
    say,
    meter: cpuMeter(b, b.service.pid, b.env.DATABASE_URL),
    seconds: SECONDS,
    warmup: WARMUP,
    rate: CHANGES_RATE,
  };
  const key = await changes.createDelayApp(h);
  const run: ChangesRun = { key, delay: await changes.measureDelay(h, key) };
  runs.set(b, run);
  mark(b, "changes: Watch delay");
  const figures = () => ({ delay: run.delay, idle: run.idle, writes: run.writes });
  b.sections.set("changes", {
    figures,
    lines: () => changesLines(figures(), b.engine),
    failure: () =>
      changesExact(figures()) ? undefined : "changes: a write was not delivered exactly once, a write failed, or an idle stream did not stay open (the tables above say which)",
  });
}

/** The idle streams and the writes, on services started on the loaded data (this one stopped first). */
export async function changesRestarted(b: Bench): Promise<void> {
  const run = runs.get(b);
  if (run === undefined) return;
  /** A service of this tree (on) or the compared one (off) on the loaded data, with `nodeFlags` for node. */
  const startFeed = async (variant: changes.FeedVariant, nodeFlags: string[] = []): Promise<changes.StartedService> => {
    const extra = variant === "off" ? await otherTreeEnv(b) : {};
    const { child, url: at } = await startOnFreePort([...nodeFlags, ...(variant === "on" ? b.serviceArgs : b.otherArgs)], { ...b.env, ...extra });
    return {
      url: at,
      pid: child.pid,
      meter: cpuMeter(b, child.pid, extra.DATABASE_URL ?? b.env.DATABASE_URL),
      rssMb: () => (child.pid === undefined ? undefined : statusMb(child.pid, "VmRSS")),
      gc: () => gcTotals(at),
      heapMb: async () => {
        const split = await nodeMemory(at);
        return split === undefined ? undefined : { used: split.heapUsedMb!, total: split.heapTotalMb! };
      },
      stop: () => stopProcess(child),
    };
  };
  await stopService(b);
  run.idle = await measureIdle({
    start: (nodeFlags) => startFeed("on", nodeFlags),
    adminKey: ADMIN_KEY,
    api,
    progress,
    seconds: CHANGES_IDLE_SECONDS,
    streams: CHANGES_STREAMS,
    streamsPerConnection: 10,
  });
  if (COMPARE_TREE === undefined) return;
  run.writes = await measureWrites(
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
    run.key,
  );
}
