/**
 * The request line of every request Fastify answers (REST routes, Connect,
 * gRPC-Web, gRPC streams relayed by the HTTP/2 layer, reflection, health,
 * 404s, requests its router refuses): written once, when the answer is
 * finished, through the RequestLog the REST fast path and unary gRPC use
 * too, so every path writes the same line (and records the same metrics).
 *
 * - With tracing on, an RPC's span starts here, on arrival; REST routes and
 *   Connect calls run in it (the gateway, and the guard through the call's
 *   context values), and the request log ends it with the answer's code.
 *
 * - The request id is Fastify's own (`genReqId` is RequestLog.requestId, see
 *   fastify-app.ts) and goes back in `x-request-id`, set on the raw response
 *   so that answers written past Fastify's reply (Connect's, the gRPC 404)
 *   carry it too.
 * - The route is a template, never the request target: a REST route's
 *   annotated template (`/api/v1/applications/{app_id}`), an RPC's path,
 *   "(no route)" for a 404. Query strings and path ids stay out of the log.
 * - The key id: REST routes note it from serveRest; Connect routes read it
 *   from the call's context values, which are made here per request (the
 *   plugin's `contextValues` option) so the hook can read them afterwards.
 * - The status: the HTTP status, except for gRPC and gRPC-Web, whose HTTP
 *   status is 200 whatever happened: there, the gRPC status code, read from
 *   the answer as it leaves (the trailers, or gRPC-Web's trailer frame).
 */
import { Code, createContextKey, createContextValues, type ContextValues } from "@connectrpc/connect";
import type { UniversalHandler, UniversalServerResponse } from "@connectrpc/connect/protocol";
import { trailerFlag, trailerParse } from "@connectrpc/connect/protocol-grpc-web";
import { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest } from "fastify";
import { rpcOfPath, Tracing, type RpcName, type Span } from "../../lib/tracing.js";
import { callerOf } from "../../services/call-values.js";
import { noteCall } from "../call/call-context.js";
import { NO_ROUTE, type RequestLog } from "../call/request-log.js";
import type { RestRoute } from "../rest/rest-gateway.js";

declare module "fastify" {
  interface FastifyContextConfig {
    /** The REST route a Fastify route serves (set by the REST gateway). */
    restRoute?: RestRoute;
  }
  interface FastifyRequest {
    /** The key id of the REST call this request carried, once authorized (set by the REST gateway). */
    callerKeyId: string | undefined;
    /** The context values of the Connect call this request carried. */
    callValues: ContextValues | undefined;
    /** The span of the RPC this request carries, when tracing is on. */
    rpcSpan: Span | undefined;
  }
}

/** The gRPC status of a Connect-router answer, once seen leaving. */
interface Outcome {
  grpcStatus: number | undefined;
}
const outcomeKey = createContextKey<Outcome | undefined>(undefined, { description: "the gRPC status of the answer" });

/**
 * Fastify's LogController (its `logController` option) is told of every
 * request it takes, before any hook: routed requests, 404s, and the requests
 * its router refuses (frameworkErrors), which run no hook at all. So the id
 * goes back and the line is arranged here, not in hooks. Fastify's own
 * request lines stay off (disableRequestLogging).
 */
export class RequestLines extends LogController {
  // Private fields (#), not properties: Fastify deep-clones its options to
  // validate them, the controller included, and these hold loggers and
  // registries it must not walk.
  /** Fastify's route paths of Connect and gRPC routes, to their RPCs (made on first use). */
  readonly #rpcs = new Map<string, RpcName | undefined>();
  readonly #requestLog: RequestLog;
  readonly #tracing: Tracing;

  constructor(requestLog: RequestLog, tracing: Tracing = Tracing.off) {
    // Fastify's own lines (an error it logs) name the request's id as ours do.
    super({ disableRequestLogging: true, requestIdLogLabel: "requestId" });
    this.#requestLog = requestLog;
    this.#tracing = tracing;
  }

  override incomingRequest(request: FastifyRequest, reply: FastifyReply): void {
    reply.raw.setHeader("x-request-id", request.id);
    if (!this.#requestLog.recording) return; // nothing would be recorded: no listener at all
    const started = performance.now();
    if (this.#tracing.enabled) this.startSpan(request, reply);
    // "finish": the whole answer was handed to the connection (a client that
    // leaves first gets no line: nothing was answered).
    reply.raw.once("finish", () => this.write(request, reply, performance.now() - started));
  }

  /** An RPC's span (not one for health checks, scrapes, the console or a 404), ended with the answer or when the client leaves. */
  private startSpan(request: FastifyRequest, reply: FastifyReply): void {
    const routePath = request.routeOptions.url;
    if (routePath === undefined) return;
    const rest = request.routeOptions.config?.restRoute;
    const rpc = rest?.rpc ?? this.rpcOf(routePath);
    if (rpc === undefined) return;
    const protocol = rest !== undefined ? "rest" : (grpcProtocol(request) ?? "connect");
    const span = (request.rpcSpan = this.#tracing.startRpc(request.headers, protocol, rpc, request.id, rest?.http));
    reply.raw.once("close", () => {
      if (!reply.raw.writableFinished) this.#tracing.endAbandoned(span);
    });
  }

  private rpcOf(routePath: string): RpcName | undefined {
    if (this.#rpcs.has(routePath)) return this.#rpcs.get(routePath);
    const rpc = rpcOfPath(routePath);
    this.#rpcs.set(routePath, rpc);
    return rpc;
  }

  private write(req: FastifyRequest, reply: FastifyReply, ms: number): void {
    const routePath = req.routeOptions.url;
    const protocol = protocolOf(req);
    const values = req.callValues;
    let status = reply.raw.statusCode;
    if (protocol === "grpc" || protocol === "grpc-web") {
      status = values?.get(outcomeKey)?.grpcStatus ?? grpcStatusHeader(reply.raw.getHeader("grpc-status")) ?? status;
      // The 404 handler answers an unknown RPC with UNIMPLEMENTED in the trailers.
      if (routePath === undefined) status = Code.Unimplemented;
    }
    const rest = req.routeOptions.config?.restRoute;
    this.#requestLog.write({
      protocol,
      method: req.method,
      route: routePath === undefined ? NO_ROUTE : (rest?.route.template ?? routePath),
      rpc: rest?.rpc.path,
      status,
      ms,
      requestId: req.id,
      keyId: req.callerKeyId ?? (values === undefined ? undefined : callerOf({ values })?.keyId),
      span: req.rpcSpan,
    });
  }
}

/** Declares the request fields the line reads; call before any route is registered. */
export function decorateForRequestLines(app: FastifyInstance): void {
  app.decorateRequest("callerKeyId", undefined);
  app.decorateRequest("callValues", undefined);
  app.decorateRequest("rpcSpan", undefined);
}

/**
 * The Connect plugin's `contextValues` option: the call's values, kept on
 * the request for the line, holding the request's id and span for the guard.
 */
export function connectContextValues(req: FastifyRequest): ContextValues {
  const values = createContextValues();
  noteCall(values, req.id, req.rpcSpan);
  req.callValues = values;
  return values;
}

/**
 * Wraps every handler of a Connect router in place, so the gRPC status of
 * each answer is noted in the call's context values as the answer leaves
 * (call after the last wrapper that may rewrite answers, mendConnectAnswers).
 */
export function noteGrpcOutcomes(handlers: UniversalHandler[]): void {
  for (let i = 0; i < handlers.length; i++) handlers[i] = wrap(handlers[i]!);
}

function wrap(handler: UniversalHandler): UniversalHandler {
  const wrapped = async (request: Parameters<UniversalHandler>[0]): Promise<UniversalServerResponse> => {
    const response = await handler(request);
    const type = response.header?.get("content-type") ?? "";
    if (!type.startsWith("application/grpc")) return response;
    const outcome: Outcome = { grpcStatus: grpcStatusHeader(response.header?.get("grpc-status")) };
    request.contextValues?.set(outcomeKey, outcome);
    if (response.body === undefined) return response;
    if (type.startsWith("application/grpc-web")) return { ...response, body: watchTrailerFrame(response.body, outcome) };
    // gRPC: the trailers are filled in once the body has been sent, before the response finishes.
    const trailer = response.trailer;
    if (trailer === undefined) return response;
    return { ...response, body: afterBody(response.body, () => (outcome.grpcStatus ??= grpcStatusHeader(trailer.get("grpc-status")))) };
  };
  // The router reads the handler's path, method, protocols and content types from its properties.
  return Object.assign(wrapped, handler);
}

async function* afterBody(body: AsyncIterable<Uint8Array>, then: () => void): AsyncIterable<Uint8Array> {
  yield* body;
  then();
}

/** gRPC-Web: the status is in the trailer frame, the last envelope of the body (one envelope per chunk). */
async function* watchTrailerFrame(body: AsyncIterable<Uint8Array>, outcome: Outcome): AsyncIterable<Uint8Array> {
  for await (const chunk of body) {
    if (chunk.byteLength >= 5 && chunk[0] === trailerFlag) {
      outcome.grpcStatus = grpcStatusHeader(trailerParse(chunk.subarray(5)).get("grpc-status")) ?? outcome.grpcStatus;
    }
    yield chunk;
  }
}

function grpcStatusHeader(value: unknown): number | undefined {
  if (typeof value !== "string" || !/^\d{1,2}$/.test(value)) return undefined;
  return Number(value);
}

function protocolOf(req: FastifyRequest): string {
  return grpcProtocol(req) ?? (req.callValues === undefined ? "rest" : "connect");
}

function grpcProtocol(req: FastifyRequest): "grpc" | "grpc-web" | undefined {
  const type = req.headers["content-type"] ?? "";
  if (type.startsWith("application/grpc-web")) return "grpc-web";
  if (type.startsWith("application/grpc")) return "grpc";
  return undefined;
}
