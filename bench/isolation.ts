/**
 * The isolation group (docs/limits.md, "One application cannot hurt
 * another"; docs/performance.md, "Isolation"): one application attacks
 * through the change feed, another is measured.
 *
 * - Writes with 1,000 readers waiting: single grant writes (closed loop,
 *   4 in flight) with no reader waiting, with 1,000 reads of another
 *   application waiting (held: nothing wakes them), and with 1,000 readers
 *   of the writer's own application, each waiting again as soon as it is
 *   answered (every write wakes them all). Alternated, `rounds` times.
 * - Another application's checks (REST, 10 in flight) with no attack, with
 *   1,000 waiting reads, and with 1,000 Watch streams (10 HTTP/2
 *   connections of 100) that read their first message and then never read,
 *   from one application's three keys (the bounds per key and per
 *   application admit some and refuse the rest): p50 and p99, and the
 *   service's resident memory before, during and after.
 * - A revoked key's streams: 100 open, the key deleted, how long until the
 *   last has ended with UNAUTHENTICATED.
 *
 * What it needs of the harness comes in as an IsolationHarness, which
 * groups/isolation.ts fills in from the run's state.
 */
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { setMaxListeners } from "node:events";
import http from "node:http";
import { ChangeService } from "../gen/authz/v1/changes_pb.js";
import type { LoadResult, LoadSpec } from "./load.js";

const ATTACKER = "bench-iso-attacker";
const VICTIM = "bench-iso-victim";
const CATALOG = { resources: [{ resource: "document", description: "a document (isolation benchmark)", actions: ["read"], relations: [{ name: "viewer", actions: ["read"] }] }] };
const WRITE_PATH = "/api/v1/authorization/relationships";
const READERS = 1_000;
const STREAM_CONNECTIONS = 10;
const STREAMS_PER_CONNECTION = 100;
const REVOKED_STREAMS = 100;
/** The issue's target: another application's checks keep their p99 under this during any one attack. */
export const VICTIM_P99_MS = 250;

export type Measured = LoadResult & { serverCpuUs: number | undefined };

export interface IsolationHarness {
  url: string;
  adminKey: string;
  api: (method: string, path: string, body: unknown, key: string) => Promise<any>;
  load: (spec: Omit<LoadSpec, "connections" | "seconds">, seconds: number, connections: number) => Promise<Measured>;
  /** The service's resident size now, MB (undefined: not measurable). */
  rssMb: () => number | undefined;
  /** The service's V8 heap in use now, MB, from its /metrics (undefined: metrics off). */
  heapMb: () => Promise<number | undefined>;
  progress: (text: string) => void;
  seconds: number;
  rounds: number;
}

export interface IsolationFigures {
  /** Single writes by condition, every round. */
  writes: { condition: WriteCondition; result: Measured }[];
  /** Another application's checks by attack. */
  victim: {
    attack: string;
    result: Measured;
    rssMb: { before?: number; during?: number; after?: number };
    heapMb: { before?: number; during?: number; after?: number };
    note: string;
  }[];
  /** A revoked key's streams: how many were open, how long until all had ended, and how. */
  revoked: { streams: number; endedMs: number; codes: Record<string, number> };
}

type WriteCondition = "no reader waiting" | "1,000 reads of another application waiting" | "1,000 readers of the writer's application, woken by each write";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function createApp(h: IsolationHarness, appId: string, keys: number): Promise<string[]> {
  await h.api("POST", "/api/v1/applications", { appId }, h.adminKey);
  await h.api("PUT", `/api/v1/applications/${appId}/resources`, CATALOG, h.adminKey);
  const made: string[] = [];
  for (let i = 0; i < keys; i++) made.push((await h.api("POST", `/api/v1/applications/${appId}/api-keys`, { name: `bench ${i}` }, h.adminKey)).key as string);
  return made;
}

/**
 * Readers of the change feed that wait (waitMs) and, with `again`, wait
 * again from their new token each time they are answered, until stop().
 * Over HTTP/1.1, a connection each, as long polls usually come.
 */
async function waitingReaders(h: IsolationHarness, keys: string[], count: number, again: boolean) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: count + 10 });
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  // The position now, read once and shared: each reader starts there and waits.
  const start = await tokenNow(h, keys[0]!);
  let answered = 0;
  let refused = 0;
  const one = async (key: string) => {
    let token = start;
    while (!controller.signal.aborted) {
      try {
        const res = await get(`${h.url}/api/v1/authorization/changes?after=${token}&waitMs=25000&pageSize=1000`, key, agent, controller.signal);
        const body = JSON.parse(res.body) as { nextToken?: string };
        if (res.status === 429) {
          refused++;
          return;
        }
        answered++;
        if (body.nextToken !== undefined) token = body.nextToken;
        if (!again) await sleep(10);
      } catch {
        return;
      }
    }
  };
  const all = Array.from({ length: count }, (_, i) => one(keys[i % keys.length]!));
  return {
    get answered() {
      return answered;
    },
    get refused() {
      return refused;
    },
    async stop() {
      controller.abort();
      await Promise.allSettled(all);
      agent.destroy();
    },
  };
}

/** The feed's position after every change committed so far: pages read to the end. */
async function tokenNow(h: IsolationHarness, key: string): Promise<string> {
  let token = "";
  for (;;) {
    const page = (await h.api("GET", `/api/v1/authorization/changes?pageSize=1000${token === "" ? "" : `&after=${token}`}`, undefined, key)) as {
      changes: unknown[];
      nextToken: string;
    };
    token = page.nextToken;
    if (page.changes.length < 1000) return token;
  }
}

/** A GET on `agent` (a connection of its own per request in flight). */
function get(url: string, key: string, agent: http.Agent, signal: AbortSignal): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { agent, headers: { "x-api-key": key }, signal }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }));
      res.on("error", reject);
    });
    req.on("error", reject);
  });
}

/** Watch streams that read their first message and then never read again, until close(). */
async function unreadStreams(h: IsolationHarness, keys: string[], connections: number, perConnection: number) {
  const sessions = Array.from({ length: connections }, () => new Http2SessionManager(h.url));
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  const codes: Record<string, number> = {};
  const opened = await Promise.all(
    Array.from({ length: connections * perConnection }, async (_, i) => {
      const client = createClient(ChangeService, createGrpcTransport({ baseUrl: h.url, sessionManager: sessions[i % connections]! }));
      try {
        const it = client.watch({}, { headers: { "x-api-key": keys[i % keys.length]! }, signal: controller.signal })[Symbol.asyncIterator]();
        const first = await it.next();
        return first.done === true ? "ended" : "open";
      } catch (error) {
        const name = Code[ConnectError.from(error).code];
        codes[name] = (codes[name] ?? 0) + 1;
        return name;
      }
    }),
  );
  return {
    open: opened.filter((o) => o === "open").length,
    codes,
    async close() {
      controller.abort();
      for (const s of sessions) s.abort();
    },
  };
}

export async function measureIsolation(h: IsolationHarness): Promise<IsolationFigures> {
  const attackerKeys = await createApp(h, ATTACKER, 3);
  const [victimKey] = await createApp(h, VICTIM, 1);
  const [writerKey] = await createApp(h, `${ATTACKER}-writer`, 1);
  // Changes for the streams to send: more than their windows take.
  const writes = Array.from({ length: 1_000 }, (_, i) => ({ userId: `seed-${i}-${"x".repeat(100)}`, resource: "document", resourceId: "seed", relation: "viewer" }));
  await h.api("POST", `${WRITE_PATH}/bulk`, { writes }, attackerKeys[0]!);
  await h.api("POST", WRITE_PATH, { userId: "v", resource: "document", resourceId: "v", relation: "viewer" }, victimKey!);

  const figures: IsolationFigures = { writes: [], victim: [], revoked: { streams: 0, endedMs: 0, codes: {} } };

  // Writes, alternated by condition.
  const writeSpec = (key: string) => ({
    kind: "rest" as const,
    url: h.url,
    method: "POST",
    path: WRITE_PATH,
    key,
    bodies: [{ userId: "w-[<id>]", resource: "document", resourceId: "w", relation: "viewer" }],
    idReplacement: true,
  });
  const conditions: WriteCondition[] = ["no reader waiting", "1,000 reads of another application waiting", "1,000 readers of the writer's application, woken by each write"];
  for (let round = 0; round < h.rounds; round++) {
    for (const condition of conditions) {
      h.progress(`running: isolation: writes, ${condition} (round ${round + 1}/${h.rounds})`);
      const readers =
        condition === "no reader waiting"
          ? undefined
          : condition === "1,000 reads of another application waiting"
            ? await waitingReaders(h, attackerKeys.slice(0, 2), READERS, false)
            : await waitingReaders(h, [writerKey!], READERS, true);
      if (readers !== undefined) await sleep(2_000);
      const result = await h.load(writeSpec(writerKey!), h.seconds, 4);
      figures.writes.push({ condition, result });
      await readers?.stop();
    }
  }

  // Another application's checks, by attack.
  const checkSpec = {
    kind: "rest" as const,
    url: h.url,
    method: "POST",
    path: "/api/v1/authorization/check",
    key: victimKey!,
    bodies: [{ userId: "v", resource: "document", resourceId: "v", action: "read" }],
  };
  const victim = async (attack: string, start: () => Promise<{ stop: () => Promise<void>; note: string } | undefined>) => {
    h.progress(`running: isolation: another application's checks, ${attack}`);
    const before = h.rssMb();
    const heapBefore = await h.heapMb();
    const running = await start();
    await sleep(1_000);
    const during = h.rssMb();
    const heapDuring = await h.heapMb();
    const result = await h.load(checkSpec, h.seconds, 10);
    await running?.stop();
    await sleep(3_000);
    figures.victim.push({
      attack,
      result,
      rssMb: { before, during, after: h.rssMb() },
      heapMb: { before: heapBefore, during: heapDuring, after: await h.heapMb() },
      note: running?.note ?? "",
    });
  };
  await victim("none", async () => undefined);
  await victim("1,000 reads of the feed waiting", async () => {
    const readers = await waitingReaders(h, attackerKeys.slice(0, 2), READERS, false);
    await sleep(2_000);
    return { stop: () => readers.stop(), note: `${READERS - readers.refused} waiting, ${readers.refused} refused (429)` };
  });
  await victim("1,000 readers woken by the attacker's own writes, 4 in flight", async () => {
    const readers = await waitingReaders(h, attackerKeys.slice(0, 2), READERS, true);
    await sleep(2_000);
    let writing = true;
    let written = 0;
    const writers = Array.from({ length: 4 }, async (_, w) => {
      while (writing) {
        await h.api("POST", WRITE_PATH, { userId: `fan-${w}-${written++}`, resource: "document", resourceId: "fan", relation: "viewer" }, attackerKeys[2]!);
      }
    });
    return {
      stop: async () => {
        writing = false;
        await Promise.all(writers);
        await readers.stop();
      },
      get note() {
        return `${written} writes, ${readers.answered} answers to the readers`;
      },
    };
  });
  await victim(`${STREAM_CONNECTIONS * STREAMS_PER_CONNECTION} Watch streams left unread`, async () => {
    const streams = await unreadStreams(h, attackerKeys, STREAM_CONNECTIONS, STREAMS_PER_CONNECTION);
    const refused = Object.entries(streams.codes).map(([code, n]) => `${n} ${code}`).join(", ");
    return { stop: () => streams.close(), note: `${streams.open} open${refused === "" ? "" : `, ${refused}`}` };
  });
  await victim("none (again)", async () => undefined);

  // A revoked key's streams.
  h.progress("running: isolation: a revoked key's streams");
  const made = await h.api("POST", `/api/v1/applications/${ATTACKER}/api-keys`, { name: "revoked" }, h.adminKey);
  const session = new Http2SessionManager(h.url);
  const client = createClient(ChangeService, createGrpcTransport({ baseUrl: h.url, sessionManager: session }));
  const ended: Promise<string>[] = [];
  for (let i = 0; i < REVOKED_STREAMS; i++) {
    ended.push(
      (async () => {
        try {
          for await (const _ of client.watch({ after: "" }, { headers: { "x-api-key": made.key as string } })) {
            // Reading on: the stream ends only by the revocation.
          }
          return "OK";
        } catch (error) {
          return Code[ConnectError.from(error).code];
        }
      })(),
    );
  }
  await sleep(3_000);
  const deleted = performance.now();
  // Deleted through this service: its readers of the key are looked up at once (another replica's deletion within STREAM_KEY_RECHECK_MS).
  await h.api("DELETE", `/api/v1/applications/${ATTACKER}/api-keys/${made.keyId as string}`, undefined, h.adminKey);
  const codes: Record<string, number> = {};
  for (const code of await Promise.all(ended)) codes[code] = (codes[code] ?? 0) + 1;
  figures.revoked = { streams: REVOKED_STREAMS, endedMs: performance.now() - deleted, codes };
  session.abort();
  return figures;
}

/** The report's lines: the tables docs/performance.md shows. */
export function isolationLines(f: IsolationFigures): string[] {
  const lines = ["", `| isolation: single writes, 4 in flight (${f.writes.length / 3} rounds, medians) | req/s | p50 ms | p99 ms | service CPU µs | ÷ no reader |`, "|---|---:|---:|---:|---:|---:|"];
  const by = (c: WriteCondition) => f.writes.filter((w) => w.condition === c).map((w) => w.result);
  const base = by("no reader waiting");
  const baseRps = median(base.map((r) => r.rps));
  for (const condition of new Set(f.writes.map((w) => w.condition))) {
    const rs = by(condition);
    const cpu = rs.map((r) => r.serverCpuUs).filter((x): x is number => x !== undefined);
    lines.push(
      `| ${condition} | ${Math.round(median(rs.map((r) => r.rps)))} | ${median(rs.map((r) => r.p50)).toFixed(2)} | ${median(rs.map((r) => r.p99)).toFixed(2)} | ${cpu.length === 0 ? "" : Math.round(median(cpu))} | ${(median(rs.map((r) => r.rps)) / baseRps).toFixed(2)} |`,
    );
  }
  lines.push("", `| isolation: another application's checks, 10 in flight, during one attack | req/s | p50 ms | p99 ms | target p99 | RSS MB before / during / after | V8 heap MB before / during / after | the attack |`, "|---|---:|---:|---:|---|---|---|---|");
  for (const v of f.victim) {
    const mb = (m: { before?: number; during?: number; after?: number }) => [m.before, m.during, m.after].map((x) => (x === undefined ? "?" : Math.round(x))).join(" / ");
    lines.push(
      `| ${v.attack} | ${Math.round(v.result.rps)} | ${v.result.p50.toFixed(2)} | ${v.result.p99.toFixed(2)} | < ${VICTIM_P99_MS}: ${v.result.p99 < VICTIM_P99_MS ? "met" : "NOT met"} | ${mb(v.rssMb)} | ${mb(v.heapMb)} | ${v.note} |`,
    );
  }
  const codes = Object.entries(f.revoked.codes).map(([c, n]) => `${n} ${c}`).join(", ");
  lines.push("", `| isolation: a revoked key's open streams | figure |`, "|---|---|", `| ${f.revoked.streams} streams of one key, the key deleted: all ended within | ${Math.round(f.revoked.endedMs)} ms (${codes}) |`);
  return lines;
}

/** Whether every target of the group was met (the victim's p99 in each attack, every revoked stream ended unauthenticated). */
export function isolationMet(f: IsolationFigures): boolean {
  return f.victim.every((v) => v.result.p99 < VICTIM_P99_MS) && (f.revoked.codes.Unauthenticated ?? 0) === f.revoked.streams;
}
