/**
 * The REST check without Fastify. Fastify's per-request machinery (routing,
 * hooks, the content-type parser, the reply object) cost a bare JSON route
 * about 15 µs of CPU per request over Node's own http server (wrk, 3 runs:
 * 39-45 µs against 25-32), a quarter of what a whole REST check costs the
 * service. So on HTTP/1.1, the plainest requests to the POST routes without
 * path variables (the check, the batch check and AuthZEN's evaluations
 * above all) are read and answered here, on Node's request and response,
 * through the very same serveRest as the Fastify route: same authorization,
 * reading, errors and JSON, and the same headers a route's own rules add
 * (RestRoute.answerHeaders: AuthZEN's). Anything else goes on to Fastify
 * untouched: no declared length or a chunked body, a length over the limit
 * (Fastify answers the 413), a query string, another media type, an Expect
 * header.
 *
 * Each request it answers is recorded here (request-log.ts: its line, its
 * metrics, the end of its span), as Fastify's request lines record the
 * others: the route's template and RPC, the status, the time from arrival,
 * the request id (also sent back in x-request-id, and in an error body) and
 * the calling key's id. With tracing on, its span starts on arrival.
 */
import type http from "node:http";
import { LIMITS } from "../../domain/formats.js";
import { onClientGone } from "../call/client-gone.js";
import { Tracing } from "../../lib/tracing.js";
import type { RequestLog } from "../call/request-log.js";
import { serveRest, type RestDeps, type RestRoute } from "./rest-gateway.js";

const NO_PARAMS: Record<string, string | undefined> = Object.freeze({});
const NO_QUERY: Record<string, string | string[]> = Object.freeze({});
/** The Content-Type Fastify sends with a JSON payload. */
const JSON_TYPE = "application/json; charset=utf-8";
const JSON_REQUEST = /^application\/json\s*(;|$)/i;

/** Answers true when it took the request, false to leave it to Fastify. */
export type RestFastPath = (req: http.IncomingMessage, res: http.ServerResponse) => boolean;

export function restFastPath(routes: RestRoute[], deps: RestDeps, requestLog: RequestLog): RestFastPath {
  const tracing = deps.tracing ?? Tracing.off;
  const byPath = new Map<string, RestRoute>();
  for (const r of routes) {
    const { route } = r;
    // Whole-response JSON only: a response_body may be a JSON string, which Fastify sends as text.
    if (route.verb === "POST" && route.pathFields.length === 0 && route.body === "*" && route.responseBody === undefined) {
      byPath.set(route.template, r);
    }
  }
  return (req, res) => {
    if (req.method !== "POST") return false;
    const r = byPath.get(req.url ?? "");
    if (r === undefined) return false;
    const { headers } = req;
    const length = headers["content-length"];
    if (length === undefined || headers["transfer-encoding"] !== undefined || headers.expect !== undefined) return false;
    if (!JSON_REQUEST.test(headers["content-type"] ?? "") || !(Number(length) <= LIMITS.bodyBytes)) return false;
    serve(r, req, res, deps, requestLog, tracing);
    return true;
  };
}

function serve(r: RestRoute, req: http.IncomingMessage, res: http.ServerResponse, deps: RestDeps, requestLog: RequestLog, tracing: Tracing): void {
  const started = requestLog.recording ? performance.now() : 0;
  const requestId = requestLog.requestId(req.headers);
  const span = tracing.enabled ? tracing.startRpc(req.headers, "rest", r.rpc, requestId, r.http) : undefined;
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.once("end", () => {
    const body = chunks.length === 0 ? undefined : chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    const request = { method: "POST", url: r.route.template, headers: req.headers, params: NO_PARAMS, query: NO_QUERY, body };
    serveRest(r, request, deps, requestId, (abort) => onClientGone(res, abort), span).then(
      ({ status, payload, keyId }) => {
        if (res.destroyed) {
          // The client went away while the call ran: nothing was answered.
          if (span !== undefined) tracing.endAbandoned(span);
          return;
        }
        const json = JSON.stringify(payload);
        const headers = { "content-type": JSON_TYPE, "content-length": Buffer.byteLength(json), "x-request-id": requestId };
        const added = r.answerHeaders?.(request, status);
        res.writeHead(status, added === undefined ? headers : { ...headers, ...added });
        res.end(json);
        if (requestLog.recording) {
          const ms = performance.now() - started;
          requestLog.write({ protocol: "rest", method: "POST", route: r.route.template, rpc: r.rpc.path, status, ms, requestId, keyId, span });
        }
      },
      (error: unknown) => {
        deps.log.error({ err: error, requestId }, "unhandled error");
        if (span !== undefined) tracing.end(span, error);
        res.destroy();
      },
    );
  });
  // A client that goes away mid-body leaves nothing to answer.
  req.on("error", ignore);
}

function ignore(): void {}
