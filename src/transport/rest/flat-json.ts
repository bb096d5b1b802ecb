/**
 * JSON for flat messages: every field a singular string or bool, a list of
 * strings (read at the top level only), a list of such messages, or a
 * singular such message (an AuthZEN request's subject, action and
 * resource), or a google.protobuf.Struct (a question's context and
 * properties, taken as the JSON object they are), as the requests and
 * answers of the check, the batch check, permissions and AuthZEN's
 * evaluations are. A reader also takes a message with other singular
 * message fields as long as the JSON leaves them out: a request that
 * carries them is read the full way. protobuf-es reads and writes JSON by walking the descriptor
 * for each message, which would be most of what a REST check costs besides
 * HTTP itself; for these shapes a table made once per message type does the same
 * work directly.
 */
import { create, ScalarType, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import { textProblem } from "../../domain/formats.js";
import type { JsonReading } from "./json-input.js";

type Reader = (json: unknown) => Message | undefined;
type Writer = (message: object) => Record<string, unknown>;

function scalarKind(field: DescField): "string" | "boolean" | undefined {
  if (field.fieldKind !== "scalar" || field.oneof !== undefined) return undefined;
  if (field.scalar === ScalarType.STRING) return "string";
  if (field.scalar === ScalarType.BOOL) return "boolean";
  return undefined;
}

/** A list of strings (permissions' actions). */
const stringList = (field: DescField): boolean => field.fieldKind === "list" && field.listKind === "scalar" && field.scalar === ScalarType.STRING;

/** A list of messages that are themselves flat. */
const flatList = (field: DescField): DescMessage | undefined =>
  field.fieldKind === "list" && field.listKind === "message" ? field.message : undefined;

/**
 * Reads a JSON object into a message of `desc`, or answers undefined for
 * anything but plain values of the right types under known names (nulls,
 * repeated fields, wrong types, text the strict reader would refuse, a
 * field this reader does not read): the caller then takes the full, strict
 * reading (json-input.ts), which names what is wrong. So it reads exactly
 * what the strict reader would, or nothing. A key that is no field is
 * refused the same way, or skipped with `ignoreUnknownFields`, at any
 * depth, as the strict reader skips it then. Undefined when `desc` is not
 * flat. Names are looked up in a Map and values gathered in an object
 * without a prototype, so "__proto__", "constructor" and the like are
 * unknown names.
 */
export function flatReader(desc: DescMessage, reading: JsonReading = {}): Reader | undefined {
  return readerOf(desc, reading, new Set());
}

/** The reader of `desc`, a message nested in those of `outer` (whose readers are being made: a recursive type is not flat). */
function readerOf(desc: DescMessage, reading: JsonReading, outer: ReadonlySet<DescMessage>): Reader | undefined {
  // A well-known type has a JSON form of its own (a wrapper is a bare value).
  if (desc.typeName.startsWith("google.protobuf.") || outer.has(desc)) return undefined;
  const nested = outer.size > 0;
  const within = new Set(outer).add(desc);
  const ignoreUnknown = reading.ignoreUnknownFields === true;
  const byKey = new Map<string, { localName: string; read: (value: unknown) => unknown }>();
  for (const f of desc.fields) {
    let read: ((value: unknown) => unknown) | undefined;
    const kind = scalarKind(f);
    const list = flatList(f);
    if (kind === "string") read = (value) => (typeof value === "string" && textProblem(value) === undefined ? value : undefined);
    else if (kind === "boolean") read = (value) => (typeof value === "boolean" ? value : undefined);
    else if (stringList(f) && !nested) {
      read = (value) => (Array.isArray(value) && value.every((x) => typeof x === "string" && textProblem(x) === undefined) ? [...(value as string[])] : undefined);
    } else if (list !== undefined) {
      const item = readerOf(list, reading, within);
      if (item !== undefined) {
        read = (value) => {
          if (!Array.isArray(value)) return undefined;
          const out: Message[] = new Array(value.length);
          for (let i = 0; i < value.length; i++) {
            const message = item(value[i]);
            if (message === undefined) return undefined;
            out[i] = message;
          }
          return out;
        };
      }
    } else if (f.fieldKind === "message" && f.message.typeName === "google.protobuf.Struct") {
      // protobuf-es holds a Struct field as its JSON object: the parsed object is taken as it is.
      read = jsonObject;
    } else if (f.fieldKind === "message") {
      const message = readerOf(f.message, reading, within);
      if (message !== undefined) read = message;
    }
    // Any other singular message field is left to the full reading: a JSON
    // object that has it is not read here (nor skipped as unknown).
    if (read === undefined && f.fieldKind === "message") read = leaveToStrict;
    if (read === undefined) return undefined;
    byKey.set(f.jsonName, { localName: f.localName, read });
    byKey.set(f.name, { localName: f.localName, read });
  }
  return (json) => {
    if (typeof json !== "object" || json === null || Array.isArray(json)) return undefined;
    const init: Record<string, unknown> = Object.create(null) as Record<string, unknown>;
    for (const key of Object.keys(json)) {
      const entry = byKey.get(key);
      if (entry === undefined) {
        if (ignoreUnknown) continue;
        return undefined;
      }
      if (entry.localName in init) return undefined;
      const value = entry.read((json as Record<string, unknown>)[key]);
      if (value === undefined) return undefined;
      init[entry.localName] = value;
    }
    return create(desc, init as never);
  };
}

const leaveToStrict = (): undefined => undefined;

/**
 * A Struct field's value (a question's context and properties): a JSON
 * object, taken as parsed. The strict reading makes the same object out of
 * it the long way, a Value message per value and back (which cost a check
 * carrying a list of 30,000 numbers some milliseconds and most of its
 * garbage); the request's nesting is bounded before either reads it
 * (rest-gateway.ts). Anything else is left to the strict reading, which
 * names it.
 */
const jsonObject = (value: unknown): unknown => (typeof value === "object" && value !== null && !Array.isArray(value) ? value : undefined);

/**
 * Writes a message (or the init object a service returned) of `desc` as
 * toJson would with alwaysEmitImplicit: every field, defaults included.
 * Undefined when `desc` is not flat or has a scalar with explicit presence.
 */
export function flatWriter(desc: DescMessage): Writer | undefined {
  const fields: { jsonName: string; localName: string; write: (value: unknown) => unknown }[] = [];
  for (const f of desc.fields) {
    const kind = scalarKind(f);
    const list = flatList(f);
    let write: ((value: unknown) => unknown) | undefined;
    if (kind !== undefined && f.presence === FeatureSet_FieldPresence.IMPLICIT) {
      const empty = kind === "string" ? "" : false;
      write = (value) => value ?? empty;
    } else if (stringList(f)) {
      write = (value) => [...((value ?? []) as string[])];
    } else if (list !== undefined && list !== desc) {
      const item = flatWriter(list);
      if (item !== undefined) write = (value) => ((value ?? []) as object[]).map(item);
    }
    if (write === undefined) return undefined;
    fields.push({ jsonName: f.jsonName, localName: f.localName, write });
  }
  return (message) => {
    const out: Record<string, unknown> = {};
    const values = message as Record<string, unknown>;
    for (const f of fields) out[f.jsonName] = f.write(values[f.localName]);
    return out;
  };
}
