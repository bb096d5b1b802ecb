/**
 * One process per embedded data folder, the way Postgres keeps one server per
 * data directory with postmaster.pid. PGlite keeps no such file: two
 * processes on one folder each open it, each sees only its own writes, and
 * whichever writes its pages last wins, so acknowledged writes are lost.
 *
 * The lock is a file, `portcullis.lock`, in the folder, made with the
 * platform's own exclusive create (link(2) of a fully written temporary file:
 * it appears whole or not at all, and fails when the name exists). It holds
 * who made it: the process id, the host, the kernel's boot id and the
 * process's start time (Linux). A lock is stale, and taken over, when its
 * process is gone: no process with that id (kill -0), or one that started
 * at another time (the id was reused), or the machine booted since, or the
 * id is this very process's own (a container restarted as pid 1). A lock
 * made on another host is never judged from here: a folder shared by two
 * machines is refused, and the message says which file to delete once that
 * host's process is known to be gone.
 *
 * Why not a library: proper-lockfile, the maintained one, calls a lock
 * stale when its mtime has not been refreshed for a while (10 s by default),
 * refreshed by a timer. PGlite runs on the event loop's thread, so a long
 * statement (a migration on a large table, an index build) stops that timer:
 * a live holder would look stale and a second process would open the folder,
 * the very failure this prevents; and after a kill -9 the next start would
 * wait out the stale period. A process id with its start time has neither
 * problem. Node has no flock(2).
 *
 * Taking over a stale lock is guarded by a second exclusive file,
 * `portcullis.lock.takeover`, so that two processes that both judged the
 * same lock stale cannot remove each other's fresh one: only the holder of
 * the takeover file removes the lock, and only after reading it again.
 */
import { randomBytes } from "node:crypto";
import { linkSync, mkdirSync, readFileSync, statSync, unlinkSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import path from "node:path";
import { StartupError } from "../lib/startup-error.js";

export const LOCK_FILE = "portcullis.lock";

/** What a lock file says of its maker. */
export interface LockHolder {
  pid: number;
  host: string;
  /** /proc/sys/kernel/random/boot_id, where there is one. */
  bootId: string | undefined;
  /** The process's start time in clock ticks since boot (/proc/PID/stat), where there is one. */
  startTicks: string | undefined;
  /** When it took the lock (ISO 8601), for people. */
  since: string;
  /** Unique per lock: how a holder knows the file is still its own. */
  nonce: string;
}

export class DataDirLockedError extends StartupError {
  constructor(
    readonly folder: string,
    readonly holder: LockHolder,
  ) {
    const where = holder.host === hostname() ? `process ${holder.pid}` : `process ${holder.pid} on host ${holder.host}`;
    super(
      holder.host === hostname()
        ? `the data folder ${folder} is in use by ${where} (since ${holder.since}): one folder serves one process; stop it, or set AUTHZ_DATA_DIR to another folder`
        : `the data folder ${folder} is in use by ${where} (since ${holder.since}): one folder serves one process; if that process is gone, delete ${path.join(folder, LOCK_FILE)}, or set AUTHZ_DATA_DIR to another folder`,
    );
    this.name = "DataDirLockedError";
  }
}

export interface DataDirLock {
  readonly file: string;
  /** Removes the lock if it is still this process's own (idempotent). */
  release(): void;
}

/** How the lock judges processes; the tests replace parts of it. */
export interface ProcessProbe {
  readonly pid: number;
  readonly host: string;
  bootId(): string | undefined;
  startTicks(pid: number): string | undefined;
  /** Whether a process with this id exists (it may belong to another user). */
  exists(pid: number): boolean;
}

export const SYSTEM: ProcessProbe = {
  pid: process.pid,
  host: hostname(),
  bootId: () => readText("/proc/sys/kernel/random/boot_id"),
  startTicks(pid) {
    const stat = readText(`/proc/${pid}/stat`);
    if (stat === undefined) return undefined;
    // Field 22, counted after the command name, which is in parentheses and may hold spaces.
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
  },
  exists(pid) {
    try {
      process.kill(pid, 0);
      return true;
    } catch (error) {
      return (error as NodeJS.ErrnoException).code === "EPERM";
    }
  },
};

/** Takes the folder's lock (making the folder if needed), or throws DataDirLockedError naming the holder. */
export function lockDataDir(folder: string, probe: ProcessProbe = SYSTEM): DataDirLock {
  const dir = path.resolve(folder);
  try {
    mkdirSync(dir, { recursive: true });
  } catch (error) {
    throw new StartupError(`the data folder ${dir} cannot be made (${(error as Error).message}): set AUTHZ_DATA_DIR to a folder this process may write`, { cause: error });
  }
  const file = path.join(dir, LOCK_FILE);
  const me: LockHolder = {
    pid: probe.pid,
    host: probe.host,
    bootId: probe.bootId(),
    startTicks: probe.startTicks(probe.pid),
    since: new Date().toISOString(),
    nonce: randomBytes(12).toString("hex"),
  };
  // Each pass either takes the lock, throws, or removed a stale lock (or waited
  // on a takeover in progress); a few passes always settle it.
  for (let attempt = 0; attempt < 50; attempt++) {
    if (createExclusive(file, me)) return held(file, me.nonce);
    const holder = readHolder(file);
    if (holder === "gone") continue; // released between our create and read
    if (holder !== "unreadable" && isAlive(holder, probe)) throw new DataDirLockedError(dir, holder);
    takeOver(file, holder, me, probe);
  }
  throw new StartupError(`could not take the lock ${file}: it keeps changing; is another process starting on the same folder?`);
}

/** The nonces of the locks this process holds: a lock with our pid is an earlier life's unless it is one of these. */
const heldHere = new Set<string>();

function held(file: string, nonce: string): DataDirLock {
  let released = false;
  heldHere.add(nonce);
  const release = () => {
    if (released) return;
    released = true;
    heldHere.delete(nonce);
    process.off("exit", release);
    const holder = readHolder(file);
    if (typeof holder === "object" && holder.nonce === nonce) unlinkQuietly(file);
  };
  // A process that exits without closing its database leaves no lock behind;
  // one that is killed does, and the next start finds its process gone.
  process.on("exit", release);
  return { file, release };
}

/**
 * Whether the process a lock names still runs. Only a lock of this host can
 * be judged; one of another host is taken as alive.
 */
function isAlive(holder: LockHolder, probe: ProcessProbe): boolean {
  if (holder.host !== probe.host) return true;
  if (holder.bootId !== undefined && probe.bootId() !== undefined && holder.bootId !== probe.bootId()) return false;
  // Our own id: held by this very process (a second open of the folder), or
  // else an earlier life's (a container restarted as pid 1).
  if (holder.pid === probe.pid) return heldHere.has(holder.nonce);
  if (!probe.exists(holder.pid)) return false;
  const ticks = probe.startTicks(holder.pid);
  return holder.startTicks === undefined || ticks === undefined || ticks === holder.startTicks;
}

/** Removes a stale lock, under the takeover file; returns to the caller's loop either way. */
function takeOver(file: string, stale: LockHolder | "unreadable", me: LockHolder, probe: ProcessProbe): void {
  const guard = `${file}.takeover`;
  if (!createExclusive(guard, me)) {
    const other = readHolder(guard);
    // A taker that died inside these few statements: remove its guard, then retry.
    if (typeof other === "object" && !isAlive(other, probe)) unlinkQuietly(guard);
    else if (other === "unreadable" && ageMs(guard) > 10_000) unlinkQuietly(guard);
    else sleepMs(20);
    return;
  }
  try {
    const now = readHolder(file);
    const same = now === stale || (typeof now === "object" && typeof stale === "object" && now.nonce === stale.nonce);
    if (same || now === "unreadable") unlinkQuietly(file);
  } finally {
    unlinkQuietly(guard);
  }
}

/** Writes `holder` to `file` atomically, failing when `file` exists. */
function createExclusive(file: string, holder: LockHolder): boolean {
  const temp = `${file}.${holder.nonce}.${randomBytes(4).toString("hex")}`;
  writeFileSync(temp, `${JSON.stringify(holder)}\n`, { mode: 0o644 });
  try {
    linkSync(temp, file);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw error;
  } finally {
    unlinkQuietly(temp);
  }
}

function readHolder(file: string): LockHolder | "gone" | "unreadable" {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return "gone";
    throw error;
  }
  try {
    const value = JSON.parse(text) as Partial<LockHolder>;
    if (typeof value.pid === "number" && typeof value.host === "string" && typeof value.nonce === "string") {
      return {
        pid: value.pid,
        host: value.host,
        bootId: typeof value.bootId === "string" ? value.bootId : undefined,
        startTicks: typeof value.startTicks === "string" ? value.startTicks : undefined,
        since: typeof value.since === "string" ? value.since : "an unknown time",
        nonce: value.nonce,
      };
    }
  } catch {
    // not JSON: a file of something else, or cut short by a crash of an older version
  }
  return "unreadable";
}

function readText(file: string): string | undefined {
  try {
    return readFileSync(file, "utf8").trim();
  } catch {
    return undefined;
  }
}

function unlinkQuietly(file: string): void {
  try {
    unlinkSync(file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
  }
}

function ageMs(file: string): number {
  try {
    return Date.now() - statSync(file).mtimeMs;
  } catch {
    return 0;
  }
}

function sleepMs(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}
