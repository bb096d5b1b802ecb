/**
 * Importing grants from a file, shared by the web console (console/src/pages/
 * grants.tsx, a whole file at once) and the command line (src/cli/, streamed):
 * read CSV or NDJSON into rows that remember their source line, and send them
 * to the bulk route (at most BULK_LIMIT entries a call), working around its
 * all-or-nothing rule: when a call is refused naming bad entries, those rows
 * are reported and the rest of the call is sent again.
 *
 * Pure TypeScript: no DOM, no Node API, no transport (TextEncoder and
 * TextDecoder exist in both). The caller injects `send` (the
 * BulkWriteRelationships call) and, optionally, how to read a refusal.
 *
 * The readers work on bytes, incrementally (push chunks, then end), so the
 * command line streams a file of any size with exact byte offsets for its
 * resumable position, and both callers read a file the same way, line for
 * line. Bytes that are not UTF-8 make a row error, as the service refuses
 * them, rather than turning into U+FFFD and a different id.
 *
 * CSV is read here rather than with a library: the console takes no CSV
 * dependency for one feature (it would weigh more in the bundle than the
 * rest of the import), and csv-parse 7.0.3, tried for the command line,
 * counts a CRLF inside a quoted field as two lines (every later line number
 * is then off by one), swallows every following row into one error after a
 * stray character behind a closing quote (skip_records_with_error), and ends
 * the parse silently after a record over max_record_size. Rows are reported
 * by line, so those matter; the reader below is RFC 4180 in some eighty lines.
 */

/** The bulk route takes at most this many entries (writes and deletes together) per call. */
export const BULK_LIMIT = 5000;

/**
 * A CSV record or NDJSON line longer than this is a row error and is not
 * kept: a grant row is a few hundred bytes at most (ids of 256 characters),
 * and a runaway (an unclosed quote) must not hold the rest of a large file
 * in memory.
 */
export const MAX_RECORD_BYTES = 64 * 1024;

/** The columns (CSV) or keys (NDJSON) a grant row has. */
export const REQUIRED_COLUMNS = ["userId", "resource", "resourceId", "relation"] as const;
export const OPTIONAL_COLUMNS = ["expiresAt", "op"] as const;
/** NDJSON keys accepted and ignored: a grant as the list route (and an export) returns it carries createdAt. */
const IGNORED_KEYS = ["createdAt"] as const;

export type Column = (typeof REQUIRED_COLUMNS)[number] | (typeof OPTIONAL_COLUMNS)[number];
const KNOWN_COLUMNS: readonly Column[] = [...REQUIRED_COLUMNS, ...OPTIONAL_COLUMNS];

export type GrantOp = "write" | "delete";

/** One grant read from the file. */
export interface GrantRow {
  /** 1-based line of the file where the row starts. */
  line: number;
  op: GrantOp;
  userId: string;
  resource: string;
  resourceId: string;
  relation: string;
  /** Writes only; absent for a grant that never expires. */
  expiresAt?: Date;
}

/** A problem with one line (or the file, line 1 for the header): "line 7: missing resourceId". */
export interface LineIssue {
  line: number;
  reason: string;
}

export interface ParseResult {
  format: GrantFormat;
  /** Rows with no problem, in file order: these are the ones sent. */
  rows: GrantRow[];
  /** Rows (or the header) with problems: reported, never sent. */
  errors: LineIssue[];
}

export type GrantFormat = "csv" | "ndjson";

/** "line 7: missing resourceId". */
export const formatIssue = (issue: LineIssue): string => `line ${issue.line}: ${issue.reason}`;

export const isIssue = (x: GrantRow | LineIssue): x is LineIssue => "reason" in x;

/* ------------------------------------------------------------------------ */
/* Field values                                                              */
/* ------------------------------------------------------------------------ */

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/;

const daysIn = (year: number, month: number) => new Date(Date.UTC(year, month, 0)).getUTCDate();

/**
 * An RFC 3339 date-time with a zone ("2030-01-31T12:00:00Z",
 * "2030-01-31T14:00:00.5+02:00"), as the API takes it; digits finer than the
 * millisecond are dropped, as the API drops them. Parsed by hand rather than
 * with Date.parse, which accepts other forms and rolls 2030-02-30 over to
 * March. Returns a reason when it is no such instant.
 */
export function parseExpiry(text: string): Date | { problem: string } {
  const m = RFC3339.exec(text.trim());
  if (m === null) {
    return /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?$/.test(text.trim())
      ? { problem: "expiresAt has no time zone (end it with Z or an offset such as +02:00)" }
      : { problem: "expiresAt is not a date (RFC 3339, e.g. 2030-01-31T12:00:00Z)" };
  }
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const millis = Number(((m[7] ?? "") + "000").slice(0, 3));
  const offsetMinutes = m[8] !== undefined ? 0 : (m[9] === "-" ? -1 : 1) * (Number(m[10]) * 60 + Number(m[11]));
  if (
    year < 1 ||
    month < 1 ||
    month > 12 ||
    day < 1 ||
    day > daysIn(year, month) ||
    hour > 23 ||
    minute > 59 ||
    second > 59 ||
    Number(m[10] ?? 0) > 23 ||
    Number(m[11] ?? 0) > 59
  ) {
    return { problem: "expiresAt is not a date (a field is out of range)" };
  }
  const utc = new Date(0);
  utc.setUTCFullYear(year, month - 1, day);
  utc.setUTCHours(hour, minute, second, millis);
  return new Date(utc.getTime() - offsetMinutes * 60_000);
}

/** The fields of one row, as strings (undefined: the column or key is absent). */
type RawRow = { line: number } & { [C in Column]?: string | undefined };

/** A row from its fields, or the reasons it is no row. */
function toRow(raw: RawRow): GrantRow | string[] {
  const problems: string[] = [];
  for (const column of REQUIRED_COLUMNS) {
    if ((raw[column] ?? "") === "") problems.push(`missing ${column}`);
  }
  const opText = (raw.op ?? "").trim().toLowerCase();
  let op: GrantOp = "write";
  if (opText === "delete") op = "delete";
  else if (opText !== "" && opText !== "write") problems.push(`op must be write or delete, not "${raw.op}"`);
  let expiresAt: Date | undefined;
  const expiryText = (raw.expiresAt ?? "").trim();
  if (expiryText !== "") {
    const parsed = parseExpiry(expiryText);
    if (parsed instanceof Date) expiresAt = parsed;
    else problems.push(parsed.problem);
    if (op === "delete") problems.push("a delete takes no expiresAt");
  }
  if (problems.length > 0) return problems;
  return {
    line: raw.line,
    op,
    userId: raw.userId!,
    resource: raw.resource!,
    resourceId: raw.resourceId!,
    relation: raw.relation!,
    ...(expiresAt === undefined ? {} : { expiresAt }),
  };
}

/* ------------------------------------------------------------------------ */
/* Bytes                                                                     */
/* ------------------------------------------------------------------------ */

/** Where the bytes a reader is given begin: offset 0, line 1 for a whole file; elsewhere when resuming. */
export interface ReadStart {
  offset: number;
  line: number;
}

const CR = 0x0d;
const LF = 0x0a;
const COMMA = 0x2c;
const QUOTE = 0x22;
const BOM = [0xef, 0xbb, 0xbf] as const;

const strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const lenient = new TextDecoder("utf-8", { ignoreBOM: true });

/** Bytes as text, or undefined when they are not UTF-8. */
function utf8(bytes: Uint8Array): string | undefined {
  try {
    return strict.decode(bytes);
  } catch {
    return undefined;
  }
}

const NOT_UTF8 = "not UTF-8 text";

/** A growable byte buffer for one field or line. */
class Bytes {
  private data = new Uint8Array(256);
  length = 0;
  push(b: number): void {
    if (this.length === this.data.length) {
      const bigger = new Uint8Array(this.data.length * 2);
      bigger.set(this.data);
      this.data = bigger;
    }
    this.data[this.length++] = b;
  }
  view(): Uint8Array {
    return this.data.subarray(0, this.length);
  }
}

/**
 * Skips a UTF-8 byte order mark at offset 0, across chunk boundaries: the
 * first bytes are held until three have come (or the input ends).
 */
class BomSkipper {
  private held: number[] | undefined;
  constructor(atStart: boolean) {
    this.held = atStart ? [] : undefined;
  }
  /** The bytes to read, and how many bytes of the input were a BOM (so offsets stay true). */
  take(bytes: Uint8Array, end: boolean): { bytes: Uint8Array; skipped: number } {
    if (this.held === undefined) return { bytes, skipped: 0 };
    const all = Uint8Array.from([...this.held, ...bytes.subarray(0, 3)]);
    if (all.length < 3 && !end) {
      this.held = [...all];
      return { bytes: new Uint8Array(0), skipped: 0 };
    }
    const heldCount = this.held.length;
    this.held = undefined;
    const isBom = all.length >= 3 && BOM.every((b, i) => all[i] === b);
    const rest = concat(Uint8Array.from(all.subarray(0, heldCount)), bytes);
    return isBom ? { bytes: rest.subarray(3), skipped: 3 } : { bytes: rest, skipped: 0 };
  }
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  if (a.length === 0) return b;
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/* ------------------------------------------------------------------------ */
/* CSV                                                                       */
/* ------------------------------------------------------------------------ */

/** One CSV record: its fields, the line it starts on, a problem if it is broken, and where it ends. */
export interface CsvRecord {
  line: number;
  fields: string[];
  problem?: string;
  /** Byte offset just past the record and its line break, and the line that starts there. */
  end: number;
  nextLine: number;
}

/** The reader's states. */
const S = {
  /** Before a record. */
  Start: 0,
  /** At the start of a field. */
  Field: 1,
  Unquoted: 2,
  Quoted: 3,
  /** A quote inside a quoted field: a second one is a quote, anything else closes the field. */
  QuoteSeen: 4,
  /** Text after a closing quote (a mistake, kept in the field and reported). */
  Stray: 5,
  /** A record ended with CR: a LF right after belongs to it. */
  AfterCr: 6,
} as const;
type State = (typeof S)[keyof typeof S];

/**
 * RFC 4180 records, incrementally: fields split on commas; a field in double
 * quotes may hold commas, line breaks and "" (one quote); records end at
 * CRLF, LF or a lone CR. A quote inside an unquoted field is kept as it is
 * (as most readers do). Records that are empty or only white space are
 * skipped. Line breaks inside quotes count as lines, so a record's line is
 * the one it starts on.
 */
export class CsvRecordReader {
  private state: State = S.Start;
  private offset: number;
  private line: number;
  private readonly bom: BomSkipper;
  private readonly field = new Bytes();
  private fields: string[] = [];
  private recordLine = 0;
  private recordBytes = 0;
  private anyQuoted = false;
  private quoteLine = 0;
  private problem: string | undefined;
  private stray: number[] = [];
  private crInQuotes = false;
  private held: CsvRecord | undefined;

  constructor(
    start: ReadStart = { offset: 0, line: 1 },
    private readonly maxRecordBytes = MAX_RECORD_BYTES,
  ) {
    this.offset = start.offset;
    this.line = start.line;
    this.bom = new BomSkipper(start.offset === 0);
  }

  push(chunk: Uint8Array): CsvRecord[] {
    const out: CsvRecord[] = [];
    const { bytes, skipped } = this.bom.take(chunk, false);
    this.offset += skipped;
    this.read(bytes, out);
    return out;
  }

  /** The last record, once the input has ended. */
  end(): CsvRecord[] {
    const out: CsvRecord[] = [];
    const { bytes, skipped } = this.bom.take(new Uint8Array(0), true);
    this.offset += skipped;
    this.read(bytes, out);
    switch (this.state) {
      case S.AfterCr:
        this.emitHeld(out);
        break;
      case S.Start:
        break;
      case S.Quoted:
        this.problem ??= `the quoted field opened on line ${this.quoteLine} is never closed`;
        this.endRecord(out);
        break;
      default:
        this.endRecord(out);
    }
    this.state = S.Start;
    return out;
  }

  private read(bytes: Uint8Array, out: CsvRecord[]): void {
    for (let i = 0; i < bytes.length; i++) {
      const b = bytes[i]!;
      if (this.state === S.AfterCr) {
        this.state = S.Start;
        if (b === LF) {
          this.offset++;
          this.emitHeld(out);
          continue;
        }
        this.emitHeld(out);
      }
      this.offset++;
      if (this.state === S.Start) {
        this.fields = [];
        this.recordLine = this.line;
        this.recordBytes = 0;
        this.anyQuoted = false;
        this.problem = undefined;
        this.state = S.Field;
      }
      if (++this.recordBytes === this.maxRecordBytes + 1) {
        this.problem ??=
          this.state === S.Quoted
            ? `the quoted field opened on line ${this.quoteLine} runs over ${this.maxRecordBytes} bytes (is it closed?)`
            : `the record is over ${this.maxRecordBytes} bytes`;
      }
      switch (this.state) {
        case S.Field:
          if (b === QUOTE) {
            this.anyQuoted = true;
            this.quoteLine = this.line;
            this.crInQuotes = false;
            this.state = S.Quoted;
          } else if (b === COMMA) this.endField();
          else if (b === CR || b === LF) this.lineBreak(b, out);
          else {
            this.append(b);
            this.state = S.Unquoted;
          }
          break;
        case S.Unquoted:
          if (b === COMMA) {
            this.endField();
            this.state = S.Field;
          } else if (b === CR || b === LF) this.lineBreak(b, out);
          else this.append(b);
          break;
        case S.Quoted:
          if (b === QUOTE) {
            this.state = S.QuoteSeen;
            break;
          }
          // A line break inside quotes is part of the field; CRLF counts once.
          if (b === CR || (b === LF && !this.crInQuotes)) this.line++;
          this.crInQuotes = b === CR;
          this.append(b);
          break;
        case S.QuoteSeen:
          if (b === QUOTE) {
            this.append(QUOTE);
            this.crInQuotes = false;
            this.state = S.Quoted;
          } else if (b === COMMA) {
            this.endField();
            this.state = S.Field;
          } else if (b === CR || b === LF) this.lineBreak(b, out);
          else {
            this.stray = [b];
            this.append(b);
            this.state = S.Stray;
          }
          break;
        case S.Stray:
          if (b === COMMA) {
            this.endField();
            this.state = S.Field;
          } else if (b === CR || b === LF) this.lineBreak(b, out);
          else {
            if (this.stray.length < 80) this.stray.push(b);
            this.append(b);
          }
          break;
      }
    }
  }

  private append(b: number): void {
    if (this.recordBytes <= this.maxRecordBytes) this.field.push(b);
  }

  private endField(): void {
    if (this.state === S.Stray) {
      const text = lenient.decode(Uint8Array.from(this.stray));
      this.problem ??= `text after a closing quote: ${JSON.stringify(text.slice(0, 20))}`;
    }
    const text = utf8(this.field.view());
    if (text === undefined) this.problem ??= NOT_UTF8;
    if (this.recordBytes <= this.maxRecordBytes) this.fields.push(text ?? lenient.decode(this.field.view()));
    this.field.length = 0;
  }

  /** A line break outside quotes ends the record (a CR waits for a LF that may follow). */
  private lineBreak(b: number, out: CsvRecord[]): void {
    this.endField();
    this.line++;
    const record = this.record();
    if (b === CR) {
      this.held = record;
      this.state = S.AfterCr;
    } else {
      this.state = S.Start;
      if (record !== undefined) out.push(record);
    }
  }

  /** The end of the input inside a record. */
  private endRecord(out: CsvRecord[]): void {
    this.endField();
    this.line++;
    const record = this.record();
    if (record !== undefined) out.push(record);
  }

  private emitHeld(out: CsvRecord[]): void {
    if (this.held !== undefined) out.push({ ...this.held, end: this.offset });
    this.held = undefined;
  }

  /** The record just read, or undefined for a blank one. */
  private record(): CsvRecord | undefined {
    const blank = !this.anyQuoted && this.fields.length === 1 && this.fields[0]!.trim() === "" && this.problem === undefined;
    if (blank) return undefined;
    return {
      line: this.recordLine,
      fields: this.fields,
      end: this.offset,
      nextLine: this.line,
      ...(this.problem === undefined ? {} : { problem: this.problem }),
    };
  }
}

const bytesOf = (input: string | Uint8Array): Uint8Array => (typeof input === "string" ? new TextEncoder().encode(input) : input);

/** Every record of a whole text or file (the console's reading; tests). */
export function readCsvRecords(input: string | Uint8Array): CsvRecord[] {
  const reader = new CsvRecordReader();
  return [...reader.push(bytesOf(input)), ...reader.end()];
}

export const CSV_HEADER_HELP = "userId,resource,resourceId,relation[,expiresAt][,op]";

/**
 * The columns a header row names, in any order: userId, resource,
 * resourceId, relation, and optionally expiresAt (RFC 3339 with a zone;
 * empty for none) and op (write or delete; empty means write). Names are
 * matched ignoring case and spaces around them; an unknown or repeated
 * column refuses the file (a misspelt "expires_at" must not quietly write
 * grants that never expire).
 */
export function csvColumns(header: CsvRecord): Column[] | LineIssue {
  const canonical = new Map(KNOWN_COLUMNS.map((c) => [c.toLowerCase(), c]));
  const columns: Column[] = [];
  const problems: string[] = [];
  if (header.problem !== undefined) problems.push(header.problem);
  header.fields.forEach((name, index) => {
    const column = canonical.get(name.trim().toLowerCase());
    if (column === undefined) problems.push(`unknown column "${name}" (columns: ${KNOWN_COLUMNS.join(", ")})`);
    else if (columns.includes(column)) problems.push(`column ${column} appears twice`);
    else columns[index] = column;
  });
  for (const required of REQUIRED_COLUMNS) {
    if (!columns.includes(required)) problems.push(`missing column ${required}`);
  }
  return problems.length > 0 ? { line: header.line, reason: `header row: ${problems.join("; ")}` } : columns;
}

export const EMPTY_FILE: LineIssue = { line: 1, reason: `the file is empty: a header row is required (${CSV_HEADER_HELP})` };

/** A CSV record under its header's columns: a row, or why it is none. */
export function csvGrant(columns: readonly Column[], record: CsvRecord): GrantRow | LineIssue {
  if (record.problem !== undefined) return { line: record.line, reason: record.problem };
  if (record.fields.length !== columns.length) {
    return { line: record.line, reason: `${record.fields.length} field${record.fields.length === 1 ? "" : "s"}, the header has ${columns.length}` };
  }
  const raw: RawRow = { line: record.line };
  record.fields.forEach((value, index) => {
    raw[columns[index]!] = value;
  });
  const row = toRow(raw);
  return Array.isArray(row) ? { line: record.line, reason: row.join("; ") } : row;
}

/** Grants from CSV text or bytes: the header row (see csvColumns), then one grant a record. */
export function parseCsv(input: string | Uint8Array): ParseResult {
  const records = readCsvRecords(input);
  const header = records[0];
  if (header === undefined) return { format: "csv", rows: [], errors: [EMPTY_FILE] };
  const columns = csvColumns(header);
  if (!Array.isArray(columns)) return { format: "csv", rows: [], errors: [columns] };
  return collect("csv", records.slice(1).map((record) => csvGrant(columns, record)));
}

function collect(format: GrantFormat, items: Iterable<GrantRow | LineIssue | null>): ParseResult {
  const result: ParseResult = { format, rows: [], errors: [] };
  for (const item of items) {
    if (item === null) continue;
    if (isIssue(item)) result.errors.push(item);
    else result.rows.push(item);
  }
  return result;
}

/* ------------------------------------------------------------------------ */
/* NDJSON                                                                    */
/* ------------------------------------------------------------------------ */

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

/* ------------------------------------------------------------------------ */
/* Sending                                                                   */
/* ------------------------------------------------------------------------ */

/** Items in runs of at most `size` (BULK_LIMIT by default), in order. */
export function chunk<T>(items: readonly T[], size = BULK_LIMIT): T[][] {
  if (!Number.isInteger(size) || size < 1) throw new RangeError(`chunk size must be a positive integer, got ${size}`);
  const chunks: T[][] = [];
  for (let i = 0; i < items.length; i += size) chunks.push(items.slice(i, i + size));
  return chunks;
}

/** One bulk call's body, in the route's terms: writes and deletes are indexed separately. */
export interface BulkChunk {
  writes: GrantRow[];
  deletes: GrantRow[];
}

/** The bulk route's answer. */
export interface BulkCounts {
  written: number;
  unchanged: number;
  deleted: number;
}

/** One entry of an API error's details. */
export interface ErrorDetail {
  field: string;
  reason: string;
}

/** What a refused call said, as the import needs it. */
export interface Rejection {
  /** The request was refused as invalid (400 invalid_argument): the details may name bad entries. */
  invalidArgument: boolean;
  message: string;
  details: ErrorDetail[];
}

/**
 * Reads a refusal shaped as the REST error body, `{code, message, details}`
 * with code "invalid_argument" (or the Connect code number 3). The console
 * passes its own reader for ConnectError (built from apiProblem).
 */
export function describeRejection(error: unknown): Rejection {
  const e = (typeof error === "object" && error !== null ? error : {}) as { code?: unknown; message?: unknown; rawMessage?: unknown; details?: unknown };
  const message = typeof e.rawMessage === "string" ? e.rawMessage : typeof e.message === "string" ? e.message : String(error);
  const details = Array.isArray(e.details)
    ? e.details.filter((d): d is ErrorDetail => typeof d === "object" && d !== null && typeof d.field === "string" && typeof d.reason === "string")
    : [];
  return { invalidArgument: e.code === "invalid_argument" || e.code === 3, message, details };
}

/** A row the route refused, with its reason ("relation: … is not a relation …"). */
export interface RefusedRow {
  row: GrantRow;
  reason: string;
}

export interface BatchOutcome extends BulkCounts {
  /** Rows the route refused, in the order it named them. */
  refused: RefusedRow[];
  /** Bulk calls made, retries included. */
  calls: number;
  /** Set when the batch stopped early: why, and the rows neither accepted nor refused. */
  stopped?: { reason: string; notSent: GrantRow[] };
}

export interface BatchOptions {
  /** How to read a rejected send; describeRejection by default. */
  describe?: (error: unknown) => Rejection;
  /** Checked before each call: once aborted, the batch stops. */
  signal?: AbortSignal;
  /** Rows settled (accepted, or refused) as they are. */
  onSettled?: (count: number) => void;
}

const ENTRY = /^(writes|deletes)\[(\d+)\](?:\.(.*))?$/;

/**
 * Sends one batch (at most BULK_LIMIT rows) to the bulk route. The route is
 * all or nothing, so when it refuses a call as invalid naming entries
 * (`writes[17].relation`, at most 100 per answer), those rows are recorded as
 * refused with the route's reason and the rest is sent again: every good row
 * is still written, once. Each retry drops at least one row, so it ends. A
 * refusal that names no entry of the call, or any other error (network, 401,
 * 403, 429, 5xx), stops the batch.
 */
export async function sendBatch(
  rows: readonly GrantRow[],
  send: (chunk: BulkChunk) => Promise<BulkCounts>,
  options: BatchOptions = {},
): Promise<BatchOutcome> {
  if (rows.length > BULK_LIMIT) throw new RangeError(`a batch holds at most ${BULK_LIMIT} rows, got ${rows.length}`);
  const describe = options.describe ?? describeRejection;
  const outcome: BatchOutcome = { written: 0, unchanged: 0, deleted: 0, refused: [], calls: 0 };
  let pending: readonly GrantRow[] = rows;
  while (pending.length > 0) {
    if (options.signal?.aborted) return { ...outcome, stopped: { reason: "stopped before it finished", notSent: [...pending] } };
    const body: BulkChunk = { writes: pending.filter((r) => r.op === "write"), deletes: pending.filter((r) => r.op === "delete") };
    outcome.calls++;
    let counts: BulkCounts;
    try {
      counts = await send(body);
    } catch (error) {
      const rejection = describe(error);
      const named = rejection.invalidArgument ? namedEntries(body, rejection.details) : new Map<GrantRow, string[]>();
      if (named.size === 0) return { ...outcome, stopped: { reason: rejection.message || "the bulk call failed", notSent: [...pending] } };
      for (const [row, reasons] of named) outcome.refused.push({ row, reason: reasons.join("; ") });
      pending = pending.filter((r) => !named.has(r));
      options.onSettled?.(named.size);
      continue;
    }
    outcome.written += counts.written;
    outcome.unchanged += counts.unchanged;
    outcome.deleted += counts.deleted;
    options.onSettled?.(pending.length);
    pending = [];
  }
  return outcome;
}

/** The rows of a call that an error's details name, each with its reasons. */
function namedEntries(body: BulkChunk, details: readonly ErrorDetail[]): Map<GrantRow, string[]> {
  const named = new Map<GrantRow, string[]>();
  for (const d of details) {
    const m = ENTRY.exec(d.field);
    if (m === null) continue;
    const row = (m[1] === "writes" ? body.writes : body.deletes)[Number(m[2])];
    if (row === undefined) continue;
    const reason = m[3] === undefined || m[3] === "" ? d.reason : `${m[3]}: ${d.reason}`;
    named.set(row, [...(named.get(row) ?? []), reason]);
  }
  return named;
}

export interface ImportProgress {
  /** Rows settled: accepted by the route, or reported as failed. */
  done: number;
  total: number;
}

export interface ImportReport {
  total: number;
  written: number;
  unchanged: number;
  deleted: number;
  /** Rows the route refused, with its reason, in line order. */
  failed: LineIssue[];
  /** Set when the import stopped early (an error other than bad entries, or a stop asked for). */
  stoppedReason?: string;
  /** Lines of the rows never accepted or refused because the import stopped, in order. */
  notSent: number[];
  /** Bulk calls made, retries included. */
  calls: number;
}

export interface ImportOptions {
  /** How to read a rejected send; describeRejection by default. */
  describe?: (error: unknown) => Rejection;
  /** Rows per call; BULK_LIMIT by default (never more). */
  chunkSize?: number;
  /** Checked before each call: once aborted, the import stops and reports what was not sent. */
  signal?: AbortSignal;
}

/**
 * Sends rows held in memory (the console's whole file) to the bulk route,
 * BULK_LIMIT at a time, in file order, each batch through sendBatch. The
 * report lists refused rows by line, and when it stops, the lines not sent.
 */
export async function importGrants(
  rows: readonly GrantRow[],
  send: (chunk: BulkChunk) => Promise<BulkCounts>,
  onProgress?: (progress: ImportProgress) => void,
  options: ImportOptions = {},
): Promise<ImportReport> {
  const size = Math.min(options.chunkSize ?? BULK_LIMIT, BULK_LIMIT);
  const report: ImportReport = { total: rows.length, written: 0, unchanged: 0, deleted: 0, failed: [], notSent: [], calls: 0 };
  let done = 0;
  onProgress?.({ done, total: rows.length });
  const chunks = chunk(rows, size);
  for (const [c, rowsOfChunk] of chunks.entries()) {
    const outcome = await sendBatch(rowsOfChunk, send, {
      ...(options.describe === undefined ? {} : { describe: options.describe }),
      ...(options.signal === undefined ? {} : { signal: options.signal }),
      onSettled: (count) => {
        done += count;
        onProgress?.({ done, total: rows.length });
      },
    });
    report.calls += outcome.calls;
    report.written += outcome.written;
    report.unchanged += outcome.unchanged;
    report.deleted += outcome.deleted;
    report.failed.push(...outcome.refused.map(({ row, reason }) => ({ line: row.line, reason })));
    if (outcome.stopped !== undefined) {
      report.stoppedReason = outcome.stopped.reason;
      report.notSent = [...outcome.stopped.notSent, ...chunks.slice(c + 1).flat()].map((r) => r.line);
      break;
    }
  }
  report.failed.sort((a, b) => a.line - b.line);
  return report;
}

/** Lines as short ranges for people: [3, 4, 5, 9] → "3–5, 9". */
export function lineRanges(lines: readonly number[]): string {
  const sorted = [...new Set(lines)].sort((a, b) => a - b);
  const parts: string[] = [];
  for (let i = 0; i < sorted.length; ) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j]! + 1) j++;
    parts.push(i === j ? `${sorted[i]}` : `${sorted[i]}–${sorted[j]}`);
    i = j + 1;
  }
  return parts.join(", ");
}
