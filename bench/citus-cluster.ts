/**
 * A throwaway Citus cluster: a coordinator and two workers, each a Postgres
 * server of its own (pg-server.ts) on a free loopback port, in one
 * temporary folder, with `shared_preload_libraries = 'citus'`. One initdb,
 * copied for the workers (a copy takes a fraction of the seconds an initdb
 * takes on two busy cores), the three servers started side by side. Each
 * database made with `createDatabase` has the extension on every node and
 * the workers added, as docs/scale-out.md says to set up. The tests' Citus
 * leg (test/support/citus.ts) and `npm run bench -- --citus` start it.
 *
 * Citus is not in Debian's package lists: `bash ../shared/citus/install.sh`
 * (as root) installs it into PostgreSQL 15, and `.ci/run` does that in CI.
 */
import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { appendSettings, checkDatabaseName, copyDataDir, freePort, initDataDir, makeRoot, pgQuery, pgServer, type PgServer } from "./pg-server.js";

/** A cluster's nodes as its user sees them: where each listens, and databases made on all of them. */
export interface CitusNodes {
  readonly coordinator: { readonly port: number };
  readonly workers: readonly { readonly port: number }[];
  /** Makes a database on every node with the extension, on the coordinator adds the workers; returns its coordinator URL. */
  createDatabase(name?: string): Promise<string>;
  /** Ends what this handle started: the databases it made, or the servers and their folder. Idempotent. */
  close(): Promise<void>;
}

export interface CitusCluster extends CitusNodes {
  readonly coordinator: PgServer;
  readonly workers: readonly PgServer[];
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
  // No reports home to Citus Data from a test or a bench.
  "citus.enable_statistics_collection": "off",
  // As docs/scale-out.md says to run Citus: a worker plans the statements routed to it, and JIT
  // would compile each graph statement (150 ms and more) on its cost estimate alone.
  jit: "off",
} as const;

/** What `--statement-stats` adds (bench/harness/statement-stats.ts): pg_stat_statements, its planning times too. */
const STATEMENT_STATS_SETTINGS = {
  shared_preload_libraries: "'citus,pg_stat_statements'",
  "pg_stat_statements.track_planning": "on",
} as const;

/** `statementStats`: each server also loads pg_stat_statements (citus first, as Citus requires). */
export async function startCitusCluster(options: { statementStats?: boolean } = {}): Promise<CitusCluster> {
  const root = makeRoot("portcullis-citus-");
  const servers: PgServer[] = [];
  let closed = false;
  // A run cut short (Ctrl-C) exits without close(): bench/pg-server.ts stops the servers on
  // exit, and this hook, added after that one, then deletes the folder.
  const removeRoot = () => rmSync(root, { recursive: true, force: true });
  process.on("exit", removeRoot);
  const close = async () => {
    if (closed) return;
    closed = true;
    await Promise.all(servers.map((s) => s.stop()));
    process.off("exit", removeRoot);
    removeRoot();
  };
  try {
    const names = ["coordinator", "worker-1", "worker-2"];
    const ports = [await freePort(), await freePort(), await freePort()];
    const dirs = names.map((n) => join(root, n));
    await initDataDir(dirs[0]!, { ...SETTINGS, ...(options.statementStats === true ? STATEMENT_STATS_SETTINGS : {}), unix_socket_directories: `'${root}'` });
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
    createDatabase: (name = `portcullis_citus_${randomBytes(4).toString("hex")}`) =>
      createCitusDatabase(coordinator.url(), workers.map((w) => w.url()), name),
    close,
  };
}

/** The same database on another server: `url` (an admin database's) with its path replaced. */
export function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

/** The host and port Citus is given for a node: those of its URL. */
export function nodeOf(url: string): { host: string; port: number } {
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port || 5432) };
}

/**
 * Makes database `name` on a running cluster, given the URLs of an admin
 * database on the coordinator and on each worker: the database on every node
 * with the extension, and on the coordinator the coordinator's own address
 * and the workers added. Returns its URL on the coordinator.
 */
export async function createCitusDatabase(coordinatorUrl: string, workerUrls: readonly string[], name: string): Promise<string> {
  checkDatabaseName(name);
  await Promise.all(
    [coordinatorUrl, ...workerUrls].map(async (admin) => {
      await pgQuery(admin, `CREATE DATABASE ${name}`);
      await pgQuery(withDatabase(admin, name), "CREATE EXTENSION citus");
    }),
  );
  const url = withDatabase(coordinatorUrl, name);
  const self = nodeOf(coordinatorUrl);
  await pgQuery(url, "SELECT citus_set_coordinator_host($1, $2)", [self.host, self.port]);
  for (const w of workerUrls.map(nodeOf)) await addNode(url, w);
  return url;
}

/**
 * citus_add_node, again (up to five times, a second apart) when its
 * connection to the worker fails: seen once in CI, with 85 test files on two
 * cores, as XX000 "failure on connection marked as essential". The call is
 * one transaction on the coordinator, so a failed one leaves nothing behind.
 * Classified by SQLSTATE: class 08 (connection exception) or XX000, the
 * code Citus gives that error.
 */
async function addNode(url: string, node: { host: string; port: number }): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await pgQuery(url, "SELECT citus_add_node($1, $2)", [node.host, node.port]);
      return;
    } catch (error) {
      const code = String((error as { code?: unknown }).code ?? "");
      if (!(code.startsWith("08") || code === "XX000") || attempt >= 5) throw error;
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }
  }
}

/** Drops database `name` made by createCitusDatabase, its connections ended: on the coordinator first, then on the workers. */
export async function dropCitusDatabase(coordinatorUrl: string, workerUrls: readonly string[], name: string): Promise<void> {
  checkDatabaseName(name);
  // The coordinator's sessions hold connections to the workers' copy: they go first.
  await dropForced(coordinatorUrl, name);
  await Promise.all(workerUrls.map((admin) => dropForced(admin, name)));
}

/**
 * DROP DATABASE ... WITH (FORCE), again while it meets object_in_use
 * (55006): Citus's maintenance daemon connects to every database with the
 * extension, and can connect again between FORCE ending the sessions and
 * the drop (seen once in CI: "is being accessed by other users").
 */
async function dropForced(adminUrl: string, name: string): Promise<void> {
  await againWhileInUse(() => pgQuery(adminUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`), 20, 250);
}

/**
 * `run`, again (up to `attempts` times, `waitMs` apart) while it fails with
 * object_in_use (55006): a statement on a whole database meeting a session
 * of it that is still ending, or that Citus's maintenance daemon opened.
 */
export async function againWhileInUse(run: () => Promise<unknown>, attempts: number, waitMs: number): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await run();
      return;
    } catch (error) {
      if ((error as { code?: unknown }).code !== "55006" || attempt >= attempts) throw error;
      await new Promise((resolve) => setTimeout(resolve, waitMs));
    }
  }
}
