/**
 * The resumable position of `grants import`: a small JSON file written after
 * every committed batch, atomically (atomic-file.ts), so a kill at any
 * moment leaves either the previous position or the new one, never half a
 * file.
 */
import { readFile, rm, stat } from "node:fs/promises";
import type { Column, GrantFormat } from "../lib/grant-import/index.js";
import { writeFileAtomically } from "./atomic-file.js";
import { usageError } from "./errors.js";

export interface ImportCounts {
  /** Rows settled: accepted by the service, or reported as errors. */
  rows: number;
  written: number;
  unchanged: number;
  deleted: number;
  /** Rows that could not be read (parse errors). */
  unreadable: number;
  /** Rows the service refused. */
  refused: number;
}

export const noCounts = (): ImportCounts => ({ rows: 0, written: 0, unchanged: 0, deleted: 0, unreadable: 0, refused: 0 });

export interface ImportState {
  version: 1;
  /** The input as it was when the import started: a resume refuses a file that changed. */
  input: { path: string; size: number; mtimeMs: number };
  format: GrantFormat;
  /** CSV: the header's columns, so a resume need not read the header again. */
  columns?: Column[];
  /** Where the next batch starts: a byte offset, and the line there. */
  offset: number;
  line: number;
  /** The error report, and its length when this state was written (a resume cuts what came after). */
  errorsFile: string;
  errorsBytes: number;
  counts: ImportCounts;
  updatedAt: string;
}

export async function writeState(file: string, state: ImportState): Promise<void> {
  await writeFileAtomically(file, `${JSON.stringify(state, null, 2)}\n`);
}

export async function readState(file: string): Promise<ImportState> {
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw usageError(code === "ENOENT" ? `--resume: no state file ${file} (nothing to resume; run without --resume to start)` : `--state ${file}: cannot read it (${code ?? String(error)})`);
  }
  let state: ImportState;
  try {
    state = JSON.parse(text) as ImportState;
  } catch {
    throw usageError(`--state ${file}: not a state file of this command (not JSON)`);
  }
  const numbers = [state.offset, state.line, state.errorsBytes, state.input?.size, state.input?.mtimeMs];
  if (state.version !== 1 || numbers.some((n) => typeof n !== "number" || !Number.isFinite(n) || n < 0) || typeof state.errorsFile !== "string") {
    throw usageError(`--state ${file}: not a state file of this command`);
  }
  return state;
}

/** Refuses to resume on an input that is not the one the state was written for. */
export async function checkSameInput(state: ImportState, path: string): Promise<void> {
  const now = await stat(path);
  if (now.size !== state.input.size || now.mtimeMs !== state.input.mtimeMs) {
    throw usageError(
      `--resume: ${path} changed since the import started (size or modification time differ from the state file's), so its position no longer applies; run without --resume to import it from the start`,
    );
  }
}

export async function removeState(file: string): Promise<void> {
  await rm(file, { force: true });
}
