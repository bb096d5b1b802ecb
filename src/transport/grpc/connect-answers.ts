/**
 * Answers of connect-node that the contract does not allow, rewritten: no
 * input a client sends may get a 5xx, and every error has a body.
 *
 * - A request message that is not valid protobuf (cut short, a bad tag, a
 *   wire type that does not fit): connect-node answers INTERNAL ("parse
 *   binary: premature EOF"), a 500 over the Connect protocol, since its
 *   binary serialization wraps every decode error so, whoever is at fault.
 *   The bytes are the client's: INVALID_ARGUMENT, over Connect and gRPC-Web.
 *   (Unary gRPC is answered by grpc-unary.ts, which maps decode errors
 *   itself; a string that is not UTF-8 does not fail the decode at all, see
 *   utf8.ts, and is named by the guard.)
 * - A compression it does not know: UNIMPLEMENTED, a 501 over Connect;
 *   INVALID_ARGUMENT (400) here, naming the supported ones as it did.
 * - Refusals it sends with no body (405 for a method the route does not
 *   take, 415 for a media type no protocol takes, 505 for a bidirectional
 *   stream over HTTP/1.1): the same statuses, 505 as a 400, with a body in
 *   the error shape.
 *
 * These happen inside the router's handler, before interceptors, and no
 * option reaches them; so each handler is wrapped, and an answer that is
 * exactly one of these is rewritten. Everything else passes untouched.
 */
import { createAsyncIterable, readAllBytes, type UniversalHandler, type UniversalServerResponse } from "@connectrpc/connect/protocol";
import { trailerFlag, trailerParse, trailerSerialize } from "@connectrpc/connect/protocol-grpc-web";

const PARSE_BINARY = "parse binary: ";
const CODE_INTERNAL = "13";
const CODE_INVALID_ARGUMENT = "3";

const reworded = (message: string) => `the request message is not valid protobuf: ${message.slice(PARSE_BINARY.length)}`;

/** Wraps every handler of a Connect router in place (call after the last service is registered). */
export function mendConnectAnswers(handlers: UniversalHandler[]): void {
  for (let i = 0; i < handlers.length; i++) handlers[i] = wrap(handlers[i]!);
}

function wrap(handler: UniversalHandler): UniversalHandler {
  const wrapped = async (request: Parameters<UniversalHandler>[0]): Promise<UniversalServerResponse> => {
    const response = await handler(request);
    if (response.body === undefined) return response.status >= 400 ? withBody(response) : response;
    // A compressed answer is left as it is (error bodies are below the compression threshold).
    if (response.header?.has("content-encoding") || response.header?.has("grpc-encoding")) return response;
    const type = response.header?.get("content-type") ?? "";
    if ((response.status === 500 || response.status === 501) && type.startsWith("application/json")) return connectUnary(response);
    if (type.startsWith("application/grpc-web")) return { ...response, body: grpcWebTrailers(response.body) };
    return response;
  };
  // The router reads the handler's path, method, protocols and content types from its properties.
  return Object.assign(wrapped, handler);
}

/** Connect unary: the error is the whole JSON body, with the HTTP status of its code. */
async function connectUnary(response: UniversalServerResponse): Promise<UniversalServerResponse> {
  const bytes = await readAllBytes(response.body!, Number.MAX_SAFE_INTEGER);
  let error: { code?: unknown; message?: unknown } | undefined;
  try {
    error = JSON.parse(Buffer.from(bytes).toString("utf8")) as typeof error;
  } catch {
    error = undefined;
  }
  const message = typeof error?.message === "string" ? error.message : "";
  if (error?.code === "internal" && message.startsWith(PARSE_BINARY)) return jsonError(response, 400, reworded(message));
  if (error?.code === "unimplemented" && message.startsWith(UNKNOWN_COMPRESSION)) return jsonError(response, 400, message);
  return { ...response, body: createAsyncIterable([bytes]) };
}

const UNKNOWN_COMPRESSION = "unknown compression ";

/** The answer with an invalid_argument body in the error shape (Connect's error JSON with empty details). */
function jsonError(response: UniversalServerResponse, status: number, message: string, code = "invalid_argument"): UniversalServerResponse {
  const body = new TextEncoder().encode(JSON.stringify({ code, message, details: [] }));
  const header = new Headers(response.header);
  header.set("content-type", "application/json");
  header.set("content-length", String(body.byteLength));
  return { ...response, status, header, body: createAsyncIterable([body]) };
}

/** Connect's bodiless refusals, with a body. */
function withBody(response: UniversalServerResponse): UniversalServerResponse {
  switch (response.status) {
    case 405:
      return jsonError(response, 405, `this method does not take the HTTP method used (allowed: ${response.header?.get("allow") ?? "POST"})`);
    case 415:
      return jsonError(response, 415, "the Content-Type is not one of the protocols this method speaks (Connect, gRPC, gRPC-Web)");
    case 505:
      return jsonError(response, 400, "this method streams both ways, which needs HTTP/2");
    default:
      return jsonError(response, response.status < 500 ? response.status : 400, "the request was refused", response.status === 404 ? "not_found" : "invalid_argument");
  }
}

/** gRPC-Web: the status is in the trailer frame, the last envelope of the body. */
async function* grpcWebTrailers(body: AsyncIterable<Uint8Array>): AsyncIterable<Uint8Array> {
  for await (const chunk of body) yield rewriteTrailerFrame(chunk);
}

function rewriteTrailerFrame(chunk: Uint8Array): Uint8Array {
  // One envelope per chunk: flags, a 4-byte length, the data.
  if (chunk.byteLength < 5 || chunk[0] !== trailerFlag) return chunk;
  const length = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength).readUInt32BE(1);
  if (chunk.byteLength !== 5 + length) return chunk;
  const trailer = trailerParse(chunk.subarray(5));
  let message: string;
  try {
    message = decodeURIComponent(trailer.get("grpc-message") ?? "");
  } catch {
    return chunk;
  }
  if (trailer.get("grpc-status") !== CODE_INTERNAL || !message.startsWith(PARSE_BINARY)) return chunk;
  trailer.set("grpc-status", CODE_INVALID_ARGUMENT);
  trailer.set("grpc-message", encodeURIComponent(reworded(message)));
  const data = trailerSerialize(trailer);
  const out = new Uint8Array(5 + data.byteLength);
  out[0] = trailerFlag;
  new DataView(out.buffer).setUint32(1, data.byteLength);
  out.set(data, 5);
  return out;
}
