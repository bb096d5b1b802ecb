/**
 * The one typed configuration of the service. `main` reads it from the
 * environment once and passes it down; nothing below reads process.env.
 */
export interface Config {
  readonly host: string;
  readonly port: number;
  /** Postgres connection string; undefined runs on embedded PGlite. */
  readonly databaseUrl: string | undefined;
  /** PGlite data folder, used when databaseUrl is undefined. */
  readonly dataDir: string;
  /** PGlite's memory settings (docs/embedded-memory.md), used when databaseUrl is undefined. */
  readonly pglite: PgliteConfig;
  /** Operator key; undefined means "use the stored one, generating it on first start". */
  readonly adminKey: string | undefined;
  readonly logLevel: LogLevel;
  /** Connections in the Postgres pool of this replica. */
  readonly pgPoolMax: number;
  /** How long shutdown waits for in-flight requests before closing connections. */
  readonly shutdownGraceMs: number;
  /**
   * Calls other than the check and the batch check that may run at once
   * (the rest wait in arrival order, and leave the queue when their caller
   * goes away): the rest of the database pool stays free for checks.
   */
  readonly maxRunningCalls: number;
  /** What one application (or one of its keys) may hold of the shared places, waits and streams (docs/limits.md). */
  readonly bulkheads: Bulkheads;
  /**
   * How long a connection may take to send its first request's head: the
   * HTTP/1.1 request line and headers, or the HTTP/2 preface (before either
   * is recognised, the connection is closed when this passes).
   */
  readonly headersTimeoutMs: number;
  /**
   * HTTP/1.1: how long a whole request (head and body) may take to arrive.
   * HTTP/2: how long one stream may stay open, from its headers to the last
   * byte of its answer (a body that stops arriving, or an answer the client
   * never opens its window for, ends here).
   */
  readonly requestTimeoutMs: number;
  /**
   * A connection with no request in progress is closed after this long:
   * HTTP/1.1 keep-alive, or an HTTP/2 connection with no stream in progress
   * and none started (PINGs do not count). Also HTTP/1.1's socket
   * inactivity limit while a request or its answer is in progress.
   */
  readonly idleTimeoutMs: number;
  /** Open connections (both protocols) above which new ones are closed at once. */
  readonly maxConnections: number;
  /**
   * HTTP/2 streams one connection may have open at once (SETTINGS). Calls
   * still running on a connection, including those whose streams were
   * reset, are capped at twice this: new streams above it are refused.
   */
  readonly h2MaxConcurrentStreams: number;
  /** nghttp2's memory per HTTP/2 connection (header tables, queued frames), in MiB; above it new streams are refused. */
  readonly h2MaxSessionMemoryMb: number;
  /**
   * "citus": distribute the tables on start (docs/scale-out.md); the
   * database must have the citus extension. undefined: plain Postgres.
   */
  readonly distribute: "citus" | undefined;
  /**
   * With distribute "citus": the questions' statements a connection
   * prepares with their application's id in the text, planned once
   * (store/bound-statements.ts); 0: none.
   */
  readonly citusBoundStatements: number;
  /** Hot standbys of DATABASE_URL that answer checks (docs/scale-out.md). */
  readonly databaseReadUrls: readonly string[];
  /** How long a check waits for a replica to replay the primary's changes before the primary answers it. */
  readonly readReplicaMaxLagMs: number;
  /** Time between passes of the sweep that deletes expired grants; 0 turns it off (expired grants count nowhere either way). */
  readonly grantSweepIntervalMs: number;
  /** Expired grants one sweep statement deletes at most. */
  readonly grantSweepBatch: number;
  /** How long the change feed keeps a change (CHANGES_RETENTION); the sweep deletes older ones. */
  readonly changesRetentionMs: number;
  /** How often an application with readers waiting for changes is asked for writes made through other processes. */
  readonly changesPollMs: number;
  /** The built console served at /console/; undefined: the build beside the service (dist/console). */
  readonly consoleDir: string | undefined;
  /** Prometheus metrics recorded and served at /metrics; false: neither (the bench's "without metrics"). */
  readonly metricsEnabled: boolean;
  /**
   * A port of its own for /metrics (a small server of its own, on
   * metricsHost); the main port then answers 404 there. undefined: /metrics
   * on the main port.
   */
  readonly metricsPort: number | undefined;
  /** The interface metricsPort listens on (default: HOST). */
  readonly metricsHost: string;
  /**
   * Where traces go, OTLP over HTTP (JSON): OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
   * or OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces. undefined: no tracing at all.
   */
  readonly otelTracesUrl: string | undefined;
  /**
   * Which traces are kept (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG):
   * by default the caller's decision (a sampled traceparent), else 1 in 100
   * (docs/api.md: Metrics, traces and request ids).
   */
  readonly otelTracesSampler: TracesSampler;
  /**
   * The service's base URL as its clients reach it (PUBLIC_URL, such as
   * https://pdp.example.com behind a TLS proxy): AuthZEN's metadata
   * (docs/authzen.md) names it and its endpoints. undefined: each metadata
   * request's own Host (and X-Forwarded-Proto) gives it.
   */
  readonly publicUrl?: string | undefined;
}

/** An OpenTelemetry sampler by its standard name; ratio for the traceidratio ones. */
export interface TracesSampler {
  readonly name: TracesSamplerName;
  readonly ratio: number;
}

const TRACES_SAMPLERS = ["always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"] as const;
export type TracesSamplerName = (typeof TRACES_SAMPLERS)[number];

/** The sampling default: the caller's decision, else 1 request in 100. */
export const DEFAULT_TRACES_SAMPLER: TracesSampler = { name: "parentbased_traceidratio", ratio: 0.01 };

export type LogLevel = "fatal" | "error" | "warn" | "info" | "debug" | "trace" | "silent";

/** The bounds per application and per key (docs/limits.md, "One application cannot hurt another"). */
export interface Bulkheads {
  /** Of MAX_RUNNING_CALLS, the calls of one application running at once. */
  readonly runningCallsPerApp: number;
  /** Calls of one application waiting for a place; the next is refused (429). */
  readonly waitingCallsPerApp: number;
  /** Reads of the change feed waiting for a change (waitMs), per key and per application; the next is refused (429). */
  readonly feedWaitsPerKey: number;
  readonly feedWaitsPerApp: number;
  /** Open Watch streams, per key and per application; the next is refused (RESOURCE_EXHAUSTED). */
  readonly watchStreamsPerKey: number;
  readonly watchStreamsPerApp: number;
  /** How often the keys of open streams and waiting reads are looked up again: a revoked key's ends within this. */
  readonly streamKeyRecheckMs: number;
}

const logLevels: readonly LogLevel[] = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];

export class ConfigError extends Error {}

/** Reads and validates the configuration; throws ConfigError naming the bad variable. */
export function loadConfig(env: Readonly<Record<string, string | undefined>>): Config {
  const logLevel = (env.LOG_LEVEL ?? "info").toLowerCase();
  if (!logLevels.includes(logLevel as LogLevel)) {
    throw new ConfigError(`LOG_LEVEL must be one of ${logLevels.join(", ")}, got "${env.LOG_LEVEL}"`);
  }
  const pgPoolMax = intVar(env, "PG_POOL_MAX", 20, 1, 1000);
  const databaseUrl = nonEmpty(env.DATABASE_URL);
  // Half the Postgres pool; on PGlite, one connection that runs on the
  // service's own thread, two (a check waits behind at most two statements).
  const maxRunningCalls = intVar(env, "MAX_RUNNING_CALLS", databaseUrl === undefined ? 2 : Math.max(1, Math.floor(pgPoolMax / 2)), 1, 100_000);
  return {
    host: nonEmpty(env.HOST) ?? "127.0.0.1",
    port: intVar(env, "PORT", 8080, 0, 65535),
    databaseUrl,
    dataDir: nonEmpty(env.AUTHZ_DATA_DIR) ?? "./data",
    pglite: pgliteSettings(env),
    adminKey: nonEmpty(env.AUTHZ_ADMIN_KEY),
    logLevel: logLevel as LogLevel,
    pgPoolMax,
    shutdownGraceMs: intVar(env, "SHUTDOWN_GRACE_MS", 10_000, 0, 600_000),
    maxRunningCalls,
    bulkheads: bulkheads(env, maxRunningCalls),
    ...connectionLimits(env),
    ...scaleOut(env, databaseUrl),
    grantSweepIntervalMs: intVar(env, "GRANT_SWEEP_INTERVAL_MS", 60_000, 0, 86_400_000),
    grantSweepBatch: intVar(env, "GRANT_SWEEP_BATCH", 1_000, 1, 100_000),
    changesRetentionMs: durationVar(env, "CHANGES_RETENTION", "7d", 1_000, 3_650 * 86_400_000),
    changesPollMs: intVar(env, "CHANGES_POLL_MS", 250, 10, 60_000),
    consoleDir: nonEmpty(env.CONSOLE_DIR),
    ...telemetry(env),
    publicUrl: publicUrl(env),
  };
}

/** The bounds per application and per key (docs/limits.md). */
function bulkheads(env: Readonly<Record<string, string | undefined>>, maxRunningCalls: number): Bulkheads {
  return {
    runningCallsPerApp: intVar(env, "MAX_RUNNING_CALLS_PER_APP", Math.max(1, Math.ceil(maxRunningCalls / 2)), 1, 100_000),
    waitingCallsPerApp: intVar(env, "MAX_WAITING_CALLS_PER_APP", 1_000, 1, 1_000_000),
    feedWaitsPerKey: intVar(env, "FEED_WAITS_PER_KEY", 500, 1, 1_000_000),
    feedWaitsPerApp: intVar(env, "FEED_WAITS_PER_APP", 1_000, 1, 1_000_000),
    watchStreamsPerKey: intVar(env, "WATCH_STREAMS_PER_KEY", 100, 1, 1_000_000),
    watchStreamsPerApp: intVar(env, "WATCH_STREAMS_PER_APP", 250, 1, 1_000_000),
    streamKeyRecheckMs: intVar(env, "STREAM_KEY_RECHECK_MS", 2_000, 50, 60_000),
  };
}

/** PUBLIC_URL: an http(s) URL with no query, fragment or credentials; a trailing slash is dropped. */
function publicUrl(env: Readonly<Record<string, string | undefined>>): string | undefined {
  const given = nonEmpty(env.PUBLIC_URL)?.trim();
  if (given === undefined) return undefined;
  const url = URL.canParse(given) ? new URL(given) : undefined;
  if (url === undefined || !["http:", "https:"].includes(url.protocol) || url.search !== "" || url.hash !== "" || url.username !== "" || url.password !== "") {
    // The value is not repeated: it may carry credentials.
    throw new ConfigError("PUBLIC_URL must be an http:// or https:// URL with no query, fragment or credentials, such as https://pdp.example.com");
  }
  return url.toString().replace(/\/+$/, "");
}

/**
 * PGlite's start settings as configured; main hands them to the store's
 * PgliteSettings (the same shape), so config needs nothing from the store.
 */
export interface PgliteConfig {
  readonly sharedBuffersMb: number;
  readonly initInChild: boolean;
}

/** PGlite's memory (docs/embedded-memory.md). */
function pgliteSettings(env: Readonly<Record<string, string | undefined>>): PgliteConfig {
  return {
    sharedBuffersMb: intVar(env, "PGLITE_SHARED_BUFFERS_MB", 16, 1, 1024),
    initInChild: boolVar(env, "PGLITE_INIT_IN_CHILD", true),
  };
}

/** Metrics and traces (docs/api.md: Metrics, traces and request ids). */
function telemetry(env: Readonly<Record<string, string | undefined>>) {
  const metricsEnabled = boolVar(env, "METRICS_ENABLED", true);
  const metricsPort = nonEmpty(env.METRICS_PORT) === undefined ? undefined : intVar(env, "METRICS_PORT", 0, 0, 65535);
  if (metricsPort !== undefined && !metricsEnabled) throw new ConfigError("METRICS_PORT is set but METRICS_ENABLED is false: nothing would be served there");
  const port = intVar(env, "PORT", 8080, 0, 65535);
  if (metricsPort !== undefined && metricsPort !== 0 && metricsPort === port) {
    throw new ConfigError(`METRICS_PORT must differ from PORT (both ${port}): /metrics is then served on its own port only`);
  }
  return {
    metricsEnabled,
    metricsPort,
    metricsHost: nonEmpty(env.METRICS_HOST) ?? nonEmpty(env.HOST) ?? "127.0.0.1",
    otelTracesUrl: otelTracesUrl(env),
    otelTracesSampler: tracesSampler(env),
  };
}

/**
 * The OTLP/HTTP traces URL, from the standard variables. The exporter would
 * read them itself; they are read here so that whether tracing is on is
 * decided by this config, and a bad value stops the service at start.
 */
function otelTracesUrl(env: Readonly<Record<string, string | undefined>>): string | undefined {
  const disabled = nonEmpty(env.OTEL_SDK_DISABLED)?.trim().toLowerCase();
  if (disabled === "true") return undefined;
  if (disabled !== undefined && disabled !== "false") throw new ConfigError(`OTEL_SDK_DISABLED must be true or false, got "${env.OTEL_SDK_DISABLED}"`);
  const protocolName = nonEmpty(env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL) !== undefined ? "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" : "OTEL_EXPORTER_OTLP_PROTOCOL";
  const protocol = nonEmpty(env[protocolName]);
  const signal = nonEmpty(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)?.trim();
  const base = nonEmpty(env.OTEL_EXPORTER_OTLP_ENDPOINT)?.trim();
  const url = signal ?? (base === undefined ? undefined : `${base.replace(/\/+$/, "")}/v1/traces`);
  if (url === undefined) return undefined;
  const name = signal !== undefined ? "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" : "OTEL_EXPORTER_OTLP_ENDPOINT";
  // Only the URL's shape is named: an endpoint may carry credentials.
  if (!/^https?:\/\//i.test(url) || !URL.canParse(url)) throw new ConfigError(`${name} must be an http:// or https:// URL`);
  // The exporter sends OTLP/HTTP with JSON bodies, which a collector's
  // OTLP/HTTP receiver takes beside protobuf; gRPC is another port and protocol.
  if (protocol !== undefined && !["http/json", "http/protobuf"].includes(protocol.trim().toLowerCase())) {
    throw new ConfigError(`${protocolName} must be http/json or http/protobuf (traces are sent as OTLP/HTTP JSON), got "${protocol}"`);
  }
  return url;
}

/**
 * The sampler, from the standard variables (the SDK's own names; the SDK is
 * handed the sampler built from them rather than reading them itself, so a
 * bad value stops the service at start).
 */
function tracesSampler(env: Readonly<Record<string, string | undefined>>): TracesSampler {
  const given = nonEmpty(env.OTEL_TRACES_SAMPLER)?.trim().toLowerCase();
  const name = (given ?? DEFAULT_TRACES_SAMPLER.name) as TracesSamplerName;
  if (!TRACES_SAMPLERS.includes(name)) {
    throw new ConfigError(`OTEL_TRACES_SAMPLER must be one of ${TRACES_SAMPLERS.join(", ")}, got "${env.OTEL_TRACES_SAMPLER}"`);
  }
  const arg = nonEmpty(env.OTEL_TRACES_SAMPLER_ARG)?.trim();
  if (!name.endsWith("traceidratio")) {
    if (arg !== undefined) throw new ConfigError(`OTEL_TRACES_SAMPLER_ARG is set but OTEL_TRACES_SAMPLER is ${name}, which takes no argument`);
    return { name, ratio: 1 };
  }
  if (arg === undefined) return { name, ratio: given === undefined ? DEFAULT_TRACES_SAMPLER.ratio : 1 };
  const ratio = Number(arg);
  if (!/^(0|1|0?\.\d+|1\.0*)$/.test(arg) || !(ratio >= 0 && ratio <= 1)) {
    throw new ConfigError(`OTEL_TRACES_SAMPLER_ARG must be a ratio from 0 to 1 (such as 0.01), got "${env.OTEL_TRACES_SAMPLER_ARG}"`);
  }
  return { name, ratio };
}

function scaleOut(env: Readonly<Record<string, string | undefined>>, databaseUrl: string | undefined) {
  const distribute = nonEmpty(env.AUTHZ_DISTRIBUTE)?.trim().toLowerCase();
  if (distribute !== undefined && distribute !== "citus") {
    throw new ConfigError(`AUTHZ_DISTRIBUTE must be "citus" or empty, got "${env.AUTHZ_DISTRIBUTE}"`);
  }
  const databaseReadUrls = (nonEmpty(env.DATABASE_READ_URLS) ?? "")
    .split(",")
    .map((url) => url.trim())
    .filter((url) => url !== "");
  if (databaseUrl === undefined && (distribute !== undefined || databaseReadUrls.length > 0)) {
    throw new ConfigError(`${distribute !== undefined ? "AUTHZ_DISTRIBUTE" : "DATABASE_READ_URLS"} needs DATABASE_URL (the embedded database has no replicas and no workers)`);
  }
  databaseReadUrls.forEach((url, i) => {
    if (!/^postgres(ql)?:\/\//.test(url) || !URL.canParse(url)) {
      // The position only: a connection string may hold a password.
      throw new ConfigError(`DATABASE_READ_URLS entry ${i + 1} must be a postgres:// URL`);
    }
  });
  return {
    distribute: distribute as "citus" | undefined,
    citusBoundStatements: intVar(env, "CITUS_BOUND_STATEMENTS", 8, 0, 1000),
    databaseReadUrls,
    readReplicaMaxLagMs: intVar(env, "READ_REPLICA_MAX_LAG_MS", 50, 1, 60_000),
  };
}

function connectionLimits(env: Readonly<Record<string, string | undefined>>) {
  const headersTimeoutMs = intVar(env, "HTTP_HEADERS_TIMEOUT_MS", 10_000, 100, 600_000);
  const requestTimeoutMs = intVar(env, "HTTP_REQUEST_TIMEOUT_MS", 30_000, 100, 3_600_000);
  if (headersTimeoutMs > requestTimeoutMs) {
    // Node refuses it too: a request's head is part of the request.
    throw new ConfigError(`HTTP_HEADERS_TIMEOUT_MS (${headersTimeoutMs}) must not be above HTTP_REQUEST_TIMEOUT_MS (${requestTimeoutMs})`);
  }
  return {
    headersTimeoutMs,
    requestTimeoutMs,
    idleTimeoutMs: intVar(env, "HTTP_IDLE_TIMEOUT_MS", 65_000, 100, 3_600_000),
    maxConnections: intVar(env, "MAX_CONNECTIONS", 10_000, 1, 1_000_000),
    h2MaxConcurrentStreams: intVar(env, "H2_MAX_CONCURRENT_STREAMS", 100, 1, 10_000),
    h2MaxSessionMemoryMb: intVar(env, "H2_MAX_SESSION_MEMORY_MB", 10, 1, 1024),
  };
}

function boolVar(env: Readonly<Record<string, string | undefined>>, name: string, fallback: boolean): boolean {
  const raw = nonEmpty(env[name])?.trim().toLowerCase();
  if (raw === undefined) return fallback;
  if (raw === "true" || raw === "false") return raw === "true";
  throw new ConfigError(`${name} must be true or false, got "${env[name]}"`);
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === "" ? undefined : value;
}

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * A duration as a whole number and a unit (ms, s, m, h, d): `7d`, `12h`,
 * `30s`; in milliseconds. Six lines of our own rather than the `ms` package,
 * which also takes "1.5h", "2 days" and a bare number of milliseconds: a
 * typo in a retention should stop the start, not mean something else.
 */
function durationVar(env: Readonly<Record<string, string | undefined>>, name: string, fallback: string, min: number, max: number): number {
  const raw = nonEmpty(env[name]) ?? fallback;
  const match = /^(\d{1,9})(ms|s|m|h|d)$/.exec(raw.trim());
  if (match === null) throw new ConfigError(`${name} must be a duration such as 7d, 12h, 30m, 30s or 500ms, got "${raw}"`);
  const value = Number(match[1]) * DURATION_UNITS[match[2]!]!;
  if (value < min || value > max) throw new ConfigError(`${name} must be between ${min / 1_000}s and ${max / 86_400_000}d, got "${raw}"`);
  return value;
}

function intVar(
  env: Readonly<Record<string, string | undefined>>,
  name: string,
  fallback: number,
  min: number,
  max: number,
): number {
  const raw = nonEmpty(env[name]);
  if (raw === undefined) return fallback;
  if (!/^\d+$/.test(raw.trim())) throw new ConfigError(`${name} must be a whole number, got "${raw}"`);
  const value = Number(raw.trim());
  if (value < min || value > max) throw new ConfigError(`${name} must be between ${min} and ${max}, got ${value}`);
  return value;
}
