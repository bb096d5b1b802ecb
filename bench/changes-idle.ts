/**
 * The changes group's idle streams: 100 idle Watch streams (10 HTTP/2
 * connections of 10) on an application nobody writes to, on a service of
 * this tree started afresh; the service's CPU over windows with no streams
 * and with them open, and its memory before and after opening them.
 */
import { setMaxListeners } from "node:events";
import { Http2SessionManager } from "@connectrpc/connect-node";
import { createApp, currentToken, grant, IDLE_APP_ID, sleep, until, watch, WRITE_PATH, type Api, type IdleHarness, type StartedService } from "./changes.js";

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
