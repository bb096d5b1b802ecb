/** Grants from NDJSON (JSON Lines): lines read incrementally, one JSON object a grant. */

import { BomSkipper, bytesOf, Bytes, CR, LF, lenient, NOT_UTF8, utf8, type ReadStart } from "./bytes.js";
import { collect, IGNORED_KEYS, KNOWN_COLUMNS, MAX_RECORD_BYTES, toRow, type Column, type GrantRow, type LineIssue, type ParseResult, type RawRow } from "./rows.js";

/** One line of text, the line's number, and where it ends. */
export interface TextLine {
  line: number;
  text: string;
  /** Not UTF-8, or too long (the text is then cut or lossy). */
  problem?: string;
  /** Byte offset just past the line and its line break. */
  end: number;
}

/** Lines, incrementally, ending at CRLF, LF or a lone CR (as String.split(/\r\n|\n|\r/) cuts them). */
export class LineReader {
  private offset: number;
  private line: number;
  private readonly bom: BomSkipper;
  private readonly text = new Bytes();
  private lineBytes = 0;
  private afterCr = false;
  private held: TextLine | undefined;

  constructor(
    start: ReadStart = { offset: 0, line: 1 },
    private readonly maxLineBytes = MAX_RECORD_BYTES,
  ) {
    this.offset = start.offset;
    this.line = start.line;
    this.bom = new BomSkipper(start.offset === 0);
  }

  push(chunk: Uint8Array): TextLine[] {
    const out: TextLine[] = [];
    const { bytes, skipped } = this.bom.take(chunk, false);
    this.offset += skipped;
    this.read(bytes, out);
    return out;
  }

  end(): TextLine[] {
    const out: TextLine[] = [];
    const { bytes, skipped } = this.bom.take(new Uint8Array(0), true);
    this.offset += skipped;
    this.read(bytes, out);
    if (this.held !== undefined) out.push({ ...this.held, end: this.offset });
    else if (this.lineBytes > 0) out.push(this.finish());
    this.held = undefined;
    return out;
  }

  private read(bytes: Uint8Array, out: TextLine[]): void {
    for (let i = 0; i < bytes.length; i++) {
      const b = bytes[i]!;
      if (this.afterCr) {
        this.afterCr = false;
        if (b === LF) {
          this.offset++;
          out.push({ ...this.held!, end: this.offset });
          this.held = undefined;
          continue;
        }
        out.push({ ...this.held!, end: this.offset });
        this.held = undefined;
      }
      this.offset++;
      if (b === CR) {
        this.held = this.finish();
        this.afterCr = true;
      } else if (b === LF) out.push(this.finish());
      else if (++this.lineBytes <= this.maxLineBytes) this.text.push(b);
    }
  }

  private finish(): TextLine {
    const text = utf8(this.text.view());
    const problem =
      this.lineBytes > this.maxLineBytes ? `the line is over ${this.maxLineBytes} bytes` : text === undefined ? NOT_UTF8 : undefined;
    const line: TextLine = { line: this.line, text: text ?? lenient.decode(this.text.view()), end: this.offset, ...(problem === undefined ? {} : { problem }) };
    this.line++;
    this.text.length = 0;
    this.lineBytes = 0;
    return line;
  }
}

/**
 * One NDJSON (JSON Lines) line: a JSON object with the keys userId,
 * resource, resourceId, relation (strings), and optionally expiresAt (an
 * RFC 3339 string, or null for none) and op ("write" or "delete").
 * createdAt, which the list route returns, is ignored, so a list answer's
 * (or an export's) grants can be imported back; any other key is refused.
 * Null for a blank line.
 */
export function ndjsonGrant(source: TextLine): GrantRow | LineIssue | null {
  const { line } = source;
  if (source.problem !== undefined) return { line, reason: source.problem };
  if (source.text.trim() === "") return null;
  let value: unknown;
  try {
    value = JSON.parse(source.text);
  } catch {
    return { line, reason: "not JSON" };
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return { line, reason: "not a JSON object" };
  const allowed: readonly string[] = [...KNOWN_COLUMNS, ...IGNORED_KEYS];
  const problems: string[] = [];
  const raw: RawRow = { line };
  for (const [key, v] of Object.entries(value as Record<string, unknown>)) {
    if (!allowed.includes(key)) {
      problems.push(`unknown key "${key}" (keys: ${KNOWN_COLUMNS.join(", ")})`);
    } else if ((IGNORED_KEYS as readonly string[]).includes(key)) {
      continue;
    } else if (key === "expiresAt" && v === null) {
      continue;
    } else if (typeof v !== "string") {
      problems.push(`${key} is not a string`);
    } else {
      raw[key as Column] = v;
    }
  }
  // A wrong type already says more than "missing".
  const typeProblem = new Set(problems.filter((p) => p.endsWith(" is not a string")).map((p) => p.split(" ")[0]));
  const row = toRow(raw);
  if (Array.isArray(row)) problems.push(...row.filter((p) => !(p.startsWith("missing ") && typeProblem.has(p.slice(8)))));
  if (problems.length > 0) return { line, reason: problems.join("; ") };
  return row as GrantRow;
}

/** Grants from NDJSON text or bytes. */
export function parseNdjson(input: string | Uint8Array): ParseResult {
  const reader = new LineReader();
  const lines = [...reader.push(bytesOf(input)), ...reader.end()];
  return collect("ndjson", lines.map(ndjsonGrant));
}
