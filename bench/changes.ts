/**
 * The changes group (the change feed; docs/performance.md, "The change
 * feed"): three speed targets.
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
 * This file holds what the parts share and the delay; the idle streams are
 * in changes-idle.ts, the writes in changes-writes.ts, the tables in
 * changes-report.ts, and groups/changes.ts runs them. What they need of the
 * harness (the API, the load generator, the service's CPU and memory,
 * starting a service of either tree) comes in as a ChangesHarness, an
 * IdleHarness and a WritesHarness.
 */
import http from "node:http";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { ChangeService } from "../gen/authz/v1/changes_pb.js";
import type { LoadResult, LoadSpec } from "./load.js";

export const DELAY_APP_ID = "bench-changes";
export const IDLE_APP_ID = "bench-changes-idle";
const CATALOG = { resources: [{ resource: "document", description: "a document (change feed benchmark)", actions: ["read", "list"] }] };
export const WRITE_PATH = "/api/v1/authorization/relationships";
export const BULK_PATH = "/api/v1/authorization/relationships/bulk";
export const BULK_SIZE = 5_000;
/** Bulk calls measured per service start (the median is the figure), after one to warm. */
export const BULK_CALLS = 7;
/** The issue's targets. */
export const TARGETS = { writeRatio: 0.8, delayP99Ms: 100, idleExtraMb: 20 } as const;
/**
 * "No measurable CPU": /proc counts in ticks of 10 ms, half a millisecond a
 * second over a 20 s window; more than two ticks a second's worth of increase
 * (1 ms of CPU a second, a thousandth of a core) is counted as measurable.
 */
export const IDLE_MEASURABLE_MS_PER_S = 1;

/** A load run's result with the service's CPU per request (harness/drive.ts's Measured). */
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

/** What the delay part needs of the harness: the service it started. */
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

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

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

export const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
export const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

/** The REST API of one service: method, path, body, key. */
export type Api = (method: string, path: string, body: unknown, key: string) => Promise<any>;

/** An application of the bench's own with a one-resource catalog, and a key of its own (scopes read and write). */
export async function createApp(api: Api, adminKey: string, appId: string): Promise<string> {
  await api("POST", "/api/v1/applications", { appId }, adminKey);
  const { key } = (await api("POST", `/api/v1/applications/${appId}/api-keys`, { name: "bench" }, adminKey)) as { key: string };
  await api("PUT", `/api/v1/applications/${appId}/resources`, CATALOG, key);
  return key;
}

/** The token after every change the application has now: a Watch from it sees only what comes next. */
export async function currentToken(api: Api, key: string): Promise<string> {
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

export const grant = (userId: string, resourceId: string) => ({ userId, resource: "document", resourceId, relation: "viewer" });

/**
 * A Watch stream over gRPC on `session`'s HTTP/2 connection, from `after`:
 * calls `onGrant` with each grant change's userId and the time it was read.
 * `ended` resolves when the stream ends, with whether it ended on its own
 * (not aborted: a failure or the service's silence bound).
 */
export function watch(
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
export const BACKLOG_SECONDS = 3;

/** Resolves once `condition` holds; false if it did not within `ms` of no progress (as `progressOf` counts). */
export async function until(condition: () => boolean, ms: number, progressOf: () => number = () => 0): Promise<boolean> {
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
