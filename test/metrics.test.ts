/**
 * /metrics (src/lib/metrics.ts): scraped from a real service after calls on
 * every protocol, on each engine. Requests are counted by RPC, protocol and
 * code and timed, whichever path answered them; check answers by allowed
 * and denied; coalesced batch sizes and statements in flight; the pool
 * (Postgres); model reloads; process metrics. The text is Prometheus's
 * exposition format, served without a key, with no secret in it; with
 * METRICS_PORT it is served there only, and with metrics off nowhere.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LATENCY_BUCKETS } from "../src/lib/metrics.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, createAppWithKey, startTestService, type TestService } from "./support/service.js";
import { expectErrorBody } from "./helpers/error-body.js";
import { checkCaller, recordedAs, type CheckCaller, type Protocol } from "./helpers/protocols.js";

type Labels = Record<string, string>;

interface Family {
  type: string;
  help: string;
  samples: { name: string; labels: Labels; value: number }[];
}

// The exposition format, line by line (prom-client writes version 0.0.4):
// https://prometheus.io/docs/instrumenting/exposition_formats/ (values are
// read by Go's ParseFloat, which takes NaN and Inf in any case: prom-client
// writes "Nan").
const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const HELP = /^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$/;
const TYPE = /^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$/;
const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*)\})? (-?(?:\d+(?:\.\d+)?(?:e[+-]?\d+)?|[Nn][Aa][Nn]|[+-][Ii][Nn][Ff]))(?: -?\d+)?$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"/g;

/**
 * Parses the text strictly: every line is a HELP, a TYPE or a sample of a
 * family declared before it; histograms have cumulative buckets ending in
 * +Inf equal to their _count. Throws on anything else.
 */
function parseExposition(text: string): Map<string, Family> {
  const families = new Map<string, Family>();
  let current: Family | undefined;
  let currentName = "";
  expect(text.endsWith("\n")).toBe(true);
  for (const line of text.slice(0, -1).split("\n")) {
    if (line === "") continue;
    const help = HELP.exec(line);
    if (help !== null) {
      expect(families.has(help[1]!), `HELP of ${help[1]} twice`).toBe(false);
      currentName = help[1]!;
      current = { type: "untyped", help: help[2]!, samples: [] };
      families.set(currentName, current);
      continue;
    }
    const type = TYPE.exec(line);
    if (type !== null) {
      expect(type[1], line).toBe(currentName);
      current!.type = type[2]!;
      continue;
    }
    const sample = SAMPLE.exec(line);
    expect(sample, `not a sample line: ${line}`).not.toBeNull();
    const [, name, labelText, value] = sample!;
    expect(METRIC_NAME.test(name!)).toBe(true);
    const suffixes = current?.type === "histogram" ? ["_bucket", "_sum", "_count"] : current?.type === "summary" ? ["", "_sum", "_count"] : [""];
    expect(suffixes.map((s) => currentName + s), `${name} outside its family ${currentName}`).toContain(name);
    const labels: Labels = {};
    for (const [, key, raw] of (labelText ?? "").matchAll(LABEL)) labels[key!] = raw!;
    current!.samples.push({ name: name!, labels, value: Number(value) });
  }
  for (const [name, family] of families) {
    if (family.type !== "histogram") continue;
    const series = new Map<string, { name: string; labels: Labels; value: number }[]>();
    for (const s of family.samples) {
      const { le: _, ...rest } = s.labels;
      const key = JSON.stringify(Object.entries(rest).sort());
      series.set(key, [...(series.get(key) ?? []), s]);
    }
    for (const samples of series.values()) {
      const buckets = samples.filter((s) => s.name === `${name}_bucket`);
      const count = samples.find((s) => s.name === `${name}_count`)!;
      expect(buckets.at(-1)!.labels.le, name).toBe("+Inf");
      for (let i = 1; i < buckets.length; i++) expect(buckets[i]!.value).toBeGreaterThanOrEqual(buckets[i - 1]!.value);
      expect(buckets.at(-1)!.value, name).toBe(count.value);
    }
  }
  return families;
}

/** A scrape: the families, and a sample's value by name and labels (0 when absent). */
async function scrape(url: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${url}/metrics`, { headers });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
  const text = await res.text();
  const families = parseExposition(text);
  const value = (name: string, labels: Labels = {}): number => {
    const family = families.get(name.replace(/_(bucket|sum|count)$/, "")) ?? families.get(name);
    const found = family?.samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
    return found?.value ?? 0;
  };
  return { text, families, value };
}
type Scrape = Awaited<ReturnType<typeof scrape>>;

const CHECK = "/authz.v1.CheckService/Check";
const BATCH = "/authz.v1.CheckService/BatchCheck";
const catalog = { resources: [{ resource: "doc", description: "", actions: ["read", "update"] }] };
const allowed = { userId: "ann", resource: "doc", resourceId: "d1", action: "read" };
const denied = { userId: "bob", resource: "doc", resourceId: "d1", action: "read" };

describe.each(engines)("metrics on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;
  let caller: CheckCaller;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    key = await createAppWithKey(service, "metered");
    expect((await service.call("PUT", "/api/v1/applications/metered/resources", { key, body: catalog })).status).toBe(200);
    const grant = { userId: "ann", resource: "doc", resourceId: "d1", relation: "viewer" };
    expect((await service.call("POST", "/api/v1/authorization/relationships", { key, body: grant })).status).toBe(201);
    caller = checkCaller(service.url);
  });
  afterAll(async () => {
    caller?.close();
    await service?.close();
    await database?.dispose();
  });

  /** What a call must move: the request counter of its labels by one, and its duration histogram's count. */
  const cases: { name: string; send: () => Promise<unknown>; protocol: string; rpc: string; code: string }[] = [];
  const viaCaller = (protocol: Protocol, withKey: boolean, code: string) =>
    cases.push({
      name: `the check over ${protocol}${withKey ? "" : " without a key"}`,
      send: () => caller.check(protocol, allowed, withKey ? { "x-api-key": key } : {}),
      protocol: recordedAs(protocol),
      rpc: CHECK,
      code,
    });
  viaCaller("rest", true, "200");
  viaCaller("rest", false, "401");
  viaCaller("rest-fastify", true, "200");
  viaCaller("connect", true, "200");
  viaCaller("connect", false, "401");
  viaCaller("grpc", true, "0");
  viaCaller("grpc", false, "16");
  viaCaller("grpc-web", true, "0");
  viaCaller("grpc-web", false, "16");
  cases.push(
    {
      name: "a REST route with a path variable (Fastify)",
      send: () => service.call("GET", "/api/v1/applications/metered/policies?pageSize=5", { key }),
      protocol: "rest",
      rpc: "/authz.v1.PolicyService/ListPolicies",
      code: "200",
    },
    {
      name: "a REST route sharing its path with another verb",
      send: () => service.call("POST", "/api/v1/applications/metered/policies", { key, body: { name: "Readers", permissions: ["doc:read"] } }),
      protocol: "rest",
      rpc: "/authz.v1.PolicyService/CreatePolicy",
      code: "201",
    },
    {
      name: "an unknown route",
      send: () => service.call("GET", "/nowhere?secret=1"),
      protocol: "rest",
      rpc: "(no route)",
      code: "404",
    },
  );

  it.each(cases)("$name: counted as $protocol $rpc $code, and timed", async ({ send, protocol, rpc, code }) => {
    const before = await scrape(service.url);
    await send();
    const after = await scrape(service.url);
    expect(after.value("portcullis_requests_total", { protocol, rpc, code }) - before.value("portcullis_requests_total", { protocol, rpc, code })).toBe(1);
    const count = (s: Scrape) => s.value("portcullis_request_duration_seconds_count", { protocol, rpc });
    expect(count(after) - count(before)).toBe(1);
    const sum = (s: Scrape) => s.value("portcullis_request_duration_seconds_sum", { protocol, rpc });
    expect(sum(after) - sum(before)).toBeGreaterThan(0);
    expect(sum(after) - sum(before)).toBeLessThan(5);
  });

  it("has a duration histogram for sub-millisecond checks up to seconds", async () => {
    const { families } = await scrape(service.url);
    const family = families.get("portcullis_request_duration_seconds")!;
    expect(family.type).toBe("histogram");
    const bounds = [...new Set(family.samples.filter((s) => s.labels.le !== undefined).map((s) => s.labels.le))];
    expect(bounds).toEqual([...LATENCY_BUCKETS.map(String), "+Inf"]);
    expect(LATENCY_BUCKETS[0]).toBeLessThanOrEqual(0.0001);
    expect(LATENCY_BUCKETS.at(-1)).toBeGreaterThanOrEqual(10);
  });

  it("counts the answers of checks and batch checks, allowed and denied", async () => {
    const answers = (s: Scrape, rpc: string, answer: string) => s.value("portcullis_check_answers_total", { rpc, answer });
    const before = await scrape(service.url);
    for (const q of [allowed, denied, denied]) expect((await caller.check("grpc", q, { "x-api-key": key })).status).toBe(0);
    const batch = await service.call("POST", "/api/v1/authorization/check/batch", { key, body: { checks: [allowed, allowed, allowed, denied] } });
    expect(batch.status).toBe(200);
    const after = await scrape(service.url);
    expect(answers(after, CHECK, "allowed") - answers(before, CHECK, "allowed")).toBe(1);
    expect(answers(after, CHECK, "denied") - answers(before, CHECK, "denied")).toBe(2);
    expect(answers(after, BATCH, "allowed") - answers(before, BATCH, "allowed")).toBe(3);
    expect(answers(after, BATCH, "denied") - answers(before, BATCH, "denied")).toBe(1);
  });

  it("observes coalesced batch sizes: a batch check is one statement; concurrent checks share statements", async () => {
    const size = (s: Scrape, suffix: "sum" | "count") => s.value(`portcullis_coalesced_batch_size_${suffix}`, { reads: "checks" });
    const bucket = (s: Scrape, le: string) => s.value("portcullis_coalesced_batch_size_bucket", { reads: "checks", le });
    let before = await scrape(service.url);
    const checks = Array.from({ length: 20 }, (_, i) => ({ ...allowed, resourceId: `d${i}` }));
    expect((await service.call("POST", "/api/v1/authorization/check/batch", { key, body: { checks } })).status).toBe(200);
    let after = await scrape(service.url);
    expect(size(after, "count") - size(before, "count")).toBe(1);
    expect(size(after, "sum") - size(before, "sum")).toBe(20);
    expect(bucket(after, "16") - bucket(before, "16")).toBe(0);
    expect(bucket(after, "32") - bucket(before, "32")).toBe(1);

    // Twelve checks sent at once on one HTTP/2 connection: they arrive together, and wait for one another's statements.
    before = after;
    const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => caller.check("grpc", { ...allowed, userId: `u${i}` }, { "x-api-key": key })));
    expect(answers.map((a) => a.status)).toEqual(Array(12).fill(0));
    after = await scrape(service.url);
    expect(size(after, "sum") - size(before, "sum")).toBe(12);
    expect(size(after, "count") - size(before, "count")).toBeLessThan(12);
    expect(after.value("portcullis_coalesced_statements_in_flight", { reads: "checks" })).toBe(0);
    expect(after.families.get("portcullis_coalesced_statements_in_flight")!.type).toBe("gauge");
  });

  it("labels who can's requests WhoCan and counts its statements apart from lookup's", async () => {
    const statements = (s: Scrape, reads: string) => s.value("portcullis_coalesced_batch_size_count", { reads });
    const requests = (s: Scrape) => s.value("portcullis_requests_total", { protocol: "rest", rpc: "/authz.v1.CheckService/WhoCan", code: "200" });
    let before = await scrape(service.url);
    const whoCan = { resource: "doc", resourceId: "d1", action: "read" };
    expect((await service.call("POST", "/api/v1/authorization/subjects", { key, body: whoCan })).status).toBe(200);
    let after = await scrape(service.url);
    expect(requests(after) - requests(before)).toBe(1);
    expect(statements(after, "who can") - statements(before, "who can")).toBe(1);
    expect(statements(after, "lookup") - statements(before, "lookup")).toBe(0);

    before = after;
    expect((await service.call("POST", "/api/v1/authorization/lookup", { key, body: { userId: "ann", resource: "doc", action: "read" } })).status).toBe(200);
    after = await scrape(service.url);
    expect(statements(after, "lookup") - statements(before, "lookup")).toBe(1);
    expect(statements(after, "who can") - statements(before, "who can")).toBe(0);
  });

  it("reports the change feed's waiting readers", async () => {
    const waiting = (s: Scrape) => s.value("portcullis_change_feed_waiting_readers", {});
    expect(waiting(await scrape(service.url))).toBe(0);
    const from = (await service.call("GET", "/api/v1/authorization/changes?pageSize=1000", { key })).body.nextToken as string;
    const read = service.call("GET", `/api/v1/authorization/changes?after=${from}&waitMs=30000`, { key });
    for (let i = 0; service.waitingReaders() === 0 && i < 200; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(waiting(await scrape(service.url))).toBe(1);
    expect((await service.call("POST", "/api/v1/authorization/relationships", { key, body: { userId: "feed", resource: "doc", resourceId: "f", relation: "viewer" } })).status).toBe(201);
    expect((await read).body.changes).toHaveLength(1);
    expect(waiting(await scrape(service.url))).toBe(0);
  });

  it("counts reloads of the access model: first, then when its version changed", async () => {
    const reloads = (s: Scrape, reason: string) => s.value("portcullis_model_reloads_total", { reason });
    const before = await scrape(service.url);
    const updated = { resources: [{ ...catalog.resources[0]!, actions: ["read", "update", "share"] }] };
    expect((await service.call("PUT", "/api/v1/applications/metered/resources", { key, body: updated })).status).toBe(200);
    expect((await caller.check("rest", allowed, { "x-api-key": key })).status).toBe(200);
    expect((await caller.check("rest", allowed, { "x-api-key": key })).status).toBe(200);
    const after = await scrape(service.url);
    expect(reloads(after, "changed") - reloads(before, "changed")).toBe(1);
    expect(reloads(after, "first")).toBeGreaterThanOrEqual(1);
  });

  it(engine === "postgres" ? "reports the pool's connections and the waits for one" : "reports no pool on PGlite", async () => {
    const s = await scrape(service.url);
    const pool = { pool: "primary" };
    const names = ["portcullis_db_pool_connections", "portcullis_db_pool_idle_connections", "portcullis_db_pool_waiting_clients", "portcullis_db_pool_max_connections"];
    for (const name of names) expect(s.families.get(name)?.type).toBe("gauge");
    if (engine === "pglite") {
      for (const name of names) expect(s.families.get(name)!.samples).toEqual([]);
      return;
    }
    expect(s.value("portcullis_db_pool_max_connections", pool)).toBe(10); // the test database's pool
    const total = s.value("portcullis_db_pool_connections", pool);
    expect(total).toBeGreaterThanOrEqual(1);
    expect(total).toBeLessThanOrEqual(10);
    expect(s.value("portcullis_db_pool_idle_connections", pool)).toBeLessThanOrEqual(total);
    expect(s.value("portcullis_db_pool_waiting_clients", pool)).toBe(0);
    expect(s.value("portcullis_db_pool_wait_seconds_count", pool)).toBeGreaterThan(0);
  });

  it("has the process's and Node.js's metrics", async () => {
    const { families } = await scrape(service.url);
    for (const name of ["process_cpu_user_seconds_total", "process_start_time_seconds", "nodejs_eventloop_lag_seconds", "nodejs_heap_size_used_bytes", "nodejs_version_info"]) {
      expect(families.get(name)?.samples.length ?? 0, name).toBeGreaterThan(0);
    }
    expect(families.get("process_resident_memory_bytes")?.samples[0]?.value).toBeGreaterThan(0);
  });

  it("is served without a key (a key sent is ignored), and holds no key, body or query string", async () => {
    // The calls above sent keys, bodies and a query string; none of it may show.
    const anonymous = await scrape(service.url);
    const withBadKey = await scrape(service.url, { "x-api-key": "pcl_not_a_key" });
    for (const { text } of [anonymous, withBadKey]) {
      for (const secret of [key, ADMIN_KEY, "pcl_not_a_key", "secret=1", "Readers", '"ann"']) expect(text).not.toContain(secret);
    }
  });
});

describe("METRICS_PORT and METRICS_ENABLED", () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase("pglite");
  });
  afterAll(async () => {
    await database?.dispose();
  });

  it("with METRICS_PORT: /metrics there only; the main port answers 404 in the error shape", async () => {
    const service = await startTestService(database.db, { metricsPort: 0 });
    try {
      expect(service.metricsPort).toBeGreaterThan(0);
      expect(service.metricsPort).not.toBe(service.port);
      const main = await fetch(`${service.url}/metrics`);
      expect(main.status).toBe(404);
      expectErrorBody(await main.json(), main.headers.get("x-request-id"));
      // The 404 on the main port is counted, on the metrics port.
      const metricsUrl = `http://127.0.0.1:${service.metricsPort}`;
      const { value } = await scrape(metricsUrl);
      expect(value("portcullis_requests_total", { protocol: "rest", rpc: "(no route)", code: "404" })).toBe(1);
      const head = await fetch(`${metricsUrl}/metrics`, { method: "HEAD" });
      expect(head.status).toBe(200);
      for (const [method, path] of [["GET", "/"], ["GET", "/healthz"], ["POST", "/metrics"], ["GET", "/api/v1/applications"]] as const) {
        expect((await fetch(metricsUrl + path, { method })).status, `${method} ${path}`).toBe(404);
      }
    } finally {
      await service.close();
    }
  });

  it("with METRICS_ENABLED=false: no /metrics, and the service answers as ever", async () => {
    const service = await startTestService(database.db, { metricsEnabled: false });
    try {
      expect(service.metricsPort).toBeUndefined();
      const res = await fetch(`${service.url}/metrics`);
      expect(res.status).toBe(404);
      expectErrorBody(await res.json(), res.headers.get("x-request-id"));
      expect((await fetch(`${service.url}/healthz`)).status).toBe(200);
    } finally {
      await service.close();
    }
  });
});
