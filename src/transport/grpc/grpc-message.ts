/**
 * connect-node writes the grpc-message trailer with encodeURIComponent, which
 * escapes far more than the gRPC spec's percent-encoding (only bytes outside
 * 0x20-0x7E, and "%"). grpc-js decodes it with decodeURI, which leaves "%3A",
 * "%2C", "%24" as they are, so its users would read `appId%3A ...`. This
 * re-encodes the field the spec's way, which every client decodes.
 */
import type { Http2ServerResponse } from "node:http2";

export function specEncodeGrpcMessage(value: string): string {
  let decoded: string;
  try {
    decoded = decodeURIComponent(value);
  } catch {
    return value; // not something we encoded: leave it be
  }
  let out = "";
  for (const byte of Buffer.from(decoded, "utf8")) {
    out += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

type HeaderBag = Record<string, string | string[] | number | undefined>;

function fix(headers: unknown): void {
  if (typeof headers !== "object" || headers === null) return;
  const bag = headers as HeaderBag;
  const message = bag["grpc-message"];
  if (typeof message === "string") bag["grpc-message"] = specEncodeGrpcMessage(message);
}

/** Patches one gRPC response so its grpc-message (in headers or trailers) is spec-encoded. */
export function fixGrpcMessageEncoding(res: Http2ServerResponse): void {
  const addTrailers = res.addTrailers.bind(res);
  res.addTrailers = (trailers) => {
    fix(trailers);
    addTrailers(trailers);
  };
  const writeHead = res.writeHead.bind(res) as (...args: unknown[]) => Http2ServerResponse;
  res.writeHead = ((...args: unknown[]) => {
    fix(args[args.length - 1]);
    return writeHead(...args);
  }) as Http2ServerResponse["writeHead"];
}
