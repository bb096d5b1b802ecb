/**
 * The service's Prometheus metrics, with prom-client, in a registry of the
 * service's own (never prom-client's global one): made in app.ts and passed
 * down as a plain dependency; served at /metrics in Prometheus's text format.
 *
 * - Requests: counted by RPC, protocol and code, and timed by RPC and
 *   protocol, at the one place every request's outcome is recorded (the
 *   request log, transport/call/request-log.ts), whichever path answered it.
 *   `rpc` is the RPC's path (`/authz.v1.CheckService/Check`) on every
 *   protocol, REST included; other requests carry their route (`/healthz`,
 *   `(no route)`). `code` is what the request line's `status` says: the HTTP
 *   status for REST and Connect, the gRPC status code for gRPC and gRPC-Web.
 *   Every value comes from a bounded set (routes, protocols, status codes):
 *   nothing a client sends becomes a label.
 * - Check answers, allowed or denied, of the check and of batch checks.
 * - Coalesced reads (lib/coalescer.ts): the size of each batch, and the
 *   statements in flight, read when scraped.
 * - The database pool (Postgres): connections open, idle, callers waiting,
 *   read when scraped; and how long each statement waited for a connection.
 * - Reloads of the in-memory access model, by reason.
 * - Process and Node.js metrics (prom-client's default metrics).
 *
 * The request path is kept cheap: the label sets of each RPC are made once
 * and kept in maps keyed by the route strings the paths already hold (no
 * label object or string built per request). prom-client hashes the label
 * values inside every inc and observe, even a child's (a quarter of a
 * microsecond each here); so the counters of the request path are plain
 * numbers, handed to prom-client's counters when scraped (their `collect`),
 * and only the latency histogram observes per request, through its child.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry, type Metric } from "prom-client";

/** A database pool's use now (a pg pool; PGlite has no pool). */
export interface PoolUse {
  /** Connections open, busy or idle. */
  total: number;
  idle: number;
  /** Callers waiting for a connection. */
  waiting: number;
  max: number;
}

/** What a database tells the metrics of its pool (both optional: PGlite has none). */
export interface WatchedPool {
  poolUse?(): PoolUse | undefined;
  /** Calls `observer` with the seconds each statement or transaction waited for a connection. */
  watchConnectWait?(observer: (seconds: number) => void): void;
}

/** Why the access model of an application was read again. */
export type ModelReloadReason = "first" | "changed";

/** From a tenth of a millisecond (a check answered from a shared statement) to ten seconds (a bulk write). */
export const LATENCY_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
/** Inputs per coalesced batch: one to a full batch check of 1,000. */
const BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000];
/** A free connection is handed over in microseconds; a pool that is short of them makes callers wait milliseconds. */
const WAIT_BUCKETS = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5];

const PROTOCOLS = ["rest", "connect", "grpc", "grpc-web"] as const;

interface HistogramChild {
  observe(value: number): void;
}

/** A count of the request path, read into its prom-client counter when scraped. */
class Tally {
  count = 0;
  constructor(readonly labels: Labels) {}
}
type Labels = Record<string, string>;

/** The metrics of one RPC on one protocol: its requests by code, and its latency histogram's child. */
class RequestCells {
  readonly codes = new Map<number, Tally>();
  constructor(readonly duration: HistogramChild) {}
}

/** Counter options whose values are tallies, read when scraped. */
function tallied(tallies: () => Iterable<Tally>) {
  return {
    collect(this: Counter) {
      this.reset();
      for (const tally of tallies()) if (tally.count > 0) this.inc(tally.labels, tally.count);
    },
  };
}

/**
 * Node's and the process's own metrics (CPU, memory, event loop lag, GC,
 * handles), made once per process and registered in every service's
 * registry: they describe the process, whichever service instance asks,
 * and collectDefaultMetrics starts observers (GC, event loop delay) that it
 * never stops, which a process running several services (the tests) would
 * otherwise gather by the dozen.
 */
let processMetrics: Registry | undefined;
function processRegistry(): Registry {
  if (processMetrics === undefined) {
    processMetrics = new Registry();
    collectDefaultMetrics({ register: processMetrics });
  }
  return processMetrics;
}

export class Metrics {
  /** Nothing recorded, nothing served (METRICS_ENABLED=false). */
  static readonly off = new Metrics(false);

  readonly registry = new Registry();
  private readonly durations: Histogram<"protocol" | "rpc">;
  private readonly cells = new Map<string, Map<string, RequestCells>>();
  private readonly checkAllowed = new Tally({ rpc: "/authz.v1.CheckService/Check", answer: "allowed" });
  private readonly checkDenied = new Tally({ rpc: "/authz.v1.CheckService/Check", answer: "denied" });
  private readonly batchAllowed = new Tally({ rpc: "/authz.v1.CheckService/BatchCheck", answer: "allowed" });
  private readonly batchDenied = new Tally({ rpc: "/authz.v1.CheckService/BatchCheck", answer: "denied" });
  private readonly batchSizes: Histogram<"reads">;
  private readonly inFlight = new Map<string, (() => number)[]>();
  private readonly pools: { name: string; pool: WatchedPool }[] = [];
  private readonly feedReaders: (() => number)[] = [];
  private readonly connectWait: Histogram<"pool">;
  private readonly modelReloads: Counter<"reason">;

  private constructor(readonly enabled: boolean) {
    const registers = enabled ? [this.registry] : [];
    const cells = this.cells;
    new Counter({
      name: "portcullis_requests_total",
      help: "Requests answered, by RPC (or route), protocol and code (HTTP status for REST and Connect, gRPC status for gRPC and gRPC-Web).",
      labelNames: ["protocol", "rpc", "code"],
      registers,
      ...tallied(function* () {
        for (const byProtocol of cells.values()) for (const cell of byProtocol.values()) yield* cell.codes.values();
      }),
    });
    this.durations = new Histogram({
      name: "portcullis_request_duration_seconds",
      help: "Time from a request's arrival to its answer, by RPC (or route) and protocol.",
      labelNames: ["protocol", "rpc"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    const answers = [this.checkAllowed, this.checkDenied, this.batchAllowed, this.batchDenied];
    new Counter({
      name: "portcullis_check_answers_total",
      help: "Answers of checks and of the checks of batch checks, allowed or denied.",
      labelNames: ["rpc", "answer"],
      registers,
      ...tallied(() => answers),
    });
    this.batchSizes = new Histogram({
      name: "portcullis_coalesced_batch_size",
      help: "Inputs per coalesced statement (questions of checks and batch checks, keys, explains, lookups), by the reads coalesced.",
      labelNames: ["reads"],
      buckets: BATCH_BUCKETS,
      registers,
    });
    const inFlight = this.inFlight;
    new Gauge({
      name: "portcullis_coalesced_statements_in_flight",
      help: "Coalesced statements running now, by the reads coalesced.",
      labelNames: ["reads"],
      registers,
      collect() {
        for (const [reads, sources] of inFlight) this.set({ reads }, sources.reduce((n, source) => n + source(), 0));
      },
    });
    const pools = this.pools;
    const poolGauge = (name: string, help: string, value: (use: PoolUse) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ["pool"],
        registers,
        collect() {
          for (const { name: pool, pool: watched } of pools) {
            const use = watched.poolUse?.();
            if (use !== undefined) this.set({ pool }, value(use));
          }
        },
      });
    poolGauge("portcullis_db_pool_connections", "Database connections open (busy or idle), by pool (primary, or a read replica's host:port/database).", (u) => u.total);
    poolGauge("portcullis_db_pool_idle_connections", "Database connections open and idle, by pool.", (u) => u.idle);
    poolGauge("portcullis_db_pool_waiting_clients", "Statements and transactions waiting for a database connection, by pool.", (u) => u.waiting);
    poolGauge("portcullis_db_pool_max_connections", "The most connections the pool opens (PG_POOL_MAX), by pool.", (u) => u.max);
    this.connectWait = new Histogram({
      name: "portcullis_db_pool_wait_seconds",
      help: "Time a statement or transaction waited for a database connection, by pool.",
      labelNames: ["pool"],
      buckets: WAIT_BUCKETS,
      registers,
    });
    const feedReaders = this.feedReaders;
    new Gauge({
      name: "portcullis_change_feed_waiting_readers",
      help: "The change feed's readers waiting for a change now: Watch streams with nothing left to send, and reads with waitMs.",
      registers,
      collect() {
        this.set(feedReaders.reduce((n, source) => n + source(), 0));
      },
    });
    this.modelReloads = new Counter({
      name: "portcullis_model_reloads_total",
      help: "Reads of an application's access model (catalog and role permissions): first (no copy in memory) or changed (the copy's version is not the database's).",
      labelNames: ["reason"],
      registers,
    });
    if (enabled) {
      // getMetricsAsArray's type is the collected shape; the values are the metric objects themselves.
      for (const metric of processRegistry().getMetricsAsArray()) this.registry.registerMetric(metric as unknown as Metric);
    }
  }

  static create(): Metrics {
    return new Metrics(true);
  }

  /** The Content-Type of `text()`. */
  get contentType(): string {
    return this.registry.contentType;
  }

  /** Every metric, in Prometheus's text exposition format. */
  text(): Promise<string> {
    return this.registry.metrics();
  }

  /** Makes the children of known RPCs up front, on every protocol, with the success codes (200, gRPC 0). */
  knownRpcs(paths: readonly string[]): void {
    if (!this.enabled) return;
    for (const path of paths) {
      for (const protocol of PROTOCOLS) this.tallyOf(this.cellsOf(path, protocol), protocol, path, protocol === "grpc" || protocol === "grpc-web" ? 0 : 200);
    }
  }

  /** One request's outcome (call only when enabled: the request log checks). */
  request(protocol: string, rpc: string, code: number, seconds: number): void {
    const cells = this.cellsOf(rpc, protocol);
    this.tallyOf(cells, protocol, rpc, code).count++;
    cells.duration.observe(seconds);
  }

  /** A check's answer. */
  checkAnswered(allowed: boolean): void {
    (allowed ? this.checkAllowed : this.checkDenied).count++;
  }

  /** The answers of a batch check. */
  batchAnswered(answers: readonly boolean[]): void {
    let allowed = 0;
    for (const answer of answers) if (answer) allowed++;
    this.batchAllowed.count += allowed;
    this.batchDenied.count += answers.length - allowed;
  }

  /**
   * A coalescer of `reads` (checks, keys, ...): its statements in flight are
   * read when scraped; the returned function is told each batch's size.
   */
  coalescer(reads: string, inFlight: () => number): ((size: number) => void) | undefined {
    if (!this.enabled) return undefined;
    const sources = this.inFlight.get(reads);
    if (sources === undefined) this.inFlight.set(reads, [inFlight]);
    else sources.push(inFlight);
    const sizes = this.batchSizes.labels(reads);
    return (size) => sizes.observe(size);
  }

  /** A database pool to report on, as `name` (primary, or a replica's host:port/database). */
  watchPool(name: string, pool: WatchedPool): void {
    if (!this.enabled) return;
    this.pools.push({ name, pool });
    const wait = this.connectWait.labels(name);
    pool.watchConnectWait?.((seconds) => wait.observe(seconds));
  }

  /** The change feed's waiting readers, read when scraped. */
  watchFeed(waiting: () => number): void {
    if (this.enabled) this.feedReaders.push(waiting);
  }

  modelReloaded(reason: ModelReloadReason): void {
    if (this.enabled) this.modelReloads.labels(reason).inc();
  }

  private cellsOf(rpc: string, protocol: string): RequestCells {
    let byProtocol = this.cells.get(rpc);
    if (byProtocol === undefined) this.cells.set(rpc, (byProtocol = new Map()));
    let cells = byProtocol.get(protocol);
    if (cells === undefined) byProtocol.set(protocol, (cells = new RequestCells(this.durations.labels(protocol, rpc))));
    return cells;
  }

  private tallyOf(cells: RequestCells, protocol: string, rpc: string, code: number): Tally {
    let tally = cells.codes.get(code);
    if (tally === undefined) cells.codes.set(code, (tally = new Tally({ protocol, rpc, code: String(code) })));
    return tally;
  }
}
