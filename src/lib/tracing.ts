/**
 * OpenTelemetry traces, when the config names an OTLP endpoint
 * (OTEL_EXPORTER_OTLP_ENDPOINT): the @opentelemetry SDK, spans batched
 * (BatchSpanProcessor) and sent as OTLP/HTTP JSON.
 *
 * - A span per RPC, on every protocol (kind SERVER, named by the RPC's path
 *   as gRPC names its spans), from the request's arrival to its answer:
 *   rpc.system, rpc.service, rpc.method, the request id, the HTTP route and
 *   method over REST, and its code at the end (rpc.grpc.status_code for gRPC
 *   and gRPC-Web, http.response.status_code for REST and Connect). A W3C
 *   `traceparent` continues the caller's trace.
 * - A span per database statement (and per transaction) an RPC waited for,
 *   as a child of the RPC's span (store/traced-db.ts).
 * - A coalesced statement answers many calls: one span for it, child of the
 *   first call it answers and linked from each of their spans (and linking
 *   to them), with the statement's own database spans beneath it.
 *
 * The RPC conventions used are those most backends read today (rpc.system,
 * rpc.service, rpc.method, rpc.grpc.status_code), not the newer stable
 * rpc.system.name and rpc.method of semantic conventions 1.39+.
 *
 * Off (the default), `Tracing.off` is a constant whose `enabled` is false:
 * callers test it once (or chose their code path when they were built) and
 * make no span, no context and no closure for a request.
 */
import {
  context,
  defaultTextMapGetter,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Link,
  type Span,
  type Tracer,
} from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { setGlobalErrorHandler, W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from "@opentelemetry/resources";
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  NodeTracerProvider,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  type Sampler,
} from "@opentelemetry/sdk-trace-node";
import {
  ATTR_DB_OPERATION_NAME,
  ATTR_DB_QUERY_TEXT,
  ATTR_DB_SYSTEM_NAME,
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_SERVICE_NAME,
  DB_SYSTEM_NAME_VALUE_POSTGRESQL,
} from "@opentelemetry/semantic-conventions";

export type { Span } from "@opentelemetry/api";

// The RPC attributes (semantic conventions before 1.39; incubating names
// are copied, not imported, as the OpenTelemetry packages advise).
const ATTR_RPC_SYSTEM = "rpc.system";
const ATTR_RPC_SERVICE = "rpc.service";
const ATTR_RPC_METHOD = "rpc.method";
const ATTR_RPC_GRPC_STATUS_CODE = "rpc.grpc.status_code";
/** The request's id (request-log.ts), as its log lines and answers carry it. */
export const ATTR_REQUEST_ID = "portcullis.request_id";
const ATTR_BATCH_SIZE = "portcullis.batch.size";
const ATTR_BATCH_CALLS = "portcullis.batch.calls";

/** One RPC, named once: its path and parts (no string work per request). */
export interface RpcName {
  /** `/authz.v1.CheckService/Check` */
  readonly path: string;
  /** `authz.v1.CheckService` */
  readonly service: string;
  /** `Check` */
  readonly method: string;
}

export function rpcName(service: string, method: string): RpcName {
  return { path: `/${service}/${method}`, service, method };
}

/** The RPC of a Connect or gRPC path (`/pkg.Service/Method`), else undefined. */
export function rpcOfPath(path: string): RpcName | undefined {
  const match = /^\/([A-Za-z_][\w.]*)\/([A-Za-z_]\w*)$/.exec(path);
  return match === null ? undefined : rpcName(match[1]!, match[2]!);
}

/** gRPC codes that are the server's failure (semantic conventions: the span's status is Error). */
const GRPC_SERVER_ERRORS = new Set([2, 4, 12, 13, 14, 15]); // UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS

const RPC_SYSTEM: Record<string, string> = { grpc: "grpc", "grpc-web": "grpc", connect: "connect_rpc", rest: "http" };

/** The headers a span's parent is read from (Node's, HTTP/1.1 or HTTP/2). */
type Carrier = Readonly<Record<string, string | string[] | undefined>>;

export interface TracingOptions {
  /** Where spans go: an OTLP/HTTP traces URL (…/v1/traces). */
  url: string;
  /** Which traces are kept, by the sampler's standard name (config.ts: tracesSampler). */
  sampler: { name: string; ratio: number };
  /** Told when spans could not be sent (the collector is down, refuses them...): else silent. */
  onError: (error: unknown) => void;
}

/** The SDK's sampler of a standard name (OTEL_TRACES_SAMPLER's values). */
function samplerOf({ name, ratio }: { name: string; ratio: number }): Sampler {
  const root = name.endsWith("always_off") ? new AlwaysOffSampler() : name.endsWith("traceidratio") ? new TraceIdRatioBasedSampler(ratio) : new AlwaysOnSampler();
  return name.startsWith("parentbased_") ? new ParentBasedSampler({ root }) : root;
}

/**
 * The process's one context manager (async-local storage), registered by the
 * first Tracing started; a second registration would be refused, and the
 * first serves all. It is enabled only while a sampled call runs: Node's
 * async-local storage follows every promise of every call through its hooks
 * once enabled: left enabled with 1 call in 100 traced, it costs the REST
 * check a third of its rate, the other 99 paying for the one.
 * `within` enters it for a sampled span and disables it again when the last
 * sampled call in progress settles; the next one enables it anew.
 */
const contexts = new AsyncLocalStorageContextManager();
let contextsRegistered = false;
/** Calls running inside `within` with a sampled span. */
let sampledInProgress = 0;

function sampledSettled(): void {
  if (--sampledInProgress === 0) contexts.disable();
}

export class Tracing {
  /** No tracing: `enabled` is false and nothing else may be called. */
  static readonly off = new Tracing(undefined, undefined);

  readonly enabled: boolean;
  private readonly propagator = new W3CTraceContextPropagator();

  private constructor(
    private readonly tracer: Tracer | undefined,
    private readonly provider: NodeTracerProvider | undefined,
  ) {
    this.enabled = tracer !== undefined;
  }

  static start(options: TracingOptions): Tracing {
    // service.name "portcullis", unless OTEL_SERVICE_NAME or
    // OTEL_RESOURCE_ATTRIBUTES say otherwise (read by the SDK's detector).
    const resource = defaultResource()
      .merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: "portcullis" }))
      .merge(detectResources({ detectors: [envDetector] }));
    // The exporter and the batch processor read the other OTEL_* variables
    // themselves (headers, timeouts, certificates, OTEL_BSP_*). The sampler
    // is the SDK's own, chosen by config (by default the caller's decision,
    // else 1 in 100): a span for every request cost 20-40% of the check's
    // rate (docs/performance.md).
    const provider = new NodeTracerProvider({
      resource,
      sampler: samplerOf(options.sampler),
      spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: options.url }))],
    });
    // The async-local-storage context manager, so that a database span finds
    // its RPC's span; once per process (a second registration is refused,
    // and the first serves all). No global propagator: the W3C one is used
    // here directly.
    provider.register({ propagator: null, contextManager: contextsRegistered ? null : contexts });
    contextsRegistered = true;
    // Where the SDK reports a failed export (process-wide, as the SDK has it).
    setGlobalErrorHandler(options.onError);
    return new Tracing(provider.getTracer("portcullis"), provider);
  }

  /**
   * The span of an RPC, from its arrival: the caller's trace continues when
   * the request carries a W3C traceparent.
   */
  startRpc(headers: Carrier, protocol: string, rpc: RpcName, requestId: string, rest?: { method: string; route: string }): Span {
    const parent = headers.traceparent === undefined ? ROOT_CONTEXT : this.propagator.extract(ROOT_CONTEXT, headers, defaultTextMapGetter);
    const attributes: Attributes = {
      [ATTR_RPC_SYSTEM]: RPC_SYSTEM[protocol] ?? protocol,
      [ATTR_RPC_SERVICE]: rpc.service,
      [ATTR_RPC_METHOD]: rpc.method,
      [ATTR_REQUEST_ID]: requestId,
    };
    if (rest !== undefined) {
      attributes[ATTR_HTTP_REQUEST_METHOD] = rest.method;
      attributes[ATTR_HTTP_ROUTE] = rest.route;
    }
    return this.tracer!.startSpan(rpc.path, { kind: SpanKind.SERVER, attributes }, parent);
  }

  /** Ends an RPC's span with its code: the gRPC status for gRPC and gRPC-Web, else the HTTP status. */
  endRpc(span: Span, protocol: string, status: number): void {
    const grpc = protocol === "grpc" || protocol === "grpc-web";
    span.setAttribute(grpc ? ATTR_RPC_GRPC_STATUS_CODE : ATTR_HTTP_RESPONSE_STATUS_CODE, status);
    if (grpc ? GRPC_SERVER_ERRORS.has(status) : status >= 500) {
      span.setAttribute(ATTR_ERROR_TYPE, String(status));
      span.setStatus({ code: SpanStatusCode.ERROR });
    }
    span.end();
  }

  /** Ends the span of an RPC whose client went away before its answer. */
  endAbandoned(span: Span): void {
    span.setAttribute(ATTR_ERROR_TYPE, "client_gone");
    span.end();
  }

  /** Runs `fn` with `span` as the current span: database spans started inside are its children. */
  within<T>(span: Span, fn: () => T): T {
    // A span the sampler dropped has nothing to be a parent of: its call runs
    // outside any context, so its statements make no spans (database()),
    // and it never enters the async-local storage, whose hooks would
    // otherwise follow every promise of every call (docs/performance.md).
    if (!span.isRecording()) return fn();
    sampledInProgress++;
    let result: T;
    try {
      result = context.with(trace.setSpan(context.active(), span), fn);
    } catch (error) {
      sampledSettled();
      throw error;
    }
    if (result instanceof Promise) result.then(sampledSettled, sampledSettled);
    else sampledSettled();
    return result;
  }

  /** The current span (the RPC's, inside `within`); undefined outside one, or when it was not sampled. */
  activeSpan(): Span | undefined {
    const span = trace.getSpan(context.active());
    return span?.isRecording() === true ? span : undefined;
  }

  /**
   * The span of one coalesced statement answering `callers` (the spans of
   * the calls it answers; undefined for calls made outside any RPC): a child
   * of the first, linked from each of them and linking to each.
   */
  startBatch(reads: string, size: number, callers: readonly (Span | undefined)[]): Span {
    const links: Link[] = [];
    let first: Span | undefined;
    for (const caller of callers) {
      if (caller === undefined) continue;
      first ??= caller;
      links.push({ context: caller.spanContext() });
    }
    const parent = first === undefined ? ROOT_CONTEXT : trace.setSpan(ROOT_CONTEXT, first);
    const span = this.tracer!.startSpan(
      `coalesced ${reads} statement`,
      { kind: SpanKind.INTERNAL, links, attributes: { [ATTR_BATCH_SIZE]: size, [ATTR_BATCH_CALLS]: callers.length } },
      parent,
    );
    const link: Link = { context: span.spanContext() };
    for (const caller of callers) caller?.addLink(link);
    return span;
  }

  /**
   * Runs a database statement (or a transaction: `sql` undefined) in a span
   * of its own, a child of the current span; with no current span (the
   * sweep, migrations), with none.
   */
  database<T>(sql: string | undefined, run: () => Promise<T>): Promise<T> {
    const parent = context.active();
    if (trace.getSpan(parent) === undefined) return run();
    const operation = sql === undefined ? "transaction" : operationOf(sql);
    const attributes: Attributes = { [ATTR_DB_SYSTEM_NAME]: DB_SYSTEM_NAME_VALUE_POSTGRESQL, [ATTR_DB_OPERATION_NAME]: operation };
    // The statement's text: parameters travel apart, so it holds no value of a request.
    if (sql !== undefined) attributes[ATTR_DB_QUERY_TEXT] = sql;
    return this.tracer!.startActiveSpan(operation, { kind: SpanKind.CLIENT, attributes }, parent, (span) =>
      run().then(
        (result) => {
          span.end();
          return result;
        },
        (error: unknown) => {
          failed(span, error);
          span.end();
          throw error;
        },
      ),
    );
  }

  /** Ends a span, marking it failed when `error` is given. */
  end(span: Span, error?: unknown): void {
    if (error !== undefined) failed(span, error);
    span.end();
  }

  /** Sends the spans still buffered and stops (the service is closing). */
  async shutdown(): Promise<void> {
    await this.provider?.shutdown();
  }
}

/**
 * Marks a span failed by the error's kind only: a database's message may
 * quote a value of the request, and spans leave the service.
 */
function failed(span: Span, error: unknown): void {
  const code = (error as { code?: unknown } | undefined)?.code;
  span.setAttribute(ATTR_ERROR_TYPE, typeof code === "string" ? code : error instanceof Error ? error.name : "error");
  span.setStatus({ code: SpanStatusCode.ERROR });
}

/** The statement's first keyword (SELECT, INSERT, WITH, BEGIN...), upper-cased. */
function operationOf(sql: string): string {
  const match = /^\s*([A-Za-z]+)/.exec(sql);
  return match === null ? "statement" : match[1]!.toUpperCase();
}
