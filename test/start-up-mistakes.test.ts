/**
 * Start-up mistakes a new user makes, with the real entry point as its own
 * process (test/support/service-process.ts), and none of them may lose an
 * acknowledged write:
 * - a second process on the same embedded data folder (another terminal,
 *   `npm run dev` beside `npm start`, two replicas on one folder) refuses to
 *   start, naming the folder and the process that holds it, and the first
 *   one's writes survive a restart;
 * - the lock a process killed with -9 leaves behind does not block the
 *   next start, and what it acknowledged is there;
 * - a port already in use is one line naming PORT, and that start never
 *   opens (or creates) its database.
 */
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { LOCK_FILE, type LockHolder } from "../src/store/data-dir-lock.js";
import { cleanUpServiceProcesses, sleep, spawnService, startService, stopService, tempDir, waitUntil, type ServiceProcess } from "./support/service-process.js";

cleanUpServiceProcesses();

const ADMIN_KEY = "start-up-mistakes-admin-key-0123456789";
const EXITS_WITHIN_MS = 20_000;
/** How fast a start is, process.test.ts checks; here it only has to start. */
const SLOW_OK = { readyWithinMs: null };

async function exitOf(service: ServiceProcess) {
  const exit = await Promise.race([service.exited, sleep(EXITS_WITHIN_MS).then(() => undefined)]);
  expect(exit, `the service kept running\nstdout:\n${service.stdout}\nstderr:\n${service.stderr}`).toBeDefined();
  return exit!;
}

/** Creates applications app-1 … app-n, each acknowledged with a 201. */
async function createApps(service: ServiceProcess, from: number, to: number): Promise<void> {
  for (let i = from; i <= to; i++) {
    const created = await service.call("POST", "/api/v1/applications", { key: ADMIN_KEY, body: { appId: `app-${i}` } });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
  }
}

async function appIds(service: ServiceProcess): Promise<string[]> {
  const listed = await service.call("GET", "/api/v1/applications", { key: ADMIN_KEY });
  expect(listed.status).toBe(200);
  return listed.body.applications.map((a: { appId: string }) => a.appId).sort();
}

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => `app-${from + i}`).sort();

describe("one data folder, one process", { timeout: 120_000 }, () => {
  it("a second process on the folder refuses to start, naming the folder and the holder; the first serves on and its writes survive a restart", async () => {
    const data = join(await tempDir(), "data");
    const env = { AUTHZ_DATA_DIR: data, AUTHZ_ADMIN_KEY: ADMIN_KEY };
    const first = await startService(env, SLOW_OK);
    await createApps(first, 1, 3);

    const second = await spawnService(env); // another port, the same folder
    const exit = await exitOf(second);
    expect(exit.code).toBe(1);
    const holder = JSON.parse(readFileSync(join(data, LOCK_FILE), "utf8")) as LockHolder;
    expect(holder.pid).toBe(first.child.pid);
    expect(second.stderr.trim().split("\n"), "one line").toHaveLength(1);
    expect(second.stderr).toContain(`the data folder ${data} is in use by process ${first.child.pid}`);
    expect(second.stdout).not.toContain("database ready");
    // A refused start never says it listens.
    expect(second.stdout).not.toContain("portcullis listening");

    // The first one was not disturbed: it acknowledges more writes.
    await createApps(first, 4, 6);
    expect(await appIds(first)).toEqual(range(1, 6));
    expect(await stopService(first)).toEqual({ code: 0, signal: null });
    expect(existsSync(join(data, LOCK_FILE)), "the lock is removed on a clean stop").toBe(false);

    const again = await startService(env, SLOW_OK);
    expect(await appIds(again)).toEqual(range(1, 6));
    expect(await stopService(again)).toEqual({ code: 0, signal: null });
  });

  it("two processes started at once on a fresh folder: one serves, the other refuses", async () => {
    const data = join(await tempDir(), "data");
    const env = { AUTHZ_DATA_DIR: data, AUTHZ_ADMIN_KEY: ADMIN_KEY };
    const both = await Promise.all([spawnService(env), spawnService(env)]);
    const outcomes = await Promise.all(
      both.map((service) =>
        Promise.race([
          waitUntil(service, "database ready", () => service.stdout.includes("database ready"), 60_000).then(() => "serves"),
          service.exited.then((exit) => `exited ${exit.code}`),
        ]),
      ),
    );
    expect([...outcomes].sort()).toEqual(["exited 1", "serves"]);
    const serving = both[outcomes.indexOf("serves")]!;
    await createApps(serving, 1, 2);
    expect(await stopService(serving)).toEqual({ code: 0, signal: null });
    const again = await startService(env, SLOW_OK);
    expect(await appIds(again)).toEqual(range(1, 2));
  });

  it("after kill -9 the lock left behind does not block the next start, and every acknowledged write is there", async () => {
    const data = join(await tempDir(), "data");
    const env = { AUTHZ_DATA_DIR: data, AUTHZ_ADMIN_KEY: ADMIN_KEY };
    const first = await startService(env, SLOW_OK);
    await createApps(first, 1, 6);
    first.child.kill("SIGKILL");
    expect(await first.exited).toEqual({ code: null, signal: "SIGKILL" });
    expect(existsSync(join(data, LOCK_FILE)), "a killed process leaves its lock").toBe(true);

    const again = await startService(env, SLOW_OK);
    expect(await appIds(again)).toEqual(range(1, 6));
    const holder = JSON.parse(readFileSync(join(data, LOCK_FILE), "utf8")) as LockHolder;
    expect(holder.pid).toBe(again.child.pid);
  });
});

describe("a port already in use", { timeout: 120_000 }, () => {
  it("is one line naming PORT, and that start opens no database", async () => {
    const first = await startService({ AUTHZ_DATA_DIR: join(await tempDir(), "data"), AUTHZ_ADMIN_KEY: ADMIN_KEY }, SLOW_OK);
    const port = new URL(first.url).port;
    const otherFolder = join(await tempDir(), "data");
    const second = await spawnService({ PORT: port, AUTHZ_DATA_DIR: otherFolder, AUTHZ_ADMIN_KEY: ADMIN_KEY });
    const exit = await exitOf(second);
    expect(exit.code).toBe(1);
    expect(second.stderr.trim().split("\n"), "one line").toHaveLength(1);
    expect(second.stderr).toContain(`PORT=${port}: 127.0.0.1:${port} is already in use by another process; stop that process or set PORT to a free port`);
    expect(second.stdout).not.toContain("database ready");
    // Not created, not locked: the database was never opened.
    expect(existsSync(otherFolder) ? readdirSync(otherFolder) : []).toEqual([]);
    // The first is untouched.
    expect((await first.call("GET", "/readyz", { key: null })).status).toBe(200);
  });

  it("METRICS_PORT in use is one line naming METRICS_PORT", async () => {
    const first = await startService({ AUTHZ_DATA_DIR: join(await tempDir(), "data"), AUTHZ_ADMIN_KEY: ADMIN_KEY }, SLOW_OK);
    const busy = new URL(first.url).port;
    const second = await spawnService({ METRICS_PORT: busy, AUTHZ_DATA_DIR: join(await tempDir(), "data"), AUTHZ_ADMIN_KEY: ADMIN_KEY });
    const exit = await exitOf(second);
    expect(exit.code).toBe(1);
    expect(second.stderr).toContain(`METRICS_PORT=${busy}: 127.0.0.1:${busy} is already in use`);
    expect(second.stdout).not.toContain("database ready");
  });
});
