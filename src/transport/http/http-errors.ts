/**
 * Errors the HTTP layer raises itself, before any route runs, in the one
 * documented error body {"code", "message", "details", "requestId"}:
 * requests Node's parser refuses (a method that is no HTTP method, a bad
 * chunk, headers over the limit, a request that took too long), an Expect
 * the server does not meet, a missing Host, and what Fastify refuses (a path
 * it cannot decode, a media type no parser takes, a body over the limit).
 * None is a 5xx: each is the client's request, not the service, failing.
 *
 * Those answered before Fastify (Node's parser, Expect, CONNECT, a missing
 * Host) get their request id here, send it back in x-request-id, and are
 * recorded by the request log like any other request (route "(no route)").
 */
import type { FastifyError, FastifyReply, FastifyRequest } from "fastify";
import http from "node:http";
import type { Duplex } from "node:stream";
import { LIMITS } from "../../domain/formats.js";
import { restErrorBody, type RestErrorBody } from "../call/errors.js";
import type { RequestLog } from "../call/request-log.js";
import { badPathProblem, type RestRoute } from "../rest/rest-gateway.js";

const JSON_TYPE = "application/json; charset=utf-8";

/** What Node's HTTP parser found wrong, in words (llhttp's codes otherwise). */
const parserErrors: Record<string, string> = {
  HPE_INVALID_METHOD: "the request method is not an HTTP method",
  HPE_INVALID_URL: "the request target is not a valid URL",
  HPE_INVALID_VERSION: "the HTTP version is not one this server speaks (HTTP/1.0 or HTTP/1.1)",
  HPE_INVALID_CONSTANT: "the request line is malformed",
  HPE_INVALID_HEADER_TOKEN: "a header name or value has characters HTTP does not allow",
  HPE_INVALID_CHUNK_SIZE: "a chunk of the body has a malformed size",
  HPE_INVALID_CONTENT_LENGTH: "the Content-Length header is not a number",
  HPE_UNEXPECTED_CONTENT_LENGTH: "a request may not carry both Content-Length and chunked Transfer-Encoding",
  HPE_INVALID_TRANSFER_ENCODING: "the Transfer-Encoding header is malformed",
  HPE_LF_EXPECTED: "a line of the request does not end in CRLF",
  HPE_CR_EXPECTED: "a line of the request does not end in CRLF",
};

/** The status and body for an error Node's HTTP/1.1 server reports as `clientError`. */
export function clientErrorAnswer(error: Error & { code?: string }, requestId: string): { status: number; body: RestErrorBody } {
  const code = error.code ?? "";
  if (code === "HPE_HEADER_OVERFLOW") {
    return { status: 431, body: restErrorBody(requestId, "invalid_argument", "the request's headers are larger than this server accepts", [{ parserError: code }]) };
  }
  if (code === "ERR_HTTP_REQUEST_TIMEOUT" || code === "HPE_REQUEST_TIMEOUT" || code === "ERR_HTTP_HEADERS_TIMEOUT") {
    return { status: 408, body: restErrorBody(requestId, "deadline_exceeded", "the request was not received in time", [{ parserError: code }]) };
  }
  const words = parserErrors[code] ?? "the request is not well-formed HTTP/1.1";
  return { status: 400, body: restErrorBody(requestId, "invalid_argument", `malformed request: ${words}`, code === "" ? [] : [{ parserError: code }]) };
}

/** No headers were parsed: the request's id is a new one. */
const NO_HEADERS: http.IncomingHttpHeaders = Object.freeze({});

/**
 * Fastify's `clientErrorHandler`: the answer written on the raw socket, as a
 * whole HTTP/1.1 response, and the connection closed (the parser cannot go
 * on after an error). Nothing is written when an answer is already under
 * way on the socket, or the client already went.
 */
export function clientErrorHandler(requestLog: RequestLog) {
  return (error: Error & { code?: string }, socket: Duplex): void => {
    if (error.code === "ECONNRESET" || socket.destroyed) return;
    const pending = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    if (!socket.writable || pending?.headersSent === true) {
      socket.destroy();
      return;
    }
    const requestId = requestLog.requestId(NO_HEADERS);
    const { status, body } = clientErrorAnswer(error, requestId);
    writeRawAnswer(socket, status, body);
    requestLog.refused(undefined, status, requestId);
  };
}

/** A whole HTTP/1.1 answer written on the socket, which is then closed. */
function writeRawAnswer(socket: Duplex, status: number, body: RestErrorBody): void {
  const json = JSON.stringify(body);
  socket.end(
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nContent-Type: ${JSON_TYPE}\r\nX-Request-Id: ${body.requestId}\r\n` +
      `Content-Length: ${Buffer.byteLength(json)}\r\nConnection: close\r\n\r\n${json}`,
  );
  // The client may still be sending; do not wait on it for long.
  setTimeout(() => socket.destroy(), 1_000).unref();
}

/**
 * Node's `connect` event: an HTTP/1.1 CONNECT (a proxy tunnel), which never
 * reaches the request handler; without a listener Node closes the socket
 * with no answer at all.
 */
export function refuseConnectMethod(requestLog: RequestLog) {
  return (req: http.IncomingMessage, socket: Duplex): void => {
    socket.on("error", () => undefined);
    const requestId = requestLog.requestId(req.headers);
    writeRawAnswer(socket, 405, restErrorBody(requestId, "invalid_argument", "CONNECT is not supported: this is not a proxy"));
    requestLog.refused(req.method, 405, requestId);
  };
}

/** The part of Node's HTTP/1.1 and HTTP/2 compatibility responses an error answer needs. */
interface ErrorResponse {
  writeHead(status: number, headers: Record<string, string | number>): unknown;
  end(body: string): unknown;
}

/**
 * Answers with an error body, and its request id in x-request-id. On
 * HTTP/1.1 the connection is closed after it (a request body, if any, is
 * left unread); HTTP/2 forbids the header, and ending the stream is enough
 * there.
 */
export function sendErrorBody(res: ErrorResponse, status: number, body: RestErrorBody, http1 = true): void {
  const json = JSON.stringify(body);
  const headers: Record<string, string | number> = { "content-type": JSON_TYPE, "content-length": Buffer.byteLength(json), "x-request-id": body.requestId };
  if (http1) headers.connection = "close";
  res.writeHead(status, headers);
  res.end(json);
}

/** The 417 for an Expect other than 100-continue (HTTP/1.1 and HTTP/2 alike). */
export function expectationFailedBody(requestId: string, expect: unknown): RestErrorBody {
  const value = String(expect ?? "").slice(0, 80);
  return restErrorBody(requestId, "invalid_argument", `Expect: ${JSON.stringify(value)} is not supported (only 100-continue is)`, [{ field: "Expect" }]);
}

/**
 * Node's `checkExpectation`: an Expect other than 100-continue. Without a
 * listener Node answers 417 itself, with no body.
 */
export function expectationFailed(requestLog: RequestLog) {
  return (req: http.IncomingMessage, res: http.ServerResponse): void => {
    refuse(requestLog, req, res, 417, (requestId) => expectationFailedBody(requestId, req.headers.expect));
  };
}

/**
 * HTTP/1.1 requires Host (RFC 9112, 3.2); Node checks it itself when
 * `requireHostHeader` is on, but answers with no body. So the server turns
 * that off and this answers instead. True when it answered.
 */
export function refuseMissingHost(req: http.IncomingMessage, res: http.ServerResponse, requestLog: RequestLog): boolean {
  if (req.headers.host !== undefined || req.httpVersionMajor !== 1 || req.httpVersionMinor !== 1) return false;
  refuse(requestLog, req, res, 400, (requestId) => restErrorBody(requestId, "invalid_argument", "an HTTP/1.1 request must carry a Host header", [{ field: "Host" }]));
  return true;
}

/**
 * A request refused before any route (HTTP/1.1 or HTTP/2): its id made,
 * the error body sent with it, and the request recorded (request-log.ts).
 */
export function refuse(
  requestLog: RequestLog,
  req: { method?: string | undefined; headers: http.IncomingHttpHeaders },
  res: ErrorResponse,
  status: number,
  body: (requestId: string) => RestErrorBody,
  http1 = true,
): void {
  const requestId = requestLog.requestId(req.headers);
  sendErrorBody(res, status, body(requestId), http1);
  requestLog.refused(req.method, status, requestId);
}

const cut = (text: string) => (text.length > 200 ? `${text.slice(0, 197)}...` : text);

/**
 * Fastify's `frameworkErrors`, for errors before routing: a path segment it
 * cannot decode (named by the route variable it would fill), an over-long
 * segment, anything else as a malformed request.
 */
export function frameworkErrorHandler(routes: RestRoute[]) {
  return (error: FastifyError, req: FastifyRequest, reply: FastifyReply): void => {
    if (error.code === "FST_ERR_MAX_PARAM_LENGTH") {
      void reply.code(404).send(restErrorBody(req.id, "not_found", "a path segment is longer than any id this service stores"));
      return;
    }
    if (error.code === "FST_ERR_BAD_URL") {
      const { field, reason } = badPathProblem(routes, req.raw.url ?? req.url);
      void reply.code(400).send(restErrorBody(req.id, "invalid_argument", `${field}: ${reason}`, [{ field, reason }]));
      return;
    }
    void reply.code(400).send(restErrorBody(req.id, "invalid_argument", `malformed request: ${cut(error.message)}`));
  };
}

/**
 * What Fastify's error handler answers for an error of its own (not the
 * gateway's, which answers every error itself): the request's fault as a
 * 4xx, anything else as a 500 that the caller logs.
 */
export function fastifyErrorAnswer(error: Error & { statusCode?: number; code?: string }, requestId: string): { status: number; body: RestErrorBody } {
  const status = error.statusCode;
  if (error.code === "FST_ERR_CTP_BODY_TOO_LARGE" || status === 413) {
    return { status: 413, body: restErrorBody(requestId, "resource_exhausted", `request body is larger than the limit of ${LIMITS.bodyBytes} bytes (8 MiB)`) };
  }
  if (error.code === "FST_ERR_CTP_INVALID_MEDIA_TYPE") {
    return { status: 415, body: restErrorBody(requestId, "invalid_argument", `Content-Type: ${cut(error.message)}`, [{ field: "Content-Type" }]) };
  }
  if (error.code === "FST_ERR_CTP_INVALID_CONTENT_LENGTH") {
    return { status: 400, body: restErrorBody(requestId, "invalid_argument", "the request body's length differs from its Content-Length", [{ field: "Content-Length" }]) };
  }
  if (status !== undefined && status >= 400 && status < 500) {
    return { status: 400, body: restErrorBody(requestId, "invalid_argument", `bad request: ${cut(error.message)}`) };
  }
  return { status: 500, body: restErrorBody(requestId, "internal", "internal error; the server log has the details") };
}
