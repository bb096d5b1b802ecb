/**
 * The one place each request's outcome is recorded, whichever path answered
 * it (Fastify, the REST fast path, unary gRPC, Connect, and the refusals
 * made before any route): its log line, its metrics (lib/metrics.ts) and the
 * end of its span (lib/tracing.ts).
 *
 * The line: method, route, status, duration, request id and the caller's
 * key id, at `info`, in the service's one JSON line format (pino). Never the
 * key itself, a body or a query string (query strings may carry ids a
 * deployment considers private; routes are templates).
 *
 * Request ids: the caller's own `x-request-id` when it is a short token (so
 * one id follows a request across services); else, when the request carries
 * a W3C `traceparent`, its trace id (the id a trace of the request goes by);
 * else one made here: a random prefix per process and a counter, unique
 * across replicas and restarts without a random draw per request.
 */
import { parseTraceParent } from "@opentelemetry/core";
import { randomBytes } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";
import type { Logger } from "pino";
import { base32 } from "../../lib/ids.js";
import type { Metrics } from "../../lib/metrics.js";
import { NO_TELEMETRY, type Telemetry } from "../../lib/telemetry.js";
import type { Span, Tracing } from "../../lib/tracing.js";

/** The route of a request no route took (an unknown path, a request refused before routing). */
export const NO_ROUTE = "(no route)";

export interface RequestRecord {
  /** "rest", "grpc", "connect", "grpc-web". */
  protocol: string;
  /** The HTTP method. */
  method: string;
  /** The route template (`/api/v1/applications/{app_id}`) or the RPC path (`/authz.v1.CheckService/Check`). */
  route: string;
  /** The HTTP status; for gRPC, the gRPC status code. */
  status: number;
  /** Milliseconds from the request's arrival to its answer. */
  ms: number;
  requestId: string;
  /** The calling key's id, once the key was recognised. */
  keyId?: string | undefined;
  /** The RPC's path when `route` is not it (a REST template): the metrics count RPCs, whatever the protocol. */
  rpc?: string | undefined;
  /** The request's span, when tracing is on and it is an RPC: ended here. */
  span?: Span | undefined;
}

const ACCEPTED_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export class RequestLog {
  private readonly prefix = `req_${base32(randomBytes(8))}`;
  private counter = 0;
  /** Whether lines are written at all (LOG_LEVEL above info skips the work). */
  readonly enabled: boolean;
  /** Whether write() records anything (a line, metrics, a span): the paths time a request only then. */
  readonly recording: boolean;
  private readonly metrics: Metrics;
  private readonly tracing: Tracing;

  constructor(
    private readonly log: Logger,
    telemetry: Telemetry = NO_TELEMETRY,
  ) {
    this.enabled = log.isLevelEnabled("info");
    this.metrics = telemetry.metrics;
    this.tracing = telemetry.tracing;
    this.recording = this.enabled || this.metrics.enabled || this.tracing.enabled;
  }

  /** The request's id: the caller's x-request-id when well-formed, else its traceparent's trace id, else a new one. */
  requestId(headers: IncomingHttpHeaders): string {
    return this.givenId(headers["x-request-id"]) ?? traceIdOf(headers.traceparent) ?? `${this.prefix}${(++this.counter).toString(36)}`;
  }

  /** The caller's x-request-id when it is well-formed (one kept as the request's id), else undefined. */
  private givenId(incoming: string | string[] | undefined): string | undefined {
    const given = Array.isArray(incoming) ? incoming[0] : incoming;
    return given !== undefined && ACCEPTED_ID.test(given) ? given : undefined;
  }

  write(record: RequestRecord): void {
    if (this.metrics.enabled) this.metrics.request(record.protocol, record.rpc ?? record.route, record.status, record.ms / 1000);
    if (record.span !== undefined) this.tracing.endRpc(record.span, record.protocol, record.status);
    if (!this.enabled) return;
    this.log.info(
      {
        protocol: record.protocol,
        method: record.method,
        route: record.route,
        status: record.status,
        ms: Math.round(record.ms * 1000) / 1000,
        requestId: record.requestId,
        ...(record.keyId === undefined ? {} : { keyId: record.keyId }),
      },
      "request",
    );
  }

  /**
   * A request answered before any route took it (Node's parser refused it,
   * a missing Host, an Expect, CONNECT; http-errors.ts): recorded like any
   * other, as "(no route)".
   */
  refused(method: string | undefined, status: number, requestId: string): void {
    if (this.recording) this.write({ protocol: "rest", method: method ?? "(unparsed)", route: NO_ROUTE, status, ms: 0, requestId });
  }
}

/** The trace id of a well-formed W3C traceparent (32 lower-case hex digits), else undefined. */
function traceIdOf(traceparent: string | string[] | undefined): string | undefined {
  if (traceparent === undefined) return undefined;
  const value = Array.isArray(traceparent) ? traceparent[0] : traceparent;
  return value === undefined ? undefined : parseTraceParent(value)?.traceId;
}
