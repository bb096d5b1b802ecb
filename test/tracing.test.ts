/**
 * OpenTelemetry traces (src/lib/tracing.ts), sent to a real OTLP/HTTP
 * receiver (a node:http server taking POST /v1/traces: the exporter sends
 * OTLP/HTTP JSON) by a real service, on each engine: a span per RPC on
 * every protocol with its attributes and status, a child span for the
 * database statement it waited for, one span for a coalesced check
 * statement linked from each check it answered (and linking back), a W3C
 * traceparent continued, and nothing at all exported when tracing is off.
 *
 * Each test starts a service of its own and closes it before reading the
 * spans: closing flushes the exporter.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { DEFAULT_TRACES_SAMPLER } from "../src/config.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { createAppWithKey, startTestService, type TestService } from "./support/service.js";
import { checkCaller, recordedAs, type Protocol } from "./helpers/protocols.js";

interface AnyValue {
  stringValue?: string;
  intValue?: number | string;
  boolValue?: boolean;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: { key: string; value: AnyValue }[];
  links?: { traceId: string; spanId: string }[];
  status?: { code?: number };
}
interface Received {
  path: string;
  contentType: string | undefined;
  resource: Record<string, unknown>;
  spans: OtlpSpan[];
}

const KIND = { INTERNAL: 1, SERVER: 2, CLIENT: 3 } as const;
const STATUS = { UNSET: 0, ERROR: 2 } as const;

const value = (v: AnyValue | undefined): unknown => (v === undefined ? undefined : (v.stringValue ?? (v.intValue === undefined ? v.boolValue : Number(v.intValue))));
const attrs = (span: OtlpSpan): Record<string, unknown> => Object.fromEntries(span.attributes.map((a) => [a.key, value(a.value)]));

/** An OTLP/HTTP receiver: each export request's spans, as the collector would get them. */
class Receiver {
  readonly received: Received[] = [];
  private server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as {
        resourceSpans: { resource: { attributes: { key: string; value: AnyValue }[] }; scopeSpans: { spans: OtlpSpan[] }[] }[];
      };
      for (const rs of body.resourceSpans) {
        this.received.push({
          path: req.url ?? "",
          contentType: req.headers["content-type"],
          resource: Object.fromEntries(rs.resource.attributes.map((a) => [a.key, value(a.value)])),
          spans: rs.scopeSpans.flatMap((s) => s.spans),
        });
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });

  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1/traces`;
  }

  get spans(): OtlpSpan[] {
    return this.received.flatMap((r) => r.spans);
  }

  clear(): void {
    this.received.length = 0;
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

const catalog = { resources: [{ resource: "doc", description: "", actions: ["read"] }] };
const question = { userId: "ann", resource: "doc", resourceId: "d1", action: "read" };

describe.each(engines)("traces on %s", (engine) => {
  let database: TestDatabase;
  let receiver: Receiver;
  let tracesUrl: string;
  let key: string;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    receiver = new Receiver();
    tracesUrl = await receiver.start();
    const setup = await startTestService(database.db);
    try {
      key = await createAppWithKey(setup, "traced");
      expect((await setup.call("PUT", "/api/v1/applications/traced/resources", { key, body: catalog })).status).toBe(200);
      const grant = { userId: "ann", resource: "doc", resourceId: "d1", relation: "viewer" };
      expect((await setup.call("POST", "/api/v1/authorization/relationships", { key, body: grant })).status).toBe(201);
    } finally {
      await setup.close();
    }
  });
  afterAll(async () => {
    await receiver?.close();
    await database?.dispose();
  });
  beforeEach(() => receiver.clear());

  /** Runs `calls` on a service with tracing on, then closes it (which flushes every span) and returns them. */
  async function traced(calls: (service: TestService) => Promise<void>): Promise<OtlpSpan[]> {
    const service = await startTestService(database.db, { otelTracesUrl: tracesUrl });
    try {
      await calls(service);
    } finally {
      await service.close();
    }
    return receiver.spans;
  }

  const rpcSpan = (spans: OtlpSpan[], requestId: string) => {
    const found = spans.filter((s) => attrs(s)["portcullis.request_id"] === requestId);
    expect(found, `spans of request ${requestId}`).toHaveLength(1);
    return found[0]!;
  };

  /** A call on each protocol, with or without a key: what its span must say. */
  const cases: { protocol: Protocol; withKey: boolean; system: string; code: Record<string, unknown> }[] = [
    { protocol: "rest", withKey: true, system: "http", code: { "http.response.status_code": 200 } },
    { protocol: "rest", withKey: false, system: "http", code: { "http.response.status_code": 401 } },
    { protocol: "rest-fastify", withKey: true, system: "http", code: { "http.response.status_code": 200 } },
    { protocol: "connect", withKey: true, system: "connect_rpc", code: { "http.response.status_code": 200 } },
    { protocol: "connect", withKey: false, system: "connect_rpc", code: { "http.response.status_code": 401 } },
    { protocol: "grpc", withKey: true, system: "grpc", code: { "rpc.grpc.status_code": 0 } },
    { protocol: "grpc", withKey: false, system: "grpc", code: { "rpc.grpc.status_code": 16 } },
    { protocol: "grpc-web", withKey: true, system: "grpc", code: { "rpc.grpc.status_code": 0 } },
    { protocol: "grpc-web", withKey: false, system: "grpc", code: { "rpc.grpc.status_code": 16 } },
  ];

  it("a span per RPC on every protocol: its RPC, request id, code and status", async () => {
    const ids = cases.map((c, i) => `span-case-${i}-${c.protocol}`);
    const spans = await traced(async (service) => {
      const caller = checkCaller(service.url);
      try {
        for (const [i, c] of cases.entries()) {
          const answer = await caller.check(c.protocol, question, { "x-request-id": ids[i]!, ...(c.withKey ? { "x-api-key": key } : {}) });
          expect(answer.requestId).toBe(ids[i]);
        }
      } finally {
        caller.close();
      }
    });
    expect(receiver.received.length).toBeGreaterThan(0);
    for (const r of receiver.received) {
      expect(r.path).toBe("/v1/traces");
      expect(r.contentType).toBe("application/json");
      expect(r.resource["service.name"]).toBe("portcullis");
    }
    for (const [i, c] of cases.entries()) {
      const span = rpcSpan(spans, ids[i]!);
      expect(span.name, c.protocol).toBe("/authz.v1.CheckService/Check");
      expect(span.kind).toBe(KIND.SERVER);
      expect(span.parentSpanId ?? "").toBe("");
      expect(attrs(span), `${c.protocol} ${c.withKey}`).toMatchObject({
        "rpc.system": c.system,
        "rpc.service": "authz.v1.CheckService",
        "rpc.method": "Check",
        ...c.code,
      });
      // A refused key is the caller's failure, not the server's: the status stays unset.
      expect(span.status?.code ?? STATUS.UNSET).toBe(STATUS.UNSET);
      if (recordedAs(c.protocol) === "rest") expect(attrs(span)).toMatchObject({ "http.request.method": "POST", "http.route": "/api/v1/authorization/check" });
    }
  });

  it("a server failure marks the span's status as an error (a passed gRPC deadline)", async () => {
    const spans = await traced(async (service) => {
      const caller = checkCaller(service.url);
      try {
        const answer = await caller.check("grpc", question, { "x-api-key": key, "x-request-id": "late-call", "grpc-timeout": "1n" });
        expect(answer.status).toBe(4);
      } finally {
        caller.close();
      }
    });
    const span = rpcSpan(spans, "late-call");
    expect(attrs(span)).toMatchObject({ "rpc.grpc.status_code": 4, "error.type": "4" });
    expect(span.status?.code).toBe(STATUS.ERROR);
  });

  it("the database statement an RPC waited for is a child span of the RPC's", async () => {
    const spans = await traced(async (service) => {
      const res = await fetch(`${service.url}/api/v1/authorization/relationships?resource=doc&resourceId=d1`, {
        headers: { "x-api-key": key, "x-request-id": "list-call" },
      });
      expect(res.status).toBe(200);
    });
    const rpc = rpcSpan(spans, "list-call");
    expect(rpc.name).toBe("/authz.v1.RelationshipService/ListRelationships");
    expect(attrs(rpc)).toMatchObject({ "http.route": "/api/v1/authorization/relationships", "http.response.status_code": 200 });
    const children = spans.filter((s) => s.parentSpanId === rpc.spanId && s.traceId === rpc.traceId);
    const statements = children.filter((s) => s.kind === KIND.CLIENT);
    expect(statements.length).toBeGreaterThan(0);
    for (const statement of statements) {
      expect(attrs(statement)).toMatchObject({ "db.system.name": "postgresql" });
      expect(statement.status?.code ?? STATUS.UNSET).toBe(STATUS.UNSET);
    }
    // The statement's text, never a value of the request (parameters travel apart).
    const texts = spans.filter((s) => s.traceId === rpc.traceId && s.kind === KIND.CLIENT).map((s) => String(attrs(s)["db.query.text"] ?? ""));
    expect(texts.some((t) => /FROM relationships/.test(t))).toBe(true);
    for (const text of texts) expect(text).not.toContain("d1");
  });

  it("one span per coalesced check statement, linked from each check it answered and linking to each", async () => {
    const n = 12;
    const ids = Array.from({ length: n }, (_, i) => `coalesced-${i}`);
    const spans = await traced(async (service) => {
      const caller = checkCaller(service.url);
      try {
        // Known key first (its lookup is a coalesced statement of its own), then twelve at once on one connection.
        expect((await caller.check("grpc", question, { "x-api-key": key })).status).toBe(0);
        const answers = await Promise.all(ids.map((id, i) => caller.check("grpc", { ...question, userId: `u${i}` }, { "x-api-key": key, "x-request-id": id })));
        expect(answers.map((a) => a.status)).toEqual(Array(n).fill(0));
      } finally {
        caller.close();
      }
    });
    const checks = ids.map((id) => rpcSpan(spans, id));
    const statements = new Map(spans.filter((s) => s.name === "coalesced checks statement").map((s) => [s.spanId, s]));
    const answeredBy = new Map<string, OtlpSpan[]>();
    for (const check of checks) {
      const links = (check.links ?? []).filter((l) => statements.has(l.spanId));
      expect(links, "each check links to the one statement that answered it").toHaveLength(1);
      const statement = statements.get(links[0]!.spanId)!;
      expect(statement.kind).toBe(KIND.INTERNAL);
      // ...which links back to it.
      expect((statement.links ?? []).map((l) => l.spanId)).toContain(check.spanId);
      answeredBy.set(statement.spanId, [...(answeredBy.get(statement.spanId) ?? []), check]);
    }
    // Coalesced: fewer statements than checks, each the size it says, with the database statement beneath it.
    expect(answeredBy.size).toBeLessThan(n);
    for (const [spanId, answered] of answeredBy) {
      const statement = statements.get(spanId)!;
      expect(attrs(statement)["portcullis.batch.calls"]).toBe(answered.length);
      expect(attrs(statement)["portcullis.batch.size"]).toBe(answered.length);
      // A child of the first call it answered, in that call's trace.
      expect(answered.map((c) => c.spanId)).toContain(statement.parentSpanId);
      const dbChildren = spans.filter((s) => s.parentSpanId === statement.spanId && s.kind === KIND.CLIENT);
      expect(dbChildren.length).toBeGreaterThan(0);
      expect(dbChildren.every((s) => attrs(s)["db.system.name"] === "postgresql")).toBe(true);
    }
  });

  it("continues the caller's trace from a W3C traceparent, whose trace id is the request id when none is given", async () => {
    const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
    const parent = "00f067aa0ba902b7";
    const protocols: Protocol[] = ["rest", "rest-fastify", "connect", "grpc", "grpc-web"];
    const answers: { protocol: Protocol; requestId: string | undefined }[] = [];
    const spans = await traced(async (service) => {
      const caller = checkCaller(service.url);
      try {
        for (const protocol of protocols) {
          const answer = await caller.check(protocol, question, { "x-api-key": key, traceparent: `00-${traceId}-${parent}-01` });
          answers.push({ protocol, requestId: answer.requestId });
        }
      } finally {
        caller.close();
      }
    });
    for (const { protocol, requestId } of answers) expect(requestId, protocol).toBe(traceId);
    const continued = spans.filter((s) => s.kind === KIND.SERVER && s.traceId === traceId);
    expect(continued).toHaveLength(protocols.length);
    for (const span of continued) {
      expect(span.parentSpanId).toBe(parent);
      expect(attrs(span)["portcullis.request_id"]).toBe(traceId);
    }
  });

  it("samples by default: the caller's decision in its traceparent, else 1 request in 100, a kept request with all its spans", async () => {
    const sampled = "5bf92f3577b34da6a3ce929d0e0e4736";
    const dropped = "6bf92f3577b34da6a3ce929d0e0e4736";
    const parent = "00f067aa0ba902b7";
    // As configured by default (the other tests here keep every trace).
    const sampling = await startTestService(database.db, { otelTracesUrl: tracesUrl, otelTracesSampler: DEFAULT_TRACES_SAMPLER });
    const caller = checkCaller(sampling.url);
    try {
      for (const protocol of ["rest", "grpc"] as const) {
        await caller.check(protocol, question, { "x-api-key": key, traceparent: `00-${sampled}-${parent}-01` });
        await caller.check(protocol, question, { "x-api-key": key, traceparent: `00-${dropped}-${parent}-00` });
      }
      for (let i = 0; i < 300; i++) await caller.check("rest", question, { "x-api-key": key });
    } finally {
      caller.close();
      await sampling.close(); // flushes every span
    }
    const spans = receiver.spans;
    const servers = spans.filter((s) => s.kind === KIND.SERVER);
    // The caller's decision, both ways.
    expect(servers.filter((s) => s.traceId === sampled)).toHaveLength(2);
    expect(spans.filter((s) => s.traceId === dropped)).toEqual([]);
    // Of 300 requests with no traceparent, 1 in 100 by trace id: 0 to 12 kept
    // (binomial(300, 0.01): above 12 has a chance below 1 in 10^5).
    const roots = servers.filter((s) => s.traceId !== sampled);
    expect(roots.length).toBeLessThanOrEqual(12);
    // A kept request keeps its statement's span: no trace is cut in pieces.
    for (const root of roots) expect(spans.some((s) => s.traceId === root.traceId && s.kind === KIND.CLIENT), root.traceId).toBe(true);
    // And no span was kept from a request that was not.
    const keptTraces = new Set(servers.map((s) => s.traceId));
    expect(spans.filter((s) => !keptTraces.has(s.traceId) && s.kind === KIND.CLIENT)).toEqual([]);
  });

  it("exports nothing when tracing is off (no OTEL_EXPORTER_OTLP_ENDPOINT)", async () => {
    const service = await startTestService(database.db);
    try {
      const caller = checkCaller(service.url);
      try {
        for (const protocol of ["rest", "connect", "grpc", "grpc-web"] as const) {
          expect((await caller.check(protocol, question, { "x-api-key": key, traceparent: `00-${"a".repeat(32)}-${"b".repeat(16)}-01` })).requestId).toBe("a".repeat(32));
        }
      } finally {
        caller.close();
      }
    } finally {
      await service.close();
    }
    // The receiver is up (the other tests use it) and heard nothing.
    expect(receiver.received).toEqual([]);
  });
});
