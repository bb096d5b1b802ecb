/**
 * One Fastify application: REST gateway, Connect/gRPC/gRPC-Web routes and the
 * health endpoints. Two are built from this, one on an HTTP/1.1 server and one
 * on an HTTP/2 server, and the listener hands each connection to the right one.
 */
import type { DescService } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { fastifyConnectPlugin } from "@connectrpc/connect-fastify";
import Fastify, { type FastifyInstance } from "fastify";
import http from "node:http";
import type http2 from "node:http2";
import type { Http2ServerResponse } from "node:http2";
import type { Logger } from "pino";
import type { Config } from "../../config.js";
import { LIMITS } from "../../domain/formats.js";
import { registerReflection } from "../../services/reflection-service.js";
import type { KeyAuthenticator } from "../../domain/keys.js";
import type { Db } from "../../store/db.js";
import { DeferredDb } from "../../store/deferred-db.js";
import type { ReadReplicas } from "../../store/read-replicas.js";
import { restErrorBody } from "../call/errors.js";
import { mendConnectAnswers } from "../grpc/connect-answers.js";
import {
  clientErrorHandler,
  expectationFailed,
  fastifyErrorAnswer,
  frameworkErrorHandler,
  refuseConnectMethod,
  refuseMissingHost,
} from "./http-errors.js";
import { fixGrpcMessageEncoding, specEncodeGrpcMessage } from "../grpc/grpc-message.js";
import type { ServiceBinding } from "../call/guard.js";
import type { H2Server } from "./h2-server.js";
import { restFastPath } from "../rest/rest-fast-path.js";
import { strictJsonText } from "../call/utf8.js";
import type { RequestLog } from "../call/request-log.js";
import type { Metrics } from "../../lib/metrics.js";
import { Tracing } from "../../lib/tracing.js";
import { connectContextValues, decorateForRequestLines, noteGrpcOutcomes, RequestLines } from "./fastify-request-log.js";
import { registerRestGateway, restRoutes } from "../rest/rest-gateway.js";
import { isAuthZenRoute, withAuthZenRules } from "../rest/authzen-gateway.js";
import { registerAuthZenMetadata } from "../rest/authzen-metadata.js";
import { registerConsole } from "../pages/console-static.js";
import { registerApiDocs } from "../pages/api-docs.js";

export interface AppDeps {
  bindings: ServiceBinding[];
  keys: KeyAuthenticator;
  db: Db;
  /** The read replicas checks go to, when there are some: /readyz reports them. */
  replicas?: ReadReplicas | undefined;
  log: Logger;
  /** One line per request, whichever path answers it. */
  requestLog: RequestLog;
  /** HTTP/1.1's timeouts (the HTTP/2 server has its own, in h2). */
  timeouts: HttpTimeouts;
  /** The HTTP/2 server; required for the "http2" app. */
  h2?: H2Server;
  /** The built console to serve at /console/ (undefined: none is built; /console/ says so). */
  consoleDir?: string | undefined;
  /** Traces (spans of RPCs start in the transport); off when not given. */
  tracing?: Tracing;
  /** The metrics to serve at GET /metrics on this port (undefined: /metrics is a 404 here). */
  metricsRoute?: Metrics | undefined;
  /** The service's public base URL for AuthZEN's metadata (PUBLIC_URL); undefined: each request's Host. */
  publicUrl?: string | undefined;
}

export type HttpTimeouts = Pick<Config, "headersTimeoutMs" | "requestTimeoutMs" | "idleTimeoutMs">;

export type HttpVersion = "http1" | "http2";

/**
 * The HTTP/2 server (h2-server.ts): unary gRPC calls are answered on the
 * core stream API there; every other stream comes to Fastify through the
 * compatibility layer's request and response objects.
 */
function h2Server(h2: H2Server, fastify: (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void): http2.Http2Server {
  h2.serveOthersWith(fastify);
  return h2.server;
}

/**
 * The HTTP/1.1 server's timeouts. Its connections come from the listener
 * (`emit("connection")`), so Node's checker of headersTimeout and
 * requestTimeout is started by the listener (see listener.ts).
 */
function h1Server(limits: HttpTimeouts, handler: http.RequestListener): http.Server {
  const server = http.createServer(
    {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      keepAliveTimeout: limits.idleTimeoutMs,
      // Node would answer a missing Host with an empty 400; refuseMissingHost answers in the JSON shape.
      requireHostHeader: false,
      // How often Node looks for requests past those timeouts (its default is 30 s).
      connectionsCheckingInterval: Math.max(10, Math.min(1_000, Math.floor(limits.headersTimeoutMs / 4))),
    },
    handler,
  );
  // No byte in or out for this long while a request or its answer is in progress: the socket is closed.
  server.timeout = limits.idleTimeoutMs;
  return server;
}

export async function buildFastifyApp(version: HttpVersion, deps: AppDeps): Promise<FastifyInstance> {
  const { bindings, db, replicas, keys, log } = deps;
  const tracing = deps.tracing ?? Tracing.off;
  // AuthZEN's routes follow its JSON rules, not this API's (authzen-gateway.ts), on the fast path and on Fastify alike.
  const routes = withAuthZenRules(restRoutes(bindings));
  const options = {
    loggerInstance: log,
    bodyLimit: LIMITS.bodyBytes,
    // Fastify's own request lines off; ours, one per request, in the format
    // every path shares (fastify-request-log.ts).
    logController: new RequestLines(deps.requestLog, tracing),
    // One id per request, the same generator as the REST fast path and unary
    // gRPC: the caller's well-formed x-request-id, else its traceparent's
    // trace id, else a new one (named requestId in Fastify's own lines: RequestLines).
    requestIdHeader: false as const,
    genReqId: (req: http.IncomingMessage | http2.Http2ServerRequest) => deps.requestLog.requestId(req.headers),
    return503OnClosing: true,
    // Path segments carry user and resource ids of up to 256 characters,
    // which percent-encoding can triple.
    routerOptions: { maxParamLength: 2048 },
    // Errors before routing, and Node's parser errors, in the JSON error shape (http-errors.ts).
    // Fastify types this option per route generics; ours is generic enough.
    frameworkErrors: frameworkErrorHandler(routes) as never,
    clientErrorHandler: clientErrorHandler(deps.requestLog),
  };
  const app = (
    version === "http2"
      ? Fastify({ ...options, http2: true, serverFactory: (handler) => h2Server(deps.h2!, handler) })
      : Fastify({
          ...options,
          serverFactory: (handler) => {
            const fast = restFastPath(routes, { keys, log, tracing }, deps.requestLog);
            return h1Server(deps.timeouts, (req, res) => {
              if (!refuseMissingHost(req, res, deps.requestLog) && !fast(req, res)) handler(req, res);
            });
          },
        })
  ) as unknown as FastifyInstance;

  if (version === "http2") {
    app.addHook("onRequest", async (req, reply) => {
      const type = req.headers["content-type"] ?? "";
      if (type.startsWith("application/grpc") && !type.startsWith("application/grpc-web")) {
        fixGrpcMessageEncoding(reply.raw as unknown as Http2ServerResponse);
      }
    });
  }

  decorateForRequestLines(app);

  app.setNotFoundHandler((req, reply) => {
    const path = req.url.split("?")[0];
    const type = req.headers["content-type"] ?? "";
    if (type.startsWith("application/grpc") && !type.startsWith("application/grpc-web")) {
      // gRPC clients read an unknown method from the status, not the HTTP code.
      reply.hijack();
      reply.raw.writeHead(200, { "content-type": type });
      reply.raw.addTrailers({ "grpc-status": String(Code.Unimplemented), "grpc-message": specEncodeGrpcMessage(`unknown method ${path}`) });
      reply.raw.end();
      return;
    }
    return reply.code(404).send(restErrorBody(req.id, "not_found", `no route for ${req.method} ${path}`));
  });

  app.setErrorHandler((error: Error & { statusCode?: number; code?: string }, req, reply) => {
    const { status, body } = fastifyErrorAnswer(error, req.id);
    if (status >= 500) req.log.error({ err: error }, "unhandled error");
    return reply.code(status).send(body);
  });
  // An Expect other than 100-continue: Node would answer 417 with no body.
  if (version === "http1") {
    app.server.on("checkExpectation", expectationFailed(deps.requestLog));
    // CONNECT never reaches a handler: Node would close the socket without an answer.
    app.server.on("connect", refuseConnectMethod(deps.requestLog));
  }

  app.get("/healthz", async () => ({ status: "ok" }));
  app.get("/readyz", async (req, reply) => {
    if (db instanceof DeferredDb && !db.isOpen) {
      return reply.code(503).send(restErrorBody(req.id, "unavailable", "the database is still opening"));
    }
    try {
      await withTimeout(db.query("SELECT 1"), 2_000);
      // A skipped replica does not make the service unready: the primary
      // answers its checks. It is reported, with why, for the operator.
      return replicas === undefined ? { status: "ready", database: db.engine } : { status: "ready", database: db.engine, replicas: replicas.status() };
    } catch (error) {
      req.log.warn({ err: error }, "readiness check failed");
      return reply.code(503).send(restErrorBody(req.id, "unavailable", "the database cannot be reached"));
    }
  });
  // Prometheus's scrape, without a key: nothing in it is a secret (see lib/metrics.ts).
  const metrics = deps.metricsRoute;
  if (metrics !== undefined) {
    app.get("/metrics", async (_req, reply) => reply.type(metrics.contentType).send(await metrics.text()));
  }

  await app.register(async (scope) => registerRestGateway(scope, routes, { keys, log, tracing }));
  registerAuthZenMetadata(app, routes.filter(isAuthZenRoute), deps.publicUrl);
  await registerConsole(app, deps.consoleDir);
  // /openapi.json and /docs, made from the routes registered above (no key).
  await registerApiDocs(app, routes.map((r) => r.route));

  const services: DescService[] = bindings.map((b) => b.service);
  await app.register(fastifyConnectPlugin, {
    routes(router) {
      for (const { service, impl } of bindings) router.service(service, impl);
      registerReflection(router, services);
      // No 5xx and no bodiless error from connect-node for what a client sent (connect-answers.ts).
      mendConnectAnswers(router.handlers);
      // The gRPC status of each answer, for its request line (after the mending, which may change it).
      noteGrpcOutcomes(router.handlers);
    },
    // The contract's JSON rules hold on Connect too: unknown fields are
    // errors and booleans are always written.
    // Bytes that are not UTF-8 are refused (Connect's own decoder substitutes U+FFFD).
    jsonOptions: { ignoreUnknownFields: false, alwaysEmitImplicit: true, ...strictJsonText },
    readMaxBytes: LIMITS.bodyBytes,
    // Made per request and kept on it, so the request line can name the caller's key.
    contextValues: connectContextValues,
  });

  await app.ready();
  return app;
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
