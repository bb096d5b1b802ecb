/**
 * The change feed's streams within the service's limits (docs/change-feed.md,
 * "Streams and their limits"), on a service with short timeouts:
 * - a Watch with nothing to send ends with OK after 0.8 of the idle timeout,
 *   over HTTP/2 and HTTP/1.1, and is not reset at the request timeout before;
 * - a waiting read answers (empty, with a token) within the request timeout;
 * - a write through the server wakes its waiting readers at once, and one
 *   through another server wakes them by the probe (CHANGES_POLL_MS);
 * - a Watch whose client stops reading (its flow-control window closed) is
 *   reset once its bytes have waited the request timeout, and frees its call;
 *   its connection lives on;
 * - a service that stops ends its Watch streams with OK and answers its
 *   waiting reads.
 */
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ChangeService } from "../gen/authz/v1/changes_pb.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { ErrorCode, Flag, FrameType, RawH2, Setting } from "./support/raw-h2.js";
import { startTestService, type TestService } from "./support/service.js";
import { createApp, expectStatus } from "./helpers/authz.js";

const CATALOG = [{ resource: "document", description: "", actions: ["read"], relations: [{ name: "viewer", actions: ["read"] }] }];
// The probe for other servers' writes a minute apart: a reader woken sooner was woken by this server's write.
const LIMITS = { idleTimeoutMs: 3_000, requestTimeoutMs: 1_000, headersTimeoutMs: 500, changesPollMs: 60_000 };

describe("the change feed's streams within the service's limits", () => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;

  beforeAll(async () => {
    // One engine is enough: what is tested is the transport's (Postgres when there is one).
    database = await createTestDatabase(engines.at(-1)!);
    service = await startTestService(database.db, LIMITS);
    key = await createApp(service, "streams", CATALOG);
  }, 120_000);

  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  /** A Watch from now on: the messages it got and when it ended, how. */
  async function watchUntilEnd(transport: ReturnType<typeof createGrpcTransport>) {
    const client = createClient(ChangeService, transport);
    const from = (await service.call("GET", "/api/v1/authorization/changes?pageSize=1000", { key })).body.nextToken as string;
    const started = Date.now();
    let messages = 0;
    let error: unknown;
    try {
      for await (const _ of client.watch({ after: from }, { headers: { "x-api-key": key } })) messages++;
    } catch (e) {
      error = e;
    }
    return { ms: Date.now() - started, messages, error };
  }

  it.each([
    ["gRPC over HTTP/2", () => createGrpcTransport({ baseUrl: service.url })],
    ["Connect over HTTP/1.1", () => createConnectTransport({ baseUrl: service.url, httpVersion: "1.1" })],
  ])("%s: a Watch with nothing to send ends with OK after 0.8 of the idle timeout, past the request timeout", async (_name, make) => {
    const ended = await watchUntilEnd(make());
    expect(ended.error).toBeUndefined();
    expect(ended.messages).toBe(0);
    // 2,400 ms of silence: twice the longest a stream under the request timeout (1,000 ms) lives, and shorter than the idle timeout.
    expect(ended.ms).toBeGreaterThanOrEqual(2_350);
    expect(ended.ms).toBeLessThan(LIMITS.idleTimeoutMs);
    expect(service.waitingReaders()).toBe(0);
  });

  it("a read with waitMs answers within the request timeout, empty, with a token that works", async () => {
    const from = (await service.call("GET", "/api/v1/authorization/changes?pageSize=1000", { key })).body.nextToken as string;
    // The same read without a wait, just before: what reading and answering take on this machine
    // now, which a loaded machine stretches past the request timeout's last tenth. A page that
    // waits reads twice, before its wait and after it, so its wait is what is left of its time
    // less two such reads.
    const before = Date.now();
    expectStatus(await service.call("GET", `/api/v1/authorization/changes?after=${from}`, { key }), 200);
    const read = Date.now() - before;
    const started = Date.now();
    const res = await service.call("GET", `/api/v1/authorization/changes?after=${from}&waitMs=30000`, { key });
    expectStatus(res, 200);
    expect(res.body.changes).toEqual([]);
    const waited = Date.now() - started - 2 * read;
    expect(waited).toBeLessThan(LIMITS.requestTimeoutMs);
    expect(Date.now() - started).toBeGreaterThanOrEqual(850);
    expectStatus(await service.call("POST", "/api/v1/authorization/relationships", { key, body: { userId: "w", resource: "document", resourceId: "w", relation: "viewer" } }), 201);
    expect((await service.call("GET", `/api/v1/authorization/changes?after=${res.body.nextToken}`, { key })).body.changes).toHaveLength(1);
  });

  it("a write through this server wakes its waiting readers at once; one through another server, by the probe", async () => {
    /**
     * A reader waiting (800 ms) on `on`, then a write through this server:
     * how long after the write's acknowledgement the reader answered with
     * it. Undefined when the write itself took over 400 ms (a loaded
     * machine): its reader's wait could then end by itself, near the
     * acknowledgement, and the trial proves nothing.
     */
    const trial = async (on: TestService, userId: string): Promise<number | undefined> => {
      const from = (await on.call("GET", "/api/v1/authorization/changes?pageSize=1000", { key })).body.nextToken as string;
      const read = on.call("GET", `/api/v1/authorization/changes?after=${from}&waitMs=800`, { key });
      for (let i = 0; on.waitingReaders() === 0 && i < 400; i++) await new Promise((resolve) => setTimeout(resolve, 5));
      expect(on.waitingReaders(), "the reader waits").toBeGreaterThan(0);
      const started = Date.now();
      expectStatus(await service.call("POST", "/api/v1/authorization/relationships", { key, body: { userId, resource: "document", resourceId: "wake", relation: "viewer" } }), 201);
      const acknowledged = Date.now();
      expect((await read).body.changes).toHaveLength(1);
      return acknowledged - started > 400 ? undefined : Date.now() - acknowledged;
    };
    /** Up to five trials until one proves something; each that does must answer within `ms`. */
    const wakes = async (on: TestService, name: string, ms: number) => {
      const taken: (number | undefined)[] = [];
      for (let n = 0; n < 5 && !taken.some((t) => t !== undefined); n++) taken.push(await trial(on, `${name}-${n}`));
      const proving = taken.filter((t) => t !== undefined);
      expect(proving.length, `a trial whose write took 400 ms or less: ${JSON.stringify(taken)}`).toBeGreaterThan(0);
      for (const t of proving) expect(t).toBeLessThan(ms);
    };
    await wakes(service, "local", 200);
    // Another server on the same database, probing every 100 ms: the write through this one reaches its reader.
    const other = await startTestService(database.db, { ...LIMITS, changesPollMs: 100 });
    try {
      await wakes(other, "remote", 350);
    } finally {
      await other.close();
    }
  });

  it("a Watch whose client stops reading is reset once its bytes waited the request timeout; the call is freed, the connection lives", async () => {
    // Enough changes to fill a window of 1 KiB many times over.
    const writes = Array.from({ length: 300 }, (_, i) => ({ userId: `slow-${i}`, resource: "document", resourceId: "slow", relation: "viewer" }));
    expectStatus(await service.call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes } }), 200);
    const client = await RawH2.connect(service.port, [[Setting.INITIAL_WINDOW_SIZE, 1_024]]);
    try {
      await client.serverSettings();
      await client.settingsAck();
      const headers: [string, string][] = [
        [":method", "POST"],
        [":scheme", "http"],
        [":authority", `127.0.0.1:${service.port}`],
        [":path", "/authz.v1.ChangeService/Watch"],
        ["content-type", "application/grpc"],
        ["te", "trailers"],
        ["x-api-key", key],
      ];
      await client.request(1, headers, false);
      await client.data(1, Buffer.from([0, 0, 0, 0, 0]), true); // WatchRequest {}: from the oldest
      const opened = Date.now();
      await client.next((f) => f.type === FrameType.DATA && f.streamId === 1);
      // The client never opens its window: the server's bytes wait, and the stream is reset.
      const code = await client.reset(1, 5_000);
      expect(code).toBe(ErrorCode.CANCEL);
      const after = Date.now() - opened;
      expect(after).toBeGreaterThanOrEqual(LIMITS.requestTimeoutMs - 100);
      expect(after).toBeLessThan(4 * LIMITS.requestTimeoutMs);
      const sent = client.frames.filter((f) => f.type === FrameType.DATA && f.streamId === 1).reduce((n, f) => n + f.payload.length, 0);
      expect(sent).toBeLessThanOrEqual(1_024);
      // The connection is not ended with it: a PING is still answered.
      await client.send(FrameType.PING, 0, 0, Buffer.alloc(8, 7));
      await client.next((f) => f.type === FrameType.PING && (f.flags & Flag.ACK) !== 0);
    } finally {
      client.close();
    }
    expect(service.waitingReaders()).toBe(0);
  });

  it("a service that stops ends its Watch streams with OK and answers its waiting reads", async () => {
    const other = await startTestService(database.db, LIMITS);
    try {
      const client = createClient(ChangeService, createGrpcTransport({ baseUrl: other.url }));
      const from = (await other.call("GET", "/api/v1/authorization/changes?pageSize=1000", { key })).body.nextToken as string;
      const watching = (async () => {
        for await (const _ of client.watch({ after: from }, { headers: { "x-api-key": key } })) return "a message";
        return "ended";
      })().catch((error: unknown) => (error instanceof ConnectError ? Code[error.code] : String(error)));
      const reading = other.call("GET", `/api/v1/authorization/changes?after=${from}&waitMs=30000`, { key });
      for (let i = 0; other.waitingReaders() < 2 && i < 200; i++) await new Promise((resolve) => setTimeout(resolve, 10));
      expect(other.waitingReaders()).toBe(2);
      const closing = Date.now();
      await other.close();
      expect(Date.now() - closing).toBeLessThan(500);
      expect(await watching).toBe("ended");
      const read = await reading;
      expect(read.status).toBe(200);
      expect(read.body.changes).toEqual([]);
    } finally {
      await other.close();
    }
  });
});
