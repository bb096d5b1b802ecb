/**
 * The one typed configuration: defaults, every variable read, and every bad
 * value refused with a message naming the variable (main prints it and
 * exits 2 before listening; see process.test.ts).
 */
import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig, type Config } from "../src/config.js";

describe("loadConfig", () => {
  it("defaults: embedded PGlite, limits for one small server", () => {
    expect(loadConfig({})).toEqual<Config>({
      host: "127.0.0.1",
      port: 8080,
      databaseUrl: undefined,
      dataDir: "./data",
      pglite: { sharedBuffersMb: 16, initInChild: true },
      adminKey: undefined,
      logLevel: "info",
      pgPoolMax: 20,
      shutdownGraceMs: 10_000,
      maxRunningCalls: 2,
      headersTimeoutMs: 10_000,
      requestTimeoutMs: 30_000,
      idleTimeoutMs: 65_000,
      maxConnections: 10_000,
      h2MaxConcurrentStreams: 100,
      h2MaxSessionMemoryMb: 10,
      distribute: undefined,
      databaseReadUrls: [],
      readReplicaMaxLagMs: 50,
      grantSweepIntervalMs: 60_000,
      grantSweepBatch: 1_000,
      consoleDir: undefined,
      metricsEnabled: true,
      metricsPort: undefined,
      metricsHost: "127.0.0.1",
      otelTracesUrl: undefined,
      otelTracesSampler: { name: "parentbased_traceidratio", ratio: 0.01 },
    });
  });

  it.each<{ env: Record<string, string>; expected: Partial<Config> }>([
    { env: { DATABASE_URL: "postgres://db/x" }, expected: { databaseUrl: "postgres://db/x", maxRunningCalls: 10 } },
    { env: { DATABASE_URL: "postgres://db/x", PG_POOL_MAX: "7" }, expected: { pgPoolMax: 7, maxRunningCalls: 3 } },
    { env: { DATABASE_URL: "postgres://db/x", PG_POOL_MAX: "1" }, expected: { maxRunningCalls: 1 } },
    { env: { MAX_RUNNING_CALLS: "40" }, expected: { maxRunningCalls: 40 } },
    { env: { PORT: "0", HOST: "0.0.0.0" }, expected: { port: 0, host: "0.0.0.0" } },
    { env: { LOG_LEVEL: "WARN" }, expected: { logLevel: "warn" } },
    { env: { AUTHZ_DATA_DIR: "/var/lib/p", AUTHZ_ADMIN_KEY: "k".repeat(20) }, expected: { dataDir: "/var/lib/p", adminKey: "k".repeat(20) } },
    { env: { HTTP_HEADERS_TIMEOUT_MS: "2000", HTTP_REQUEST_TIMEOUT_MS: "2000" }, expected: { headersTimeoutMs: 2_000, requestTimeoutMs: 2_000 } },
    { env: { HTTP_IDLE_TIMEOUT_MS: "5000", MAX_CONNECTIONS: "50" }, expected: { idleTimeoutMs: 5_000, maxConnections: 50 } },
    { env: { H2_MAX_CONCURRENT_STREAMS: "250", H2_MAX_SESSION_MEMORY_MB: "32" }, expected: { h2MaxConcurrentStreams: 250, h2MaxSessionMemoryMb: 32 } },
    { env: { DATABASE_URL: "  ", PORT: "" }, expected: { databaseUrl: undefined, port: 8080 } },
    { env: { DATABASE_URL: "postgres://db/x", AUTHZ_DISTRIBUTE: "Citus" }, expected: { distribute: "citus" } },
    { env: { DATABASE_URL: "postgres://db/x", AUTHZ_DISTRIBUTE: " " }, expected: { distribute: undefined } },
    {
      env: { DATABASE_URL: "postgres://db/x", DATABASE_READ_URLS: "postgres://r1/x, postgresql://u:p@r2:5433/x,," },
      expected: { databaseReadUrls: ["postgres://r1/x", "postgresql://u:p@r2:5433/x"] },
    },
    { env: { DATABASE_URL: "postgres://db/x", READ_REPLICA_MAX_LAG_MS: "250" }, expected: { readReplicaMaxLagMs: 250 } },
    { env: { GRANT_SWEEP_INTERVAL_MS: "0", GRANT_SWEEP_BATCH: "200" }, expected: { grantSweepIntervalMs: 0, grantSweepBatch: 200 } },
    { env: { PGLITE_SHARED_BUFFERS_MB: "128" }, expected: { pglite: { sharedBuffersMb: 128, initInChild: true } } },
    { env: { PGLITE_SHARED_BUFFERS_MB: " 1 ", PGLITE_INIT_IN_CHILD: "False" }, expected: { pglite: { sharedBuffersMb: 1, initInChild: false } } },
    { env: { PGLITE_SHARED_BUFFERS_MB: "", PGLITE_INIT_IN_CHILD: " " }, expected: { pglite: { sharedBuffersMb: 16, initInChild: true } } },
    { env: { CONSOLE_DIR: "/srv/console" }, expected: { consoleDir: "/srv/console" } },
    { env: { METRICS_ENABLED: "false" }, expected: { metricsEnabled: false, metricsPort: undefined } },
    { env: { METRICS_ENABLED: "TRUE", METRICS_PORT: "9464" }, expected: { metricsEnabled: true, metricsPort: 9464, metricsHost: "127.0.0.1" } },
    { env: { HOST: "0.0.0.0", METRICS_PORT: "9464" }, expected: { metricsPort: 9464, metricsHost: "0.0.0.0" } },
    { env: { HOST: "0.0.0.0", METRICS_PORT: "9464", METRICS_HOST: "10.0.0.5" }, expected: { metricsHost: "10.0.0.5" } },
    { env: { PORT: "0", METRICS_PORT: "0" }, expected: { port: 0, metricsPort: 0 } },
    { env: { METRICS_PORT: " " }, expected: { metricsPort: undefined } },
    { env: { OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" }, expected: { otelTracesUrl: "http://collector:4318/v1/traces" } },
    { env: { OTEL_EXPORTER_OTLP_ENDPOINT: "https://collector:4318/otlp/" }, expected: { otelTracesUrl: "https://collector:4318/otlp/v1/traces" } },
    {
      env: { OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://traces:4318/custom" },
      expected: { otelTracesUrl: "http://traces:4318/custom" },
    },
    { env: { OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318", OTEL_SDK_DISABLED: "true" }, expected: { otelTracesUrl: undefined } },
    { env: { OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_EXPORTER_OTLP_PROTOCOL: "http/json" }, expected: { otelTracesUrl: "http://c:4318/v1/traces" } },
    { env: { OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" }, expected: { otelTracesUrl: undefined } },
    { env: { OTEL_TRACES_SAMPLER: "always_on" }, expected: { otelTracesSampler: { name: "always_on", ratio: 1 } } },
    { env: { OTEL_TRACES_SAMPLER: " ParentBased_Always_Off " }, expected: { otelTracesSampler: { name: "parentbased_always_off", ratio: 1 } } },
    { env: { OTEL_TRACES_SAMPLER: "traceidratio" }, expected: { otelTracesSampler: { name: "traceidratio", ratio: 1 } } },
    { env: { OTEL_TRACES_SAMPLER: "traceidratio", OTEL_TRACES_SAMPLER_ARG: "0.25" }, expected: { otelTracesSampler: { name: "traceidratio", ratio: 0.25 } } },
    { env: { OTEL_TRACES_SAMPLER_ARG: "1" }, expected: { otelTracesSampler: { name: "parentbased_traceidratio", ratio: 1 } } },
    { env: { OTEL_TRACES_SAMPLER_ARG: "0" }, expected: { otelTracesSampler: { name: "parentbased_traceidratio", ratio: 0 } } },
    { env: { OTEL_TRACES_SAMPLER: "", OTEL_TRACES_SAMPLER_ARG: " " }, expected: { otelTracesSampler: { name: "parentbased_traceidratio", ratio: 0.01 } } },
  ])("reads $env", ({ env, expected }) => {
    expect(loadConfig(env)).toMatchObject(expected);
  });

  it.each<[Record<string, string>, RegExp]>([
    [{ PORT: "abc" }, /^PORT must be a whole number/],
    [{ GRANT_SWEEP_INTERVAL_MS: "-5" }, /^GRANT_SWEEP_INTERVAL_MS must be a whole number/],
    [{ GRANT_SWEEP_BATCH: "0" }, /^GRANT_SWEEP_BATCH must be between 1 and 100000/],
    [{ PGLITE_SHARED_BUFFERS_MB: "0" }, /^PGLITE_SHARED_BUFFERS_MB must be between 1 and 1024/],
    [{ PGLITE_SHARED_BUFFERS_MB: "1025" }, /^PGLITE_SHARED_BUFFERS_MB must be between 1 and 1024/],
    [{ PGLITE_SHARED_BUFFERS_MB: "16MB" }, /^PGLITE_SHARED_BUFFERS_MB must be a whole number/],
    [{ PGLITE_INIT_IN_CHILD: "yes" }, /^PGLITE_INIT_IN_CHILD must be true or false/],
    [{ PORT: "65536" }, /^PORT must be between 0 and 65535/],
    [{ PORT: "-1" }, /^PORT must be a whole number/],
    [{ PORT: "1e3" }, /^PORT must be a whole number/],
    [{ LOG_LEVEL: "chatty" }, /^LOG_LEVEL must be one of/],
    [{ PG_POOL_MAX: "0" }, /^PG_POOL_MAX must be between 1/],
    [{ SHUTDOWN_GRACE_MS: "600001" }, /^SHUTDOWN_GRACE_MS must be between/],
    [{ MAX_RUNNING_CALLS: "0" }, /^MAX_RUNNING_CALLS must be between 1/],
    [{ HTTP_HEADERS_TIMEOUT_MS: "50" }, /^HTTP_HEADERS_TIMEOUT_MS must be between 100/],
    [{ HTTP_REQUEST_TIMEOUT_MS: "1.5" }, /^HTTP_REQUEST_TIMEOUT_MS must be a whole number/],
    [{ HTTP_HEADERS_TIMEOUT_MS: "20000", HTTP_REQUEST_TIMEOUT_MS: "10000" }, /^HTTP_HEADERS_TIMEOUT_MS \(20000\) must not be above HTTP_REQUEST_TIMEOUT_MS/],
    [{ HTTP_IDLE_TIMEOUT_MS: "0" }, /^HTTP_IDLE_TIMEOUT_MS must be between/],
    [{ MAX_CONNECTIONS: "0" }, /^MAX_CONNECTIONS must be between 1/],
    [{ H2_MAX_CONCURRENT_STREAMS: "0" }, /^H2_MAX_CONCURRENT_STREAMS must be between 1/],
    [{ H2_MAX_SESSION_MEMORY_MB: "2048" }, /^H2_MAX_SESSION_MEMORY_MB must be between 1 and 1024/],
    [{ DATABASE_URL: "postgres://db/x", AUTHZ_DISTRIBUTE: "yes" }, /^AUTHZ_DISTRIBUTE must be "citus" or empty/],
    [{ AUTHZ_DISTRIBUTE: "citus" }, /^AUTHZ_DISTRIBUTE needs DATABASE_URL/],
    [{ DATABASE_READ_URLS: "postgres://r1/x" }, /^DATABASE_READ_URLS needs DATABASE_URL/],
    [{ DATABASE_URL: "postgres://db/x", DATABASE_READ_URLS: "postgres://r1/x,mysql://u:secret@r2/x" }, /^DATABASE_READ_URLS entry 2 must be a postgres:\/\/ URL$/],
    [{ DATABASE_URL: "postgres://db/x", READ_REPLICA_MAX_LAG_MS: "0" }, /^READ_REPLICA_MAX_LAG_MS must be between 1/],
    [{ METRICS_ENABLED: "yes" }, /^METRICS_ENABLED must be true or false/],
    [{ METRICS_PORT: "abc" }, /^METRICS_PORT must be a whole number/],
    [{ METRICS_PORT: "70000" }, /^METRICS_PORT must be between 0 and 65535/],
    [{ METRICS_PORT: "8080" }, /^METRICS_PORT must differ from PORT/],
    [{ PORT: "9000", METRICS_PORT: "9000" }, /^METRICS_PORT must differ from PORT/],
    [{ METRICS_ENABLED: "false", METRICS_PORT: "9464" }, /^METRICS_PORT is set but METRICS_ENABLED is false/],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: "collector:4318" }, /^OTEL_EXPORTER_OTLP_ENDPOINT must be an http:\/\/ or https:\/\/ URL$/],
    [{ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "ftp://u:secret@c/x" }, /^OTEL_EXPORTER_OTLP_TRACES_ENDPOINT must be an http:\/\/ or https:\/\/ URL$/],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" }, /^OTEL_EXPORTER_OTLP_PROTOCOL must be http\/json or http\/protobuf/],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "grpc" }, /^OTEL_EXPORTER_OTLP_TRACES_PROTOCOL must be http\/json/],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_SDK_DISABLED: "maybe" }, /^OTEL_SDK_DISABLED must be true or false/],
    [{ OTEL_TRACES_SAMPLER: "jaeger_remote" }, /^OTEL_TRACES_SAMPLER must be one of always_on, .*got "jaeger_remote"/],
    [{ OTEL_TRACES_SAMPLER_ARG: "1.5" }, /^OTEL_TRACES_SAMPLER_ARG must be a ratio from 0 to 1/],
    [{ OTEL_TRACES_SAMPLER_ARG: "-0.1" }, /^OTEL_TRACES_SAMPLER_ARG must be a ratio from 0 to 1/],
    [{ OTEL_TRACES_SAMPLER_ARG: "1e-2" }, /^OTEL_TRACES_SAMPLER_ARG must be a ratio from 0 to 1/],
    [{ OTEL_TRACES_SAMPLER: "always_on", OTEL_TRACES_SAMPLER_ARG: "0.5" }, /^OTEL_TRACES_SAMPLER_ARG is set but OTEL_TRACES_SAMPLER is always_on/],
  ])("refuses %j, naming the variable", (env, message) => {
    expect(() => loadConfig(env)).toThrow(ConfigError);
    expect(() => loadConfig(env)).toThrow(message);
  });
});
