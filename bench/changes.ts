/**
 * The changes group (issue 28, the change feed; docs/performance.md, "The
 * change feed"): the issue's three speed targets.
 *
 * - Writes with the feed on ÷ with it off, at least 0.8: single grant writes
 *   (POST .../relationships, many in flight) and bulk writes of 5,000, each
 *   write a new grant (a write that changes nothing records nothing, and
 *   costs less). "On" is this tree's service, "off" the one built in
 *   --compare-tree (the commit before capture), restarted in turn on the
 *   same data and alternated, as the compare group does with REST checks.
 * - The delay from commit to a Watch client, p99 under 100 ms at 1,000
 *   writes a second: a Watch over gRPC (HTTP/2) from the current token while
 *   single writes go out open-loop at a fixed pace; for each write, when it
 *   was sent, when its answer came and when the Watch delivered its change.
 *   Every write must arrive exactly once, or the run fails.
 * - 100 idle Watch streams: no measurable CPU and under 20 MB more memory.
 *   The service's CPU over a window with no streams and one with 100 open
 *   (10 HTTP/2 connections of 10) on an application nobody writes to, and
 *   its resident size before and after opening them.
 *
 * What it needs of the harness (the API, the load generator, the service's
 * CPU and memory, starting a service of either tree) comes in as a
 * ChangesHarness and a WritesHarness, since bench/run.ts runs its main when
 * imported (as the models group does).
 */
import { setMaxListeners } from "node:events";
import http from "node:http";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { ChangeService } from "../gen/authz/v1/changes_pb.js";
import type { LoadResult, LoadSpec } from "./load.js";

export const DELAY_APP_ID = "bench-changes";
export const IDLE_APP_ID = "bench-changes-idle";
const CATALOG = { resources: [{ resource: "document", description: "a document (change feed benchmark)", actions: ["read", "list"] }] };
const WRITE_PATH = "/api/v1/authorization/relationships";
const BULK_PATH = "/api/v1/authorization/relationships/bulk";
const BULK_SIZE = 5_000;
/** Bulk calls measured per service start (the median is the figure), after one to warm. */
const BULK_CALLS = 7;
/** The issue's targets. */
export const TARGETS = { writeRatio: 0.8, delayP99Ms: 100, idleExtraMb: 20 } as const;
/**
 * "No measurable CPU": /proc counts in ticks of 10 ms, half a millisecond a
 * second over a 20 s window; more than two ticks a second's worth of increase
 * (1 ms of CPU a second, a thousandth of a core) is counted as measurable.
 */
export const IDLE_MEASURABLE_MS_PER_S = 1;

/** A load run's result with the service's CPU per request (bench/run.ts's Measured). */
export type Measured = LoadResult & { serverCpuUs: number | undefined };

/**
 * The CPU a service process and its Postgres backends use from the meter's
 * start to its stop, in µs: the service's from /proc; the backends' (those
 * connected to its database, read while the meter runs, so that one the
 * service drops meanwhile counts too) undefined where not measurable: on
 * PGlite the database runs in the service's process, and a server on
 * another machine has no /proc here. The backends rather than the whole
 * server: on a server others use too, they are what this service's
 * statements cost it, apart from theirs.
 */
export interface CpuMeter {
  stop: () => Promise<{ service: number | undefined; postgres: number | undefined }>;
}

/** What the delay part needs of the harness in bench/run.ts: the service it started. */
export interface ChangesHarness {
  url: string;
  adminKey: string;
  api: (method: string, path: string, body: unknown, key: string) => Promise<any>;
  progress: (text: string) => void;
  say: (text: string) => void;
  meter: () => Promise<CpuMeter>;
  seconds: number;
  warmup: number;
  /** Single writes a second while the Watch delay is measured. */
  rate: number;
}

/** A service process of one tree, started on the loaded data. */
export interface StartedService {
  url: string;
  pid: number | undefined;
  meter: () => Promise<CpuMeter>;
  /** Its resident set size now, in MB (undefined without /proc). */
  rssMb: () => number | undefined;
  /** Its garbage collections so far, from its /metrics (undefined with metrics off): major ones, and the time of all kinds. */
  gc: () => Promise<{ major: number; ms: number } | undefined>;
  /** Its V8 heap now, used and total, in MB, from its /metrics (undefined with metrics off). */
  heapMb: () => Promise<{ used: number; total: number } | undefined>;
  stop: () => Promise<void>;
}

/** What the idle part needs: a service of this tree started afresh on the loaded data. */
export interface IdleHarness {
  /** With these flags for node (IDLE_NODE_FLAGS). */
  start: (nodeFlags: string[]) => Promise<StartedService>;
  adminKey: string;
  api: (url: string, method: string, path: string, body: unknown, key: string) => Promise<any>;
  progress: (text: string) => void;
  /** Length of each idle window. */
  seconds: number;
  streams: number;
  streamsPerConnection: number;
}

/** What the writes part needs: a service of either tree on the same data, and the load generator. */
export interface WritesHarness {
  start: (variant: FeedVariant) => Promise<StartedService>;
  /** The load generator (bench/load.ts) on `spec` for `seconds`, with the CPU per request of process `pid`. */
  load: (spec: Omit<LoadSpec, "connections" | "seconds">, seconds: number, connections: number, pid: number | undefined) => Promise<Measured>;
  api: (url: string, method: string, path: string, body: unknown, key: string) => Promise<any>;
  progress: (text: string) => void;
  rounds: number;
  connections: number;
  seconds: number;
  warmup: number;
  /** The other tree's folder, for the report. */
  tree: string;
}

export type FeedVariant = "on" | "off";

// ---------------------------------------------------------------- small parts

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface Spread {
  count: number;
  p50: number;
  p99: number;
  max: number;
}

function spread(values: ArrayLike<number>): Spread {
  const sorted = Float64Array.from(values).sort();
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
  return { count: sorted.length, p50: at(0.5), p99: at(0.99), max: sorted[sorted.length - 1] ?? Number.NaN };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

/** The REST API of one service: method, path, body, key. */
type Api = (method: string, path: string, body: unknown, key: string) => Promise<any>;

/** An application of the bench's own with a one-resource catalog, and a key of its own (scopes read and write). */
async function createApp(api: Api, adminKey: string, appId: string): Promise<string> {
  await api("POST", "/api/v1/applications", { appId }, adminKey);
  const { key } = (await api("POST", `/api/v1/applications/${appId}/api-keys`, { name: "bench" }, adminKey)) as { key: string };
  await api("PUT", `/api/v1/applications/${appId}/resources`, CATALOG, key);
  return key;
}

/** The token after every change the application has now: a Watch from it sees only what comes next. */
async function currentToken(api: Api, key: string): Promise<string> {
  let after = "";
  for (;;) {
    const page = (await api("GET", `/api/v1/authorization/changes?pageSize=1000${after === "" ? "" : `&after=${after}`}`, undefined, key)) as {
      changes: unknown[];
      nextToken: string;
    };
    after = page.nextToken;
    if (page.changes.length < 1000) return after;
  }
}

const grant = (userId: string, resourceId: string) => ({ userId, resource: "document", resourceId, relation: "viewer" });

/**
 * A Watch stream over gRPC on `session`'s HTTP/2 connection, from `after`:
 * calls `onGrant` with each grant change's userId and the time it was read.
 * `ended` resolves when the stream ends, with whether it ended on its own
 * (not aborted: a failure or the service's silence bound).
 */
function watch(
  session: Http2SessionManager,
  url: string,
  key: string,
  after: string,
  signal: AbortSignal,
  onGrant: (userId: string, at: number) => void,
): { ended: Promise<{ early: boolean; error?: string }> } {
  const client = createClient(ChangeService, createGrpcTransport({ baseUrl: url, sessionManager: session }));
  const ended = (async () => {
    try {
      for await (const res of client.watch({ after }, { signal, headers: { "x-api-key": key } })) {
        const change = res.change?.change;
        if (change?.case === "grant") onGrant(change.value.userId, performance.now());
      }
      return { early: !signal.aborted };
    } catch (error) {
      return signal.aborted ? { early: false } : { early: true, error: String(error) };
    }
  })();
  return { ended };
}

/** POST of a JSON body on a keep-alive agent: the answer's status once its body has arrived (0: no answer). */
function post(agent: http.Agent, target: URL, path: string, key: string, body: string): Promise<number> {
  return new Promise((resolve) => {
    const req = http.request(
      {
        agent,
        host: target.hostname,
        port: target.port,
        method: "POST",
        path,
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body), "x-api-key": key },
      },
      (res) => {
        res.resume();
        res.once("end", () => resolve(res.statusCode ?? 0));
        res.once("error", () => resolve(0));
      },
    );
    req.once("error", () => resolve(0));
    req.end(body);
  });
}

/**
 * Calls `send(i)` for i = 0 .. total-1, write i at `i / rate` seconds from
 * the start, whatever the answers do (open loop: a slow answer does not
 * delay the next write, as a real application's writes would not wait).
 * Stops early when `behind()` says the service has fallen too far behind;
 * returns how many were sent.
 */
async function paced(total: number, rate: number, send: (i: number, due: number) => void, behind: () => boolean): Promise<number> {
  const t0 = performance.now();
  const due = (i: number) => t0 + (i * 1000) / rate;
  let next = 0;
  while (next < total) {
    const now = performance.now();
    while (next < total && due(next) <= now) {
      send(next, due(next));
      next++;
    }
    if (behind()) return next;
    if (next < total) await sleep(Math.max(0, due(next) - performance.now()));
  }
  return next;
}

/**
 * Writes unanswered, in seconds of the pace, past which the generator stops:
 * the delay from sending is then that long at least, the target missed
 * whatever follows, and a service slower than the pace (PGlite) would take
 * minutes to work through the rest.
 */
const BACKLOG_SECONDS = 3;

/** Resolves once `condition` holds; false if it did not within `ms` of no progress (as `progressOf` counts). */
async function until(condition: () => boolean, ms: number, progressOf: () => number = () => 0): Promise<boolean> {
  let last = progressOf();
  let since = performance.now();
  while (!condition()) {
    if (performance.now() - since > ms) return false;
    await sleep(5);
    const now = progressOf();
    if (now !== last) {
      last = now;
      since = performance.now();
    }
  }
  return true;
}

// ---------------------------------------------------------------- the delay from commit to a Watch client

export interface DelayFigures {
  rate: number;
  seconds: number;
  warmupSeconds: number;
  /** Writes planned (warm-up included); when the service fell BACKLOG_SECONDS behind, the generator stopped early. */
  planned: number;
  /** Answers a second over the run, from the first write's sending to the last answer. */
  answeredRate: number;
  /** Writes sent, answered 2xx, delivered exactly once, missing, delivered twice or more. */
  writes: number;
  answered: number;
  exactlyOnce: number;
  missing: number;
  duplicated: number;
  /** A grant delivered that no write of this run made (none expected). */
  strays: number;
  /** Every write answered and delivered exactly once, and the stream still open at the end. */
  exact: boolean;
  streamProblem: string | undefined;
  /** Over the measured writes (the warm-up's left out), ms. */
  afterAnswer: Spread;
  afterSend: Spread;
  answer: Spread;
  /** How late the generator sent each write against its schedule, ms. */
  lateness: Spread;
  /** CPU per write over the whole run (warm-up included), its delivery to the Watch included, µs. */
  serviceCpuUs: number | undefined;
  postgresCpuUs: number | undefined;
}

/** The delay part's application, and its key (the writes part writes to it too, on both trees). */
export const createDelayApp = (h: ChangesHarness) => createApp(h.api, h.adminKey, DELAY_APP_ID);

/** The grant of write i of the delay run: its userId names it, so its change is matched to it. */
const DELAY_PREFIX = "delay-";
const delayGrant = (i: number) => grant(`${DELAY_PREFIX}${i}`, `d-${i}`);

/** Each write of the delay run: when it was due and sent, its answer, and the Watch's deliveries of its change. */
class Ledger {
  readonly due: Float64Array;
  readonly sentAt: Float64Array;
  readonly answeredAt: Float64Array;
  readonly statuses: Uint16Array;
  readonly deliveredAt: Float64Array;
  readonly deliveries: Uint16Array;
  sent = 0;
  answered = 0;
  delivered = 0;
  /** Grants delivered that no write of the run made. */
  strays = 0;
  /** The oldest write not answered yet (see behind). */
  private oldest = 0;

  constructor(readonly total: number) {
    this.due = new Float64Array(total);
    this.sentAt = new Float64Array(total);
    this.answeredAt = new Float64Array(total);
    this.statuses = new Uint16Array(total);
    this.deliveredAt = new Float64Array(total);
    this.deliveries = new Uint16Array(total);
  }

  send(i: number, due: number): void {
    this.due[i] = due;
    this.sentAt[i] = performance.now();
    this.sent = i + 1;
  }

  answer(i: number, status: number): void {
    this.answeredAt[i] = performance.now();
    this.statuses[i] = status;
    this.answered++;
  }

  deliver(userId: string, at: number): void {
    const i = userId.startsWith(DELAY_PREFIX) ? Number(userId.slice(DELAY_PREFIX.length)) : Number.NaN;
    if (!Number.isInteger(i) || i < 0 || i >= this.sent) {
      this.strays++;
      return;
    }
    if (this.deliveries[i] === 0) {
      this.deliveredAt[i] = at;
      this.delivered++;
    }
    this.deliveries[i] = this.deliveries[i]! + 1;
  }

  /** Whether the oldest write unanswered was sent more than `ms` ago. */
  behind(ms: number): boolean {
    while (this.oldest < this.sent && this.answeredAt[this.oldest]! > 0) this.oldest++;
    return this.oldest < this.sent && performance.now() - this.sentAt[this.oldest]! > ms;
  }

  get ok(): number {
    let n = 0;
    for (let i = 0; i < this.sent; i++) if (this.statuses[i]! >= 200 && this.statuses[i]! < 300) n++;
    return n;
  }

  /** Writes delivered exactly once, not at all, more than once. */
  counts(): { exactlyOnce: number; missing: number; duplicated: number } {
    const c = { exactlyOnce: 0, missing: 0, duplicated: 0 };
    for (let i = 0; i < this.sent; i++) {
      if (this.deliveries[i] === 1) c.exactlyOnce++;
      else if (this.deliveries[i] === 0) c.missing++;
      else c.duplicated++;
    }
    return c;
  }

  /** `f` of each write from `from` on that was answered 2xx and delivered once. */
  spread(from: number, f: (i: number) => number): Spread {
    const out: number[] = [];
    for (let i = from; i < this.sent; i++) {
      if (this.deliveries[i] === 1 && this.statuses[i]! >= 200 && this.statuses[i]! < 300) out.push(f(i));
    }
    return spread(out);
  }
}

/**
 * A Watch from the current token, then single writes of new grants at
 * `rate` a second, open loop, for `warmup` + `seconds`: each write's
 * sending, answer and delivery times, matched on its grant's userId.
 */
export async function measureDelay(h: ChangesHarness, key: string): Promise<DelayFigures> {
  const token = await currentToken(h.api, key);
  const ledger = new Ledger(Math.round((h.warmup + h.seconds) * h.rate));
  const measuredFrom = Math.round(h.warmup * h.rate);
  let ready = false;
  const session = new Http2SessionManager(h.url);
  const stop = new AbortController();
  const stream = watch(session, h.url, key, token, stop.signal, (userId, at) => {
    if (userId === "ready") ready = true;
    else ledger.deliver(userId, at);
  });
  let streamProblem: string | undefined;
  // Any end before the run aborts it is a failure: a Watch ends on its own only after 52 s of silence.
  void stream.ended.then((end) => {
    if (end.early) streamProblem = end.error ?? "the Watch ended before the run did";
  });
  const target = new URL(h.url);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });
  try {
    // The stream is open and reading once a first write comes through it.
    await h.api("POST", WRITE_PATH, grant("ready", "ready"), key);
    if (!(await until(() => ready, 10_000))) throw new Error("changes: the Watch delivered no change within 10 s of a write");

    h.progress(`running: changes: Watch delay, ${h.rate} writes/s (${h.warmup} s warm-up, ${h.seconds} s)`);
    const meter = await h.meter();
    const sent = await paced(
      ledger.total,
      h.rate,
      (i, due) => {
        const body = JSON.stringify(delayGrant(i));
        ledger.send(i, due);
        void post(agent, target, WRITE_PATH, key, body).then((status) => ledger.answer(i, status));
      },
      () => ledger.behind(BACKLOG_SECONDS * 1000),
    );
    if (sent < ledger.total) {
      h.say(`changes: the service fell ${BACKLOG_SECONDS} s behind ${h.rate} writes/s; the generator stopped after ${sent.toLocaleString("en-US")} of ${ledger.total.toLocaleString("en-US")} writes`);
    }
    // Every answer, then every delivery (or 10 s with none new: what is missing is missing).
    await until(() => ledger.answered === sent, 30_000, () => ledger.answered);
    const lastAnswer = ledger.answeredAt.subarray(0, sent).reduce((a, b) => Math.max(a, b), 0);
    const ok = ledger.ok;
    await until(() => ledger.delivered >= ok, 10_000, () => ledger.delivered);
    await sleep(300); // a moment more, for a change delivered twice to show
    const used = await meter.stop();
    const counts = ledger.counts();
    const l = ledger;
    return {
      rate: h.rate,
      seconds: h.seconds,
      warmupSeconds: h.warmup,
      planned: l.total,
      answeredRate: sent / ((lastAnswer - l.sentAt[0]!) / 1000),
      writes: sent,
      answered: ok,
      ...counts,
      strays: l.strays,
      exact: ok === sent && counts.exactlyOnce === sent && l.strays === 0 && streamProblem === undefined,
      streamProblem,
      afterAnswer: l.spread(measuredFrom, (i) => l.deliveredAt[i]! - l.answeredAt[i]!),
      afterSend: l.spread(measuredFrom, (i) => l.deliveredAt[i]! - l.sentAt[i]!),
      answer: l.spread(measuredFrom, (i) => l.answeredAt[i]! - l.sentAt[i]!),
      lateness: l.spread(measuredFrom, (i) => l.sentAt[i]! - l.due[i]!),
      serviceCpuUs: used.service === undefined ? undefined : used.service / sent,
      postgresCpuUs: used.postgres === undefined ? undefined : used.postgres / sent,
    };
  } finally {
    stop.abort();
    session.abort();
    agent.destroy();
  }
}

// ---------------------------------------------------------------- idle streams

/** One idle window: the streams open through it, the CPU it took a second, and the service's garbage collections in it. */
export interface IdleWindow {
  streams: number;
  serviceMsPerS: number | undefined;
  postgresMsPerS: number | undefined;
  majorGcs: number | undefined;
  gcMs: number | undefined;
}

/** The service's memory at one moment: resident size, and V8's heap used and total (MB). */
export interface MemoryAt {
  rssMb: number | undefined;
  heapUsedMb: number | undefined;
  heapTotalMb: number | undefined;
}

export interface IdleFigures {
  streams: number;
  connections: number;
  seconds: number;
  /** From the service's start until no garbage collection for SETTLED_MS (at most SETTLE_MAX_MS). */
  settleSeconds: number;
  /** No streams, one, then all of them open: nobody writes meanwhile. */
  windows: IdleWindow[];
  /** The service's memory: before opening them all, once all were open, at the end of their window. */
  before: MemoryAt | undefined;
  open: MemoryAt | undefined;
  end: MemoryAt | undefined;
  /** Every stream delivered the write made before its window and the one after it (all open and reading throughout). */
  allLive: boolean;
  problem: string | undefined;
}

/** Watch streams on `connections` HTTP/2 connections from `token`, each counting the idle-mark grants it delivers. */
class IdleStreams {
  private readonly sessions: Http2SessionManager[];
  private readonly stop = new AbortController();
  readonly marks: Uint16Array;
  problem: string | undefined;

  constructor(url: string, key: string, token: string, count: number, perConnection: number) {
    this.sessions = Array.from({ length: Math.ceil(count / perConnection) }, () => new Http2SessionManager(url));
    setMaxListeners(count + 10, this.stop.signal); // one listener per stream: they end together
    this.marks = new Uint16Array(count);
    for (let s = 0; s < count; s++) {
      const { ended } = watch(this.sessions[Math.floor(s / perConnection)]!, url, key, token, this.stop.signal, (userId) => {
        if (userId.startsWith("idle-mark-")) this.marks[s]!++;
      });
      void ended.then((end) => {
        if (end.early) this.problem ??= `stream ${s} ended: ${end.error ?? "on its own (the service's silence bound?)"}`;
      });
    }
  }

  get connections(): number {
    return this.sessions.length;
  }

  /** Whether every stream has delivered `k` marks (all written since the token), within 15 s. */
  delivered(k: number): Promise<boolean> {
    return until(() => this.marks.every((m) => m >= k), 15_000);
  }

  close(): void {
    this.stop.abort();
    for (const session of this.sessions) session.abort();
  }
}

/** A service settled: no major garbage collection for this long (a fresh process collects what its start left). */
const SETTLED_MS = 10_000;
const SETTLE_MAX_MS = 60_000;

/**
 * Waits until `s` has made no major garbage collection for SETTLED_MS, or
 * SETTLE_MAX_MS passed; the seconds it waited. Minor ones do not count:
 * reading /metrics, as this does, makes some.
 */
async function settle(s: StartedService, progress: (text: string) => void): Promise<number> {
  const t = performance.now();
  let last = await s.gc();
  let quietSince = performance.now();
  while (performance.now() - quietSince < SETTLED_MS && performance.now() - t < SETTLE_MAX_MS) {
    progress(`running: changes: the idle streams' service settling (${((performance.now() - t) / 1000).toFixed(0)} s)`);
    await sleep(2_000);
    const now = await s.gc();
    if (now === undefined) break; // metrics off: nothing to wait for
    if (last === undefined || now.major !== last.major) quietSince = performance.now();
    last = now;
  }
  return (performance.now() - t) / 1000;
}

const memoryAt = async (s: StartedService): Promise<MemoryAt> => {
  const heap = await s.heapMb();
  return { rssMb: s.rssMb(), heapUsedMb: heap?.used, heapTotalMb: heap?.total };
};

/**
 * The idle part's service runs without V8's memory reducer: in its first
 * minute a fresh process otherwise makes compacting collections some 20 s
 * apart (seen here at 3, 25 and 49 s after the start, on a service doing
 * nothing), which land in whichever window and outweigh the milliseconds a
 * second compared. They follow any drop in activity, streams or not; every
 * other collection is counted, and shown by window.
 */
const IDLE_NODE_FLAGS = ["--no-memory-reducer"];

/**
 * Watch streams on an application with no writes: the service's CPU (and
 * its Postgres backends') over a window with none, one with a single stream,
 * and one with all of them open, on a service started for it and let settle
 * first (one that measured other things before, or had just started, would
 * spend these windows collecting garbage: V8 shrinks its heap once a process
 * goes quiet); its garbage collections in each window, and its memory before
 * and after opening them. A grant written before each window with streams and one
 * after it, which every stream must deliver, shows them all open and
 * reading throughout (a Watch with nothing to send ends after 0.8 of
 * HTTP_IDLE_TIMEOUT_MS, 52 s by default: the windows stay below it).
 */
export async function measureIdle(h: IdleHarness): Promise<IdleFigures> {
  const s = await h.start(IDLE_NODE_FLAGS);
  const api: Api = (method, path, body, key) => h.api(s.url, method, path, body, key);
  let marks = 0;
  const mark = async () => api("POST", WRITE_PATH, grant(`idle-mark-${++marks}`, `mark-${marks}`), key);
  const key = await createApp(api, h.adminKey, IDLE_APP_ID);
  const token = await currentToken(api, key);
  const windows: IdleWindow[] = [];
  let problem: string | undefined;
  /** Opens `count` streams, marks, runs a window, marks again: whether every stream delivered every mark; `during` reads the memory. */
  const withStreams = async (count: number, during: (phase: "open" | "end") => Promise<void>) => {
    const streams = new IdleStreams(s.url, key, token, count, h.streamsPerConnection);
    try {
      h.progress(`running: changes: opening ${count} Watch streams`);
      // Every stream reads from the application's first token: it delivers every mark written so far.
      await mark();
      let live = await streams.delivered(marks);
      await sleep(1_000); // the mark's deliveries done
      await during("open");
      windows.push(await idleWindow(h, s, count, `${count} Watch streams open, idle`));
      await during("end");
      await mark();
      live = (await streams.delivered(marks)) && live && streams.problem === undefined;
      if (!live) problem ??= streams.problem ?? `of ${count} streams, ${streams.marks.filter((m) => m < marks).length} did not deliver every write`;
      return { live, connections: streams.connections };
    } finally {
      streams.close();
    }
  };
  try {
    // The Watch path used once first: its first use compiles and allocates what a window would count.
    const warm = new IdleStreams(s.url, key, token, h.streamsPerConnection, h.streamsPerConnection);
    await mark();
    const warmed = await warm.delivered(marks);
    warm.close();
    if (!warmed) problem = "the warm-up's streams did not deliver a write";
    const settleSeconds = await settle(s, h.progress);
    windows.push(await idleWindow(h, s, 0, "no Watch streams, idle"));
    const one = await withStreams(1, async () => undefined);
    const memory: Partial<Record<"before" | "open" | "end", MemoryAt>> = { before: await memoryAt(s) };
    const all = await withStreams(h.streams, async (phase) => {
      memory[phase] = await memoryAt(s);
    });
    return {
      streams: h.streams,
      connections: all.connections,
      seconds: h.seconds,
      settleSeconds,
      windows,
      before: memory.before,
      open: memory.open,
      end: memory.end,
      allLive: warmed && one.live && all.live,
      problem,
    };
  } finally {
    await s.stop();
  }
}

/** `seconds` of doing nothing with `streams` open: the CPU a second, and the garbage collections meanwhile. */
async function idleWindow(h: IdleHarness, s: StartedService, streams: number, label: string): Promise<IdleWindow> {
  // /metrics is read outside the window: answering it costs the service CPU.
  const gcBefore = await s.gc();
  const meter = await s.meter();
  const t = performance.now();
  for (let k = 0; k < h.seconds; k++) {
    h.progress(`running: changes: ${label} (${k}/${h.seconds} s)`);
    await sleep(Math.max(0, t + (k + 1) * 1000 - performance.now()));
  }
  const used = await meter.stop();
  const elapsed = (performance.now() - t) / 1000;
  const gcAfter = await s.gc();
  const perS = (us: number | undefined) => (us === undefined ? undefined : us / 1000 / elapsed);
  return {
    streams,
    serviceMsPerS: perS(used.service),
    postgresMsPerS: perS(used.postgres),
    majorGcs: gcBefore === undefined || gcAfter === undefined ? undefined : gcAfter.major - gcBefore.major,
    gcMs: gcBefore === undefined || gcAfter === undefined ? undefined : gcAfter.ms - gcBefore.ms,
  };
}

// ---------------------------------------------------------------- writes with the feed on and off

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

// ---------------------------------------------------------------- the report

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
