/**
 * `portcullis grants import FILE`: grants from a CSV or NDJSON file, streamed
 * (never the whole file in memory), through the bulk route in batches of up
 * to 5,000, one call at a time by default. A row's holder is a user
 * (userId) or a subject set or linked instance (subjectResource,
 * subjectResourceId, subjectRelation; in NDJSON also the API's nested
 * `subject`), sent as the bulk entry's `subject` (src/lib/grant-import/rows.ts).
 *
 * The bulk route is all or nothing; sendBatch (src/lib/grant-import/bulk-runner.ts, the
 * console's import too) reports the entries a 400 names and sends the rest
 * again, so every good row is written once. Rows that cannot be read are
 * reported the same way. Both go to the error report (one JSON line per bad
 * row: {line, reason, row}).
 *
 * After each batch the service accepted, the error lines of that batch are
 * appended (and flushed), then the position (byte offset and line after the
 * batch) and the counts are written to the state file, atomically. Any error
 * other than a 400 naming entries (401, 403, 429, 5xx, the network) stops the
 * import with exit code 3; `--resume` reads the state, cuts the error report
 * back to its length then, and continues from the position. A batch sent but
 * not recorded (a kill in between) is sent again on resume: the route writes
 * a grant that exists as "unchanged", so the grants end the same.
 */
import { createReadStream } from "node:fs";
import { open, stat, truncate, rm, type FileHandle } from "node:fs/promises";
import { resolve } from "node:path";
import {
  CsvRecordReader,
  EMPTY_FILE,
  LineReader,
  csvColumns,
  csvGrant,
  formatOfContent,
  formatOfName,
  holderEntry,
  isIssue,
  ndjsonGrant,
  sendBatch,
  type BatchOutcome,
  type BulkChunk,
  type BulkCounts,
  type Column,
  type CsvRecord,
  type GrantFormat,
  type GrantRow,
  type ReadStart,
  type Rejection,
  type TextLine,
} from "../lib/grant-import/index.js";
import { ApiError, type Api } from "./client.js";
import { CliError, EXIT, stopError, usageError } from "./errors.js";
import { importProgress } from "./import-progress.js";
import { checkSameInput, noCounts, readState, removeState, writeState, type ImportCounts, type ImportState } from "./import-state.js";

export interface ImportOptions {
  file: string;
  format?: GrantFormat | undefined;
  batch: number;
  concurrency: number;
  errors?: string | undefined;
  state?: string | undefined;
  resume: boolean;
  progress: boolean;
  json: boolean;
}

export interface Io {
  out: NodeJS.WritableStream;
  err: NodeJS.WriteStream;
}

/** One line of the error report. */
interface ReportLine {
  line: number;
  reason: string;
  /** The row as read (an object of its columns or keys; the fields or the text when it could not be read), or as sent. */
  row: unknown;
}

/** What the reader found, in file order, with where it ends. */
interface Item {
  end: number;
  nextLine: number;
  row?: GrantRow;
  issue?: ReportLine;
}

interface Batch {
  rows: GrantRow[];
  issues: ReportLine[];
  end: number;
  nextLine: number;
}

const READ_CHUNK_BYTES = 256 * 1024;
/** A batch is also closed after this many unreadable rows, so a file of nothing but bad rows is reported in bounded memory. */
const MAX_ISSUES_PER_BATCH = 10_000;
/** A row that could not be read is shown in the report up to this many characters. */
const SHOWN_TEXT = 1_000;

const NO_CALL: BatchOutcome = { written: 0, unchanged: 0, deleted: 0, refused: [], calls: 0 };

export async function importGrants(api: Api, options: ImportOptions, io: Io): Promise<number> {
  const path = resolve(options.file);
  const size = await inputSize(path, options.file);
  const stateFile = resolve(options.state ?? `${options.file}.import-state.json`);
  const errorsFile = resolve(options.errors ?? `${options.file}.errors.ndjson`);

  let state: ImportState;
  if (options.resume) {
    state = await readState(stateFile);
    await checkSameInput(state, path);
    if (options.format !== undefined && options.format !== state.format) {
      throw usageError(`--format ${options.format}: the import being resumed reads the file as ${state.format}`);
    }
    if (options.errors !== undefined && errorsFile !== state.errorsFile) {
      throw usageError(`--errors ${options.errors}: the import being resumed reports to ${state.errorsFile}`);
    }
  } else {
    const input = await stat(path);
    const format = options.format ?? formatOfName(path) ?? formatOfContent(await head(path));
    let start: ReadStart = { offset: 0, line: 1 };
    let columns: Column[] | undefined;
    if (format === "csv") {
      const header = await readHeader(path);
      if (header === undefined) throw usageError(`${options.file}: ${EMPTY_FILE.reason}`);
      const found = csvColumns(header);
      if (!Array.isArray(found)) throw usageError(`${options.file} line ${found.line}: ${found.reason}`);
      columns = found;
      start = { offset: header.end, line: header.nextLine };
    }
    state = {
      version: 1,
      input: { path, size: input.size, mtimeMs: input.mtimeMs },
      format,
      ...(columns === undefined ? {} : { columns }),
      offset: start.offset,
      line: start.line,
      errorsFile,
      errorsBytes: 0,
      counts: noCounts(),
      updatedAt: new Date().toISOString(),
    };
  }

  let errors: FileHandle;
  try {
    errors = await openReport(state, io);
  } catch (error) {
    throw usageError(`--errors ${state.errorsFile}: cannot write it (${(error as NodeJS.ErrnoException).code ?? String(error)})`);
  }
  try {
    // Written before the first call, so a stop at the first batch can resume too.
    await writeState(stateFile, state);
  } catch (error) {
    await errors.close();
    throw usageError(`--state ${stateFile}: cannot write it (${(error as NodeJS.ErrnoException).code ?? String(error)})`);
  }

  const counts: ImportCounts = { ...state.counts };
  let errorsBytes = state.errorsBytes;
  let rowsThisRun = 0;
  const started = performance.now();
  const progress = importProgress(io.err, size, state.offset, options.progress);
  const interrupted = () => {
    progress.stop();
    io.err.write(`portcullis: interrupted; the position after the last finished batch (line ${state.line}) is in ${stateFile}: run the same command with --resume to continue\n`);
    process.exit(130);
  };
  process.once("SIGINT", interrupted);

  const send = (chunk: BulkChunk): Promise<BulkCounts> =>
    api.post<BulkCounts>("/api/v1/authorization/relationships/bulk", { writes: chunk.writes.map(sent), deletes: chunk.deletes.map(sent) }).then((c) => ({
      written: c.written ?? 0,
      unchanged: c.unchanged ?? 0,
      deleted: c.deleted ?? 0,
    }));

  const commit = async (batch: Batch, outcome: BatchOutcome) => {
    const refused = outcome.refused.map((r) => ({ line: r.row.line, reason: r.reason, row: { ...(r.row.op === "delete" ? { op: "delete" } : {}), ...sent(r.row) } }));
    const lines = [...batch.issues, ...refused].sort((a, b) => a.line - b.line);
    if (lines.length > 0) {
      const text = lines.map((l) => JSON.stringify(l)).join("\n") + "\n";
      await errors.write(text);
      await errors.sync();
      errorsBytes += Buffer.byteLength(text);
    }
    const settled = batch.rows.length + batch.issues.length;
    counts.rows += settled;
    counts.written += outcome.written;
    counts.unchanged += outcome.unchanged;
    counts.deleted += outcome.deleted;
    counts.unreadable += batch.issues.length;
    counts.refused += outcome.refused.length;
    rowsThisRun += settled;
    state = { ...state, offset: batch.end, line: batch.nextLine, errorsBytes, counts: { ...counts }, updatedAt: new Date().toISOString() };
    await writeState(stateFile, state);
    progress.update(batch.end, rowsThisRun);
  };

  // Batches in flight, oldest first; committed in file order, so the saved position only ever covers finished batches.
  const window: { batch: Batch; outcome: Promise<BatchOutcome> }[] = [];
  const commitOldest = async () => {
    const { batch, outcome } = window.shift()!;
    const result = await outcome;
    if (result.stopped !== undefined) {
      await Promise.allSettled(window.map((w) => w.outcome));
      window.length = 0;
      throw stopError(
        `stopped: ${result.stopped.reason}\n` +
          `portcullis: ${counts.rows.toLocaleString("en-US")} rows are done, up to line ${state.line - 1}; the position is saved in ${stateFile}: ` +
          `run the same command with --resume to continue`,
      );
    }
    await commit(batch, result);
  };
  const dispatch = async (batch: Batch) => {
    const outcome =
      batch.rows.length === 0
        ? Promise.resolve(NO_CALL)
        : sendBatch(batch.rows, send, { describe }).catch((error: unknown) => ({ ...NO_CALL, stopped: { reason: String(error), notSent: batch.rows } }));
    window.push({ batch, outcome });
    while (window.length >= options.concurrency) await commitOldest();
  };

  try {
    let batch: Batch = { rows: [], issues: [], end: state.offset, nextLine: state.line };
    for await (const items of readItems(path, state)) {
      for (const item of items) {
        if (item.row !== undefined) batch.rows.push(item.row);
        else if (item.issue !== undefined) batch.issues.push(item.issue);
        batch.end = item.end;
        batch.nextLine = item.nextLine;
        if (batch.rows.length >= options.batch || batch.issues.length >= MAX_ISSUES_PER_BATCH) {
          await dispatch(batch);
          batch = { rows: [], issues: [], end: batch.end, nextLine: batch.nextLine };
        }
      }
    }
    if (batch.rows.length + batch.issues.length > 0) await dispatch(batch);
    while (window.length > 0) await commitOldest();
  } finally {
    progress.stop();
    process.removeListener("SIGINT", interrupted);
    await errors.close();
  }

  await removeState(stateFile);
  const bad = counts.unreadable + counts.refused;
  if (bad === 0) await rm(errorsFile, { force: true });
  const seconds = (performance.now() - started) / 1000;
  const summary = {
    file: options.file,
    rows: counts.rows,
    written: counts.written,
    unchanged: counts.unchanged,
    deleted: counts.deleted,
    refused: bad,
    unreadable: counts.unreadable,
    refusedByService: counts.refused,
    ...(bad > 0 ? { errorsFile } : {}),
    resumed: options.resume,
    seconds: Number(seconds.toFixed(3)),
    rowsPerSecond: Math.round(rowsThisRun / Math.max(seconds, 0.001)),
  };
  io.out.write(options.json ? `${JSON.stringify(summary)}\n` : humanSummary(summary));
  return bad > 0 ? EXIT.negative : EXIT.ok;
}

function humanSummary(s: {
  file: string;
  rows: number;
  written: number;
  unchanged: number;
  deleted: number;
  refused: number;
  unreadable: number;
  refusedByService: number;
  errorsFile?: string;
  resumed: boolean;
  seconds: number;
  rowsPerSecond: number;
}): string {
  const n = (x: number) => x.toLocaleString("en-US").padStart(12);
  const lines = [
    `imported ${s.file}${s.resumed ? " (resumed)" : ""}: ${s.rows.toLocaleString("en-US")} rows; this run ${s.seconds.toFixed(1)} s, ${s.rowsPerSecond.toLocaleString("en-US")} rows/s`,
    `  written   ${n(s.written)}`,
    `  unchanged ${n(s.unchanged)}`,
    `  deleted   ${n(s.deleted)}`,
    `  refused   ${n(s.refused)}` +
      (s.refused > 0
        ? `  (${s.unreadable.toLocaleString("en-US")} could not be read, ${s.refusedByService.toLocaleString("en-US")} refused by the service; one line each in ${s.errorsFile})`
        : ""),
  ];
  return `${lines.join("\n")}\n`;
}

/** How the import reads a refused call: the entries a 400 names are per-row errors; anything else stops it. */
function describe(error: unknown): Rejection {
  if (error instanceof ApiError) {
    return { invalidArgument: error.status === 400 && error.code === "invalid_argument", message: error.describe(), details: error.details };
  }
  return { invalidArgument: false, message: error instanceof Error ? error.message : String(error), details: [] };
}

/**
 * A row as the bulk route takes it (and as the report shows a refused one):
 * its holder as `userId`, or as `subject` (relation "" for a link).
 */
const sent = (row: GrantRow) => ({
  ...holderEntry(row),
  resource: row.resource,
  resourceId: row.resourceId,
  relation: row.relation,
  ...(row.expiresAt === undefined ? {} : { expiresAt: row.expiresAt.toISOString() }),
  ...(row.condition === undefined ? {} : { condition: row.condition }),
});

async function inputSize(path: string, given: string): Promise<number> {
  try {
    const s = await stat(path);
    if (!s.isFile()) throw usageError(`FILE ${given}: not a file`);
    return s.size;
  } catch (error) {
    if (error instanceof CliError) throw error;
    throw usageError(`FILE ${given}: cannot read it (${(error as NodeJS.ErrnoException).code ?? String(error)})`);
  }
}

/** The first bytes of a file, to tell NDJSON from CSV when its name does not. */
async function head(path: string): Promise<Uint8Array> {
  const handle = await open(path, "r");
  try {
    const buffer = Buffer.alloc(4096);
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
    return buffer.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
}

/** A CSV file's header record (undefined for a file with none), read on its own: the import starts after it. */
async function readHeader(path: string): Promise<CsvRecord | undefined> {
  const reader = new CsvRecordReader();
  const stream = createReadStream(path, { highWaterMark: 64 * 1024 });
  try {
    for await (const chunk of stream) {
      const [first] = reader.push(chunk as Buffer);
      if (first !== undefined) return first;
    }
    return reader.end()[0];
  } finally {
    stream.destroy();
  }
}

/** The error report: created afresh, or on resume cut back to what the state counted. */
async function openReport(state: ImportState, io: Io): Promise<FileHandle> {
  if (state.counts.rows === 0 && state.errorsBytes === 0) return open(state.errorsFile, "w");
  try {
    await truncate(state.errorsFile, state.errorsBytes);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
    if (state.errorsBytes > 0) io.err.write(`portcullis: the error report ${state.errorsFile} of the earlier run is gone; it will hold this run's errors only\n`);
  }
  return open(state.errorsFile, "a");
}

/** The file from the state's position, as items, a chunk's worth at a time. */
async function* readItems(path: string, state: ImportState): AsyncGenerator<Item[]> {
  const start = { offset: state.offset, line: state.line };
  const stream = createReadStream(path, { start: state.offset, highWaterMark: READ_CHUNK_BYTES });
  if (state.format === "csv") {
    const columns = state.columns;
    if (columns === undefined) throw usageError("the state file has no CSV columns");
    const reader = new CsvRecordReader(start);
    const toItems = (records: CsvRecord[]) => records.map((record) => csvItem(columns, record));
    for await (const chunk of stream) yield toItems(reader.push(chunk as Buffer));
    yield toItems(reader.end());
  } else {
    const reader = new LineReader(start);
    for await (const chunk of stream) yield reader.push(chunk as Buffer).map(ndjsonItem);
    yield reader.end().map(ndjsonItem);
  }
}

function csvItem(columns: readonly Column[], record: CsvRecord): Item {
  const read = csvGrant(columns, record);
  const at = { end: record.end, nextLine: record.nextLine };
  if (!isIssue(read)) return { ...at, row: read };
  const row =
    record.fields.length === columns.length ? Object.fromEntries(columns.map((c, i) => [c, record.fields[i]])) : record.fields;
  return { ...at, issue: { line: read.line, reason: read.reason, row } };
}

function ndjsonItem(line: TextLine): Item {
  const read = ndjsonGrant(line);
  const at = { end: line.end, nextLine: line.line + 1 };
  if (read === null) return at;
  if (!isIssue(read)) return { ...at, row: read };
  let row: unknown = line.text.length > SHOWN_TEXT ? `${line.text.slice(0, SHOWN_TEXT)}…` : line.text;
  if (line.problem === undefined) {
    try {
      row = JSON.parse(line.text);
    } catch {
      // Not JSON: the text it is.
    }
  }
  return { ...at, issue: { line: read.line, reason: read.reason, row } };
}

