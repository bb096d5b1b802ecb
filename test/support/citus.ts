/**
 * A throwaway Citus cluster for the tests: a coordinator and two workers,
 * each a Postgres server of its own (bench/pg-server.ts) on a free loopback
 * port, in one temporary folder, with `shared_preload_libraries = 'citus'`.
 * One initdb, copied for the workers (a copy takes a fraction of the
 * seconds an initdb takes on two busy cores), the three servers started
 * side by side. Each database made with `createDatabase` has the extension
 * on every node and the workers added, as docs/scale-out.md says to set up.
 *
 * Citus is not in Debian's package lists: `bash ../shared/citus/install.sh`
 * (as root) installs it into PostgreSQL 15, and `.ci/run` does that in CI.
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import {
  appendSettings,
  binDir,
  checkDatabaseName,
  copyDataDir,
  freePort,
  initDataDir,
  makeRoot,
  pgBinariesInstalled,
  pgQuery,
  pgServer,
  type PgServer,
} from "../../bench/pg-server.js";

/** Where Citus is missing: fail in CI, skip elsewhere (as the Python interop test does). */
export const IN_CI = process.env.CI === "true";

/** Whether this machine's Postgres has Citus: its library and its extension files. */
export function citusInstalled(): boolean {
  if (!pgBinariesInstalled()) return false;
  try {
    const [lib, share] = execFileSync(join(binDir(), "pg_config"), ["--pkglibdir", "--sharedir"], { encoding: "utf8" }).trim().split("\n");
    return existsSync(join(lib!, "citus.so")) && existsSync(join(share!, "extension", "citus.control"));
  } catch {
    return false;
  }
}

export const CITUS_MISSING =
  "Citus is not installed in this machine's PostgreSQL: run `bash ../shared/citus/install.sh` as root (docs/development.md#tests)";

export interface CitusCluster {
  readonly coordinator: PgServer;
  readonly workers: readonly PgServer[];
  /** Makes a database on every node with the extension, on the coordinator adds the workers; returns its coordinator URL. */
  createDatabase(name?: string): Promise<string>;
  /** Stops the three servers and deletes the folder. Idempotent. */
  close(): Promise<void>;
}

const SETTINGS = {
  listen_addresses: "'127.0.0.1'",
  shared_preload_libraries: "'citus'",
  // Throwaway data.
  fsync: "off",
  synchronous_commit: "off",
  full_page_writes: "off",
  // Small: three servers share two cores and the memory of a machine other work runs on.
  shared_buffers: "'32MB'",
  max_connections: 100,
  // No reports home to Citus Data from a test.
  "citus.enable_statistics_collection": "off",
} as const;

export async function startCitusCluster(): Promise<CitusCluster> {
  const root = makeRoot("portcullis-citus-");
  const servers: PgServer[] = [];
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await Promise.all(servers.map((s) => s.stop()));
    rmSync(root, { recursive: true, force: true });
  };
  try {
    const names = ["coordinator", "worker-1", "worker-2"];
    const ports = [await freePort(), await freePort(), await freePort()];
    const dirs = names.map((n) => join(root, n));
    await initDataDir(dirs[0]!, { ...SETTINGS, unix_socket_directories: `'${root}'` });
    for (const dir of dirs.slice(1)) copyDataDir(dirs[0]!, dir);
    for (const [i, dir] of dirs.entries()) {
      appendSettings(dir, { port: ports[i]! });
      servers.push(pgServer(dir, ports[i]!, join(root, `${names[i]}.log`)));
    }
    await Promise.all(servers.map((s) => s.start()));
  } catch (error) {
    await close();
    throw error;
  }
  const [coordinator, ...workers] = servers as [PgServer, ...PgServer[]];
  return {
    coordinator,
    workers,
    async createDatabase(name = `portcullis_citus_${randomBytes(4).toString("hex")}`) {
      checkDatabaseName(name);
      await Promise.all(
        servers.map(async (s) => {
          await pgQuery(s.url(), `CREATE DATABASE ${name}`);
          await pgQuery(s.url(name), "CREATE EXTENSION citus");
        }),
      );
      const url = coordinator.url(name);
      await pgQuery(url, "SELECT citus_set_coordinator_host('127.0.0.1', $1)", [coordinator.port]);
      for (const w of workers) await pgQuery(url, "SELECT citus_add_node('127.0.0.1', $1)", [w.port]);
      return url;
    },
    close,
  };
}
