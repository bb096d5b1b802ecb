/**
 * Composition: the database, the domain, the services and the transport,
 * wired from one Config. `main` runs it; the tests start it on port 0.
 */
import type { Server as Http1Server } from "node:http";
import { fileURLToPath } from "node:url";
import pino, { type Logger } from "pino";
import type { Config } from "./config.js";
import { feedBounds } from "./domain/change-feed.js";
import { FeedReaders } from "./domain/feed-readers.js";
import { ChangeSignals } from "./domain/change-signals.js";
import { ExpirySweep } from "./domain/expiry-sweep.js";
import { KeyAuthenticator } from "./domain/keys.js";
import type { Db } from "./store/db.js";
import { DeferredDb } from "./store/deferred-db.js";
import { distributeOnCitus } from "./store/distribute.js";
import { migrate } from "./store/migrate.js";
import { ReadReplicas } from "./store/read-replicas.js";
import { PgDb, PG_READS } from "./store/pg-db.js";
import { PGLITE_READS, PgliteDb } from "./store/pglite-db.js";
import { TEMPLATE_FILE } from "./store/pglite-template.js";
import { buildFastifyApp } from "./transport/http/fastify-app.js";
import { UnaryGrpc } from "./transport/grpc/grpc-unary.js";
import { H2Server } from "./transport/http/h2-server.js";
import { CallLimiter } from "./transport/call/call-limiter.js";
import { defaultConsoleDir } from "./transport/pages/console-static.js";
import { effectiveConnectionCap, openFilesLimit } from "./transport/http/descriptor-limit.js";
import { serviceBindings } from "./bindings.js";
import { listen } from "./transport/http/listener.js";
import { portError } from "./transport/http/port-error.js";
import { RequestLog } from "./transport/call/request-log.js";
import { serveMetrics, type MetricsServer } from "./transport/http/metrics-server.js";
import { Metrics } from "./lib/metrics.js";
import { NO_TELEMETRY, type Telemetry } from "./lib/telemetry.js";
import { Tracing } from "./lib/tracing.js";
import { TracedDb } from "./store/traced-db.js";

export interface Portcullis {
  readonly url: string;
  readonly port: number;
  /** The port of /metrics when METRICS_PORT is set (its own server), else undefined. */
  readonly metricsPort: number | undefined;
  readonly db: Db;
  /**
   * Resolves when the database is open and migrated and the service answers
   * API calls, with the operator key this start generated (to print once;
   * undefined when none was). Rejects when the database cannot be opened.
   * Until then /healthz answers, /readyz says 503, and API calls wait.
   */
  readonly ready: Promise<{ generatedOperatorKey: string | undefined }>;
  /** Readers of the change feed admitted now, by kind: reads waiting for a change, and Watch streams (domain/feed-readers.ts). */
  openReaders(): { waits: number; streams: number };
  /** Readers of the change feed waiting for a change now (Watch streams and waiting reads). */
  waitingReaders(): number;
  /** Graceful stop: in-flight requests finish, then the database closes (unless it was passed in). */
  close(): Promise<void>;
}

/**
 * JSON lines on stdout, written asynchronously in blocks of 4 KiB or every
 * 250 ms, and whatever is left when the process exits. At info every request
 * has a line (request-log.ts); written synchronously, one write(2) per line
 * takes 17% of the service's main-thread CPU profile under wrk on the REST
 * check (1.5% this way), at thousands of checks a second. The price: a
 * process killed outright (SIGKILL) loses up to 250 ms of lines.
 */
export function createLogger(config: Pick<Config, "logLevel">): Logger {
  const destination = pino.destination({ dest: 1, sync: false, minLength: 4096, periodicFlush: 250 });
  process.once("exit", () => {
    try {
      destination.flushSync();
    } catch {
      // stdout is gone: nothing left to write to
    }
  });
  return pino(
    {
      level: config.logLevel,
      // Belt and braces: nothing logs headers today, but a key must never reach a log.
      redact: { paths: ['req.headers["x-api-key"]', "req.headers.authorization", "key", "*.key"], censor: "[redacted]" },
    },
    destination,
  );
}

export async function openDb(config: Config, log: Logger): Promise<Db> {
  if (config.databaseUrl !== undefined) {
    return new PgDb(config.databaseUrl, {
      max: config.pgPoolMax,
      boundStatements: config.distribute === "citus" ? config.citusBoundStatements : 0,
      onError: (error) => log.warn({ err: error }, "idle database connection failed"),
    });
  }
  // A new folder starts from the build's template when there is one (none when run from the sources).
  const db = await PgliteDb.open(config.dataDir, { ...config.pglite, templateFile: fileURLToPath(TEMPLATE_FILE) });
  const created = db.created;
  if (created !== undefined) {
    const how = `${created.from === "template" ? "from the build's template" : "by initdb"}, ${created.inChild ? "in a child process" : "in this process"}`;
    const fields = { dataDir: config.dataDir, from: created.from, ms: created.ms, ...(created.inChild ? { childPeakRssMb: created.peakRssMb } : {}) };
    if (created.templateError === undefined) log.info(fields, `created the PGlite data folder ${how}`);
    else log.warn({ ...fields, templateError: created.templateError }, `created the PGlite data folder ${how}: the build's template failed`);
  }
  return db;
}

/**
 * The hot standbys of DATABASE_READ_URLS, each with its own pool (watched by
 * the metrics, traced when tracing is on); undefined when there are none.
 */
export function openReadReplicas(config: Config, primary: Db, log: Logger, telemetry: Telemetry = NO_TELEMETRY): ReadReplicas | undefined {
  if (config.databaseReadUrls.length === 0) return undefined;
  const replicas = config.databaseReadUrls.map((url) => {
    const name = replicaName(url);
    const db = new PgDb(url, {
      max: config.pgPoolMax,
      // A replica that does not answer is skipped, not waited for.
      connectionTimeoutMs: 1_000,
      onError: (error) => log.warn({ err: error, replica: name }, "idle read replica connection failed"),
    });
    telemetry.metrics.watchPool(name, db);
    return { name, db: telemetry.tracing.enabled ? new TracedDb(db, telemetry.tracing) : db };
  });
  return new ReadReplicas(primary, replicas, {
    maxLagMs: config.readReplicaMaxLagMs,
    statementTimeoutMs: 2_000,
    probeIntervalMs: 1_000,
    log,
  });
}

/** A host as a URL writes it (an IPv6 address in brackets). */
const metricsHostOf = (host: string) => (host.includes(":") ? `[${host}]` : host);

/** host:port/database of a connection string: what logs and /readyz may show of it. */
function replicaName(url: string): string {
  const parsed = new URL(url);
  return `${parsed.hostname}:${parsed.port || "5432"}${parsed.pathname}`;
}

export async function startPortcullis(
  config: Config,
  options: { log?: Logger; db?: Db } = {},
): Promise<Portcullis> {
  const log = options.log ?? createLogger(config);
  // Metrics in a registry of this service's own; traces only when an OTLP
  // endpoint is configured (each part tests `enabled` once: off costs nothing).
  const telemetry: Telemetry = {
    metrics: config.metricsEnabled ? Metrics.create() : Metrics.off,
    tracing:
      config.otelTracesUrl === undefined
        ? Tracing.off
        : Tracing.start({ url: config.otelTracesUrl, sampler: config.otelTracesSampler, onError: (error) => log.warn({ err: error }, "spans could not be sent to the OTLP endpoint") }),
  };
  const { metrics, tracing } = telemetry;
  const engine = options.db?.engine ?? (config.databaseUrl === undefined ? "pglite" : "postgres");
  // Listen first, open the database behind: creating a fresh embedded
  // database takes seconds, and health checks should not wait for it; and a
  // start whose port is taken must not open (or lock) the database at all.
  const reads = options.db?.reads ?? (engine === "pglite" ? PGLITE_READS : PG_READS);
  const db = new DeferredDb(engine, reads, async () => {
    const opened = options.db ?? (await openDb(config, log));
    try {
      const applied = await migrate(opened);
      if (applied.length > 0) log.info({ versions: applied }, "applied database migrations");
      if (config.distribute === "citus") {
        const distributed = await distributeOnCitus(opened);
        if (distributed.length > 0) log.info({ tables: distributed }, "distributed the tables on Citus");
      }
    } catch (error) {
      if (options.db === undefined) await opened.close().catch(() => undefined);
      throw error;
    }
    return opened;
  });
  metrics.watchPool("primary", db);
  // The database the domain uses: with tracing on, each statement an RPC waits for is a span.
  const data: Db = tracing.enabled ? new TracedDb(db, tracing) : db;
  const replicas = openReadReplicas(config, data, log, telemetry);
  const keys = new KeyAuthenticator(data, config.adminKey, telemetry);
  const sweep =
    config.grantSweepIntervalMs > 0
      ? new ExpirySweep(db, {
          intervalMs: config.grantSweepIntervalMs,
          batchSize: config.grantSweepBatch,
          onError: (error) => log.warn({ err: error }, "the sweep of expired grants failed; the next pass will try again"),
          onSwept: (deleted, ms, changes) => log.info({ deleted, changes, ms: Math.round(ms) }, "swept expired grants and old changes"),
          changesRetentionMs: config.changesRetentionMs,
        })
      : undefined;
  // The change feed's readers: woken by this process's writes, and by a probe for others' (domain/change-signals.ts).
  const feed = {
    signals: new ChangeSignals(data, { pollMs: config.changesPollMs, onError: (error) => log.warn({ err: error }, "the change feed's probe for new changes failed") }),
    // Waiting reads and streams per key and per application, ended with their key (domain/feed-readers.ts).
    readers: new FeedReaders(keys, config.bulkheads, (error) => log.warn({ err: error }, "looking up the keys of open streams failed; the next look-up will try again")),
    ...feedBounds(config.requestTimeoutMs, config.idleTimeoutMs),
  };
  metrics.watchFeed(() => feed.signals.waiting);
  const ready = db.opened.then(async () => {
    const generatedOperatorKey = await keys.ensureOperatorKey();
    log.info({ database: engine }, "database ready");
    sweep?.start();
    return { generatedOperatorKey };
  });
  ready.catch(() => undefined); // observed by the caller

  let metricsServer: MetricsServer | undefined;
  try {
    const bindings = serviceBindings(data, { keys, log, limiter: new CallLimiter({
          limit: config.maxRunningCalls,
          perOwner: config.bulkheads.runningCallsPerApp,
          maxWaiting: config.bulkheads.waitingCallsPerApp,
        }), tracing }, { replicas, telemetry, feed });
    metrics.knownRpcs(bindings.flatMap(({ service }) => service.methods.map((m) => `/${service.typeName}/${m.name}`)));

    const requestLog = new RequestLog(log, telemetry);
    const h2 = new H2Server(
      {
        maxConcurrentStreams: config.h2MaxConcurrentStreams,
        maxSessionMemoryMb: config.h2MaxSessionMemoryMb,
        requestTimeoutMs: config.requestTimeoutMs,
        idleTimeoutMs: config.idleTimeoutMs,
        streamingPaths: new Set(
          bindings.flatMap(({ service }) => service.methods.filter((m) => m.methodKind === "server_streaming").map((m) => `/${service.typeName}/${m.name}`)),
        ),
      },
      new UnaryGrpc(bindings, log, requestLog, tracing),
      log,
      requestLog,
    );
    const consoleDir = config.consoleDir ?? defaultConsoleDir();
    // /metrics on the main port, unless METRICS_PORT gives it one of its own.
    const metricsRoute = metrics.enabled && config.metricsPort === undefined ? metrics : undefined;
    const appDeps = { bindings, db, replicas, keys, log, requestLog, timeouts: config, consoleDir, tracing, metricsRoute, publicUrl: config.publicUrl };
    const app1 = await buildFastifyApp("http1", appDeps);
    const app2 = await buildFastifyApp("http2", { ...appDeps, h2 });
    metricsServer =
      metrics.enabled && config.metricsPort !== undefined
        ? await serveMetrics(metrics, { host: config.metricsHost, port: config.metricsPort }, log).catch((error: unknown) => {
            throw portError(error, { portVariable: "METRICS_PORT", hostVariable: "METRICS_HOST", host: config.metricsHost, port: config.metricsPort! });
          })
        : undefined;
    const descriptors = openFilesLimit();
    const maxConnections = effectiveConnectionCap(config.maxConnections, descriptors);
    if (maxConnections < config.maxConnections) {
      log.warn(
        { configured: config.maxConnections, openFilesLimit: descriptors, maxConnections },
        "MAX_CONNECTIONS lowered to fit the process's open file limit (raise `ulimit -n` to allow more)",
      );
    }
    const listener = await listen(
      { host: config.host, port: config.port, headersTimeoutMs: config.headersTimeoutMs, maxConnections },
      app1.server as unknown as Http1Server,
      h2,
    ).catch((error: unknown) => {
      throw portError(error, { portVariable: "PORT", hostVariable: "HOST", host: config.host, port: config.port });
    });
    // The ports are ours: only now is the database opened (and, embedded, its folder locked).
    db.start();
    const host = config.host.includes(":") ? `[${config.host}]` : config.host;
    const url = `http://${host}:${listener.port}`;
    const metricsUrl = metricsServer === undefined ? {} : { metrics: `http://${metricsHostOf(config.metricsHost)}:${metricsServer.port}/metrics` };
    // Said once the database is open: a start refused by its database (a data folder in use, a
    // server it cannot reach) never says it listens.
    ready.then(
      () => log.info({ url, database: db.engine, ...metricsUrl }, "portcullis listening (REST, Connect, gRPC, gRPC-Web)"),
      () => undefined,
    );

    return {
      url,
      port: listener.port,
      metricsPort: metricsServer?.port,
      db,
      ready,
      waitingReaders: () => feed.signals.waiting,
      openReaders: () => ({ waits: feed.readers.count("wait"), streams: feed.readers.count("stream") }),
      async close() {
        await sweep?.stop();
        // Waiting reads answer now and Watch streams end (OK): the listener's grace is not spent on them.
        feed.signals.close();
        feed.readers.close();
        await listener.close(config.shutdownGraceMs);
        await Promise.allSettled([app1.close(), app2.close(), metricsServer?.close()]);
        await replicas?.close();
        if (options.db === undefined) await db.close().catch(() => undefined);
        // The spans of the last requests, sent before the process goes.
        await tracing.shutdown().catch((error: unknown) => log.warn({ err: error }, "the last spans could not be sent"));
        log.info("portcullis stopped");
      },
    };
  } catch (error) {
    await sweep?.stop();
    await metricsServer?.close();
    await replicas?.close();
    if (options.db === undefined) await db.close().catch(() => undefined);
    await tracing.shutdown().catch(() => undefined);
    throw error;
  }
}
