/**
 * `portcullis changes`: the change feed of the key's application (grants
 * written and deleted, role assignments added and removed, model changes, in
 * commit order) as NDJSON on stdout, one change a line, each the object
 * GET /api/v1/authorization/changes returns.
 *
 * Without --follow it reads page after page up to now (a short page means
 * nothing more yet) and ends; with --follow it goes on with long polls,
 * printing each page as it comes, until SIGINT or SIGTERM.
 *
 * --state keeps the position. After a page's lines have been handed to
 * stdout, the page's nextToken is saved (atomic-file.ts). The feed itself
 * gives every change after a token exactly once; what reaches stdout is at
 * least once at the page boundary: a kill or a crash between the lines and
 * the save prints that one page again on the next run, never more, and
 * skips nothing. A stop by signal finishes the page in hand and saves it
 * (exit 0 for a follower, 3 for a run up to now, which did not get there).
 *
 * The state file names its application: a token carries none, and one used
 * with another application's key would read that feed from a position that
 * means nothing there, silently.
 */
import { readFile, stat } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { writeFileAtomically } from "./atomic-file.js";
import { ApiError, NetworkError, type Api } from "./client.js";
import { EXIT, stopError, usageError } from "./errors.js";
import { ownApplication } from "./grants-export.js";

export interface ChangesOptions {
  after?: string | undefined;
  state?: string | undefined;
  pageSize: number;
  follow: boolean;
}

export interface ChangesIo {
  out: NodeJS.WritableStream;
  err: NodeJS.WritableStream;
}

const PATH = "/api/v1/authorization/changes";
/** The longest wait the route takes: an idle follower calls twice a minute. */
const WAIT_MS = 30_000;
/** A long poll's answer is due after its wait; one this late is lost (a half-open connection), and the call is retried. */
const LONG_POLL_TIMEOUT_MS = WAIT_MS + 30_000;
/** --follow retries a lost service after 0.5 s, then twice as long each time, up to 10 s. */
const FIRST_RETRY_MS = 500;
const MAX_RETRY_MS = 10_000;

/** --state as given (for messages) and resolved. */
interface StateFile {
  given: string;
  path: string;
}

interface FeedState {
  version: 1;
  appId: string;
  nextToken: string;
  savedAt: string;
}

/** A page as the route gives it; checked before anything of it is printed. */
interface Page {
  changes: object[];
  nextToken: string;
}

/** stdout's reader went away (EPIPE): nothing is left to do, and nothing to say. */
class ConsumerGone extends Error {}

/** What a call gives when a signal stopped the command. */
const STOPPED = Symbol("stopped");

export async function changes(api: Api, options: ChangesOptions, io: ChangesIo): Promise<number> {
  if (options.after === "") throw usageError("--after: the token is empty (leave --after out to start from the oldest change kept)");
  const stateFile = options.state === undefined ? undefined : { given: options.state, path: resolve(options.state) };
  if (stateFile !== undefined) await checkFolder(stateFile);

  const stop = new AbortController();
  let stoppedBy: NodeJS.Signals | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    if (stoppedBy !== undefined) {
      // A second one: whatever the first is waiting for (a consumer that reads nothing) is not coming.
      removeSignals();
      process.kill(process.pid, signal);
      return;
    }
    stoppedBy = signal;
    stop.abort();
  };
  const removeSignals = () => {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  // Without a listener, EPIPE on stdout would be thrown from the stream; the failed write's callback says it instead.
  // It stays: the stream may report again after this returns.
  io.out.on("error", () => undefined);

  let retryMs = 0;
  /**
   * A call; under --follow, tried again while it fails in a way that passes
   * (retryable), so that a follower outlives a restart of the service or of
   * the network. STOPPED once a signal came.
   */
  const attempt = async <T>(call: () => Promise<T>): Promise<T | typeof STOPPED> => {
    for (;;) {
      try {
        const value = await call();
        if (retryMs !== 0) io.err.write("portcullis: the service answers again; going on\n");
        retryMs = 0;
        return value;
      } catch (error) {
        // A call cut short by the signal: the position is where the last page left it.
        if (stop.signal.aborted) return STOPPED;
        if (!options.follow || !retryable(error)) throw error;
        retryMs = retryMs === 0 ? FIRST_RETRY_MS : Math.min(retryMs * 2, MAX_RETRY_MS);
        io.err.write(`portcullis: ${describe(error)}; trying again in ${retryMs / 1000} s\n`);
        try {
          await sleep(retryMs, undefined, { signal: stop.signal });
        } catch {
          return STOPPED;
        }
      }
    }
  };

  const started = performance.now();
  let count = 0;
  let token = "";
  let saved: string | undefined;
  try {
    const appId = await attempt(() => ownApplication(api, "changes", "the feed is the key's own application's"));
    if (appId === STOPPED) return options.follow ? EXIT.ok : EXIT.stopped;
    const state = stateFile === undefined ? undefined : await readFeedState(stateFile, appId);
    // --after wins over the state file: it is how a consumer is sent back to a known point.
    const first = options.after ?? state?.nextToken ?? "";
    saved = state?.nextToken;
    token = first;

    while (!stop.signal.aborted) {
      const page = await attempt(async () => {
        try {
          const answer = await api.get<unknown>(
            PATH,
            { after: token, pageSize: options.pageSize, waitMs: options.follow ? WAIT_MS : undefined },
            { signal: stop.signal, ...(options.follow ? { timeoutMs: LONG_POLL_TIMEOUT_MS } : {}) },
          );
          return pageOf(answer, api.baseUrl);
        } catch (error) {
          if (error instanceof ApiError && error.status === 409) throw expired(error, { after: options.after, state: stateFile?.given, moved: token !== first });
          throw error;
        }
      });
      if (page === STOPPED) break;
      if (page.changes.length > 0) {
        await writeOut(io.out, page.changes.map((c) => `${JSON.stringify(c)}\n`).join(""));
        count += page.changes.length;
      }
      token = page.nextToken;
      if (stateFile !== undefined && token !== saved) {
        const next: FeedState = { version: 1, appId, nextToken: token, savedAt: new Date().toISOString() };
        await writeFileAtomically(stateFile.path, `${JSON.stringify(next, null, 2)}\n`);
        saved = token;
      }
      if (!options.follow && page.changes.length < options.pageSize) break;
    }
  } catch (error) {
    if (error instanceof ConsumerGone) return EXIT.ok;
    throw error;
  } finally {
    removeSignals();
  }

  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  const printed = `${count.toLocaleString("en-US")} change${count === 1 ? "" : "s"} in ${seconds} s`;
  const where =
    stateFile !== undefined ? (saved === undefined ? `no position saved in ${stateFile.given} yet` : `the position is saved in ${stateFile.given}`) : token === "" ? "no position yet" : `go on with --after ${token}`;
  io.err.write(stoppedBy === undefined ? `${printed}, up to now; ${where}\n` : `stopped (${stoppedBy}) after ${printed}; ${where}\n`);
  // A signal is how a follower ends; a run up to now that it cut short did not finish.
  return stoppedBy !== undefined && !options.follow ? EXIT.stopped : EXIT.ok;
}

/** The state file's folder must exist before the first page is printed: a page whose position cannot be saved would be printed again. */
async function checkFolder({ given, path }: StateFile): Promise<void> {
  const folder = dirname(path);
  const isFolder = await stat(folder).then(
    (s) => s.isDirectory(),
    () => false,
  );
  if (!isFolder) throw usageError(`--state ${given}: there is no folder ${folder} to keep it in`);
}

/** The position a state file holds; undefined when there is no file yet (a first run). */
async function readFeedState({ given, path }: StateFile, appId: string): Promise<FeedState | undefined> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return undefined;
    throw usageError(`--state ${given}: cannot read it (${code ?? String(error)})`);
  }
  let state: Partial<FeedState>;
  try {
    state = JSON.parse(text) as Partial<FeedState>;
  } catch {
    throw usageError(`--state ${given}: not a state file of portcullis changes (not JSON)`);
  }
  if (typeof state !== "object" || state === null || state.version !== 1 || typeof state.appId !== "string" || typeof state.nextToken !== "string" || state.nextToken === "") {
    throw usageError(`--state ${given}: not a state file of portcullis changes`);
  }
  if (state.appId !== appId) {
    throw usageError(`--state ${given}: it holds a position in application ${state.appId}'s feed, and the key is application ${appId}'s (a token means nothing in another feed)`);
  }
  return state as FeedState;
}

/** The answer, checked: a page without a nextToken cannot be gone on from, and "" would start again from the oldest. */
function pageOf(answer: unknown, baseUrl: string): Page {
  const page = answer as { changes?: unknown; nextToken?: unknown };
  const changes = page.changes ?? [];
  if (!Array.isArray(changes) || !changes.every((c) => typeof c === "object" && c !== null) || typeof page.nextToken !== "string" || page.nextToken === "") {
    throw stopError(`GET ${PATH}: the answer is not a page of changes with a nextToken (is ${baseUrl} a Portcullis service with the change feed?)`);
  }
  return { changes: changes as object[], nextToken: page.nextToken };
}

/** A failure --follow waits out: the network, a timeout, a service busy, restarting or failing. A refusal of the call itself (400, 401, 403, 404, 409) is not. */
function retryable(error: unknown): boolean {
  if (error instanceof NetworkError) return true;
  if (error instanceof ApiError) return error.status === 408 || error.status === 429 || (error.status >= 500 && error.status !== 501);
  return false;
}

const describe = (error: unknown) => (error instanceof ApiError ? `the service refused: ${error.describe()}` : error instanceof Error ? error.message : String(error));

/**
 * 409: the position is older than the feed's retention (changes after it
 * have been swept), so no read from it can be complete. Where to start again
 * depends on where the position came from.
 */
function expired(error: ApiError, from: { after: string | undefined; state: string | undefined; moved: boolean }) {
  const source = from.moved ? "the position reached" : from.after !== undefined ? "the --after token" : from.state !== undefined ? `the position in --state ${from.state}` : "the position";
  const restart =
    from.state !== undefined
      ? `delete ${from.state}${from.after === undefined ? "" : " and leave --after out"}`
      : "run it again without --after";
  return stopError(
    `${source} is older than the change feed's retention: changes after it were deleted, so the feed cannot go on from it without a gap. ` +
      `To start again from the oldest change kept, ${restart} (${error.describe()})`,
  );
}

/** The page's lines, handed to stdout: resolves once the stream has taken them (and so the position may be saved). */
function writeOut(out: NodeJS.WritableStream, text: string): Promise<void> {
  return new Promise((done, fail) => {
    out.write(text, (error?: Error | null) => {
      if (error === undefined || error === null) done();
      else {
        const code = (error as NodeJS.ErrnoException).code;
        fail(code === "EPIPE" || code === "ERR_STREAM_DESTROYED" ? new ConsumerGone() : stopError(`cannot write to stdout: ${error.message}`));
      }
    });
  });
}
