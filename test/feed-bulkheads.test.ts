/**
 * One application's readers of the change feed cannot take the service from
 * another (docs/limits.md, "One application cannot hurt another"), on both
 * engines, through a real port:
 * - reads waiting for a change (waitMs) hold no call place and no
 *   connection: with the embedded default of two places, ten of them leave
 *   another application's writes, lists and reads answering at once, and a
 *   write of their own application wakes them;
 * - waiting reads and Watch streams are bounded per key and per
 *   application (429, RESOURCE_EXHAUSTED), and another application is not
 *   counted with them;
 * - a revoked key ends its open streams and waiting reads with
 *   unauthenticated, whether it was deleted through this server (at once) or
 *   through another one (within STREAM_KEY_RECHECK_MS), and nothing written
 *   after is delivered;
 * - a client closing its stream is logged at debug, never as an error;
 * - a hundred streams that stop reading leave the pool and another
 *   application's checks and writes alone.
 */
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ChangeService } from "../gen/authz/v1/changes_pb.js";
import { startPortcullis } from "../src/app.js";
import type { Config } from "../src/config.js";
import type { Db, Queryable } from "../src/store/db.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { restCaller, startTestService, testConfig, type TestService } from "./support/service.js";
import { createApp, expectStatus } from "./helpers/authz.js";

const CATALOG = [{ resource: "document", description: "", actions: ["read"], relations: [{ name: "viewer", actions: ["read"] }] }];

const BULKHEADS: Config["bulkheads"] = {
  runningCallsPerApp: 1,
  waitingCallsPerApp: 1_000,
  feedWaitsPerKey: 12,
  feedWaitsPerApp: 15,
  watchStreamsPerKey: 3,
  watchStreamsPerApp: 4,
  streamKeyRecheckMs: 200,
};
// The embedded default's two places; the probe for other servers' writes a minute apart.
const LIMITS: Partial<Config> = { maxRunningCalls: 2, bulkheads: BULKHEADS, changesPollMs: 60_000 };

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(what: string, done: () => boolean, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await sleep(5);
  }
}

/** What a Watch ended with: the messages it got, and its error's code name (or "ok"). */
async function watchUntilEnd(service: TestService, key: string, after: string, signal?: AbortSignal) {
  const client = createClient(ChangeService, createGrpcTransport({ baseUrl: service.url }));
  const got: string[] = [];
  try {
    for await (const message of client.watch({ after }, { headers: { "x-api-key": key }, signal })) {
      const change = message.change?.change;
      got.push(change?.case === "grant" ? change.value.userId : String(message.change?.kind));
    }
    return { got, end: "ok", message: "" };
  } catch (error) {
    const e = ConnectError.from(error);
    return { got, end: Code[e.code], message: e.rawMessage };
  }
}

describe.each(engines)("the change feed's readers hold nothing and end with their key (%s)", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let keyA: string;
  let keyB: string;
  let gauge: ReturnType<typeof feedReadsGauge>;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    gauge = feedReadsGauge(database.db);
    service = await startTestService(database.db, LIMITS);
    keyA = await createApp(service, "busy", CATALOG);
    keyB = await createApp(service, "quiet", CATALOG);
  }, 120_000);

  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  const tokenNow = async (key: string) => (await service.call("GET", "/api/v1/authorization/changes?pageSize=1000", { key })).body.nextToken as string;
  const write = (key: string, userId: string, resourceId = "d1") =>
    service.call("POST", "/api/v1/authorization/relationships", { key, body: { userId, resource: "document", resourceId, relation: "viewer" } });
  const newKey = async (appId: string) => {
    const res = await service.call("POST", `/api/v1/applications/${appId}/api-keys`, { body: { name: "another" } });
    expectStatus(res, 201);
    return { key: res.body.key as string, keyId: res.body.keyId as string };
  };

  it("ten waiting reads hold no place: another application's writes, lists and reads answer at once; a write of their own wakes them", async () => {
    const from = await tokenNow(keyA);
    const waiting = Array.from({ length: 10 }, () => service.call("GET", `/api/v1/authorization/changes?after=${from}&waitMs=10000`, { key: keyA }));
    await until("ten readers wait", () => service.waitingReaders() === 10);
    const started = Date.now();
    expectStatus(await write(keyB, "bob"), 201);
    expectStatus(await service.call("GET", "/api/v1/authorization/relationships?resource=document", { key: keyB }), 200);
    expectStatus(await service.call("GET", "/api/v1/authorization/changes", { key: keyB }), 200);
    expectStatus(await service.call("GET", "/api/v1/applications/quiet/roles", { key: keyB }), 200);
    // Behind the waits (10 s) these took 10 s: now they take what they cost.
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(service.waitingReaders()).toBe(10);
    const woken = Date.now();
    expectStatus(await write(keyA, "alice"), 201);
    const answers = await Promise.all(waiting);
    expect(Date.now() - woken).toBeLessThan(3_000);
    for (const answer of answers) {
      expectStatus(answer, 200);
      expect(answer.body.changes.map((c: { grant: { userId: string } }) => c.grant.userId)).toEqual(["alice"]);
    }
  });

  it("waiting reads are bounded per key and per application (429 naming the bound); another application is not counted", async () => {
    const from = await tokenNow(keyA);
    const second = await newKey("busy");
    const wait = (key: string) => service.call("GET", `/api/v1/authorization/changes?after=${from}&waitMs=10000`, { key });
    const first = Array.from({ length: BULKHEADS.feedWaitsPerKey }, () => wait(keyA));
    await until("the key's waits", () => service.waitingReaders() === BULKHEADS.feedWaitsPerKey);
    const overKey = await wait(keyA);
    expectStatus(overKey, 429);
    expect(overKey.body.code).toBe("resource_exhausted");
    expect(overKey.body.message).toContain(`this API key has ${BULKHEADS.feedWaitsPerKey} reads of the change feed waiting`);
    const others = Array.from({ length: BULKHEADS.feedWaitsPerApp - BULKHEADS.feedWaitsPerKey }, () => wait(second.key));
    await until("the application's waits", () => service.waitingReaders() === BULKHEADS.feedWaitsPerApp);
    const overApp = await wait(second.key);
    expectStatus(overApp, 429);
    expect(overApp.body.message).toContain(`this application has ${BULKHEADS.feedWaitsPerApp} reads of the change feed waiting`);
    // A read that does not wait is no waiting reader, and another application still waits.
    expectStatus(await service.call("GET", `/api/v1/authorization/changes?after=${from}`, { key: keyA }), 200);
    const quiet = service.call("GET", `/api/v1/authorization/changes?after=${await tokenNow(keyB)}&waitMs=10000`, { key: keyB });
    await until("the other application's wait", () => service.waitingReaders() === BULKHEADS.feedWaitsPerApp + 1);
    expectStatus(await write(keyA, "carol"), 201);
    for (const answer of await Promise.all([...first, ...others])) expectStatus(answer, 200);
    // Their places are free again.
    const fresh = await tokenNow(keyA);
    const again = service.call("GET", `/api/v1/authorization/changes?after=${fresh}&waitMs=10000`, { key: keyA });
    await until("a wait again", () => service.waitingReaders() === 2);
    expectStatus(await write(keyB, "dave"), 201);
    expectStatus(await quiet, 200);
    expectStatus(await write(keyA, "erin"), 201);
    expectStatus(await again, 200);
  });

  it("Watch streams are bounded per key and per application (RESOURCE_EXHAUSTED); one that ends frees its place", async () => {
    const from = await tokenNow(keyA);
    const second = await newKey("busy");
    const controllers: AbortController[] = [];
    const open = (key: string) => {
      const controller = new AbortController();
      controllers.push(controller);
      return watchUntilEnd(service, key, from, controller.signal);
    };
    const streams = Array.from({ length: BULKHEADS.watchStreamsPerKey }, () => open(keyA));
    await until("the key's streams", () => service.waitingReaders() === BULKHEADS.watchStreamsPerKey);
    const overKey = await open(keyA);
    expect(overKey.end).toBe("ResourceExhausted");
    expect(overKey.message).toContain(`this API key has ${BULKHEADS.watchStreamsPerKey} Watch streams open`);
    const fourth = open(second.key);
    await until("the application's streams", () => service.waitingReaders() === BULKHEADS.watchStreamsPerApp);
    const overApp = await open(second.key);
    expect(overApp.end).toBe("ResourceExhausted");
    expect(overApp.message).toContain(`this application has ${BULKHEADS.watchStreamsPerApp} Watch streams open`);
    // Another application still streams.
    const quiet = new AbortController();
    const quietStream = watchUntilEnd(service, keyB, await tokenNow(keyB), quiet.signal);
    await until("the other application's stream", () => service.waitingReaders() === BULKHEADS.watchStreamsPerApp + 1);
    controllers[0]!.abort();
    await streams[0];
    await until("a place freed", () => service.waitingReaders() === BULKHEADS.watchStreamsPerApp);
    const replacement = open(keyA);
    await until("the replacement stream", () => service.waitingReaders() === BULKHEADS.watchStreamsPerApp + 1);
    for (const c of [...controllers, quiet]) c.abort();
    await Promise.all([...streams, fourth, quietStream, replacement]);
  });

  it("a key deleted through this server ends its streams and waiting reads at once; nothing written after reaches them", async () => {
    const { key, keyId } = await newKey("busy");
    const from = await tokenNow(key);
    const stream = watchUntilEnd(service, key, from);
    const read = service.call("GET", `/api/v1/authorization/changes?after=${from}&waitMs=10000`, { key });
    await until("the stream and the read wait", () => service.waitingReaders() === 2);
    expectStatus(await write(keyA, "before"), 201);
    await until("the stream saw the write and waits again", () => service.waitingReaders() === 1);
    const deleted = Date.now();
    expectStatus(await service.call("DELETE", `/api/v1/applications/busy/api-keys/${keyId}`), 200);
    const ended = await stream;
    expect(Date.now() - deleted).toBeLessThan(1_500);
    expect(ended.end).toBe("Unauthenticated");
    expect(ended.message).toBe("the API key is not valid: it is unknown or revoked");
    expect(ended.got).toEqual(["before"]);
    // The read was woken by the write before the deletion: it answered with it.
    expectStatus(await read, 200);
    const again = service.call("GET", `/api/v1/authorization/changes?after=${from}&waitMs=10000`, { key });
    expectStatus(await again, 401);
  });

  it("a key deleted through another server ends this one's streams within STREAM_KEY_RECHECK_MS", async () => {
    const other = await startTestService(database.db, LIMITS);
    try {
      const { key, keyId } = await newKey("busy");
      const from = await tokenNow(key);
      const stream = watchUntilEnd(service, key, from);
      const read = service.call("GET", `/api/v1/authorization/changes?after=${await tokenNow(key)}&waitMs=10000`, { key });
      await until("the stream and the read wait", () => service.waitingReaders() === 2);
      const deleted = Date.now();
      expectStatus(await other.call("DELETE", `/api/v1/applications/busy/api-keys/${keyId}`), 200);
      const answer = await read;
      expectStatus(answer, 401);
      expect(answer.body.code).toBe("unauthenticated");
      const ended = await stream;
      // The look-up every 200 ms, plus the read's own time.
      expect(Date.now() - deleted).toBeLessThan(2_000);
      expect(ended.end).toBe("Unauthenticated");
      expectStatus(await write(keyA, "after"), 201);
      expect(ended.got).toEqual([]);
    } finally {
      await other.close();
    }
  });
});

/** A real Db that counts the change feed's reads running at once (the statement of changesStore.read), and the most there were. */
function feedReadsGauge(inner: Db): { db: Db; most: () => number; reset: () => void } {
  let running = 0;
  let most = 0;
  const query = <R,>(sql: string, params?: readonly unknown[]) => {
    if (!sql.includes("(SELECT k.seq::text FROM change_clocks k WHERE k.app_id = $1) AS clock")) return inner.query<R>(sql, params);
    most = Math.max(most, ++running);
    return inner.query<R>(sql, params).finally(() => running--);
  };
  const db = Object.create(inner, { query: { value: query as Queryable["query"] } }) as Db;
  return { db, most: () => most, reset: () => (most = running) };
}

describe("the change feed's streams: closed by their clients, and left unread", () => {
  const engine = engines.at(-1)!;
  let database: TestDatabase;
  let service: TestService;
  let close: () => Promise<void>;
  const lines: { level: number; msg: string }[] = [];
  let keyA: string;
  let keyB: string;
  let gauge: ReturnType<typeof feedReadsGauge>;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    gauge = feedReadsGauge(database.db);
    const log = pino({ level: "debug" }, { write: (s: string) => void lines.push(JSON.parse(s) as { level: number; msg: string }) });
    // A small pool, as the trial's: a hundred streams' reads must not take it. The request
    // timeout also resets a stream whose client's window takes nothing for that long (h2-server.ts):
    // long enough here that the unread streams outlive the other application's twenty writes and
    // checks on a loaded machine, so the count below sees them all.
    const config = testConfig({ logLevel: "debug", pgPoolMax: 4, maxRunningCalls: 2, requestTimeoutMs: 30_000, headersTimeoutMs: 1_000, changesPollMs: 60_000 });
    const started = await startPortcullis(config, { db: gauge.db, log });
    await started.ready;
    service = Object.assign(started, { call: restCaller(started.url) });
    close = () => started.close();
    keyA = await createApp(service, "streams", CATALOG);
    keyB = await createApp(service, "bystander", CATALOG);
    // Pages for every stream to send: more than a window of them.
    const writes = Array.from({ length: 400 }, (_, i) => ({ userId: `u${i}-${"x".repeat(200)}`, resource: "document", resourceId: "many", relation: "viewer" }));
    expectStatus(await service.call("POST", "/api/v1/authorization/relationships/bulk", { key: keyA, body: { writes } }), 200);
  }, 120_000);

  afterAll(async () => {
    await close?.();
    await database?.dispose();
  });

  it("a client closing its stream, over Connect's and gRPC's transports, is noted at debug, never as an error", async () => {
    const client = createClient(ChangeService, createGrpcTransport({ baseUrl: service.url }));
    const from = lines.length;
    for (let i = 0; i < 10; i++) {
      const controller = new AbortController();
      const it = client.watch({}, { headers: { "x-api-key": keyA }, signal: controller.signal })[Symbol.asyncIterator]();
      await it.next();
      controller.abort();
      await it.next().catch(() => undefined);
    }
    await until("every stream ended", () => service.waitingReaders() === 0 && service.openReaders().streams === 0);
    await sleep(200);
    const errors = lines.slice(from).filter((l) => l.level >= 50);
    expect(errors).toEqual([]);
  });

  it("a hundred streams that read one message and stop leave the pool alone: another application's checks and writes answer", async () => {
    const transports = Array.from({ length: 4 }, () => createGrpcTransport({ baseUrl: service.url }));
    const controllers: AbortController[] = [];
    // Each from a token of its own, so that no two share a read.
    const tokens = ((await service.call("GET", "/api/v1/authorization/changes?pageSize=1000", { key: keyA })).body.changes as { token: string }[]).map((c) => c.token);
    expect(tokens.length).toBeGreaterThan(200);
    gauge.reset();
    const firsts = await Promise.all(
      Array.from({ length: 100 }, async (_, i) => {
        const controller = new AbortController();
        controllers.push(controller);
        const client = createClient(ChangeService, transports[i % transports.length]!);
        const it = client.watch({ after: tokens[2 * i]! }, { headers: { "x-api-key": keyA }, signal: controller.signal })[Symbol.asyncIterator]();
        const first = await it.next();
        return first.done === true ? "ended" : "a message";
      }),
    );
    expect(new Set(firsts)).toEqual(new Set(["a message"]));
    // Their reads took places (MAX_RUNNING_CALLS, 2): never more at once, whatever the number of streams.
    expect(gauge.most()).toBeLessThanOrEqual(2);
    expect(gauge.most()).toBeGreaterThan(0);
    const from = lines.length;
    for (let i = 0; i < 20; i++) {
      const started = Date.now();
      expectStatus(await service.call("POST", "/api/v1/authorization/relationships", { key: keyB, body: { userId: `b${i}`, resource: "document", resourceId: "d", relation: "viewer" } }), 201);
      const check = await service.call("POST", "/api/v1/authorization/check", { key: keyB, body: { userId: `b${i}`, resource: "document", resourceId: "d", action: "read" } });
      expectStatus(check, 200);
      expect(check.body.allowed).toBe(true);
      expect(Date.now() - started).toBeLessThan(2_000);
    }
    expect(lines.slice(from).filter((l) => l.level >= 50)).toEqual([]);
    expect(service.openReaders().streams).toBe(100);
    // Their clients go away while the streams wait in writes nobody reads: each is counted out at once.
    for (const c of controllers) c.abort();
    await until("every stream counted out", () => service.openReaders().streams === 0, 5_000);
    await until("every stream ended", () => service.waitingReaders() === 0, 10_000);
  });
});
