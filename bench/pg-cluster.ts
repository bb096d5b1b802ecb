/**
 * A throwaway PostgreSQL primary and one hot standby (streaming
 * replication), on loopback ports of their own, in a temporary folder: for
 * the read-replica tests and `npm run bench -- --replicas 1`. Uses the
 * machine's Postgres binaries (initdb, pg_ctl, pg_basebackup); Postgres
 * refuses to run as root, so under root every binary runs as the `postgres`
 * user.
 */
import { execFile, execFileSync } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, appendFileSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";

export interface PgCluster {
  readonly primaryUrl: string;
  readonly standbyUrl: string;
  readonly primaryPort: number;
  readonly standbyPort: number;
  /** pg_wal_replay_pause() on the standby; resolves once replay is paused. */
  pauseReplay(): Promise<void>;
  resumeReplay(): Promise<void>;
  /** Stops the standby at once (immediate shutdown: its connections drop). */
  stopStandby(): Promise<void>;
  /** Starts it again, same folder and port; resolves once it accepts connections in recovery. */
  startStandby(): Promise<void>;
  /** The postmasters' pids (undefined while stopped), for CPU accounting. */
  pids(): { primary: number | undefined; standby: number | undefined };
  /** Stops both and deletes the folder. Idempotent. */
  close(): Promise<void>;
}

function binDir(): string {
  try {
    return execFileSync("pg_config", ["--bindir"], { encoding: "utf8" }).trim();
  } catch {
    return "/usr/lib/postgresql/15/bin";
  }
}

/** Whether the Postgres server binaries are on this machine. */
export function pgBinariesInstalled(): boolean {
  return existsSync(join(binDir(), "initdb")) && existsSync(join(binDir(), "pg_basebackup"));
}

const asRoot = process.getuid?.() === 0;

/** Runs a Postgres binary (as `postgres` under root); rejects with its stderr. */
function run(bin: string, args: string[]): Promise<string> {
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

function chownTree(path: string, ids: { uid: number; gid: number }): void {
  chownSync(path, ids.uid, ids.gid);
  for (const entry of readdirSync(path, { withFileTypes: true })) {
    if (entry.isDirectory()) chownTree(join(path, entry.name), ids);
    else chownSync(join(path, entry.name), ids.uid, ids.gid);
  }
}

function postmasterPid(dataDir: string): number | undefined {
  try {
    return Number(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0]);
  } catch {
    return undefined;
  }
}

/** Clusters still running, stopped when the process exits however it exits. */
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

async function query<R>(url: string, sql: string): Promise<R[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  try {
    await client.connect();
    return (await client.query(sql)).rows as R[];
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, ms = 30_000): Promise<T> {
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

const urlOf = (port: number, database = "postgres") => `postgres://postgres@127.0.0.1:${port}/${database}`;

export async function startPgCluster(options: { settings?: Record<string, string | number> } = {}): Promise<PgCluster> {
  const root = mkdtempSync(join(tmpdir(), "portcullis-pg-"));
  const primaryDir = join(root, "primary");
  const standbyDir = join(root, "standby");
  const ids = asRoot ? postgresIds() : undefined;
  if (ids) chownTree(root, ids);
  const [primaryPort, standbyPort] = [await freePort(), await freePort()];

  await run("initdb", ["-D", primaryDir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"]);
  const settings: Record<string, string | number> = {
    listen_addresses: "'127.0.0.1'",
    unix_socket_directories: `'${root}'`,
    wal_level: "replica",
    max_wal_senders: 5,
    hot_standby: "on",
    // Throwaway data: no fsync. Commits still go through the WAL, which is what replication reads.
    fsync: "off",
    wal_keep_size: "'256MB'",
    max_connections: 100,
    shared_buffers: "'64MB'",
    ...options.settings,
  };
  // Appended as root, so the file is given back to postgres below.
  appendFileSync(join(primaryDir, "postgresql.conf"), `\n${Object.entries(settings).map(([k, v]) => `${k} = ${v}`).join("\n")}\nport = ${primaryPort}\n`);
  appendFileSync(join(primaryDir, "pg_hba.conf"), "\nhost replication all 127.0.0.1/32 trust\n");
  if (ids) chownTree(primaryDir, ids);
  running.add(primaryDir);
  await run("pg_ctl", ["-D", primaryDir, "-l", join(root, "primary.log"), "-w", "-t", "60", "start"]);

  await run("pg_basebackup", ["-h", "127.0.0.1", "-p", String(primaryPort), "-U", "postgres", "-D", standbyDir, "-R", "-X", "stream", "--checkpoint=fast"]);
  // The copy has the primary's configuration: the standby's own port comes last, so it wins.
  appendFileSync(join(standbyDir, "postgresql.conf"), `\nport = ${standbyPort}\n`);
  if (ids) chownTree(standbyDir, ids);

  const startStandby = async () => {
    running.add(standbyDir);
    await run("pg_ctl", ["-D", standbyDir, "-l", join(root, "standby.log"), "-w", "-t", "60", "start"]);
    await until("the standby in recovery", async () =>
      (await query<{ r: boolean }>(urlOf(standbyPort), "SELECT pg_is_in_recovery() AS r"))[0]!.r ? true : undefined,
    );
  };
  const stop = async (dir: string) => {
    if (!running.has(dir)) return;
    running.delete(dir);
    await run("pg_ctl", ["-D", dir, "-m", "immediate", "-w", "stop"]).catch(() => undefined);
  };
  await startStandby();

  let closed = false;
  return {
    primaryUrl: urlOf(primaryPort),
    standbyUrl: urlOf(standbyPort),
    primaryPort,
    standbyPort,
    async pauseReplay() {
      await query(urlOf(standbyPort), "SELECT pg_wal_replay_pause()");
      await until("replay paused", async () =>
        (await query<{ s: string }>(urlOf(standbyPort), "SELECT pg_get_wal_replay_pause_state() AS s"))[0]!.s === "paused" ? true : undefined,
      );
    },
    async resumeReplay() {
      await query(urlOf(standbyPort), "SELECT pg_wal_replay_resume()");
    },
    stopStandby: () => stop(standbyDir),
    startStandby,
    pids: () => ({
      primary: running.has(primaryDir) ? postmasterPid(primaryDir) : undefined,
      standby: running.has(standbyDir) ? postmasterPid(standbyDir) : undefined,
    }),
    async close() {
      if (closed) return;
      closed = true;
      await stop(standbyDir);
      await stop(primaryDir);
      rmSync(root, { recursive: true, force: true });
    },
  };
}

/** Creates a database on the primary and resolves once the standby has it. */
export async function createDatabase(cluster: PgCluster, name: string): Promise<{ primaryUrl: string; standbyUrl: string }> {
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`not a plain database name: ${name}`);
  await query(cluster.primaryUrl, `CREATE DATABASE ${name}`);
  const standbyUrl = urlOf(cluster.standbyPort, name);
  await until(`database ${name} on the standby`, async () => ((await query(standbyUrl, "SELECT 1")).length === 1 ? true : undefined));
  return { primaryUrl: urlOf(cluster.primaryPort, name), standbyUrl };
}

/**
 * CPU seconds (user and system) the postmaster and every process under it
 * have used, exited children included (cutime, cstime): all of one server's
 * work. Linux only.
 */
export function clusterCpuSeconds(postmasterPid: number): number {
  const children = new Map<number, number[]>();
  const stats = new Map<number, string[]>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const fields = readFileSync(`/proc/${entry}/stat`, "utf8").split(") ")[1]!.split(" ");
      const pid = Number(entry);
      stats.set(pid, fields);
      const parent = Number(fields[1]);
      children.set(parent, [...(children.get(parent) ?? []), pid]);
    } catch {
      // exited meanwhile
    }
  }
  const ticks = (fields: string[], withChildren: boolean) =>
    Number(fields[11]) + Number(fields[12]) + (withChildren ? Number(fields[13]) + Number(fields[14]) : 0);
  let total = 0;
  const visit = (pid: number, root: boolean) => {
    const fields = stats.get(pid);
    if (fields === undefined) return;
    // The postmaster's cutime/cstime hold its exited backends; a backend's own children are none.
    total += ticks(fields, root);
    for (const child of children.get(pid) ?? []) visit(child, false);
  };
  visit(postmasterPid, true);
  return total / 100; // USER_HZ
}
