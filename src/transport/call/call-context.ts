import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, createContextKey, createContextValues, type ContextValues, type HandlerContext } from "@connectrpc/connect";
import type { IncomingHttpHeaders } from "node:http";
import type { Span } from "../../lib/tracing.js";

/**
 * The HandlerContext of a call the REST gateway or the unary gRPC path
 * serves. connect's createHandlerContext builds three Headers objects, a
 * deadline timer and a linked AbortController for every call; most calls
 * (the check above all) touch none of them, and at thousands of calls a
 * second that would be a tenth of the service's CPU. Here each part is made on
 * first use.
 *
 * Deadlines and cancellation: the transport passes the call's deadline (from
 * grpc-timeout, when the client sent one) and calls `abort` when the client
 * goes away (a reset stream, a closed connection). `signal` aborts then, or
 * when the deadline passes, with a ConnectError (CANCELED or
 * DEADLINE_EXCEEDED) as its reason; the store stops the statement in flight
 * and rolls back an open transaction on it. The timer exists only once
 * something read `signal`.
 */
export class CallContext implements HandlerContext {
  readonly values: ContextValues = createContextValues();
  private headers: Headers | undefined;
  private outHeaders: Headers | undefined;
  private outTrailers: Headers | undefined;
  private controller: AbortController | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** Set by abort() before anything read the signal. */
  private abortedWith: ConnectError | undefined;

  constructor(
    readonly method: DescMethod,
    readonly protocolName: string,
    readonly requestMethod: string,
    readonly url: string,
    /** The request's headers as Node parsed them. */
    readonly rawHeaders: IncomingHttpHeaders,
    /** When the call's caller stops waiting (Date.now() milliseconds), if it said. */
    readonly deadline?: number,
    /** The request's id (request-log.ts), for the lines logged about the call. */
    readonly requestId?: string,
    /** The call's span, when tracing is on. */
    readonly span?: Span,
  ) {}

  get service(): DescService {
    return this.method.parent;
  }

  get requestHeader(): Headers {
    return (this.headers ??= toHeaders(this.rawHeaders));
  }

  get responseHeader(): Headers {
    return (this.outHeaders ??= new Headers());
  }

  get responseTrailer(): Headers {
    return (this.outTrailers ??= new Headers());
  }

  get signal(): AbortSignal {
    if (this.controller === undefined) {
      const controller = (this.controller = new AbortController());
      if (this.abortedWith !== undefined) controller.abort(this.abortedWith);
      else if (this.deadline !== undefined) {
        const left = this.deadline - Date.now();
        if (left <= 0) controller.abort(deadlineExceeded());
        else {
          this.timer = setTimeout(() => controller.abort(deadlineExceeded()), left);
          this.timer.unref();
        }
      }
    }
    return this.controller.signal;
  }

  timeoutMs(): number | undefined {
    return this.deadline === undefined ? undefined : this.deadline - Date.now();
  }

  /** The client went away: abort whatever still runs for it. */
  abort(reason: ConnectError = new ConnectError("the client cancelled the call", Code.Canceled)): void {
    if (this.controller === undefined) this.abortedWith ??= reason;
    else if (!this.controller.signal.aborted) this.controller.abort(reason);
    this.done();
  }

  /** The call is answered: its deadline timer, if any, is no longer needed. */
  done(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** The response headers and trailers the implementation set, if it set any. */
  setResponseHeaders(): Headers | undefined {
    return this.outHeaders;
  }

  setResponseTrailers(): Headers | undefined {
    return this.outTrailers;
  }
}

export function deadlineExceeded(): ConnectError {
  return new ConnectError("the call's deadline passed", Code.DeadlineExceeded);
}

const requestIdKey = createContextKey<string | undefined>(undefined, { description: "the request's id" });
const spanKey = createContextKey<Span | undefined>(undefined, { description: "the call's span" });

/**
 * Keeps the request's id and span (when tracing is on) in the values of a
 * call connect-node's router serves, as CallContext holds them for the
 * others, so the guard finds both whatever the protocol.
 */
export function noteCall(values: ContextValues, requestId: string, span: Span | undefined): void {
  values.set(requestIdKey, requestId);
  if (span !== undefined) values.set(spanKey, span);
}

/** The request id of a call. */
export function requestIdOf(ctx: HandlerContext): string | undefined {
  return ctx instanceof CallContext ? ctx.requestId : ctx.values.get(requestIdKey);
}

/** The span of a call, when tracing is on and the transport made one. */
export function spanOf(ctx: HandlerContext): Span | undefined {
  return ctx instanceof CallContext ? ctx.span : ctx.values.get(spanKey);
}

/** One request header: the first value when the header came more than once. */
export function headerOf(ctx: HandlerContext, name: string): string | undefined {
  if (ctx instanceof CallContext) {
    const value = ctx.rawHeaders[name];
    return Array.isArray(value) ? value[0] : value;
  }
  return ctx.requestHeader.get(name) ?? undefined;
}

function toHeaders(raw: IncomingHttpHeaders): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(raw)) {
    if (name.startsWith(":")) continue; // HTTP/2 pseudo-headers
    if (typeof value === "string") headers.set(name, value);
    else if (Array.isArray(value)) for (const v of value) headers.append(name, v);
  }
  return headers;
}
