/** The changes group's tables: the targets, then the writes, the delay and the idle streams in detail. */
import { BACKLOG_SECONDS, BULK_CALLS, BULK_SIZE, IDLE_MEASURABLE_MS_PER_S, mean, median, TARGETS, type DelayFigures, type FeedVariant, type Spread } from "./changes.js";
import type { IdleFigures, IdleWindow, MemoryAt } from "./changes-idle.js";
import type { WriteFigures } from "./changes-writes.js";

export interface ChangeFigures {
  delay: DelayFigures;
  /** Undefined when the run stopped before it. */
  idle: IdleFigures | undefined;
  /** Undefined without --compare-tree: nothing to compare the writes with. */
  writes: WriteFigures | undefined;
}

/** Whether the run holds what it must (every write delivered exactly once, every idle stream live, every write done): else the bench fails. */
export function changesExact(f: ChangeFigures): boolean {
  return f.delay.exact && (f.idle?.allLive ?? true) && (f.writes?.runs.every((r) => r.single.errors === 0 && r.bulkWritten === BULK_CALLS * BULK_SIZE) ?? true);
}

const num = (x: number | undefined, digits = 1) => (x === undefined || Number.isNaN(x) ? "n/a" : x.toFixed(digits));
const signed = (x: number | undefined, digits: number, unit: string) => (x === undefined ? "n/a" : `${x >= 0 ? "+" : ""}${x.toFixed(digits)} ${unit}`);
const met = (ok: boolean) => (ok ? "met" : "**not met**");

/** The group's tables: the writes by round, the delay, the idle windows, then the issue's targets, each met or not. */
export function changesLines(f: ChangeFigures, engine: string): string[] {
  return [
    ...(f.writes === undefined ? [] : writeLines(f.writes, engine)),
    ...delayLines(f.delay, engine),
    ...(f.idle === undefined ? [] : idleLines(f.idle, engine)),
    ...targetLines(f, engine),
  ];
}

function writeLines(w: WriteFigures, engine: string): string[] {
  const name = (v: FeedVariant) => (v === "on" ? "feed on (this tree)" : "feed off (the compared tree)");
  return [
    "",
    `| change feed (${engine}): writes, the service of each tree restarted on the same data in turn (off: ${w.tree}) | single writes/s, ${w.connections} in flight (${w.seconds} s) | p50 / p99 ms | CPU µs per write: service / its Postgres backends | bulk of 5,000: median ms (of ${BULK_CALLS}) | grants/s | CPU ms per bulk call: service / its Postgres backends |`,
    "|---|---:|---:|---:|---:|---:|---:|",
    ...w.runs.map((r) => {
      const bulk = median(r.bulkMs);
      const failed = r.single.errors > 0 ? ` (${r.single.errors} failed)` : "";
      return `| ${name(r.variant)} (${r.round}) | ${Math.round(r.single.rps).toLocaleString("en-US")}${failed} | ${num(r.single.p50, 2)} / ${num(r.single.p99, 2)} | ${num(r.single.serverCpuUs)} / ${num(r.singlePostgresUs)} | ${num(bulk)} | ${Math.round(BULK_SIZE / (bulk / 1000)).toLocaleString("en-US")} | ${num(r.bulkServiceMs)} / ${num(r.bulkPostgresMs)} |`;
    }),
  ];
}

function delayLines(d: DelayFigures, engine: string): string[] {
  const row = (name: string, s: Spread) => `| ${name} | ${num(s.p50, 2)} | ${num(s.p99, 2)} | ${num(s.max, 2)} |`;
  const stopped = d.writes < d.planned ? `; the generator stopped after ${d.writes.toLocaleString("en-US")} of ${d.planned.toLocaleString("en-US")} writes, ${BACKLOG_SECONDS} s behind` : "";
  return [
    "",
    `| change feed (${engine}): Watch delay, gRPC over HTTP/2, ${d.rate.toLocaleString("en-US")} single writes/s open loop for ${d.seconds} s (${d.afterSend.count.toLocaleString("en-US")} writes measured, after ${d.warmupSeconds} s of warm-up) | p50 ms | p99 ms | max ms |`,
    "|---|---:|---:|---:|",
    row("delivery − answer received (a lower bound of commit → client)", d.afterAnswer),
    row("delivery − request sent (an upper bound of commit → client)", d.afterSend),
    row("the write: request sent → answer received", d.answer),
    row("the generator's lateness against its schedule", d.lateness),
    `| writes sent ${d.writes.toLocaleString("en-US")}, answered 2xx ${d.answered.toLocaleString("en-US")}, delivered exactly once ${d.exactlyOnce.toLocaleString("en-US")}, missing ${d.missing}, more than once ${d.duplicated}, strays ${d.strays}${d.streamProblem === undefined ? "" : `; ${d.streamProblem}`} | | | |`,
    `| CPU per write, its delivery included (warm-up included): service ${num(d.serviceCpuUs)} µs, its Postgres backends ${num(d.postgresCpuUs)} µs; answers ${Math.round(d.answeredRate).toLocaleString("en-US")}/s${stopped} | | | |`,
  ];
}

function idleLines(i: IdleFigures, engine: string): string[] {
  const at = (name: string, m: MemoryAt | undefined) =>
    `${name} ${num(m?.rssMb)} MB (heap ${num(m?.heapUsedMb)} of ${num(m?.heapTotalMb)})`;
  const memory = (w: IdleWindow) => (w.streams === i.streams ? [at("before opening", i.before), at("all open", i.open), at("at the end", i.end)].join(", ") : "");
  return [
    "",
    `| change feed (${engine}): idle Watch streams (${i.streams} on ${i.connections} HTTP/2 connections), an application with no writes, a service started for it and settled (${i.settleSeconds.toFixed(0)} s), windows of ${i.seconds} s | service CPU ms/s | its Postgres backends' CPU ms/s | major GCs (all GC ms) | service RSS (V8 heap used of total) |`,
    "|---|---:|---:|---:|---:|",
    ...i.windows.map(
      (w) => `| ${w.streams === 0 ? "no streams" : w.streams === 1 ? "1 stream" : `${w.streams} streams`} | ${num(w.serviceMsPerS, 2)} | ${num(w.postgresMsPerS, 2)} | ${w.majorGcs ?? "n/a"} (${num(w.gcMs)}) | ${memory(w)} |`,
    ),
    `| every stream delivered a write made before its window and one after it | ${i.allLive ? "yes" : `NO: ${i.problem}`} | | | |`,
  ];
}

/** The increase of a window's CPU over the first's (no streams), the service's and its backends'. */
function idleIncrease(i: IdleFigures, streams: number): { service: number | undefined; postgres: number | undefined } {
  const none = i.windows.find((w) => w.streams === 0);
  const some = i.windows.find((w) => w.streams === streams);
  const less = (a: number | undefined, b: number | undefined) => (a === undefined || b === undefined ? undefined : a - b);
  return { service: less(some?.serviceMsPerS, none?.serviceMsPerS), postgres: less(some?.postgresMsPerS, none?.postgresMsPerS) };
}

function targetLines(f: ChangeFigures, engine: string): string[] {
  const { writes: w, delay: d, idle: i } = f;
  const rounds = (xs: number[]) => xs.map((x) => x.toFixed(2)).join(", ");
  const lines = ["", `| change feed (${engine}): the targets | figure | target | |`, "|---|---:|---|---|"];
  if (w === undefined) lines.push("| writes, feed on ÷ off | not measured: needs --compare-tree DIR (the commit before capture, built) | ≥ 0.8 | |");
  else {
    lines.push(
      `| single writes (${w.connections} in flight): feed on ÷ off, req/s (mean of ${w.rounds} rounds: ${rounds(w.singleRatios)}) | ${w.singleRatio.toFixed(2)} | ≥ ${TARGETS.writeRatio} | ${met(w.singleRatio >= TARGETS.writeRatio)} |`,
      `| bulk writes of 5,000: feed on ÷ off, grants/s of the median call (mean of ${w.rounds} rounds: ${rounds(w.bulkRatios)}) | ${w.bulkRatio.toFixed(2)} | ≥ ${TARGETS.writeRatio} | ${met(w.bulkRatio >= TARGETS.writeRatio)} |`,
    );
  }
  lines.push(
    `| Watch delay at ${d.rate.toLocaleString("en-US")} writes/s: p99 from the request's sending (from its answer: ${num(d.afterAnswer.p99, 2)} ms) | ${num(d.afterSend.p99, 2)} ms | < ${TARGETS.delayP99Ms} ms | ${met(d.afterSend.p99 < TARGETS.delayP99Ms)} |`,
    `| every write delivered to the Watch exactly once (${d.writes.toLocaleString("en-US")} writes) | ${d.exact ? "yes" : "NO"} | exactly once | ${met(d.exact)} |`,
  );
  if (i === undefined) return lines;
  const all = idleIncrease(i, i.streams);
  const one = idleIncrease(i, 1);
  const rss = [i.before?.rssMb, i.open?.rssMb, i.end?.rssMb];
  const extraMb = rss.some((x) => x === undefined) ? undefined : Math.max(rss[1]!, rss[2]!) - rss[0]!;
  lines.push(
    `| ${i.streams} idle streams: the service's CPU over none (1 stream: ${signed(one.service, 2, "ms/s")}; its Postgres backends: ${signed(all.postgres, 2, "ms/s")}) | ${signed(all.service, 2, "ms/s")} | none measurable (< ${IDLE_MEASURABLE_MS_PER_S} ms/s) | ${met(all.service !== undefined && all.service < IDLE_MEASURABLE_MS_PER_S && i.allLive)} |`,
    `| ${i.streams} idle streams: service RSS, the most after opening − before | ${signed(extraMb, 1, "MB")} | < ${TARGETS.idleExtraMb} MB | ${met(extraMb !== undefined && extraMb < TARGETS.idleExtraMb && i.allLive)} |`,
  );
  return lines;
}
