/**
 * Starts the real service in-process on a free port, over a test database,
 * and talks to it over HTTP with fetch.
 */
import { startPortcullis, type Portcullis } from "../../src/app.js";
import type { Config } from "../../src/config.js";
import type { Db } from "../../src/store/db.js";

export const ADMIN_KEY = "test-operator-key-0123456789abcdef";

export function testConfig(overrides: Partial<Config> = {}): Config {
  return {
    host: "127.0.0.1",
    port: 0,
    databaseUrl: undefined,
    dataDir: "./data-unused",
    pglite: { sharedBuffersMb: 16, initInChild: true },
    adminKey: ADMIN_KEY,
    logLevel: "silent",
    pgPoolMax: 10,
    shutdownGraceMs: 5_000,
    maxRunningCalls: 5,
    bulkheads: {
      runningCallsPerApp: 3,
      waitingCallsPerApp: 1_000,
      feedWaitsPerKey: 500,
      feedWaitsPerApp: 1_000,
      watchStreamsPerKey: 100,
      watchStreamsPerApp: 250,
      streamKeyRecheckMs: 2_000,
    },
    headersTimeoutMs: 10_000,
    requestTimeoutMs: 30_000,
    idleTimeoutMs: 65_000,
    maxConnections: 10_000,
    h2MaxConcurrentStreams: 100,
    h2MaxSessionMemoryMb: 10,
    distribute: undefined,
    citusBoundStatements: 8,
    databaseReadUrls: [],
    readReplicaMaxLagMs: 50,
    // Off: tests that need expired rows keep them; the sweep's own tests turn it on.
    grantSweepIntervalMs: 0,
    grantSweepBatch: 1_000,
    changesRetentionMs: 7 * 86_400_000,
    // Short, so that a test of writes through another process waits little.
    changesPollMs: 50,
    consoleDir: undefined,
    metricsEnabled: true,
    metricsPort: undefined,
    metricsHost: "127.0.0.1",
    otelTracesUrl: undefined,
    // Every trace kept, so that a test sees the span of each call it makes;
    // tracing.test.ts tests the default (1 in 100) on its own.
    otelTracesSampler: { name: "parentbased_always_on", ratio: 1 },
    ...overrides,
  };
}

export interface TestService extends Portcullis {
  /** JSON over REST: `call("POST", "/api/v1/applications", { key, body })`. */
  call(method: string, path: string, options?: { key?: string | null; body?: unknown; rawBody?: string }): Promise<RestAnswer>;
}

export interface RestAnswer {
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
  headers: Headers;
}

export async function startTestService(db: Db, overrides: Partial<Config> = {}): Promise<TestService> {
  const service = await startPortcullis(testConfig(overrides), { db });
  await service.ready;
  return Object.assign(service, { call: restCaller(service.url) });
}

/** A REST caller for a base URL. The operator key is sent unless `key` says otherwise (null: no header). */
export function restCaller(baseUrl: string) {
  return async (
    method: string,
    path: string,
    options: { key?: string | null; body?: unknown; rawBody?: string } = {},
  ): Promise<RestAnswer> => {
    const headers: Record<string, string> = {};
    const key = options.key === undefined ? ADMIN_KEY : options.key;
    if (key !== null) headers["x-api-key"] = key;
    let body: string | undefined;
    if (options.rawBody !== undefined) body = options.rawBody;
    else if (options.body !== undefined) body = JSON.stringify(options.body);
    if (body !== undefined) headers["content-type"] = "application/json";
    const res = await fetch(baseUrl + path, { method, headers, body });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = text === "" ? undefined : JSON.parse(text);
    } catch {
      // leave as text
    }
    return { status: res.status, body: parsed, headers: res.headers };
  };
}

/** Creates an application and an application key for it; returns the key. */
export async function createAppWithKey(service: TestService, appId: string): Promise<string> {
  const app = await service.call("POST", "/api/v1/applications", { body: { appId } });
  if (app.status !== 201) throw new Error(`create application ${appId}: ${app.status} ${JSON.stringify(app.body)}`);
  const key = await service.call("POST", `/api/v1/applications/${appId}/api-keys`, { body: { name: "test" } });
  if (key.status !== 201) throw new Error(`create key: ${key.status} ${JSON.stringify(key.body)}`);
  return key.body.key as string;
}
