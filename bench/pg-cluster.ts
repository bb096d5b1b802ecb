/**
 * A throwaway PostgreSQL primary and one hot standby (streaming
 * replication), on loopback ports of their own, in a temporary folder: for
 * the read-replica tests and `npm run bench -- --replicas 1`. Uses the
 * machine's Postgres binaries (initdb, pg_ctl, pg_basebackup); Postgres
 * refuses to run as root, so under root every binary runs as the `postgres`
 * user. Built from the parts in pg-server.ts.
 */
import { appendFileSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import {
  appendSettings,
  checkDatabaseName,
  giveToPostgres,
  initDataDir,
  makeRoot,
  pgQuery as query,
  pgServer,
  type PgServer,
  runPg as run,
  until,
  urlOf,
  freePort,
} from "./pg-server.js";

export { freePort, pgBinariesInstalled } from "./pg-server.js";

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
  /**
   * Another hot standby of the primary, copied from it now, on a port of its
   * own: stopped by close() with the rest.
   */
  addStandby(): Promise<PgStandby>;
  /** Stops both and deletes the folder. Idempotent. */
  close(): Promise<void>;
}

export interface PgStandby {
  readonly port: number;
  url(database?: string): string;
  /** pg_wal_replay_pause(); resolves once replay is paused. */
  pauseReplay(): Promise<void>;
  resumeReplay(): Promise<void>;
  /** Stops it at once (immediate shutdown). */
  stop(): Promise<void>;
}

export async function startPgCluster(options: { settings?: Record<string, string | number> } = {}): Promise<PgCluster> {
  const root = makeRoot("portcullis-pg-");
  const [primaryPort, standbyPort] = [await freePort(), await freePort()];
  const primary = pgServer(join(root, "primary"), primaryPort, join(root, "primary.log"));
  const standby = pgServer(join(root, "standby"), standbyPort, join(root, "standby.log"));

  await initDataDir(primary.dataDir, {
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
    port: primaryPort,
  });
  appendFileSync(join(primary.dataDir, "pg_hba.conf"), "\nhost replication all 127.0.0.1/32 trust\n");
  giveToPostgres(primary.dataDir);
  await primary.start();

  const copyPrimary = async (server: PgServer) => {
    await run("pg_basebackup", ["-h", "127.0.0.1", "-p", String(primaryPort), "-U", "postgres", "-D", server.dataDir, "-R", "-X", "stream", "--checkpoint=fast"]);
    // The copy has the primary's configuration: the standby's own port comes last, so it wins.
    appendSettings(server.dataDir, { port: server.port });
  };
  const startStandby = async (server: PgServer) => {
    await server.start();
    await until("the standby in recovery", async () =>
      (await query<{ r: boolean }>(server.url(), "SELECT pg_is_in_recovery() AS r"))[0]!.r ? true : undefined,
    );
  };
  const pauseReplay = async (server: PgServer) => {
    await query(server.url(), "SELECT pg_wal_replay_pause()");
    await until("replay paused", async () =>
      (await query<{ s: string }>(server.url(), "SELECT pg_get_wal_replay_pause_state() AS s"))[0]!.s === "paused" ? true : undefined,
    );
  };
  const resumeReplay = async (server: PgServer) => {
    await query(server.url(), "SELECT pg_wal_replay_resume()");
  };
  await copyPrimary(standby);
  await startStandby(standby);

  const others: PgServer[] = [];
  let closed = false;
  return {
    primaryUrl: urlOf(primaryPort),
    standbyUrl: urlOf(standbyPort),
    primaryPort,
    standbyPort,
    pauseReplay: () => pauseReplay(standby),
    resumeReplay: () => resumeReplay(standby),
    stopStandby: () => standby.stop(),
    startStandby: () => startStandby(standby),
    pids: () => ({ primary: primary.pid(), standby: standby.pid() }),
    async addStandby() {
      const n = others.length + 1;
      const server = pgServer(join(root, `standby-${n}`), await freePort(), join(root, `standby-${n}.log`));
      others.push(server);
      await copyPrimary(server);
      await startStandby(server);
      return {
        port: server.port,
        url: server.url,
        pauseReplay: () => pauseReplay(server),
        resumeReplay: () => resumeReplay(server),
        stop: () => server.stop(),
      };
    },
    async close() {
      if (closed) return;
      closed = true;
      for (const other of others) await other.stop();
      await standby.stop();
      await primary.stop();
      rmSync(root, { recursive: true, force: true });
    },
  };
}

/** Creates a database on the primary and resolves once the standby has it. */
export async function createDatabase(cluster: PgCluster, name: string): Promise<{ primaryUrl: string; standbyUrl: string }> {
  await query(cluster.primaryUrl, `CREATE DATABASE ${checkDatabaseName(name)}`);
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
