/**
 * Importing grants from a file, shared by the web console (console/src/pages/
 * grants/import-section.tsx, a whole file at once) and the command line (src/cli/, streamed):
 * read CSV or NDJSON into rows that remember their source line (rows.ts,
 * bytes.ts, csv-records.ts, csv-grants.ts, ndjson.ts, grant-file.ts), and send
 * them to the bulk route (bulk-runner.ts).
 *
 * Pure TypeScript: no DOM, no Node API, no transport (TextEncoder and
 * TextDecoder exist in both).
 *
 * The readers work on bytes, incrementally (push chunks, then end), so the
 * command line streams a file of any size with exact byte offsets for its
 * resumable position, and both callers read a file the same way, line for
 * line.
 */
export * from "./bulk-runner.js";
export type { ReadStart } from "./bytes.js";
export * from "./csv-grants.js";
export * from "./csv-records.js";
export * from "./grant-file.js";
export * from "./ndjson.js";
export {
  ALL_USERS_COLUMN,
  BULK_LIMIT,
  formatIssue,
  holderEntry,
  isIssue,
  KNOWN_COLUMNS,
  MAX_RECORD_BYTES,
  NO_HOLDER,
  OPTIONAL_COLUMNS,
  parseExpiry,
  REQUIRED_COLUMNS,
  SUBJECT_COLUMNS,
  USER_COLUMN,
} from "./rows.js";
export type { Column, GrantFormat, GrantOp, GrantRow, GrantSubject, LineIssue, ParseResult, SubjectColumn } from "./rows.js";
