/**
 * Bytes to text, never silently: a decoder that meets bytes that are not
 * UTF-8 replaces them with U+FFFD, so `u\xff` and `u\xc0` would become the
 * same user id. Every way text enters the service goes through one of these.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { configureTextEncoding, getTextEncoding } from "@bufbuild/protobuf/wire";
import { isUtf8 } from "node:buffer";
import { invalidArgument } from "../../domain/errors.js";

const NOT_UTF8 = "request body is not valid UTF-8";

/** A REST body as text, or a 400 when its bytes are not UTF-8. */
export function bodyText(body: Buffer): string {
  if (!isUtf8(body)) throw invalidArgument(NOT_UTF8);
  return body.toString("utf8");
}

/**
 * Connect's JSON reading takes a TextDecoder; its default one substitutes
 * U+FFFD. This one refuses, as INVALID_ARGUMENT (Connect keeps a ConnectError
 * thrown while parsing as it is).
 */
const fatalJson = new TextDecoder("utf-8", { fatal: true }); // strips a leading BOM, as Connect's own does
export const strictJsonDecoder = {
  decode(input?: Uint8Array): string {
    try {
      return fatalJson.decode(input);
    } catch {
      throw new ConnectError(NOT_UTF8, Code.InvalidArgument);
    }
  },
};

/**
 * To spread into the Connect router's `jsonOptions`: its type names only
 * protobuf's JSON options, but it hands the object on to Connect's JSON
 * serialization, which takes a `textDecoder`.
 */
export const strictJsonText: object = { textDecoder: strictJsonDecoder };

// Never part of a string decoded from UTF-8 (UTF-8 cannot encode a surrogate).
const UNPAIRED_SURROGATE = "\udc00";
// A leading U+FEFF in a protobuf string is text, not a byte-order mark.
const strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const lenient = new TextDecoder("utf-8", { ignoreBOM: true });

let installed = false;

/**
 * Binary protobuf strings (gRPC, Connect and gRPC-Web with protobuf bodies).
 * protobuf-es throws a TypeError on a string field that is not UTF-8, which
 * names no field, and which Connect answers as INTERNAL ("parse binary").
 * Decoded here instead, such a string becomes its lenient decoding marked with
 * an unpaired surrogate, which no UTF-8 decoding can produce: the message
 * parses, and the guard's check of every string (text-fields.ts) answers
 * INVALID_ARGUMENT naming the field, the same for every protocol.
 *
 * configureTextEncoding is deprecated in favour of a global TextDecoder,
 * which would change decoding for every library in the process; this
 * changes only protobuf-es (of which the service has one copy). Idempotent.
 */
export function markInvalidUtf8InProtobuf(): void {
  if (installed) return;
  installed = true;
  const base = getTextEncoding();
  configureTextEncoding({
    checkUtf8: base.checkUtf8,
    encodeUtf8: base.encodeUtf8,
    encodeUtf8Into: base.encodeUtf8Into,
    decodeUtf8(bytes: Uint8Array): string {
      try {
        return strict.decode(bytes);
      } catch {
        return UNPAIRED_SURROGATE + lenient.decode(bytes);
      }
    },
  });
}
