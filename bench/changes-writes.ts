/**
 * The changes group's writes: single grant writes (many in flight) and bulk
 * writes of 5,000, with the feed on (this tree's service) and off (the one
 * built in --compare-tree), each service restarted on the loaded data in
 * turn, alternated.
 */
import { BULK_CALLS, BULK_PATH, BULK_SIZE, grant, mean, median, WRITE_PATH, type FeedVariant, type Measured, type StartedService, type WritesHarness } from "./changes.js";

/** One service start: single writes at `connections` in flight, then bulk writes of 5,000 one at a time. */
export interface WriteRun {
  variant: FeedVariant;
  round: number;
  single: Measured;
  /** Each measured bulk call's time, ms. */
  bulkMs: number[];
  /** Per single write, the CPU of the service's Postgres backends, µs. */
  singlePostgresUs: number | undefined;
  /** Per bulk call, the CPU of the service and of its Postgres backends, ms. */
  bulkServiceMs: number | undefined;
  bulkPostgresMs: number | undefined;
  /** Grants each single write run and bulk call wrote as new (the check that every write was one). */
  bulkWritten: number;
}

export interface WriteFigures {
  tree: string;
  rounds: number;
  connections: number;
  seconds: number;
  runs: WriteRun[];
  /** Feed on ÷ off by round, and their mean: single writes' req/s, bulk's grants/s of the median call. */
  singleRatios: number[];
  bulkRatios: number[];
  singleRatio: number;
  bulkRatio: number;
}

/**
 * Bulk writes of 5,000 new grants, one call at a time: one to warm, then
 * BULK_CALLS measured, with the CPU they took (a mean over the calls: /proc
 * counts in 10 ms ticks).
 */
async function bulkWrites(w: WritesHarness, s: StartedService, key: string, tag: string) {
  const call = async (k: number) => {
    const writes = Array.from({ length: BULK_SIZE }, (_, j) => grant(`bulk-${tag}-${k}-${j}`, `b-${j}`));
    const t = performance.now();
    const answer = (await w.api(s.url, "POST", BULK_PATH, { writes }, key)) as { written: number };
    return { ms: performance.now() - t, written: answer.written };
  };
  await call(0);
  const meter = await s.meter();
  const times: number[] = [];
  let written = 0;
  for (let k = 1; k <= BULK_CALLS; k++) {
    const r = await call(k);
    times.push(r.ms);
    written += r.written;
    w.progress(`running: changes: bulk writes of 5,000, feed ${tag} (${k}/${BULK_CALLS})`);
  }
  const used = await meter.stop();
  const perCall = (us: number | undefined) => (us === undefined ? undefined : us / BULK_CALLS / 1000);
  return { times, written, serviceMs: perCall(used.service), postgresMs: perCall(used.postgres) };
}

/**
 * Feed on (this tree) and off (the compared tree), each started on the
 * loaded data in turn, `rounds` times: single writes of new grants, then
 * bulk writes. The key is the delay part's application's, in both.
 */
export async function measureWrites(w: WritesHarness, key: string): Promise<WriteFigures> {
  const runs: WriteRun[] = [];
  for (let round = 1; round <= w.rounds; round++) {
    for (const variant of ["on", "off"] as const) {
      const s = await w.start(variant);
      try {
        // `[<id>]`: a new id per request (load.ts), so each write is a new grant.
        const spec = { kind: "rest" as const, url: s.url, method: "POST", path: WRITE_PATH, key, bodies: [grant(`single-${variant}-${round}-[<id>]`, "[<id>]")], idReplacement: true };
        w.progress(`running: changes: single writes, feed ${variant} (${round}), warm-up ${w.warmup} s`);
        await w.load(spec, w.warmup, w.connections, s.pid);
        w.progress(`running: changes: single writes, feed ${variant} (${round}), ${w.seconds} s, ${w.connections} in flight`);
        const meter = await s.meter();
        const single = await w.load(spec, w.seconds, w.connections, s.pid);
        const { postgres } = await meter.stop();
        const bulk = await bulkWrites(w, s, key, `${variant}-${round}`);
        runs.push({
          variant,
          round,
          single,
          singlePostgresUs: postgres === undefined ? undefined : postgres / Math.max(1, single.requests),
          bulkMs: bulk.times,
          bulkServiceMs: bulk.serviceMs,
          bulkPostgresMs: bulk.postgresMs,
          bulkWritten: bulk.written,
        });
      } finally {
        await s.stop();
      }
    }
  }
  const of = (variant: FeedVariant, round: number) => runs.find((r) => r.variant === variant && r.round === round)!;
  const rounds = Array.from({ length: w.rounds }, (_, k) => k + 1);
  const singleRatios = rounds.map((r) => of("on", r).single.rps / of("off", r).single.rps);
  const bulkRatios = rounds.map((r) => median(of("off", r).bulkMs) / median(of("on", r).bulkMs));
  return {
    tree: w.tree,
    rounds: w.rounds,
    connections: w.connections,
    seconds: w.seconds,
    runs,
    singleRatios,
    bulkRatios,
    singleRatio: mean(singleRatios),
    bulkRatio: mean(bulkRatios),
  };
}
