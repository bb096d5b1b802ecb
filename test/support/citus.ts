/**
 * The tests' Citus cluster (bench/citus-cluster.ts starts one): whether
 * this machine has Citus, and a cluster already running joined by its URLs.
 *
 * Citus is not in Debian's package lists: `bash ../shared/citus/install.sh`
 * (as root) installs it into PostgreSQL 15, and `.ci/run` does that in CI.
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { createCitusDatabase, dropCitusDatabase, nodeOf, type CitusNodes } from "../../bench/citus-cluster.js";
import { binDir, pgBinariesInstalled } from "../../bench/pg-server.js";

export {
  againWhileInUse,
  createCitusDatabase,
  dropCitusDatabase,
  startCitusCluster,
  withDatabase,
  type CitusCluster,
  type CitusNodes,
} from "../../bench/citus-cluster.js";

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

/**
 * A cluster already running, named by the URLs of an admin database on its
 * coordinator and on each worker (the Citus leg's: global-setup.ts starts
 * it): databases made on it are dropped by close(), the servers left running.
 */
export function joinCitusCluster(coordinatorUrl: string, workerUrls: readonly string[]): CitusNodes {
  const made: string[] = [];
  const port = (url: string) => nodeOf(url).port;
  return {
    coordinator: { port: port(coordinatorUrl) },
    workers: workerUrls.map((url) => ({ port: port(url) })),
    async createDatabase(name = `portcullis_citus_${randomBytes(4).toString("hex")}`) {
      made.push(name);
      return await createCitusDatabase(coordinatorUrl, workerUrls, name);
    },
    async close() {
      const names = made.splice(0);
      for (const name of names) await dropCitusDatabase(coordinatorUrl, workerUrls, name);
    },
  };
}

