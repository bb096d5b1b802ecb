/**
 * Importing grants from a file: parse CSV or NDJSON into rows that remember
 * their source line, cut them into calls of the bulk route (at most
 * BULK_LIMIT entries each), and send them, working around the bulk route's
 * all-or-nothing rule: when a call is refused naming bad entries, those rows
 * are reported and the rest of the call is sent again.
 *
 * Pure TypeScript: no DOM, no React, no transport. The page injects `send`
 * (the BulkWriteRelationships call) and, optionally, how to read a refusal
 * (`describeRejection`, which the page builds from apiProblem), so the module
 * is tested under Node.
 *
 * CSV: node_modules holds no CSV library (and the console takes no new
 * dependency for one feature), so the small RFC 4180 reader is written here:
 * quoted fields, "" escapes, commas and line breaks inside quotes, CRLF or LF.
 */

/** The bulk route takes at most this many entries (writes and deletes together) per call. */
export const BULK_LIMIT = 5000;

/** The columns (CSV) or keys (NDJSON) a grant row has. */
export const REQUIRED_COLUMNS = ["userId", "resource", "resourceId", "relation"] as const;
export const OPTIONAL_COLUMNS = ["expiresAt", "op"] as const;
/** NDJSON keys accepted and ignored: a grant as the list route returns it carries createdAt. */
const IGNORED_KEYS = ["createdAt"] as const;

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
  format: "csv" | "ndjson";
  /** Rows with no problem, in file order: these are the ones sent. */
  rows: GrantRow[];
  /** Rows (or the header) with problems: reported, never sent. */
  errors: LineIssue[];
}

/** "line 7: missing resourceId". */
export const formatIssue = (issue: LineIssue): string => `line ${issue.line}: ${issue.reason}`;

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
interface RawRow {
  line: number;
  userId?: string | undefined;
  resource?: string | undefined;
  resourceId?: string | undefined;
  relation?: string | undefined;
  expiresAt?: string | undefined;
  op?: string | undefined;
}

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

function collect(format: ParseResult["format"], raws: Iterable<RawRow | LineIssue>): ParseResult {
  const result: ParseResult = { format, rows: [], errors: [] };
  for (const raw of raws) {
    if ("reason" in raw) {
      result.errors.push(raw);
      continue;
    }
    const row = toRow(raw);
    if (Array.isArray(row)) result.errors.push({ line: raw.line, reason: row.join("; ") });
    else result.rows.push(row);
  }
  return result;
}

/* ------------------------------------------------------------------------ */
/* CSV                                                                       */
/* ------------------------------------------------------------------------ */

/** One CSV record: its fields, the line it starts on, and a problem if its quoting is broken. */
export interface CsvRecord {
  line: number;
  fields: string[];
  problem?: string;
}

/**
 * RFC 4180 records: fields split on commas, a field in double quotes may hold
 * commas, line breaks and "" (one quote); records end at CRLF, LF or a lone
 * CR. A quote inside an unquoted field is kept as it is (as most readers do).
 * Lines that are empty or only white space are skipped.
 */
export function readCsvRecords(text: string): CsvRecord[] {
  const records: CsvRecord[] = [];
  let i = text.charCodeAt(0) === 0xfeff ? 1 : 0; // a byte order mark
  let line = 1;
  const n = text.length;
  while (i < n) {
    const start = line;
    const fields: string[] = [];
    let problem: string | undefined;
    let anyQuoted = false;
    // One record.
    for (;;) {
      let field = "";
      if (text[i] === '"') {
        anyQuoted = true;
        const quoteLine = line;
        i++;
        let closed = false;
        while (i < n) {
          const c = text[i]!;
          if (c === '"') {
            if (text[i + 1] === '"') {
              field += '"';
              i += 2;
              continue;
            }
            i++;
            closed = true;
            break;
          }
          if (c === "\r" || c === "\n") {
            // A line break inside quotes is part of the field; CRLF counts once.
            if (c === "\r" && text[i + 1] === "\n") {
              field += "\r\n";
              i += 2;
            } else {
              field += c;
              i++;
            }
            line++;
            continue;
          }
          field += c;
          i++;
        }
        if (!closed) problem ??= `the quoted field opened on line ${quoteLine} is never closed`;
        // Anything between the closing quote and the next comma or line end is a mistake.
        let stray = "";
        while (i < n && text[i] !== "," && text[i] !== "\r" && text[i] !== "\n") stray += text[i++];
        if (stray !== "") {
          problem ??= `text after a closing quote: ${JSON.stringify(stray.slice(0, 20))}`;
          field += stray;
        }
      } else {
        while (i < n && text[i] !== "," && text[i] !== "\r" && text[i] !== "\n") field += text[i++];
      }
      fields.push(field);
      if (i < n && text[i] === ",") {
        i++;
        continue;
      }
      // End of record: a line break or the end of the text.
      if (text[i] === "\r") i += text[i + 1] === "\n" ? 2 : 1;
      else if (text[i] === "\n") i++;
      line++;
      break;
    }
    const blank = !anyQuoted && fields.length === 1 && fields[0]!.trim() === "";
    if (!blank) records.push({ line: start, fields, ...(problem === undefined ? {} : { problem }) });
  }
  return records;
}

const KNOWN_COLUMNS: readonly string[] = [...REQUIRED_COLUMNS, ...OPTIONAL_COLUMNS];

/**
 * Grants from CSV text. The header row is required and names the columns,
 * in any order: userId, resource, resourceId, relation, and optionally
 * expiresAt (RFC 3339 with a zone; empty for none) and op (write or delete;
 * empty means write). Header names are matched ignoring case and spaces
 * around them; an unknown or repeated column is refused (a misspelt
 * "expires_at" must not quietly write grants that never expire).
 */
export function parseCsv(text: string): ParseResult {
  const records = readCsvRecords(text);
  const header = records[0];
  if (header === undefined) return { format: "csv", rows: [], errors: [{ line: 1, reason: "the file is empty: a header row is required (userId,resource,resourceId,relation[,expiresAt][,op])" }] };
  const canonical = new Map(KNOWN_COLUMNS.map((c) => [c.toLowerCase(), c]));
  const columns: (string | undefined)[] = [];
  const headerProblems: string[] = [];
  if (header.problem !== undefined) headerProblems.push(header.problem);
  header.fields.forEach((name, index) => {
    const column = canonical.get(name.trim().toLowerCase());
    if (column === undefined) headerProblems.push(`unknown column "${name}" (columns: ${KNOWN_COLUMNS.join(", ")})`);
    else if (columns.includes(column)) headerProblems.push(`column ${column} appears twice`);
    columns[index] = column;
  });
  for (const required of REQUIRED_COLUMNS) {
    if (!columns.includes(required)) headerProblems.push(`missing column ${required}`);
  }
  if (headerProblems.length > 0) {
    return { format: "csv", rows: [], errors: [{ line: header.line, reason: `header row: ${headerProblems.join("; ")}` }] };
  }
  function* raws(): Generator<RawRow | LineIssue> {
    for (const record of records.slice(1)) {
      if (record.problem !== undefined) {
        yield { line: record.line, reason: record.problem };
        continue;
      }
      if (record.fields.length !== columns.length) {
        yield { line: record.line, reason: `${record.fields.length} field${record.fields.length === 1 ? "" : "s"}, the header has ${columns.length}` };
        continue;
      }
      const raw: RawRow = { line: record.line };
      record.fields.forEach((value, index) => {
        raw[columns[index] as keyof Omit<RawRow, "line">] = value;
      });
      yield raw;
    }
  }
  return collect("csv", raws());
}

/* ------------------------------------------------------------------------ */
/* NDJSON                                                                    */
/* ------------------------------------------------------------------------ */

/**
 * Grants from NDJSON (JSON Lines) text: one JSON object per line with the
 * keys userId, resource, resourceId, relation (strings), and optionally
 * expiresAt (an RFC 3339 string, or null for none) and op ("write" or
 * "delete"). createdAt, which the list route returns, is ignored, so a list
 * answer's grants can be imported back; any other key is refused.
 */
export function parseNdjson(text: string): ParseResult {
  const lines = (text.charCodeAt(0) === 0xfeff ? text.slice(1) : text).split(/\r\n|\n|\r/);
  const allowed: readonly string[] = [...KNOWN_COLUMNS, ...IGNORED_KEYS];
  function* raws(): Generator<RawRow | LineIssue> {
    for (const [index, source] of lines.entries()) {
      const line = index + 1;
      if (source.trim() === "") continue;
      let value: unknown;
      try {
        value = JSON.parse(source);
      } catch {
        yield { line, reason: "not JSON" };
        continue;
      }
      if (typeof value !== "object" || value === null || Array.isArray(value)) {
        yield { line, reason: "not a JSON object" };
        continue;
      }
      const object = value as Record<string, unknown>;
      const problems: string[] = [];
      const raw: RawRow = { line };
      for (const [key, v] of Object.entries(object)) {
        if (!allowed.includes(key)) {
          problems.push(`unknown key "${key}" (keys: ${KNOWN_COLUMNS.join(", ")})`);
        } else if ((IGNORED_KEYS as readonly string[]).includes(key)) {
          continue;
        } else if (key === "expiresAt" && v === null) {
          continue;
        } else if (typeof v !== "string") {
          problems.push(`${key} is not a string`);
        } else {
          raw[key as keyof Omit<RawRow, "line">] = v;
        }
      }
      // A wrong type already says more than "missing".
      const typeProblem = new Set(problems.filter((p) => p.endsWith(" is not a string")).map((p) => p.split(" ")[0]));
      const row = toRow(raw);
      if (Array.isArray(row)) problems.push(...row.filter((p) => !(p.startsWith("missing ") && typeProblem.has(p.slice(8)))));
      if (problems.length > 0) yield { line, reason: problems.join("; ") };
      else yield raw;
    }
  }
  return collect("ndjson", raws());
}

/**
 * Grants from a file's text: NDJSON for .ndjson and .jsonl names, CSV for
 * .csv; otherwise NDJSON when the first non-blank character
 * is "{", else CSV.
 */
export function parseGrantFile(text: string, fileName = ""): ParseResult {
  const name = fileName.toLowerCase();
  if (/\.(ndjson|jsonl)$/.test(name)) return parseNdjson(text);
  if (name.endsWith(".csv")) return parseCsv(text);
  return text.trimStart().startsWith("{") ? parseNdjson(text) : parseCsv(text);
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

/** What a refused call said, as importGrants needs it. */
export interface Rejection {
  /** The request was refused as invalid (400 invalid_argument): the details may name bad entries. */
  invalidArgument: boolean;
  message: string;
  details: ErrorDetail[];
}

/**
 * Reads a refusal shaped as the REST error body, `{code, message, details}`
 * with code "invalid_argument" (or the Connect code number 3). The page
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

const ENTRY = /^(writes|deletes)\[(\d+)\](?:\.(.*))?$/;

/**
 * Sends rows to the bulk route, BULK_LIMIT at a time, in file order. The
 * route is all or nothing, so when it refuses a call as invalid naming
 * entries (`writes[17].relation`, at most 100 per answer), those rows are
 * recorded as failed with the route's reason and the rest of the same call is
 * sent again: every good row is still written. Each retry drops at least one
 * row, so it ends; a refusal that names no entry of the call, or any other
 * error (network, 403, 429, 5xx), stops the import, and the report lists the
 * lines not sent.
 */
export async function importGrants(
  rows: readonly GrantRow[],
  send: (chunk: BulkChunk) => Promise<BulkCounts>,
  onProgress?: (progress: ImportProgress) => void,
  options: ImportOptions = {},
): Promise<ImportReport> {
  const describe = options.describe ?? describeRejection;
  const size = Math.min(options.chunkSize ?? BULK_LIMIT, BULK_LIMIT);
  const report: ImportReport = { total: rows.length, written: 0, unchanged: 0, deleted: 0, failed: [], notSent: [], calls: 0 };
  let done = 0;
  onProgress?.({ done, total: rows.length });
  const chunks = chunk(rows, size);
  const stop = (reason: string, from: number, pending: readonly GrantRow[]) => {
    report.stoppedReason = reason;
    report.notSent = [...pending, ...chunks.slice(from + 1).flat()].map((r) => r.line);
    report.failed.sort((a, b) => a.line - b.line);
    return report;
  };
  for (const [c, rowsOfChunk] of chunks.entries()) {
    let pending: GrantRow[] = rowsOfChunk;
    while (pending.length > 0) {
      if (options.signal?.aborted) return stop("stopped before it finished", c, pending);
      const body: BulkChunk = { writes: pending.filter((r) => r.op === "write"), deletes: pending.filter((r) => r.op === "delete") };
      report.calls++;
      let counts: BulkCounts;
      try {
        counts = await send(body);
      } catch (error) {
        const rejection = describe(error);
        const named = rejection.invalidArgument ? namedEntries(body, rejection.details) : new Map<GrantRow, string[]>();
        if (named.size === 0) return stop(rejection.message || "the bulk call failed", c, pending);
        for (const [row, reasons] of named) report.failed.push({ line: row.line, reason: reasons.join("; ") });
        pending = pending.filter((r) => !named.has(r));
        done += named.size;
        onProgress?.({ done, total: rows.length });
        continue;
      }
      report.written += counts.written;
      report.unchanged += counts.unchanged;
      report.deleted += counts.deleted;
      done += pending.length;
      onProgress?.({ done, total: rows.length });
      pending = [];
    }
  }
  report.failed.sort((a, b) => a.line - b.line);
  return report;
}

/** The rows of a call that an error's details name, each with its reasons ("relation: … is not a relation …"). */
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
