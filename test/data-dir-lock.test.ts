/**
 * The embedded data folder's lock (src/store/data-dir-lock.ts) on the real
 * file system: which locks it honours and which it takes over (a table of
 * holders judged through a process probe), the file it leaves, release, and
 * processes racing for one folder, fresh and with a stale lock in it.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { DataDirLockedError, LOCK_FILE, lockDataDir, SYSTEM, type LockHolder, type ProcessProbe } from "../src/store/data-dir-lock.js";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const folders: string[] = [];
afterAll(() => folders.forEach((f) => rmSync(f, { recursive: true, force: true })));

function folder(): string {
  const dir = mkdtempSync(path.join(tmpdir(), "portcullis-lock-"));
  folders.push(dir);
  return dir;
}

/** This machine as the probe sees it, with a few processes made up. */
function probe(live: Record<number, string>, over: Partial<ProcessProbe> = {}): ProcessProbe {
  return {
    pid: 1000,
    host: "here",
    bootId: () => "boot-1",
    startTicks: (pid) => live[pid],
    exists: (pid) => pid in live,
    ...over,
  };
}

const holder = (over: Partial<LockHolder>): LockHolder => ({
  pid: 2000,
  host: "here",
  bootId: "boot-1",
  startTicks: "555",
  since: "2026-11-25T10:00:00.000Z",
  nonce: "n0",
  ...over,
});

describe("which locks are honoured", () => {
  it.each<{ name: string; lock: LockHolder | string; live: Record<number, string>; honoured: boolean }>([
    { name: "a live process of this host, same start time", lock: holder({}), live: { 2000: "555" }, honoured: true },
    { name: "a live process whose start time is unknown", lock: holder({ startTicks: undefined }), live: { 2000: "555" }, honoured: true },
    { name: "a process on another host (cannot be judged from here)", lock: holder({ host: "elsewhere" }), live: {}, honoured: true },
    { name: "no such process (killed with -9)", lock: holder({}), live: {}, honoured: false },
    { name: "the id now belongs to a process started later (reused)", lock: holder({}), live: { 2000: "999" }, honoured: false },
    { name: "made before the machine last booted (power loss)", lock: holder({ bootId: "boot-0" }), live: { 2000: "555" }, honoured: false },
    { name: "made by this very process id (a restarted container's pid 1)", lock: holder({ pid: 1000 }), live: { 1000: "777" }, honoured: false },
    { name: "not a lock this service writes", lock: "garbage\n", live: {}, honoured: false },
    { name: "an empty file", lock: "", live: {}, honoured: false },
  ])("$name: honoured $honoured", ({ lock, live, honoured }) => {
    const dir = folder();
    writeFileSync(path.join(dir, LOCK_FILE), typeof lock === "string" ? lock : JSON.stringify(lock));
    const take = () => lockDataDir(dir, probe(live));
    if (honoured) {
      const error = (() => {
        try {
          take();
        } catch (e) {
          return e;
        }
        return undefined;
      })();
      expect(error).toBeInstanceOf(DataDirLockedError);
      const message = (error as Error).message;
      expect(message).toContain(dir);
      expect(message).toContain(`process ${(lock as LockHolder).pid}`);
      expect(message).toMatch(/AUTHZ_DATA_DIR/);
      if ((lock as LockHolder).host === "elsewhere") {
        expect(message).toContain("on host elsewhere");
        expect(message).toContain(`delete ${path.join(dir, LOCK_FILE)}`);
      }
      // Refused: the holder's file is as it was.
      expect(JSON.parse(readFileSync(path.join(dir, LOCK_FILE), "utf8"))).toEqual(lock);
    } else {
      const held = take();
      const now = JSON.parse(readFileSync(path.join(dir, LOCK_FILE), "utf8")) as LockHolder;
      expect(now).toMatchObject({ pid: 1000, host: "here", bootId: "boot-1" });
      held.release();
      expect(existsSync(path.join(dir, LOCK_FILE))).toBe(false);
    }
  });
});

describe("the lock of this process", () => {
  it("makes the folder, writes who holds it, refuses a second taker, and is gone once released", () => {
    const dir = path.join(folder(), "nested", "data");
    const held = lockDataDir(dir);
    const written = JSON.parse(readFileSync(held.file, "utf8")) as LockHolder;
    expect(written.pid).toBe(process.pid);
    expect(written.host).toBe(SYSTEM.host);
    if (process.platform === "linux") expect(written.startTicks).toBe(SYSTEM.startTicks(process.pid));
    expect(() => lockDataDir(dir)).toThrow(DataDirLockedError);
    // Nothing but the lock is left behind (no temporary files).
    expect(readdirSync(dir)).toEqual([LOCK_FILE]);
    held.release();
    held.release(); // idempotent
    expect(readdirSync(dir)).toEqual([]);
    lockDataDir(dir).release();
  });

  it("release leaves alone a lock that is no longer its own", () => {
    const dir = folder();
    const held = lockDataDir(dir);
    const other = JSON.stringify(holder({ nonce: "someone-else" }));
    writeFileSync(held.file, other);
    held.release();
    expect(readFileSync(held.file, "utf8")).toBe(other);
  });
});

/**
 * Processes taking the lock of `dir` at once; each prints "got" (and holds
 * the lock until it is killed) or "refused". Resolves with what they printed
 * once all have, then kills them.
 */
async function race(dir: string, processes: number): Promise<string[]> {
  const script = `
    import { lockDataDir } from "./src/store/data-dir-lock.ts";
    try { lockDataDir(${JSON.stringify(dir)}); console.log("got"); setInterval(() => undefined, 1000); }
    catch (e) { console.log(e.name === "DataDirLockedError" ? "refused" : "error " + e.message); }`;
  const children = Array.from({ length: processes }, () =>
    spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { cwd: ROOT, stdio: ["ignore", "pipe", "inherit"] }),
  );
  try {
    const lines = children.map(
      (child) =>
        new Promise<string>((resolve) => {
          let out = "";
          child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
            out += chunk;
            if (out.includes("\n")) resolve(out.trim());
          });
          child.once("exit", () => resolve(out.trim()));
        }),
    );
    return (await Promise.all(lines)).sort();
  } finally {
    for (const child of children) child.kill("SIGKILL");
  }
}

describe("processes racing for one folder", { timeout: 60_000 }, () => {
  it("a fresh folder: exactly one of six gets it", async () => {
    expect(await race(folder(), 6)).toEqual(["got", "refused", "refused", "refused", "refused", "refused"]);
  });

  it("a stale lock (its process is gone): exactly one of six takes it over", async () => {
    const dir = folder();
    writeFileSync(path.join(dir, LOCK_FILE), JSON.stringify(holder({ pid: 2 ** 22 + 7, host: SYSTEM.host, bootId: SYSTEM.bootId() })));
    expect(await race(dir, 6)).toEqual(["got", "refused", "refused", "refused", "refused", "refused"]);
  });
});
