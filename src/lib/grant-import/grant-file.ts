/** A whole grant file: its format from its name or its first bytes, then its rows. */

import { BOM, bytesOf, CR, LF } from "./bytes.js";
import { parseCsv } from "./csv-grants.js";
import { parseNdjson } from "./ndjson.js";
import type { GrantFormat, ParseResult } from "./rows.js";

/** The format a file name says: .ndjson and .jsonl, .csv; undefined for any other. */
export function formatOfName(fileName: string): GrantFormat | undefined {
  const name = fileName.toLowerCase();
  if (/\.(ndjson|jsonl)$/.test(name)) return "ndjson";
  if (name.endsWith(".csv")) return "csv";
  return undefined;
}

/** The format of a file's first bytes: NDJSON when its first non-blank character is "{", else CSV. */
export function formatOfContent(head: Uint8Array): GrantFormat {
  const start = head[0] === BOM[0] && head[1] === BOM[1] && head[2] === BOM[2] ? 3 : 0;
  for (let i = start; i < head.length; i++) {
    const b = head[i]!;
    if (b === 0x20 || b === 0x09 || b === CR || b === LF) continue;
    return b === 0x7b ? "ndjson" : "csv";
  }
  return "csv";
}

/** Grants from a whole file: by its name's extension, else by its first character. */
export function parseGrantFile(input: string | Uint8Array, fileName = ""): ParseResult {
  const bytes = bytesOf(input);
  const format = formatOfName(fileName) ?? formatOfContent(bytes.subarray(0, 4096));
  return format === "ndjson" ? parseNdjson(bytes) : parseCsv(bytes);
}
