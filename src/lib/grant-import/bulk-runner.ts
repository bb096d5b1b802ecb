/**
 * Sending rows to the bulk route (at most BULK_LIMIT entries a call),
 * working around its all-or-nothing rule: when a call is refused naming bad
 * entries, those rows are reported and the rest of the call is sent again.
 * The caller injects `send` (the BulkWriteRelationships call) and,
 * optionally, how to read a refusal.
 */

import { BULK_LIMIT, type GrantRow, type LineIssue } from "./rows.js";

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
