import { isUtf8 } from "node:buffer";
import type { TimeCursor } from "../store/db.js";
import { invalidArgument } from "./errors.js";
import { show, textProblem } from "./formats.js";

/**
 * Opaque page tokens: the position after the last item of a page, as
 * base64url JSON. Opaque to clients (they must not build them), so the
 * position format can change without breaking anyone.
 *
 * Opaque is not trusted: a client can forge one, and every position field
 * goes into SQL as a parameter. So a token is decoded and checked completely
 * here, in one place, before any query sees it: a value Postgres would
 * refuse (a date that is no instant, a NUL, 1.5 as a bigint) is a 400
 * naming pageToken, never a data error from the database.
 */
export function encodePageToken(position: Record<string, string | number>): string {
  return Buffer.from(JSON.stringify(position), "utf8").toString("base64url");
}

/**
 * What a position field holds:
 * - "string": text (an id, a name): well-formed, no NUL, at most 1,024 UTF-16 units;
 * - "number": a sequence number: a safe integer, 0 or more;
 * - "timestamp": an instant as Date.toISOString writes it, years 1 to 9999.
 */
export type PositionKind = "string" | "number" | "timestamp";
type PositionValue<T extends PositionKind> = T extends "number" ? number : string;

// Tokens this service issues stay far below this: two ids of 256 characters
// (4 UTF-8 bytes each at most), JSON-quoted, in base64.
const TOKEN_MAX = 4096;
const STRING_MAX = 1024;
const BASE64URL = /^[A-Za-z0-9_-]*$/;
const ISO_INSTANT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

function positionProblem(kind: PositionKind, value: unknown): boolean {
  switch (kind) {
    case "string":
      return typeof value !== "string" || value.length > STRING_MAX || textProblem(value) !== undefined;
    case "number":
      return typeof value !== "number" || !Number.isSafeInteger(value) || value < 0;
    case "timestamp": {
      if (typeof value !== "string" || !ISO_INSTANT.test(value) || value.startsWith("0000")) return true;
      // The pattern admits 2024-02-31 and 25:00; the round trip does not.
      const time = Date.parse(value);
      return Number.isNaN(time) || new Date(time).toISOString() !== value;
    }
  }
}

/** Decodes a token this service issued with the given keys; a 400 naming pageToken otherwise. */
export function decodePageToken<K extends string, T extends PositionKind>(
  token: string,
  keys: Record<K, T>,
): Record<K, PositionValue<T>> | undefined {
  if (token === "") return undefined;
  const bad = () =>
    invalidArgument(`pageToken: ${show(token)} is not a page token of this list`, [
      { field: "pageToken", reason: "not a page token of this list" },
    ]);
  if (token.length > TOKEN_MAX || !BASE64URL.test(token)) throw bad();
  const bytes = Buffer.from(token, "base64url");
  if (!isUtf8(bytes)) throw bad();
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString("utf8"));
  } catch {
    throw bad();
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw bad();
  const record = value as Record<string, unknown>;
  const expected = Object.entries(keys) as [K, T][];
  // Exactly the expected keys, each its own (JSON.parse makes "__proto__" an own key, never a prototype).
  if (Object.keys(record).length !== expected.length) throw bad();
  for (const [key, kind] of expected) {
    if (!Object.hasOwn(record, key) || positionProblem(kind, record[key])) throw bad();
  }
  return record as Record<K, PositionValue<T>>;
}

/** Decodes a token of a list in (created_at, id) order. */
export function decodeTimeCursor(token: string): TimeCursor | undefined {
  const position = decodePageToken(token, { createdAt: "timestamp", id: "string" } as const);
  return position && { createdAt: position.createdAt, id: position.id };
}

/** The (created_at, id) position of a row. */
export const timeCursor = (createdAt: Date, id: string): TimeCursor => ({ createdAt: createdAt.toISOString(), id });

/** Splits a `limit + 1` fetch into the page and the token of the next one. */
export function page<T>(rows: T[], limit: number, position: (last: T) => Record<string, string | number>) {
  const items = rows.slice(0, limit);
  const last = items[items.length - 1];
  const nextPageToken = rows.length > limit && last !== undefined ? encodePageToken(position(last)) : "";
  return { items, nextPageToken };
}
