/**
 * Stored user properties (API.md, "Conditions and AuthZEN"): a JSON object
 * per user that conditions will read as `subject.properties`, with a
 * question's `subjectProperties` laid over it key by key. A write replaces
 * the whole object; `{}` clears it (the row goes: a user with no properties
 * and a user never written are the same to every reader).
 *
 * The bounds are checked here, once, whatever protocol brought the object:
 * its size, because a question reads it and its context (64 KiB in all)
 * into CEL values; its depth, because that conversion and CEL's evaluation
 * recurse through it; and finite numbers, because a binary protobuf Value
 * may carry NaN or Infinity, which neither JSON nor jsonb can hold. Its
 * strings are checked at the edge with every other string of a request
 * (transport/call/text-fields.ts).
 */
import { stoppable, type AbortOptions, type Db } from "../store/db.js";
import { userPropertiesStore } from "../store/user-properties-store.js";
import { jsonDepthExceeds, type JsonObject } from "../lib/json.js";
import { requireApplication } from "./applications.js";
import { Violations } from "./errors.js";
import { appIdProblem, check, identifierProblem, show } from "./formats.js";

export const USER_PROPERTIES_LIMITS = {
  /** Bytes of the object's JSON text, written compactly (JSON.stringify) in UTF-8: 16 KiB. */
  jsonBytes: 16 * 1024,
  /** Levels of objects and arrays, the object itself the first. */
  depth: 32,
  /** Violations named in one 400 for the values inside; the rest are counted. */
  namedProblems: 20,
} as const;

/** What kind of JSON value a client sent, for a message. */
const kindOf = (value: unknown): string =>
  value === null ? "null" : Array.isArray(value) ? "an array" : typeof value === "object" ? "an object" : `a ${typeof value}`;

/**
 * The problems of a properties object at `field`, added to `v`; the object
 * when it has none. Its depth is checked before anything walks it.
 */
export function checkProperties(value: unknown, field: string, v: Violations): JsonObject | undefined {
  if (value === undefined || value === null) {
    v.add(field, "is required: a JSON object ({} to clear the properties)");
    return undefined;
  }
  if (typeof value !== "object" || Array.isArray(value)) {
    v.add(field, `must be a JSON object, got ${kindOf(value)}`);
    return undefined;
  }
  const { depth, jsonBytes } = USER_PROPERTIES_LIMITS;
  if (jsonDepthExceeds(value, depth)) {
    v.add(field, `is nested deeper than ${depth} levels (objects and arrays, the properties object itself the first)`);
    return undefined;
  }
  const before = v.count;
  nonFiniteNumbers(value, field, v);
  if (v.count > before) return undefined;
  const bytes = Buffer.byteLength(JSON.stringify(value), "utf8");
  if (bytes > jsonBytes) {
    v.add(field, `is ${bytes.toLocaleString("en-US")} bytes of JSON; at most ${jsonBytes.toLocaleString("en-US")} (16 KiB)`);
    return undefined;
  }
  return value as JsonObject;
}

/** NaN and ±Infinity anywhere in `value` (only a binary Value carries them), each named by its path. */
function nonFiniteNumbers(value: unknown, path: string, v: Violations): void {
  if (typeof value === "number") {
    if (!Number.isFinite(value)) v.add(path, `must be a finite number, got ${String(value)}`);
  } else if (Array.isArray(value)) {
    value.forEach((item, i) => nonFiniteNumbers(item, `${path}[${i}]`, v));
  } else if (typeof value === "object" && value !== null) {
    for (const [key, item] of Object.entries(value)) nonFiniteNumbers(item, `${path}[${show(key)}]`, v);
  }
}

/** Each user's stored properties. */
export class UserProperties {
  constructor(private readonly db: Db) {}

  /** Replaces the user's properties with `properties` and answers them as stored. */
  async set(appId: string, userId: string, properties: unknown, options?: AbortOptions): Promise<JsonObject> {
    const v = new Violations(USER_PROPERTIES_LIMITS.namedProblems);
    check(v, "appId", appIdProblem(appId));
    check(v, "userId", identifierProblem(userId));
    const object = checkProperties(properties, "properties", v);
    v.throwIfAny();
    const q = stoppable(this.db, options);
    await requireApplication(q, appId);
    if (Object.keys(object!).length === 0) {
      await userPropertiesStore.delete(q, appId, userId);
      return {};
    }
    return userPropertiesStore.put(q, appId, userId, JSON.stringify(object));
  }

  /** The user's properties; {} when none are stored. */
  async get(appId: string, userId: string): Promise<JsonObject> {
    const v = new Violations();
    check(v, "appId", appIdProblem(appId));
    check(v, "userId", identifierProblem(userId));
    v.throwIfAny();
    await requireApplication(this.db, appId);
    return (await userPropertiesStore.get(this.db, appId, userId)) ?? {};
  }
}
