/**
 * The request line of every request Fastify answers (REST routes, Connect,
 * gRPC-Web, gRPC streams relayed by the HTTP/2 layer, reflection, health,
 * 404s, requests its router refuses): written once, when the answer is
 * finished, through the RequestLog the REST fast path and unary gRPC use
 * too, so every path writes the same line.
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
import { callerOf } from "./auth.js";
import type { RequestLog } from "./request-log.js";
import type { RestRoute } from "./rest-gateway.js";

declare module "fastify" {
  interface FastifyRequest {
    /** The key id of the REST call this request carried, once authorized (set by the REST gateway). */
    callerKeyId: string | undefined;
    /** The context values of the Connect call this request carried. */
    callValues: ContextValues | undefined;
  }
}

/** The gRPC status of a Connect-router answer, once seen leaving. */
interface Outcome {
  grpcStatus: number | undefined;
}
const outcomeKey = createContextKey<Outcome | undefined>(undefined, { description: "the gRPC status of the answer" });

const NO_ROUTE = "(no route)";

/**
 * Fastify's LogController (its `logController` option) is told of every
 * request it takes, before any hook: routed requests, 404s, and the requests
 * its router refuses (frameworkErrors), which run no hook at all. So the id
 * goes back and the line is arranged here, not in hooks. Fastify's own
 * request lines stay off (disableRequestLogging).
 */
export class RequestLines extends LogController {
  /** Fastify's route paths (`:app_id`) back to the annotated templates (`{app_id}`). */
  private readonly templates: Map<string, string>;

  constructor(
    private readonly requestLog: RequestLog,
    routes: RestRoute[],
  ) {
    super({ disableRequestLogging: true });
    this.templates = new Map(routes.map((r) => [r.route.routePath, r.route.template]));
  }

  override incomingRequest(request: FastifyRequest, reply: FastifyReply): void {
    reply.raw.setHeader("x-request-id", request.id);
    if (!this.requestLog.enabled) return; // the line would not be written: no listener at all
    const started = performance.now();
    // "finish": the whole answer was handed to the connection (a client that
    // leaves first gets no line: nothing was answered).
    reply.raw.once("finish", () => this.write(request, reply, performance.now() - started));
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
    this.requestLog.write({
      protocol,
      method: req.method,
      route: routePath === undefined ? NO_ROUTE : (this.templates.get(routePath) ?? routePath),
      status,
      ms,
      requestId: req.id,
      keyId: req.callerKeyId ?? (values === undefined ? undefined : callerOf({ values })?.keyId),
    });
  }
}

/** Declares the request fields the line reads; call before any route is registered. */
export function decorateForRequestLines(app: FastifyInstance): void {
  app.decorateRequest("callerKeyId", undefined);
  app.decorateRequest("callValues", undefined);
}

/** The Connect plugin's `contextValues` option: the call's values, kept on the request for the line. */
export function connectContextValues(req: FastifyRequest): ContextValues {
  const values = createContextValues();
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
  const type = req.headers["content-type"] ?? "";
  if (type.startsWith("application/grpc-web")) return "grpc-web";
  if (type.startsWith("application/grpc")) return "grpc";
  return req.callValues === undefined ? "rest" : "connect";
}
