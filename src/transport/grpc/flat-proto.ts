/**
 * Protobuf binary for flat messages, as flat-json.ts does for JSON: every
 * field a singular string or bool, or a list of such messages (the check's
 * and the batch check's requests and answers). protobuf-es reads and writes
 * by walking the descriptor for each message, through a reader and a writer
 * object that allocate as they go; for these shapes a table made once per
 * message type does the same work directly (a few microseconds of a unary
 * gRPC check).
 *
 * The reader answers undefined for anything it does not take exactly as
 * fromBinary would (a non-ASCII string, an unknown or repeated singular
 * field, an unexpected wire type, a bool that is not 0 or 1): the caller
 * then decodes with fromBinary, which keeps unknown fields and names errors.
 * The writer writes the bytes toBinary writes, fields in number order.
 *
 * A message with singular message fields (a question's context and
 * properties) is read here only when the bytes leave them out: their
 * numbers are unknown to the codec, so bytes that carry them go to
 * fromBinary. Such a codec writes nothing (`partial`).
 */
import { create, ScalarType, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";

type Reader = (bytes: Uint8Array) => Message | undefined;
/** Writes `message` after `offset` reserved bytes. */
type Writer = (message: object, offset: number) => Buffer;

interface Field {
  number: number;
  localName: string;
  kind: "string" | "boolean" | "list";
  /** Implicit presence: the default value is not written. */
  implicit: boolean;
  item?: Codec;
}

interface Codec {
  desc: DescMessage;
  fields: Field[];
  byNumber: Map<number, Field>;
  /** Some singular message field is left out (here or in a list's items): read only. */
  partial: boolean;
}

const codecs = new WeakMap<DescMessage, Codec | null>();

function codecOf(desc: DescMessage, seen = new Set<DescMessage>()): Codec | undefined {
  const known = codecs.get(desc);
  if (known !== undefined) return known ?? undefined;
  if (seen.has(desc)) return undefined; // recursive types are not flat
  seen.add(desc);
  const fields: Field[] = [];
  let partial = false;
  for (const f of desc.fields) {
    if (f.fieldKind === "message" && f.oneof === undefined) {
      partial = true;
      continue;
    }
    const field = fieldOf(f, seen);
    if (field === undefined) {
      codecs.set(desc, null);
      return undefined;
    }
    if (field.item?.partial === true) partial = true;
    fields.push(field);
  }
  fields.sort((a, b) => a.number - b.number);
  const codec = { desc, fields, byNumber: new Map(fields.map((f) => [f.number, f])), partial };
  codecs.set(desc, codec);
  return codec;
}

function fieldOf(f: DescField, seen: Set<DescMessage>): Field | undefined {
  if (f.oneof !== undefined || f.number > 2047) return undefined; // tags of one or two bytes
  const implicit = f.presence === FeatureSet_FieldPresence.IMPLICIT;
  if (f.fieldKind === "scalar") {
    if (f.scalar === ScalarType.STRING) return { number: f.number, localName: f.localName, kind: "string", implicit };
    if (f.scalar === ScalarType.BOOL) return { number: f.number, localName: f.localName, kind: "boolean", implicit };
    return undefined;
  }
  if (f.fieldKind === "list" && f.listKind === "message") {
    const item = codecOf(f.message, seen);
    return item === undefined ? undefined : { number: f.number, localName: f.localName, kind: "list", implicit: false, item };
  }
  return undefined;
}

export function flatProtoReader(desc: DescMessage): Reader | undefined {
  const codec = codecOf(desc);
  if (codec === undefined) return undefined;
  return (bytes) => {
    const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    return read(codec, buf, 0, buf.length);
  };
}

export function flatProtoWriter(desc: DescMessage): Writer | undefined {
  const codec = codecOf(desc);
  if (codec === undefined || codec.partial) return undefined;
  return (message, offset) => {
    const out = Buffer.allocUnsafe(offset + sizeOf(codec, message));
    write(codec, message, out, offset);
    return out;
  };
}

function read(codec: Codec, bytes: Buffer, start: number, end: number): Message | undefined {
  const init: Record<string, unknown> = Object.create(null) as Record<string, unknown>;
  let pos = start;
  while (pos < end) {
    let tag = bytes[pos++]!;
    if (tag >= 0x80) {
      if (pos >= end || bytes[pos]! >= 0x80) return undefined;
      tag = (tag & 0x7f) | (bytes[pos++]! << 7);
    }
    const field = codec.byNumber.get(tag >>> 3);
    if (field === undefined) return undefined;
    const wireType = tag & 7;
    if (field.kind === "boolean") {
      if (wireType !== 0 || pos >= end || bytes[pos]! > 1 || field.localName in init) return undefined;
      init[field.localName] = bytes[pos++] === 1;
      continue;
    }
    if (wireType !== 2) return undefined;
    // A length of up to four varint bytes (256 MiB): messages here are under the 8 MiB limit.
    let length = 0;
    for (let shift = 0; ; shift += 7) {
      if (pos >= end || shift > 21) return undefined;
      const b = bytes[pos++]!;
      length |= (b & 0x7f) << shift;
      if (b < 0x80) break;
    }
    const stop = pos + length;
    if (stop > end) return undefined;
    if (field.kind === "string") {
      if (field.localName in init) return undefined;
      for (let i = pos; i < stop; i++) if (bytes[i]! >= 0x80) return undefined;
      init[field.localName] = bytes.toString("latin1", pos, stop);
    } else {
      const item = read(field.item!, bytes, pos, stop);
      if (item === undefined) return undefined;
      const list = (init[field.localName] ??= []) as Message[];
      list.push(item);
    }
    pos = stop;
  }
  return create(codec.desc, init as never);
}

const tagSize = (number: number) => (number < 16 ? 1 : 2);
const varintSize = (n: number) => (n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : n < 0x10000000 ? 4 : 5);

function sizeOf(codec: Codec, message: object): number {
  const values = message as Record<string, unknown>;
  let size = 0;
  for (const f of codec.fields) {
    const value = values[f.localName];
    if (f.kind === "string") {
      if (value === undefined || (f.implicit && value === "")) continue;
      const n = Buffer.byteLength(value as string, "utf8");
      size += tagSize(f.number) + varintSize(n) + n;
    } else if (f.kind === "boolean") {
      if (value === undefined || (f.implicit && value === false)) continue;
      size += tagSize(f.number) + 1;
    } else if (value !== undefined) {
      for (const item of value as object[]) {
        const n = sizeOf(f.item!, item);
        size += tagSize(f.number) + varintSize(n) + n;
      }
    }
  }
  return size;
}

function writeTag(out: Buffer, pos: number, number: number, wireType: number): number {
  const tag = (number << 3) | wireType;
  if (tag < 0x80) {
    out[pos] = tag;
    return pos + 1;
  }
  out[pos] = (tag & 0x7f) | 0x80;
  out[pos + 1] = tag >>> 7;
  return pos + 2;
}

function writeVarint(out: Buffer, pos: number, n: number): number {
  while (n >= 0x80) {
    out[pos++] = (n & 0x7f) | 0x80;
    n >>>= 7;
  }
  out[pos] = n;
  return pos + 1;
}

function write(codec: Codec, message: object, out: Buffer, pos: number): number {
  const values = message as Record<string, unknown>;
  for (const f of codec.fields) {
    const value = values[f.localName];
    if (f.kind === "string") {
      if (value === undefined || (f.implicit && value === "")) continue;
      pos = writeTag(out, pos, f.number, 2);
      const n = Buffer.byteLength(value as string, "utf8");
      pos = writeVarint(out, pos, n);
      pos += out.write(value as string, pos, n, "utf8");
    } else if (f.kind === "boolean") {
      if (value === undefined || (f.implicit && value === false)) continue;
      pos = writeTag(out, pos, f.number, 0);
      out[pos++] = value === true ? 1 : 0;
    } else if (value !== undefined) {
      for (const item of value as object[]) {
        pos = writeTag(out, pos, f.number, 2);
        pos = writeVarint(out, pos, sizeOf(f.item!, item));
        pos = write(f.item!, item, out, pos);
      }
    }
  }
  return pos;
}
