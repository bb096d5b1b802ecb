/**
 * One log line per request, whichever path answered it (Fastify, the REST
 * fast path, unary gRPC, Connect): method, route, status, duration, request
 * id and the caller's key id, at `info`, in the service's one JSON line
 * format (pino). Never the key itself, a body or a query string (query
 * strings may carry ids a deployment considers private; routes are templates).
 *
 * Request ids: the caller's own `x-request-id` when it is a short token
 * (so one id follows a request across services), else one made here: a
 * random prefix per process and a counter, unique across replicas and
 * restarts without a random draw per request.
 */
import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import { base32 } from "../domain/ids.js";

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
}

const ACCEPTED_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export class RequestLog {
  private readonly prefix = `req_${base32(randomBytes(8))}`;
  private counter = 0;
  /** Whether lines are written at all (LOG_LEVEL above info skips the work). */
  readonly enabled: boolean;

  constructor(private readonly log: Logger) {
    this.enabled = log.isLevelEnabled("info");
  }

  /** The request's id: the caller's x-request-id when well-formed, else a new one. */
  requestId(incoming: string | string[] | undefined): string {
    return this.givenId(incoming) ?? `${this.prefix}${(++this.counter).toString(36)}`;
  }

  /** The caller's x-request-id when it is well-formed (one kept as the request's id), else undefined. */
  givenId(incoming: string | string[] | undefined): string | undefined {
    const given = Array.isArray(incoming) ? incoming[0] : incoming;
    return given !== undefined && ACCEPTED_ID.test(given) ? given : undefined;
  }

  write(record: RequestRecord): void {
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
}
