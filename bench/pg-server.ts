/**
 * Throwaway PostgreSQL servers of our own, on loopback ports, in temporary
 * folders: the parts `pg-cluster.ts` (a primary and a hot standby) and the
 * Citus cluster (`citus-cluster.ts`) are built from. Uses the
 * machine's Postgres binaries (initdb, pg_ctl); Postgres refuses to run as
 * root, so under root every binary runs as the `postgres` user and the
 * folders are given to it.
 */
import { execFile, execFileSync } from "node:child_process";
import { appendFileSync, chownSync, cpSync, existsSync, mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";

let cachedBinDir: string | undefined;

/** Where the server binaries are (`pg_config --bindir`, else Debian's PostgreSQL 15). */
export function binDir(): string {
  if (cachedBinDir === undefined) {
    try {
      cachedBinDir = execFileSync("pg_config", ["--bindir"], { encoding: "utf8" }).trim();
    } catch {
      cachedBinDir = "/usr/lib/postgresql/15/bin";
    }
  }
  return cachedBinDir;
}

/** Whether the Postgres server binaries are on this machine. */
export function pgBinariesInstalled(): boolean {
  return existsSync(join(binDir(), "initdb")) && existsSync(join(binDir(), "pg_basebackup"));
}

const asRoot = process.getuid?.() === 0;

/** Runs a Postgres binary (as `postgres` under root); rejects with its stderr. */
export function runPg(bin: string, args: string[]): Promise<string> {
  const path = join(binDir(), bin);
  const [file, argv] = asRoot ? ["runuser", ["-u", "postgres", "--", path, ...args]] : [path, args];
  return new Promise((resolve, reject) => {
    execFile(file, argv, { encoding: "utf8", timeout: 120_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${bin} ${args.join(" ")} failed: ${stderr || error.message}`));
      else resolve(stdout);
    });
  });
}

/** A loopback port nobody listens on right now. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

function postgresIds(): { uid: number; gid: number } {
  return {
    uid: Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim()),
    gid: Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim()),
  };
}

/** Under root, gives a folder and everything in it to `postgres`; otherwise nothing to do. */
export function giveToPostgres(path: string): void {
  if (!asRoot) return;
  const ids = postgresIds();
  const chownTree = (p: string) => {
    chownSync(p, ids.uid, ids.gid);
    for (const entry of readdirSync(p, { withFileTypes: true })) {
      if (entry.isDirectory()) chownTree(join(p, entry.name));
      else chownSync(join(p, entry.name), ids.uid, ids.gid);
    }
  };
  chownTree(path);
}

/** A new temporary folder the servers may write to (their sockets and logs go there too). */
export function makeRoot(prefix: string): string {
  const root = mkdtempSync(join(tmpdir(), prefix));
  giveToPostgres(root);
  return root;
}

/** `name = value` lines appended to postgresql.conf: a later line wins over an earlier one. */
export function appendSettings(dataDir: string, settings: Record<string, string | number>): void {
  appendFileSync(join(dataDir, "postgresql.conf"), `\n${Object.entries(settings).map(([k, v]) => `${k} = ${v}`).join("\n")}\n`);
  giveToPostgres(dataDir);
}

/** initdb into `dataDir` (trust, UTF8, C locale, no sync), then `settings`. */
export async function initDataDir(dataDir: string, settings: Record<string, string | number>): Promise<void> {
  await runPg("initdb", ["-D", dataDir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"]);
  appendSettings(dataDir, settings);
}

/**
 * A copy of a stopped server's data folder: a second server without a second
 * initdb (which takes seconds; the copy, a fraction of one). The copies share
 * the system identifier, which matters only to replication.
 */
export function copyDataDir(from: string, to: string): void {
  cpSync(from, to, { recursive: true });
  giveToPostgres(to);
}

export function postmasterPid(dataDir: string): number | undefined {
  try {
    return Number(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0]);
  } catch {
    return undefined;
  }
}

/** Servers still running, stopped when the process exits however it exits. */
const running = new Set<string>();
process.on("exit", () => {
  for (const dir of running) {
    try {
      const args = ["-D", dir, "-m", "immediate", "stop"];
      const path = join(binDir(), "pg_ctl");
      if (asRoot) execFileSync("runuser", ["-u", "postgres", "--", path, ...args], { stdio: "ignore" });
      else execFileSync(path, args, { stdio: "ignore" });
    } catch {
      // already stopped
    }
  }
});

export interface PgServer {
  readonly port: number;
  readonly dataDir: string;
  /** The connection string of a database on it (user postgres, trust). */
  url(database?: string): string;
  /** The postmaster's pid; undefined while stopped. */
  pid(): number | undefined;
  /** pg_ctl start; resolves once it accepts connections. */
  start(): Promise<void>;
  /** Immediate shutdown (its connections drop). Idempotent. */
  stop(): Promise<void>;
}

/** A server on `dataDir`, whose configuration must say `port` (appendSettings). Not started yet. */
export function pgServer(dataDir: string, port: number, logFile: string): PgServer {
  return {
    port,
    dataDir,
    url: (database = "postgres") => urlOf(port, database),
    pid: () => (running.has(dataDir) ? postmasterPid(dataDir) : undefined),
    async start() {
      running.add(dataDir);
      await runPg("pg_ctl", ["-D", dataDir, "-l", logFile, "-w", "-t", "60", "start"]);
    },
    async stop() {
      if (!running.has(dataDir)) return;
      running.delete(dataDir);
      await runPg("pg_ctl", ["-D", dataDir, "-m", "immediate", "-w", "stop"]).catch(() => undefined);
    },
  };
}

export const urlOf = (port: number, database = "postgres") => `postgres://postgres@127.0.0.1:${port}/${database}`;

/**
 * One statement on a connection of its own. A failure carries the warnings
 * the server sent before it: Citus reports a worker's own error only as a
 * WARNING, then fails with "failure on connection marked as essential".
 */
export async function pgQuery<R>(url: string, sql: string, params: unknown[] = []): Promise<R[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  const warnings: string[] = [];
  client.on("notice", (n) => {
    if (n.severity === "WARNING") warnings.push([n.message, n.detail].filter(Boolean).join(": "));
  });
  try {
    await client.connect();
    return (await client.query(sql, params)).rows as R[];
  } catch (error) {
    if (error instanceof Error && warnings.length > 0) error.message += ` (after the warnings: ${warnings.join("; ")})`;
    throw error;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Polls `probe` every 100 ms until it gives a value. */
export async function until<T>(what: string, probe: () => Promise<T | undefined>, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms${last ? ` (${String(last)})` : ""}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A plain database name, safe to put in a statement. */
export function checkDatabaseName(name: string): string {
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`not a plain database name: ${name}`);
  return name;
}
