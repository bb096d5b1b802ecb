/**
 * The REST API of a running service, over fetch: JSON in and out, the key in
 * X-API-Key, and errors in the service's one shape ({code, message, details,
 * requestId}) kept as ApiError. The key is never part of a message: errors
 * are built from the answer alone.
 */

/** One entry of an error's details, as the service sends them. */
export interface ApiDetail {
  field: string;
  reason: string;
}

/** The service refused a call: its HTTP status and error body. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details: ApiDetail[],
    readonly requestId: string | undefined,
  ) {
    super(message);
    this.name = "ApiError";
  }

  /** "403 permission_denied: … (request id …)". */
  describe(): string {
    return `${this.status} ${this.code}: ${this.message}${this.requestId === undefined ? "" : ` (request id ${this.requestId})`}`;
  }
}

/** The service could not be reached, or did not answer in time. */
export class NetworkError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "NetworkError";
  }
}

/**
 * A bulk write of 5,000 grants takes a second or two; a call that has not
 * answered in five minutes never will, and the import can resume.
 */
const CALL_TIMEOUT_MS = 300_000;

export interface CallOptions {
  /** Ends the call early (the command is stopping): it then fails as a NetworkError, which the caller tells apart by its own signal. */
  signal?: AbortSignal;
  /** Instead of CALL_TIMEOUT_MS: a long poll knows how long its answer may take. */
  timeoutMs?: number;
}

export class Api {
  constructor(
    readonly baseUrl: string,
    private readonly key: string,
    /** How requests travel: the network, or the embedded instance's Fastify (embedded.ts). */
    private readonly fetchFn: typeof fetch = fetch,
  ) {}

  get<T>(path: string, query?: Record<string, string | number | boolean | undefined>, options?: CallOptions): Promise<T> {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(query ?? {})) {
      if (value !== undefined && value !== "") params.set(name, String(value));
    }
    const qs = params.toString();
    return this.call<T>("GET", qs === "" ? path : `${path}?${qs}`, undefined, options);
  }

  post<T>(path: string, body: unknown): Promise<T> {
    return this.call<T>("POST", path, body);
  }

  put<T>(path: string, body: unknown): Promise<T> {
    return this.call<T>("PUT", path, body);
  }

  async call<T>(method: string, path: string, body?: unknown, options: CallOptions = {}): Promise<T> {
    const timeoutMs = options.timeoutMs ?? CALL_TIMEOUT_MS;
    const timeout = AbortSignal.timeout(timeoutMs);
    let res: Response;
    try {
      res = await this.fetchFn(new URL(path, this.baseUrl), {
        method,
        headers: { "x-api-key": this.key, ...(body === undefined ? {} : { "content-type": "application/json" }) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: options.signal === undefined ? timeout : AbortSignal.any([options.signal, timeout]),
      });
    } catch (error) {
      throw new NetworkError(`could not reach ${this.baseUrl}: ${reasonOf(error, timeoutMs)}`);
    }
    let text: string;
    try {
      text = await res.text();
    } catch (error) {
      throw new NetworkError(`the answer from ${this.baseUrl} was cut off: ${reasonOf(error, timeoutMs)}`);
    }
    if (res.ok) {
      try {
        return (text === "" ? {} : JSON.parse(text)) as T;
      } catch {
        throw new NetworkError(`${method} ${path}: the answer is not JSON (is ${this.baseUrl} a Portcullis service?)`);
      }
    }
    throw errorOf(res, text);
  }
}

function errorOf(res: Response, text: string): ApiError {
  let body: { code?: unknown; message?: unknown; details?: unknown; requestId?: unknown } = {};
  try {
    const parsed: unknown = JSON.parse(text);
    if (typeof parsed === "object" && parsed !== null) body = parsed as typeof body;
  } catch {
    // Not the service's error shape (a proxy's page?): the status says enough.
  }
  const details = Array.isArray(body.details)
    ? body.details.filter((d): d is ApiDetail => typeof d === "object" && d !== null && typeof d.field === "string" && typeof d.reason === "string")
    : [];
  const requestId = typeof body.requestId === "string" ? body.requestId : (res.headers.get("x-request-id") ?? undefined);
  return new ApiError(
    res.status,
    typeof body.code === "string" ? body.code : "unknown",
    typeof body.message === "string" ? body.message : res.statusText || "no message",
    details,
    requestId,
  );
}

/** A fetch failure's reason: undici hides the socket's error in `cause`. */
function reasonOf(error: unknown, timeoutMs: number): string {
  if (error instanceof Error && error.name === "TimeoutError") return `no answer within ${timeoutMs / 1000} s`;
  const cause = error instanceof Error ? (error.cause as { code?: unknown; message?: unknown } | undefined) : undefined;
  if (cause !== undefined && typeof cause.message === "string") return cause.message;
  return error instanceof Error ? error.message : String(error);
}
