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

/**
 * The columns (CSV) or keys (NDJSON) a grant row has: its holder, the
 * instance and relation (required), and optionally an expiry and an op.
 *
 * The holder is a user (`userId`), every user (`allUsers`: true; CSV
 * "true", NDJSON the boolean, as the API writes it; a relation whose
 * subjects include "user:*") or a subject (`subjectResource`,
 * `subjectResourceId`, and `subjectRelation` for a subject set such as
 * team:eng#member, empty or absent for a link such as folder:runbooks; the
 * names the single DELETE route takes as query parameters), exactly one of
 * the three. Empty (and allUsers false) counts as absent, so a CSV file may
 * carry every kind of row, and a list answer's `userId: ""` beside its
 * `subject`, or its `allUsers: false` beside its userId, names no second holder.
 */
export const USER_COLUMN = "userId" as const;
export const ALL_USERS_COLUMN = "allUsers" as const;
export const SUBJECT_COLUMNS = ["subjectResource", "subjectResourceId", "subjectRelation"] as const;
export const REQUIRED_COLUMNS = ["resource", "resourceId", "relation"] as const;
export const OPTIONAL_COLUMNS = ["expiresAt", "condition", "op"] as const;
/** NDJSON keys accepted and ignored: a grant as the list route (and an export) returns it carries createdAt. */
export const IGNORED_KEYS = ["createdAt"] as const;

export type SubjectColumn = (typeof SUBJECT_COLUMNS)[number];
export type Column = typeof USER_COLUMN | typeof ALL_USERS_COLUMN | SubjectColumn | (typeof REQUIRED_COLUMNS)[number] | (typeof OPTIONAL_COLUMNS)[number];
/** Every column, in the order messages list them (and an export writes them): the holder, the grant, its expiry, the op. */
export const KNOWN_COLUMNS: readonly Column[] = [USER_COLUMN, ALL_USERS_COLUMN, ...SUBJECT_COLUMNS, ...REQUIRED_COLUMNS, ...OPTIONAL_COLUMNS];

export type GrantOp = "write" | "delete";

/** A grant's holder other than a user, as the API names it: a subject set (relation set) or a linked instance (relation ""). */
export interface GrantSubject {
  resource: string;
  resourceId: string;
  /** The set's relation ("member" of team:eng#member); "" for a link. */
  relation: string;
}

/** One grant read from the file. */
export interface GrantRow {
  /** 1-based line of the file where the row starts. */
  line: number;
  op: GrantOp;
  /** The user holding the grant; "" when `subject` holds it, or every user (as the list route says it). */
  userId: string;
  /** Every user holds the grant (API.md, "Everyone"). */
  allUsers?: true;
  /** The subject set or linked instance holding the grant, instead of a user. */
  subject?: GrantSubject;
  resource: string;
  resourceId: string;
  relation: string;
  /** Writes only; absent for a grant that never expires. */
  expiresAt?: Date;
  /** Writes only: a CEL condition (docs/conditions.md), checked by the service; absent for a grant that always counts. */
  condition?: string;
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

/** How a file can name a row's holder, which words its problems in the file's own terms. */
export interface HolderForm {
  /**
   * "flat": the subject columns or keys (subjectResource, …); "nested": the
   * NDJSON `subject` object the API returns (subject.resource, …); "none": a
   * CSV header with no subject column, where a user is the only holder.
   */
  subject: "flat" | "nested" | "none";
}

/** The names of a subject's three fields in a form's terms. */
export const subjectNames = (form: HolderForm["subject"]): Record<SubjectColumn, string> =>
  form === "nested"
    ? { subjectResource: "subject.resource", subjectResourceId: "subject.resourceId", subjectRelation: "subject.relation" }
    : { subjectResource: "subjectResource", subjectResourceId: "subjectResourceId", subjectRelation: "subjectRelation" };

/** A row that names no holder, in a file that can name subjects. */
export const NO_HOLDER = "missing the holder: userId, allUsers, or subjectResource and subjectResourceId";

/**
 * An allUsers field as the row's text: "true" or "false" in any case, or
 * empty (false); undefined for anything else. NDJSON's booleans come as
 * "true" and "" (ndjson.ts).
 */
function allUsersOf(text: string | undefined): boolean | undefined {
  const value = (text ?? "").trim().toLowerCase();
  return value === "true" ? true : value === "false" || value === "" ? false : undefined;
}

/**
 * The holder of a row, or its problems: a userId, every user (allUsers), or
 * a subject (subjectResource and subjectResourceId, subjectRelation for a
 * set), exactly one of the three. Empty fields count as absent.
 */
function holderOf(raw: RawRow, form: HolderForm["subject"]): { userId: string; subject?: GrantSubject; allUsers?: true } | string[] {
  const names = subjectNames(form);
  const userId = raw.userId ?? "";
  const allUsers = allUsersOf(raw.allUsers);
  if (allUsers === undefined) return [`allUsers must be true or false (or empty), not ${JSON.stringify(raw.allUsers)}`];
  const [resource, resourceId, relation] = SUBJECT_COLUMNS.map((c) => raw[c] ?? "") as [string, string, string];
  const hasSubject = form === "nested" || resource !== "" || resourceId !== "" || relation !== "";
  const subjectName = form === "nested" ? "subject" : "subjectResource and subjectResourceId";
  const given = [...(userId !== "" ? ["userId"] : []), ...(allUsers ? ["allUsers"] : []), ...(hasSubject ? [subjectName] : [])];
  if (given.length > 1) return [`a row names its holder by userId, by allUsers or by ${subjectName}, exactly one: given ${given.join(" and ")}`];
  if (userId !== "") return { userId };
  if (allUsers) return { userId: "", allUsers: true };
  if (!hasSubject) return [form === "none" ? "missing userId (or allUsers)" : NO_HOLDER];
  const problems: string[] = [];
  if (resource === "") problems.push(`missing ${names.subjectResource}`);
  if (resourceId === "") problems.push(`missing ${names.subjectResourceId}`);
  return problems.length > 0 ? problems : { userId: "", subject: { resource, resourceId, relation } };
}

/** A row from its fields, or the reasons it is no row. */
export function toRow(raw: RawRow, form: HolderForm = { subject: "flat" }): GrantRow | string[] {
  const holder = holderOf(raw, form.subject);
  const problems: string[] = Array.isArray(holder) ? [...holder] : [];
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
  // As written: a condition is code, whose spaces and line breaks are the writer's.
  const condition = raw.condition ?? "";
  if (condition !== "" && op === "delete") problems.push("a delete takes no condition");
  if (problems.length > 0 || Array.isArray(holder)) return problems;
  return {
    line: raw.line,
    op,
    ...holder,
    resource: raw.resource!,
    resourceId: raw.resourceId!,
    relation: raw.relation!,
    ...(expiresAt === undefined ? {} : { expiresAt }),
    ...(condition === "" ? {} : { condition }),
  };
}

/**
 * A row's holder as the API takes it in a write, a bulk entry or a delete:
 * `{userId}`, `{allUsers: true}`, or `{subject: {resource, resourceId,
 * relation}}` (relation "" for a link).
 */
export const holderEntry = (row: Pick<GrantRow, "userId" | "subject" | "allUsers">): { userId: string } | { allUsers: true } | { subject: GrantSubject } =>
  row.allUsers === true
    ? { allUsers: true }
    : row.subject === undefined
      ? { userId: row.userId }
      : { subject: { resource: row.subject.resource, resourceId: row.subject.resourceId, relation: row.subject.relation } };

export function collect(format: GrantFormat, items: Iterable<GrantRow | LineIssue | null>): ParseResult {
  const result: ParseResult = { format, rows: [], errors: [] };
  for (const item of items) {
    if (item === null) continue;
    if (isIssue(item)) result.errors.push(item);
    else result.rows.push(item);
  }
  return result;
}
