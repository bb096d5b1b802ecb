import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { createContextValues, type ContextValues, type HandlerContext } from "@connectrpc/connect";
import type { IncomingHttpHeaders } from "node:http";

/**
 * The HandlerContext of a call the REST gateway or the unary gRPC path
 * serves. connect's createHandlerContext builds three Headers objects, a
 * deadline timer and a linked AbortController for every call; most calls
 * (the check above all) touch none of them, and at thousands of calls a
 * second that was a tenth of the service's CPU. Here each part is made on
 * first use. These calls carry no deadline of their own.
 */
export class CallContext implements HandlerContext {
  readonly values: ContextValues = createContextValues();
  private headers: Headers | undefined;
  private outHeaders: Headers | undefined;
  private outTrailers: Headers | undefined;
  private controller: AbortController | undefined;

  constructor(
    readonly method: DescMethod,
    readonly protocolName: string,
    readonly requestMethod: string,
    readonly url: string,
    /** The request's headers as Node parsed them. */
    readonly rawHeaders: IncomingHttpHeaders,
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
    return (this.controller ??= new AbortController()).signal;
  }

  timeoutMs(): number | undefined {
    return undefined;
  }

  /** The response headers and trailers the implementation set, if it set any. */
  setResponseHeaders(): Headers | undefined {
    return this.outHeaders;
  }

  setResponseTrailers(): Headers | undefined {
    return this.outTrailers;
  }
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
