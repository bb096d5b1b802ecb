/**
 * The service's real entry point as a child process (entry-points.ts:
 * compiled when dist/ is current, else under tsx), configured only through its environment, for the tests
 * that start, stop, kill and restart it: spawn, wait for ready, stop with
 * SIGTERM, and clean-up hooks so that no process or folder outlives a test.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, expect } from "vitest";
import { entryArgs, ROOT } from "./entry-points.js";
import { freePort } from "./ports.js";
import { restCaller } from "./service.js";

export const KEY_PATTERN = /pcl_[a-z2-7]+/g;
export const HEALTHY_WITHIN_MS = 10_000;
export const STOPS_WITHIN_MS = 5_000;

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface ServiceProcess {
  child: ChildProcess;
  url: string;
  /** Everything written so far. */
  readonly stdout: string;
  readonly stderr: string;
  readonly exited: Promise<Exit>;
  call: ReturnType<typeof restCaller>;
}

const running = new Set<ServiceProcess>();
const tempDirs: string[] = [];

export async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "portcullis-process-"));
  tempDirs.push(dir);
  return dir;
}

/** The parent's environment without anything that configures the service. */
export function cleanEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const name of ["PORT", "HOST", "DATABASE_URL", "AUTHZ_DATA_DIR", "AUTHZ_ADMIN_KEY", "LOG_LEVEL", "PG_POOL_MAX", "SHUTDOWN_GRACE_MS", "NODE_OPTIONS", "METRICS_PORT", "METRICS_HOST", "METRICS_ENABLED", "OTEL_EXPORTER_OTLP_ENDPOINT"]) {
    delete env[name];
  }
  return env;
}

/** Spawns the entry point with PORT, HOST and LOG_LEVEL set, plus `env` (which may override them). */
export async function spawnService(env: Record<string, string>): Promise<ServiceProcess> {
  const port = await freePort();
  const child = spawn(process.execPath, entryArgs("src/main.ts"), {
    cwd: ROOT,
    env: { ...cleanEnv(), PORT: String(port), HOST: "127.0.0.1", LOG_LEVEL: "info", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exited = new Promise<Exit>((resolve) => {
    child.once("exit", (code, signal) => resolve({ code, signal }));
    child.once("error", () => resolve({ code: null, signal: null }));
  });
  const url = `http://127.0.0.1:${port}`;
  const service: ServiceProcess = {
    child,
    url,
    get stdout() {
      return stdout;
    },
    get stderr() {
      return stderr;
    },
    exited,
    call: restCaller(url),
  };
  running.add(service);
  void exited.then(() => running.delete(service));
  return service;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Resolves with the time it took once `condition` holds; fails after `timeoutMs` or when the process exits. */
export async function waitUntil(service: ServiceProcess, what: string, condition: () => Promise<boolean> | boolean, timeoutMs: number): Promise<number> {
  const started = Date.now();
  let exit: Exit | undefined;
  void service.exited.then((e) => (exit = e));
  for (;;) {
    if (await condition()) return Date.now() - started;
    if (exit !== undefined) {
      throw new Error(`the service exited (code ${exit.code}, signal ${exit.signal}) before ${what}\nstderr:\n${service.stderr}\nstdout:\n${service.stdout}`);
    }
    if (Date.now() - started > timeoutMs) {
      throw new Error(`no ${what} within ${timeoutMs} ms\nstderr:\n${service.stderr}\nstdout:\n${service.stdout}`);
    }
    await sleep(50);
  }
}

export async function answersReady(service: ServiceProcess): Promise<boolean> {
  try {
    const res = await fetch(`${service.url}/readyz`, { signal: AbortSignal.timeout(1_000) });
    return res.status === 200;
  } catch {
    return false;
  }
}

/**
 * Starts the service and waits until /readyz answers 200: the database is
 * open and migrated, and anything start-up prints (the operator key) is out.
 * (/healthz answers earlier, as soon as the port listens.) Ready later than
 * 10 s after the spawn fails the test (softly: the test goes on, so later
 * steps and tests still have what they need), but the wait allows longer;
 * `readyWithinMs: null` drops that check (for tests about something else).
 */
export async function startService(env: Record<string, string>, options: { readyWithinMs?: number | null } = {}): Promise<ServiceProcess> {
  const started = Date.now();
  const service = await spawnService(env);
  await waitUntil(service, "200 on /readyz", () => answersReady(service), 45_000);
  const within = options.readyWithinMs === undefined ? HEALTHY_WITHIN_MS : options.readyWithinMs;
  if (within !== null) expect.soft(Date.now() - started, "milliseconds from spawn until /readyz answered 200").toBeLessThanOrEqual(within);
  await waitUntil(service, "database ready log line", () => service.stdout.includes("database ready"), 5_000);
  await sleep(200);
  return service;
}

/** SIGTERM, then the exit, which must come within `STOPS_WITHIN_MS`. */
export async function stopService(service: ServiceProcess): Promise<Exit> {
  service.child.kill("SIGTERM");
  const exit = await Promise.race([service.exited, sleep(STOPS_WITHIN_MS).then(() => undefined)]);
  if (exit === undefined) throw new Error(`no exit within ${STOPS_WITHIN_MS} ms of SIGTERM\nstderr:\n${service.stderr}`);
  return exit;
}

/** Every API key printed on stdout or stderr. */
export const printedKeys = (service: ServiceProcess) => [...`${service.stdout}\n${service.stderr}`.matchAll(KEY_PATTERN)].map((m) => m[0]);

/**
 * Registers the clean-up of a test file that spawns services: whatever
 * happened, no service outlives its test (`per: "test"`, the default) or
 * the file (`per: "file"`, for a service shared by the file's tests), and
 * the file's temporary folders are removed after it.
 */
export function cleanUpServiceProcesses(options: { per: "test" | "file" } = { per: "test" }): void {
  const killAll = async () => {
    await Promise.all(
      [...running].map(async (service) => {
        if (service.child.exitCode === null && service.child.signalCode === null) service.child.kill("SIGKILL");
        await service.exited;
      }),
    );
  };
  if (options.per === "test") afterEach(killAll);
  afterAll(async () => {
    await killAll();
    await Promise.all(tempDirs.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
  });
}
