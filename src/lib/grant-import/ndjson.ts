/** Grants from NDJSON (JSON Lines): lines read incrementally, one JSON object a grant. */

import { BomSkipper, bytesOf, Bytes, CR, LF, lenient, NOT_UTF8, utf8, type ReadStart } from "./bytes.js";
import {
  collect,
  IGNORED_KEYS,
  KNOWN_COLUMNS,
  MAX_RECORD_BYTES,
  NO_HOLDER,
  SUBJECT_COLUMNS,
  toRow,
  type Column,
  type GrantRow,
  type LineIssue,
  type ParseResult,
  type RawRow,
} from "./rows.js";

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

/** The keys of the nested `subject` (as the API writes it) and the flat keys they stand for. */
const NESTED_SUBJECT = { resource: "subjectResource", resourceId: "subjectResourceId", relation: "subjectRelation" } as const;
/** The keys a line may have: every column, the nested subject, and the ignored ones. */
const ALLOWED_KEYS: readonly string[] = [...KNOWN_COLUMNS, "subject", ...IGNORED_KEYS];
/** The keys that name a holder, as problems name them. */
const HOLDER_KEYS = ["userId", "allUsers", "subject", ...SUBJECT_COLUMNS, ...Object.keys(NESTED_SUBJECT).map((k) => `subject.${k}`)];

/**
 * One NDJSON (JSON Lines) line: a JSON object with the keys resource,
 * resourceId, relation, the holder, and optionally expiresAt (an RFC 3339
 * string, or null for none), condition (CEL, or null for none) and op
 * ("write" or "delete"), all strings but allUsers. The
 * holder is userId, allUsers (the boolean true: every user), or a subject: the flat keys subjectResource,
 * subjectResourceId and subjectRelation (absent or "" for a link), or the
 * API's own `subject: {resource, resourceId, relation}` (what the list
 * route returns, beside `userId: ""`; allUsers false, as the route writes
 * it beside every other holder, names none); a line with both forms of a subject
 * is a row error. createdAt, which the list route returns, is ignored, so a
 * list answer's (or an export's) grants can be imported back; any other key
 * is refused. Null for a blank line.
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
  const problems: string[] = [];
  /** Keys (as problems name them) whose value has the wrong type: "missing" says less about them. */
  const mistyped = new Set<string>();
  const raw: RawRow = { line };
  let nested = false;
  for (const [key, v] of Object.entries(value as Record<string, unknown>)) {
    if (!ALLOWED_KEYS.includes(key)) {
      problems.push(`unknown key "${key}" (keys: ${[...KNOWN_COLUMNS, "subject"].join(", ")})`);
    } else if ((IGNORED_KEYS as readonly string[]).includes(key)) {
      continue;
    } else if ((key === "expiresAt" || key === "condition" || key === "subject" || key === "allUsers") && v === null) {
      continue;
    } else if (key === "allUsers") {
      // A boolean, as the API writes it; the row's text form is CSV's.
      if (typeof v === "boolean") raw.allUsers = v ? "true" : "";
      else {
        problems.push("allUsers is not a boolean (true or false)");
        mistyped.add("allUsers");
      }
    } else if (key === "subject") {
      nested = true;
      if (typeof v !== "object" || Array.isArray(v)) {
        problems.push("subject is not an object ({resource, resourceId, relation})");
        mistyped.add("subject");
        continue;
      }
      for (const [inner, w] of Object.entries(v as Record<string, unknown>)) {
        const flat = Object.hasOwn(NESTED_SUBJECT, inner) ? NESTED_SUBJECT[inner as keyof typeof NESTED_SUBJECT] : undefined;
        if (flat === undefined) problems.push(`unknown key "subject.${inner}" (subject keys: resource, resourceId, relation)`);
        else if (inner === "relation" && w === null) continue;
        else if (typeof w !== "string") {
          problems.push(`subject.${inner} is not a string`);
          mistyped.add(`subject.${inner}`);
        } else raw[flat] = w;
      }
    } else if (typeof v !== "string") {
      problems.push(`${key} is not a string`);
      mistyped.add(key);
    } else {
      raw[key as Column] = v;
    }
  }
  const record = value as Record<string, unknown>;
  if (nested && SUBJECT_COLUMNS.some((c) => Object.hasOwn(record, c))) {
    return {
      line,
      reason: [...problems, `subject and ${SUBJECT_COLUMNS.join(", ")} are two forms of the same holder: give one of them`].join("; "),
    };
  }
  const holderMistyped = HOLDER_KEYS.some((k) => mistyped.has(k));
  const row = toRow(raw, { subject: nested ? "nested" : "flat" });
  // A wrong type already says more than "missing".
  const said = (p: string) =>
    (p.startsWith("missing ") && (mistyped.has(p.slice(8)) || (p.startsWith("missing subject.") && mistyped.has("subject")))) || (p === NO_HOLDER && holderMistyped);
  if (Array.isArray(row)) problems.push(...row.filter((p) => !said(p)));
  if (problems.length > 0) return { line, reason: problems.join("; ") };
  return row as GrantRow;
}

/** Grants from NDJSON text or bytes. */
export function parseNdjson(input: string | Uint8Array): ParseResult {
  const reader = new LineReader();
  const lines = [...reader.push(bytesOf(input)), ...reader.end()];
  return collect("ndjson", lines.map(ndjsonGrant));
}
