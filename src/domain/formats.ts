/**
 * The formats table of the API contract, in one place. Each check returns the
 * reason a value is bad, or undefined when it is good, so callers can collect
 * violations with the field path they know.
 */
import { MAX_HOPS } from "../store/outward-hop.js";
import { invalidArgument, type Violations } from "./errors.js";

export const APP_ID = /^[a-z0-9][a-z0-9_-]{0,63}$/;
export const NAME_TOKEN = /^[a-z][a-z0-9_]{0,63}$/; // resource, action, relation
// The two patterns above in words, for the people who read the errors (the console shows them as they are).
const APP_ID_RULE = 'must start with a lowercase letter or digit and use only lowercase letters, digits, "_" and "-", at most 64 characters';
const NAME_TOKEN_RULE = 'must start with a lowercase letter and use only lowercase letters, digits and "_", at most 64 characters';
// C0 and C1 control characters and DEL.
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

export const LIMITS = {
  identifierMax: 256,
  nameMax: 200,
  descriptionMax: 2000,
  catalogResources: 1000,
  actionsPerResource: 100,
  relationsPerResource: 100,
  subjectsPerRelation: 100,
  inheritsPerRelation: 100,
  /** Subject sets and links a question follows from the instance (API.md: 16 reach, 17 do not): the walks' own bound. */
  hops: MAX_HOPS,
  bulkEntries: 5000,
  batchChecks: 1000,
  pageSizeDefault: 100,
  pageSizeMax: 1000,
  bodyBytes: 8 * 1024 * 1024,
  /** JSON bodies nested deeper than this are refused before anything walks them. */
  jsonDepth: 64,
} as const;

/**
 * A client's value as a message may quote it: JSON-quoted (so an unpaired
 * surrogate or a control character shows as an escape, never raw) and cut
 * to 80 characters, so an error never echoes a whole megabyte back.
 */
export const show = (value: string): string => JSON.stringify(value.length > 80 ? `${value.slice(0, 77)}...` : value);

/** Any JSON value for a message: strings as show() quotes them, anything else by its kind. */
export function showJson(value: unknown): string {
  if (typeof value === "string") return show(value);
  if (typeof value === "number" || typeof value === "boolean" || value === null) return String(value);
  return Array.isArray(value) ? "an array" : typeof value === "object" ? "an object" : typeof value;
}

// NUL or any surrogate (UTF-16 code units, no "u" flag): the one cheap test
// every string of every request passes; only a hit looks closer.
const SUSPECT_TEXT = /[\u0000\ud800-\udfff]/;
const isWellFormed = (value: string): boolean => (value as unknown as { isWellFormed(): boolean }).isWellFormed();

/** `value` with each unpaired surrogate replaced by U+FFFD (for text sent back, which must be encodable). */
export const toWellFormed = (value: string): string => (value as unknown as { toWellFormed(): string }).toWellFormed();

/**
 * Text Postgres can store and that means what the client sent: no NUL
 * (Postgres text cannot hold one) and well-formed Unicode (an unpaired
 * surrogate from JSON's "\ud800", or bytes that were not UTF-8, which the
 * decoders turn into one; see transport/call/text-fields.ts). Undefined when good.
 */
export function textProblem(value: string): string | undefined {
  if (!SUSPECT_TEXT.test(value)) return undefined;
  if (value.includes("\u0000")) return "must not contain the control character NUL (\\u0000)";
  if (!isWellFormed(value)) return "is not well-formed Unicode text (invalid UTF-8, or an unpaired surrogate such as \\ud800)";
  return undefined;
}

export function appIdProblem(value: string): string | undefined {
  if (value === "") return "is required";
  return APP_ID.test(value) ? undefined : `${show(value)} ${APP_ID_RULE}`;
}

/** resource, action and relation names. */
export function tokenProblem(value: string): string | undefined {
  if (value === "") return "is required";
  return NAME_TOKEN.test(value) ? undefined : `${show(value)} ${NAME_TOKEN_RULE}`;
}

/** userId, resourceId, tenantId: 1 to 256 characters, no control characters. */
export function identifierProblem(value: string): string | undefined {
  if (value === "") return "is required";
  // Length in characters (code points), not UTF-16 units; never more
  // code points than units, so short values need no count.
  if (value.length > LIMITS.identifierMax) {
    const length = [...value].length;
    if (length > LIMITS.identifierMax) return `must be at most ${LIMITS.identifierMax} characters, got ${length}`;
  }
  if (CONTROL.test(value)) return `${show(value)} must not contain control characters`;
  return undefined;
}

/** Policy, role and key names: 1 to 200 characters, no control characters. */
export function nameProblem(value: string): string | undefined {
  if (value.trim() === "") return "is required";
  const length = [...value].length;
  if (length > LIMITS.nameMax) return `must be at most ${LIMITS.nameMax} characters, got ${length}`;
  if (CONTROL.test(value)) return `${show(value)} must not contain control characters`;
  return undefined;
}

export function descriptionProblem(value: string): string | undefined {
  const length = [...value].length;
  return length > LIMITS.descriptionMax ? `must be at most ${LIMITS.descriptionMax} characters, got ${length}` : undefined;
}

/** Adds a violation for `field` when `problem` found one. */
export function check(v: Violations, field: string, problem: string | undefined): boolean {
  if (problem === undefined) return true;
  v.add(field, problem);
  return false;
}

/** Throws a 400 at once for a single bad field (for requests with one or two fields). */
export function ensure(field: string, problem: string | undefined): void {
  if (problem !== undefined) throw invalidArgument(`${field}: ${problem}`, [{ field, reason: problem }]);
}

/** Resolves an optional page size against the contract's bounds. */
export function pageSize(value: number | undefined, field = "pageSize"): number {
  if (value === undefined) return LIMITS.pageSizeDefault;
  ensure(
    field,
    Number.isInteger(value) && value >= 1 && value <= LIMITS.pageSizeMax
      ? undefined
      : `must be between 1 and ${LIMITS.pageSizeMax}, got ${value}`,
  );
  return value;
}

/** The range of a protobuf Timestamp, 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z, in milliseconds since the epoch. */
const INSTANT_RANGE = { min: -62_135_596_800_000, max: 253_402_300_799_999 };

/** An instant given as milliseconds since the epoch: a whole number within the Timestamp range. */
export function instantProblem(ms: number): string | undefined {
  if (Number.isInteger(ms) && ms >= INSTANT_RANGE.min && ms <= INSTANT_RANGE.max) return undefined;
  return "must be a timestamp from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z";
}
