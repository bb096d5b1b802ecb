import type { TimeCursor } from "../store/db.js";
import { invalidArgument } from "./errors.js";

/**
 * Opaque page tokens: the position after the last item of a page, as
 * base64url JSON. Opaque to clients (they must not build them), so the
 * position format can change without breaking anyone.
 */
export function encodePageToken(position: Record<string, string | number>): string {
  return Buffer.from(JSON.stringify(position), "utf8").toString("base64url");
}

/** Decodes a token this service issued with the given keys; a 400 naming pageToken otherwise. */
export function decodePageToken<K extends string>(
  token: string,
  keys: Record<K, "string" | "number">,
): Record<K, string | number> | undefined {
  if (token === "") return undefined;
  const bad = () => invalidArgument(`pageToken: "${token.slice(0, 40)}" is not a page token of this list`, [{ field: "pageToken", reason: "not a page token of this list" }]);
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(token, "base64url").toString("utf8"));
  } catch {
    throw bad();
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw bad();
  const record = value as Record<string, unknown>;
  for (const [key, type] of Object.entries(keys) as [K, "string" | "number"][]) {
    if (typeof record[key] !== type) throw bad();
  }
  if (Object.keys(record).length !== Object.keys(keys).length) throw bad();
  return record as Record<K, string | number>;
}

/** Decodes a token of a list in (created_at, id) order. */
export function decodeTimeCursor(token: string): TimeCursor | undefined {
  const position = decodePageToken(token, { createdAt: "string", id: "string" });
  return position && { createdAt: position.createdAt as string, id: position.id as string };
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
