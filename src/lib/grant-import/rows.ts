/**
 * A grant row as an import reads it (from CSV or NDJSON), the limits of a
 * row and of a call, and the rules for a row's fields: which columns there
 * are, what an op and an expiry may be.
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
export const IGNORED_KEYS = ["createdAt"] as const;

export type Column = (typeof REQUIRED_COLUMNS)[number] | (typeof OPTIONAL_COLUMNS)[number];
export const KNOWN_COLUMNS: readonly Column[] = [...REQUIRED_COLUMNS, ...OPTIONAL_COLUMNS];

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
export type RawRow = { line: number } & { [C in Column]?: string | undefined };

/** A row from its fields, or the reasons it is no row. */
export function toRow(raw: RawRow): GrantRow | string[] {
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

export function collect(format: GrantFormat, items: Iterable<GrantRow | LineIssue | null>): ParseResult {
  const result: ParseResult = { format, rows: [], errors: [] };
  for (const item of items) {
    if (item === null) continue;
    if (isIssue(item)) result.errors.push(item);
    else result.rows.push(item);
  }
  return result;
}
