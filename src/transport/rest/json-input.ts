/**
 * Strict reading of JSON request bodies into protobuf messages, with errors
 * that name the field: `resources[2].actions` must be an array, `foo` is not a
 * field. protobuf-es would reject the same inputs, but with messages naming
 * protobuf internals; this walks the descriptor first so a REST caller reads
 * their own field names.
 *
 * Hostile JSON: only own keys are read and a key that is no field (such as
 * "__proto__" or "constructor") is an unknown field; values are quoted
 * through show()/showJson(), never echoed whole; the caller bounds the
 * nesting depth (lib/json.ts, jsonDepthExceeds) before anything here walks it.
 */
import { fromJson, ScalarType, type DescField, type DescMessage, type JsonValue, type MessageShape } from "@bufbuild/protobuf";
import { Violations, invalidArgument } from "../../domain/errors.js";
import { instantProblem, show, showJson, textProblem } from "../../domain/formats.js";

/** The fields of `desc` by every name JSON may use: the lowerCamelCase name and the proto name. */
export function fieldByJsonKey(desc: DescMessage, key: string): DescField | undefined {
  return desc.fields.find((f) => f.jsonName === key || f.name === key);
}

/** How a request's JSON is read: this API refuses a key that is no field; AuthZEN ignores it (authzen-gateway.ts). */
export interface JsonReading {
  ignoreUnknownFields?: boolean;
}

/**
 * Reads `json` into a message of `desc`, or throws one 400 listing what is
 * wrong. `bound` names top-level fields the caller filled from elsewhere (the
 * path): they are not offered as accepted body fields. With
 * `ignoreUnknownFields` (AuthZEN's rule, not this API's), a key that is no
 * field is skipped at any depth instead of refused; the types of the fields
 * there are still checked.
 */
export function messageFromJson<D extends DescMessage>(
  desc: D,
  json: Record<string, unknown>,
  bound: ReadonlySet<DescField> = new Set(),
  options: JsonReading = {},
): MessageShape<D> {
  const where = "request body";
  const ignoreUnknownFields = options.ignoreUnknownFields === true;
  const v = new Violations();
  checkMessage(desc, json, "", v, { where, ignoreUnknownFields }, bound);
  v.throwIfAny();
  try {
    return fromJson(desc, json as JsonValue, { ignoreUnknownFields });
  } catch (error) {
    // The walk above should have caught everything; keep protobuf's word as a fallback.
    const message = error instanceof Error ? error.message : String(error);
    throw invalidArgument(`${where}: ${message.length > 200 ? `${message.slice(0, 197)}...` : message}`);
  }
}

/** Why `key` is refused: it is no field of `desc` (bound fields, given elsewhere, are not offered). */
export function unknownFieldReason(desc: DescMessage, bound: ReadonlySet<DescField>, what = "this request"): string {
  const accepted = desc.fields.filter((f) => !bound.has(f)).map((f) => f.jsonName).join(", ");
  return `is not a field of ${what} (accepted: ${accepted})`;
}

const typeOf = (value: unknown): string =>
  value === null ? "null" : Array.isArray(value) ? "array" : typeof value === "object" ? "object" : typeof value;

const join = (path: string, key: string) => (path === "" ? key : `${path}.${key}`);
/** A client's key in a field path: cut short, as show() cuts values. */
const keyName = (key: string) => (key.length > 80 ? `${key.slice(0, 77)}...` : key);

/** How a walk reads: what the top level is called in messages, and whether unknown keys are skipped. */
interface Reading {
  where: string;
  ignoreUnknownFields: boolean;
}

function checkMessage(
  desc: DescMessage,
  value: unknown,
  path: string,
  v: Violations,
  reading: Reading,
  bound: ReadonlySet<DescField> = new Set(),
): void {
  const special = wellKnown[desc.typeName];
  if (special !== undefined) {
    const problem = special(value);
    if (problem !== undefined) v.add(path, problem);
    return;
  }
  if (typeOf(value) !== "object") {
    v.add(path === "" ? reading.where : path, `must be a JSON object, got ${typeOf(value)}`);
    return;
  }
  const seen = new Set<DescField>();
  for (const [key, item] of Object.entries(value as Record<string, unknown>)) {
    const field = fieldByJsonKey(desc, key);
    const at = join(path, keyName(key));
    if (field === undefined) {
      if (!reading.ignoreUnknownFields) v.add(at, unknownFieldReason(desc, bound, path === "" ? "this request" : "this object"));
      continue;
    }
    if (seen.has(field)) {
      v.add(at, `is given twice (as ${field.jsonName} and ${field.name})`);
      continue;
    }
    seen.add(field);
    if (item === null) continue; // JSON null means "not set"
    checkField(field, item, at, v, reading);
  }
}

function checkField(field: DescField, value: unknown, path: string, v: Violations, reading: Reading): void {
  switch (field.fieldKind) {
    case "scalar":
      return addProblem(v, path, scalarProblem(field.scalar, value));
    case "enum":
      return addProblem(v, path, enumProblem(field.enum.values.map((x) => x.name), value));
    case "message":
      return checkMessage(field.message, value, path, v, reading);
    case "list":
      if (!Array.isArray(value)) return v.add(path, `must be an array, got ${typeOf(value)}`);
      value.forEach((item, i) => {
        const at = `${path}[${i}]`;
        if (item === null) return v.add(at, "must not be null");
        if (field.listKind === "scalar") addProblem(v, at, scalarProblem(field.scalar, item));
        else if (field.listKind === "enum") addProblem(v, at, enumProblem(field.enum.values.map((x) => x.name), item));
        else checkMessage(field.message, item, at, v, reading);
      });
      return;
    case "map":
      if (typeOf(value) !== "object") return v.add(path, `must be a JSON object, got ${typeOf(value)}`);
      for (const [key, item] of Object.entries(value as Record<string, unknown>)) {
        const at = `${path}[${show(key)}]`;
        addProblem(v, at, textProblem(key));
        if (field.mapKind === "scalar") addProblem(v, at, scalarProblem(field.scalar, item));
        else if (field.mapKind === "enum") addProblem(v, at, enumProblem(field.enum.values.map((x) => x.name), item));
        else checkMessage(field.message, item, at, v, reading);
      }
      return;
  }
}

function addProblem(v: Violations, path: string, problem: string | undefined): void {
  if (problem !== undefined) v.add(path, problem);
}

const INT32 = { min: -2147483648, max: 2147483647 };
const UINT32 = { min: 0, max: 4294967295 };

function scalarProblem(type: ScalarType, value: unknown): string | undefined {
  switch (type) {
    case ScalarType.STRING:
      // Named here: protobuf-es would refuse an unpaired surrogate too, but as "invalid UTF8" of a proto field.
      return typeof value === "string" ? textProblem(value) : `must be a string, got ${typeOf(value)}`;
    case ScalarType.BOOL:
      return typeof value === "boolean" ? undefined : `must be true or false, got ${typeOf(value)}`;
    case ScalarType.BYTES:
      return typeof value === "string" ? undefined : `must be a base64 string, got ${typeOf(value)}`;
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return typeof value === "number" || value === "NaN" || value === "Infinity" || value === "-Infinity"
        ? undefined
        : `must be a number, got ${typeOf(value)}`;
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return integerProblem(value, INT32);
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return integerProblem(value, UINT32);
    default: // 64-bit integers: JSON numbers or decimal strings
      return integerProblem(value, undefined);
  }
}

function integerProblem(value: unknown, range: { min: number; max: number } | undefined): string | undefined {
  const n = typeof value === "string" && /^-?\d+$/.test(value) ? Number(value) : value;
  if (typeof n !== "number" || !Number.isInteger(n)) return `must be a whole number, got ${typeOf(value) === "number" ? String(value) : typeOf(value)}`;
  if (range !== undefined && (n < range.min || n > range.max)) return `must be between ${range.min} and ${range.max}, got ${n}`;
  return undefined;
}

function enumProblem(names: string[], value: unknown): string | undefined {
  if (typeof value === "number" && Number.isInteger(value)) return undefined;
  if (typeof value === "string" && names.includes(value)) return undefined;
  return `must be one of ${names.join(", ")}, got ${showJson(value)}`;
}

/**
 * The form protobuf-es reads a Timestamp from (date, time, optional fraction
 * of up to 9 digits, Z or an offset), with a day that exists in its month:
 * Date.parse alone would take "2030-02-30" for March 2nd.
 */
const RFC_3339 = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})$/;

function isRfc3339(value: string): boolean {
  const match = RFC_3339.exec(value);
  if (match === null || instantProblem(Date.parse(value)) !== undefined) return false;
  const [year, month, day] = [Number(match[1]), Number(match[2]), Number(match[3])];
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  return date.getUTCMonth() === month - 1 && date.getUTCDate() === day && Number(match[4]) < 24 && Number(match[5]) < 60 && Number(match[6]) < 60;
}

/** Well-known types with their own JSON forms. */
const wellKnown: Record<string, (value: unknown) => string | undefined> = {
  "google.protobuf.Timestamp": (x) =>
    typeof x === "string" && isRfc3339(x)
      ? undefined
      : `must be an RFC 3339 timestamp with a zone, such as "2030-01-31T17:00:00Z", from year 0001 to 9999, got ${showJson(x)}`,
  "google.protobuf.Duration": (x) =>
    typeof x === "string" && /^-?\d+(\.\d+)?s$/.test(x) ? undefined : `must be a duration such as "1.5s", got ${showJson(x)}`,
  "google.protobuf.FieldMask": (x) =>
    typeof x === "string" && /^([a-zA-Z0-9_.]+(,[a-zA-Z0-9_.]+)*)?$/.test(x)
      ? undefined
      : `must be a comma-separated list of field names, got ${showJson(x)}`,
  "google.protobuf.Struct": (x) => (typeOf(x) === "object" ? undefined : `must be a JSON object, got ${typeOf(x)}`),
  "google.protobuf.ListValue": (x) => (Array.isArray(x) ? undefined : `must be an array, got ${typeOf(x)}`),
  "google.protobuf.Value": () => undefined,
  "google.protobuf.StringValue": (x) => scalarProblem(ScalarType.STRING, x),
  "google.protobuf.BoolValue": (x) => scalarProblem(ScalarType.BOOL, x),
  "google.protobuf.Int32Value": (x) => scalarProblem(ScalarType.INT32, x),
  "google.protobuf.UInt32Value": (x) => scalarProblem(ScalarType.UINT32, x),
  "google.protobuf.Int64Value": (x) => scalarProblem(ScalarType.INT64, x),
  "google.protobuf.UInt64Value": (x) => scalarProblem(ScalarType.UINT64, x),
  "google.protobuf.DoubleValue": (x) => scalarProblem(ScalarType.DOUBLE, x),
  "google.protobuf.FloatValue": (x) => scalarProblem(ScalarType.FLOAT, x),
  "google.protobuf.BytesValue": (x) => scalarProblem(ScalarType.BYTES, x),
};
