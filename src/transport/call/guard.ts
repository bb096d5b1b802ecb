import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { KeyAuthenticator } from "../../domain/keys.js";
import { Tracing } from "../../lib/tracing.js";
import { callerOf } from "../../services/call-values.js";
import { authorizeCall, scopeOf } from "./auth.js";
import { requestIdOf, spanOf } from "./call-context.js";
import type { CallLimiter } from "./call-limiter.js";
import { toConnectError } from "./errors.js";
import { checkTextFields } from "./text-fields.js";
import { markInvalidUtf8InProtobuf } from "./utf8.js";

// Once, before any request is decoded: binary protobuf strings that are not
// UTF-8 reach the check below as ill-formed text instead of a decode error.
markInvalidUtf8InProtobuf();

/** A service and its implementation, as the routers and the REST gateway take them. */
export interface ServiceBinding<S extends DescService = DescService> {
  service: S;
  impl: ServiceImpl<S>;
}

type UnaryFn = (request: { appId?: unknown }, ctx: HandlerContext) => Promise<unknown>;
type StreamFn = (request: { appId?: unknown }, ctx: HandlerContext) => AsyncIterable<unknown>;

/** Told of every write call that succeeded, with its application: the change feed's readers wake (domain/change-signals.ts). */
export interface WriteSignals {
  changed(appId: string): void;
}

/**
 * Wraps every RPC of a service with authorization, the check of every string
 * in the request (no NUL, well-formed Unicode: the edge, before anything
 * reaches SQL) and the one error mapping, so Connect, gRPC, gRPC-Web and REST
 * all run exactly the same checks.
 *
 * With tracing on, the implementation runs with the call's span current,
 * so the database spans it waits for become its children (lib/tracing.ts);
 * off, the wrapper adds nothing to the call.
 */
export function guard<S extends DescService>(
  service: S,
  impl: ServiceImpl<S>,
  deps: {
    keys: KeyAuthenticator;
    log: Logger;
    limiter?: CallLimiter;
    tracing?: Tracing;
    writes?: WriteSignals;
    /** Told when a key was deleted through this process: the change feed's readers of it end (domain/feed-readers.ts). */
    keyDeleted?: () => void;
  },
): ServiceBinding<S> {
  const guarded: Record<string, UnaryFn | StreamFn> = {};
  const methods = impl as unknown as Record<string, UnaryFn>;
  const tracing = deps.tracing ?? Tracing.off;
  for (const method of service.methods) {
    if (method.methodKind === "server_streaming") {
      guarded[method.localName] = guardStream(method, (impl as unknown as Record<string, StreamFn>)[method.localName]!, deps);
      continue;
    }
    if (method.methodKind !== "unary") throw new Error(`${service.typeName}.${method.name}: only unary and server-streaming RPCs are guarded`);
    const fn = methods[method.localName]!;
    const writes = scopeOf(method).scope === "write" ? deps.writes : undefined;
    const keyDeleted = method.parent.typeName === "authz.v1.ApplicationService" && method.name === "DeleteApiKey" ? deps.keyDeleted : undefined;
    // Calls that hold a database connection a while wait for a place (see call-limiter).
    const limiter = deps.limiter?.limits(method) === true ? deps.limiter : undefined;
    const run: UnaryFn = async (request, ctx) => {
      try {
        await authorizeCall(deps.keys, method, ctx, typeof request.appId === "string" ? request.appId : undefined);
        checkTextFields(method.input, request);
        const answer = await (limiter === undefined ? fn(request, ctx) : limiter.run(ownerOf(ctx), ctx.signal, () => fn(request, ctx)));
        if (writes !== undefined) signalWrite(writes, ctx, request);
        keyDeleted?.();
        return answer;
      } catch (error) {
        throw toConnectError(error, deps.log, requestIdOf(ctx));
      }
    };
    guarded[method.localName] = !tracing.enabled
      ? run
      : (request, ctx) => {
          const span = spanOf(ctx);
          return span === undefined ? run(request, ctx) : tracing.within(span, () => run(request, ctx));
        };
  }
  return { service, impl: guarded as unknown as ServiceImpl<S> };
}

/** Whose share of the call limiter's places a call takes: its key's application, or the operator's. */
function ownerOf(ctx: HandlerContext): string {
  const caller = callerOf(ctx);
  return caller?.kind === "application" ? `app:${caller.appId}` : "operator";
}

/** The application a write acted on: the key's own, or (the operator's) the request's. */
function signalWrite(writes: WriteSignals, ctx: HandlerContext, request: { appId?: unknown }): void {
  const caller = callerOf(ctx);
  const appId = caller?.kind === "application" ? caller.appId : request.appId;
  if (typeof appId === "string" && appId !== "") writes.changed(appId);
}

/**
 * A server stream, guarded as a unary call is: authorization and the
 * request's text checked before the first message, every error (before or
 * during the stream) mapped once. It takes no place in the call limiter: a
 * stream holds no database connection between its reads (each read takes a
 * place of its own), and may last long.
 *
 * A client that closes its stream is ordinary: the write that finds it gone
 * is noted at debug and ends the stream as cancelled, never as an internal
 * error.
 */
function guardStream(method: DescMethod, fn: StreamFn, deps: { keys: KeyAuthenticator; log: Logger }): StreamFn {
  return async function* (request, ctx) {
    try {
      await authorizeCall(deps.keys, method, ctx, typeof request.appId === "string" ? request.appId : undefined);
      checkTextFields(method.input, request);
      yield* fn(request, ctx);
    } catch (error) {
      if (ctx.signal.aborted || isClientGone(error)) {
        deps.log.debug({ requestId: requestIdOf(ctx), rpc: `${method.parent.typeName}/${method.name}`, err: error }, "the client closed its stream");
        throw new ConnectError("the client closed the stream", Code.Canceled);
      }
      throw toConnectError(error, deps.log, requestIdOf(ctx));
    }
  };
}

/** Node's errors for a write to a stream or socket its client closed or reset. */
const CLIENT_GONE = new Set([
  "ERR_STREAM_PREMATURE_CLOSE",
  "ERR_STREAM_WRITE_AFTER_END",
  "ERR_STREAM_DESTROYED",
  "ERR_HTTP2_STREAM_ERROR",
  "ERR_HTTP2_INVALID_STREAM",
  "ERR_HTTP2_STREAM_CANCEL",
  "ECONNRESET",
  "EPIPE",
]);

function isClientGone(error: unknown): boolean {
  if (error instanceof ConnectError) return error.code === Code.Canceled;
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && CLIENT_GONE.has(code);
}
