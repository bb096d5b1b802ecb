/**
 * The Citus leg's template databases: a file's database is copied from one
 * (`CREATE DATABASE … TEMPLATE` on every node) instead of being made from
 * nothing. Making one takes about a second of a core on the three servers
 * (the extension's script on each node, the workers added), and migrating
 * and distributing it another: with about 35 databases a run, a third of
 * the leg's CPU. A copy takes a tenth of a second, the extension, the
 * nodes and (from the migrated template) the distributed tables included:
 * each node copies its own part, under the same name, which is the name
 * the coordinator connects to on the workers.
 *
 * Two templates, made by the global setup once the cluster runs:
 * - `empty`: the extension on every node and the workers added, as
 *   createCitusDatabase leaves a database; for the files that migrate it
 *   themselves (the store suite's migrations, the upgrade tests);
 * - `migrated`: that, migrated by this build and distributed (four shards a
 *   table); for the files whose service migrates at start, which then
 *   finds nothing to do, as a service restarted on its database does.
 *
 * A template takes no connections (ALLOW_CONNECTIONS false, its sessions
 * ended): CREATE DATABASE copies only a database nobody is connected to,
 * and Citus's maintenance daemon connects to every database with the
 * extension.
 */
import { randomBytes } from "node:crypto";
import { checkDatabaseName, pgQuery } from "../../bench/pg-server.js";
import { distributeOnCitus } from "../../src/store/distribute.js";
import { migrate } from "../../src/store/migrate.js";
import { PgDb } from "../../src/store/pg-db.js";
import { againWhileInUse, createCitusDatabase, dropCitusDatabase, withDatabase } from "./citus.js";

/** Where the global setup names the run's templates: `empty,migrated`. */
export const CITUS_TEMPLATES_VAR = "PORTCULLIS_TEST_CITUS_TEMPLATES";

export interface CitusTemplates {
  empty: string;
  migrated: string;
}

/** The shards a distributed table of a test database has: Citus's default is 32 (test/citus.test.ts keeps it). */
export const TEST_SHARD_COUNT = 4;

/** Makes the two templates on a running cluster; `drop` removes them. */
export async function makeCitusTemplates(coordinatorUrl: string, workerUrls: readonly string[]): Promise<CitusTemplates & { drop(): Promise<void> }> {
  const suffix = randomBytes(4).toString("hex");
  const templates = { empty: `portcullis_template_${suffix}`, migrated: `portcullis_migrated_${suffix}` };
  const drop = async () => {
    for (const name of [templates.migrated, templates.empty]) await dropCitusDatabase(coordinatorUrl, workerUrls, name);
  };
  try {
    await createCitusDatabase(coordinatorUrl, workerUrls, templates.empty);
    await seal(coordinatorUrl, workerUrls, templates.empty);
    const url = await copyCitusDatabase(coordinatorUrl, workerUrls, templates.empty, templates.migrated);
    const db = new PgDb(url, { max: 1, onError: () => undefined });
    try {
      await migrate(db);
      await distributeOnCitus(db);
    } finally {
      await db.close();
    }
    await seal(coordinatorUrl, workerUrls, templates.migrated);
  } catch (error) {
    await drop().catch(() => undefined);
    throw error;
  }
  return { ...templates, drop };
}

/** The run's templates, as the global setup named them; undefined when it made none. */
export function citusTemplates(): CitusTemplates | undefined {
  const [empty, migrated] = (process.env[CITUS_TEMPLATES_VAR] ?? "").split(",");
  return empty && migrated ? { empty, migrated } : undefined;
}

/**
 * Database `name` as a copy of `template` on every node, with the test
 * databases' shard count (a database's settings are not copied); returns
 * its URL on the coordinator. A copy meeting a session of the template
 * still ending (55006, object in use) is tried again.
 */
export async function copyCitusDatabase(coordinatorUrl: string, workerUrls: readonly string[], template: string, name: string): Promise<string> {
  checkDatabaseName(template);
  checkDatabaseName(name);
  await Promise.all([coordinatorUrl, ...workerUrls].map((admin) => againWhileInUse(() => pgQuery(admin, `CREATE DATABASE ${name} TEMPLATE ${template}`), 50, 100)));
  await pgQuery(coordinatorUrl, `ALTER DATABASE ${name} SET citus.shard_count = ${TEST_SHARD_COUNT}`);
  return withDatabase(coordinatorUrl, name);
}

/** No more connections to `name` on any node, and those there ended. */
async function seal(coordinatorUrl: string, workerUrls: readonly string[], name: string): Promise<void> {
  for (const admin of [coordinatorUrl, ...workerUrls]) {
    await pgQuery(admin, `ALTER DATABASE ${name} WITH ALLOW_CONNECTIONS false`);
    await pgQuery(admin, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", [name]);
  }
}
