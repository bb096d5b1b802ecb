/**
 * A JSON object typed by a person (the check's context and properties), read
 * before it is sent: the service takes only an object there and refuses
 * anything else with a 400, but a message saying where the text stops being
 * JSON, or what it is instead of an object, is clearer and costs no call.
 */
import type { JsonObject } from "@bufbuild/protobuf";

export type JsonObjectText = { ok: true; value: JsonObject | undefined } | { ok: false; problem: string };

/** What a JSON value is, in words, for the message refusing it. */
function kindOf(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return `a ${typeof value}`;
}

/** Non-blank text as a JSON value, or where it stops being JSON. */
export function readJson(text: string): { ok: true; value: unknown } | { ok: false; problem: string } {
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch (error) {
    // The browser's message says where (Chromium: "... at position 12 (line 2 column 3)").
    return { ok: false, problem: `not JSON: ${error instanceof Error ? error.message : String(error)}` };
  }
}

/** The text as a JSON object; undefined when it is empty or blank (nothing given). */
export function readJsonObject(text: string): JsonObjectText {
  if (text.trim() === "") return { ok: true, value: undefined };
  const read = readJson(text);
  if (!read.ok) return read;
  const value = read.value;
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return { ok: false, problem: `a JSON object is needed ({"key": value, …}), not ${kindOf(value)}` };
  }
  return { ok: true, value: value as JsonObject };
}
