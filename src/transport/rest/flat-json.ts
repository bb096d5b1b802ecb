/**
 * JSON for flat messages: every field a singular string or bool, a list of
 * strings (read at the top level only), or a list of such messages, as the
 * requests and answers of the check, the batch check and permissions are.
 * A reader also takes a message with singular message fields (a question's
 * context and properties) as long as the JSON leaves them out: a question
 * that carries them is read the full way. protobuf-es reads and writes JSON by walking the descriptor
 * for each message, which was most of what a REST check cost besides HTTP
 * itself; for these shapes a table made once per message type does the same
 * work directly.
 */
import { create, ScalarType, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";

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
 * unknown or repeated fields, wrong types): the caller then takes the full,
 * strict reading, which names what is wrong. Undefined when `desc` is not flat.
 * Names are looked up in a Map and values gathered in an object without a
 * prototype, so "__proto__", "constructor" and the like are unknown names.
 */
export function flatReader(desc: DescMessage, nested = false): Reader | undefined {
  const byKey = new Map<string, { localName: string; read: (value: unknown) => unknown }>();
  for (const f of desc.fields) {
    let read: ((value: unknown) => unknown) | undefined;
    const kind = scalarKind(f);
    const list = flatList(f);
    if (kind !== undefined) read = (value) => (typeof value === kind ? value : undefined);
    else if (stringList(f) && !nested) {
      read = (value) => (Array.isArray(value) && value.every((x) => typeof x === "string") ? [...(value as string[])] : undefined);
    } else if (list !== undefined && list !== desc) {
      const item = flatReader(list, true);
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
    }
    // A singular message field is left to the full reading: its key is not
    // mapped, so a JSON object that has it is not read here.
    if (read === undefined && f.fieldKind === "message") continue;
    if (read === undefined) return undefined;
    byKey.set(f.jsonName, { localName: f.localName, read });
    byKey.set(f.name, { localName: f.localName, read });
  }
  return (json) => {
    if (typeof json !== "object" || json === null || Array.isArray(json)) return undefined;
    const init: Record<string, unknown> = Object.create(null) as Record<string, unknown>;
    for (const key of Object.keys(json)) {
      const entry = byKey.get(key);
      if (entry === undefined || entry.localName in init) return undefined;
      const value = entry.read((json as Record<string, unknown>)[key]);
      if (value === undefined) return undefined;
      init[entry.localName] = value;
    }
    return create(desc, init as never);
  };
}

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
