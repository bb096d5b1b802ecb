/** Grants from CSV: a header row naming the columns, then one grant a record. */

import { readCsvRecords, type CsvRecord } from "./csv-records.js";
import {
  collect,
  KNOWN_COLUMNS,
  REQUIRED_COLUMNS,
  SUBJECT_COLUMNS,
  toRow,
  type Column,
  type GrantRow,
  type HolderForm,
  type LineIssue,
  type ParseResult,
  type RawRow,
} from "./rows.js";

export const CSV_HEADER_HELP = "userId,resource,resourceId,relation[,expiresAt][,condition][,op]";

/**
 * The columns a header row names, in any order: resource, resourceId,
 * relation; the holder: userId, allUsers ("true" for every user), or
 * subjectResource and subjectResourceId with optionally subjectRelation, or
 * any of them together (each row then fills one holder); and optionally expiresAt (RFC 3339 with a zone; empty for none),
 * condition (CEL; empty for none) and op (write or delete; empty means write). Names are matched ignoring
 * case and spaces around them; an unknown or repeated column refuses the
 * file (a misspelt "expires_at" must not quietly write grants that never
 * expire).
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
  const subjectColumns = SUBJECT_COLUMNS.filter((c) => columns.includes(c));
  if (subjectColumns.length > 0) {
    // A subject takes both its resource and its id; its relation is optional (none for a link).
    for (const needed of ["subjectResource", "subjectResourceId"] as const) {
      if (!columns.includes(needed)) problems.push(`missing column ${needed} (a subject holder takes subjectResource and subjectResourceId)`);
    }
  } else if (!columns.includes("userId") && !columns.includes("allUsers")) {
    problems.push("missing column userId (or allUsers, or subjectResource and subjectResourceId)");
  }
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
  const form: HolderForm = { subject: columns.some((c) => (SUBJECT_COLUMNS as readonly Column[]).includes(c)) ? "flat" : "none" };
  const row = toRow(raw, form);
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
