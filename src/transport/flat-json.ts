/**
 * JSON for flat messages: every field a singular string or bool, as the
 * check's request and answer are. protobuf-es reads and writes JSON by
 * walking the descriptor for each message, which is most of what a REST
 * check costs besides HTTP itself; for these shapes a table made once per
 * message type does the same work directly.
 */
import { create, ScalarType, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";

type FlatKind = "string" | "boolean";

function flatKind(field: DescField): FlatKind | undefined {
  if (field.fieldKind !== "scalar" || field.oneof !== undefined) return undefined;
  if (field.scalar === ScalarType.STRING) return "string";
  if (field.scalar === ScalarType.BOOL) return "boolean";
  return undefined;
}

/**
 * Reads a JSON object into a message of `desc`, or answers undefined for
 * anything but plain values of the right types under known names (nulls,
 * unknown or repeated fields, wrong types): the caller then takes the full,
 * strict reading, which names what is wrong. Undefined when `desc` is not flat.
 */
export function flatReader(desc: DescMessage): ((json: Record<string, unknown>) => Message | undefined) | undefined {
  if (!desc.fields.every((f) => flatKind(f) !== undefined)) return undefined;
  const byKey = new Map<string, { localName: string; kind: FlatKind }>();
  for (const f of desc.fields) {
    const entry = { localName: f.localName, kind: flatKind(f)! };
    byKey.set(f.jsonName, entry);
    byKey.set(f.name, entry);
  }
  return (json) => {
    const init: Record<string, unknown> = {};
    for (const key of Object.keys(json)) {
      const entry = byKey.get(key);
      const value = json[key];
      if (entry === undefined || typeof value !== entry.kind || entry.localName in init) return undefined;
      init[entry.localName] = value;
    }
    return create(desc, init as never);
  };
}

/**
 * Writes a message (or the init object a service returned) of `desc` as
 * toJson would with alwaysEmitImplicit: every field, defaults included.
 * Undefined when `desc` is not flat or has a field with explicit presence.
 */
export function flatWriter(desc: DescMessage): ((message: object) => Record<string, unknown>) | undefined {
  if (!desc.fields.every((f) => flatKind(f) !== undefined && f.presence === FeatureSet_FieldPresence.IMPLICIT)) return undefined;
  const fields = desc.fields.map((f) => ({ jsonName: f.jsonName, localName: f.localName, empty: flatKind(f) === "string" ? "" : false }));
  return (message) => {
    const out: Record<string, unknown> = {};
    const values = message as Record<string, unknown>;
    for (const f of fields) out[f.jsonName] = values[f.localName] ?? f.empty;
    return out;
  };
}
