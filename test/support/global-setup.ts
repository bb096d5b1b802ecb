/**
 * Runs once before the test files: finds out whether the real Postgres is
 * there. In CI it must be (the suite covers both engines); on a developer's
 * bare machine without one, the Postgres half is skipped with a warning so
 * `npm test` still runs everything else.
 *
 * When the engines include citus (`npm run test:citus`) and no cluster is
 * named (PORTCULLIS_TEST_CITUS_URL), starts one for the run, a coordinator and
 * two workers (citus.ts), and stops it when the run ends, failed or not; on
 * the cluster, started or named, it makes the templates the files' databases
 * are copied from (citus-templates.ts), and drops them at the end.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { CITUS_MISSING, citusInstalled, startCitusCluster } from "./citus.js";
import { CITUS_TEMPLATES_VAR, makeCitusTemplates } from "./citus-templates.js";
import { CITUS_URL_VAR, CITUS_WORKERS_VAR, citusUrls, engines, PGLITE_TEMPLATE_VAR, POSTGRES_ADMIN_URL, writePgliteTemplate } from "./engines.js";

export default async function setup(): Promise<(() => Promise<void>) | void> {
  const teardowns: (() => Promise<void>)[] = [];
  if (engines.includes("pglite") && !process.env[PGLITE_TEMPLATE_VAR]) {
    const dir = mkdtempSync(join(tmpdir(), "portcullis-test-pglite-"));
    const file = join(dir, "template.tgz");
    await writePgliteTemplate(file);
    // The test files' processes start after this and inherit it.
    process.env[PGLITE_TEMPLATE_VAR] = file;
    teardowns.push(async () => rmSync(dir, { recursive: true, force: true }));
  }
  const more = await checkEngines();
  if (more !== undefined) teardowns.push(more);
  return async () => {
    for (const teardown of teardowns.reverse()) await teardown();
  };
}

async function checkEngines(): Promise<(() => Promise<void>) | undefined> {
  if (engines.includes("citus")) {
    let stopCluster = async () => {};
    if (!process.env[CITUS_URL_VAR]) {
      if (!citusInstalled()) throw new Error(`PORTCULLIS_TEST_ENGINES names citus, but ${CITUS_MISSING}`);
      const started = Date.now();
      const cluster = await startCitusCluster();
      // The test files' processes start after this and inherit these.
      process.env[CITUS_URL_VAR] = cluster.coordinator.url();
      process.env[CITUS_WORKERS_VAR] = cluster.workers.map((w) => w.url()).join(",");
      process.stderr.write(
        `\n  Citus: a coordinator on port ${cluster.coordinator.port}, workers on ${cluster.workers.map((w) => w.port).join(" and ")} (started in ${((Date.now() - started) / 1000).toFixed(1)} s)\n\n`,
      );
      stopCluster = () => cluster.close();
    }
    let templates: Awaited<ReturnType<typeof makeCitusTemplates>>;
    try {
      const { coordinator, workers } = citusUrls();
      templates = await makeCitusTemplates(coordinator, workers);
    } catch (error) {
      await stopCluster();
      throw error;
    }
    process.env[CITUS_TEMPLATES_VAR] = `${templates.empty},${templates.migrated}`;
    return async () => {
      await templates.drop().catch(() => undefined);
      await stopCluster();
    };
  }
  if (process.env.PORTCULLIS_TEST_ENGINES !== undefined) return undefined;
  const client = new pg.Client({ connectionString: POSTGRES_ADMIN_URL, connectionTimeoutMillis: 3_000 });
  try {
    await client.connect();
    await client.query("SELECT 1");
  } catch (error) {
    if (process.env.CI) {
      throw new Error(`Postgres is required in CI and is not reachable at ${POSTGRES_ADMIN_URL}: ${String(error)}`);
    }
    process.stderr.write(
      `\n  WARNING: Postgres is not reachable at ${POSTGRES_ADMIN_URL}; running the PGlite half of the suite only.\n` +
        `  Set TEST_POSTGRES_URL to a server where the tests may create databases to run both.\n\n`,
    );
    process.env.PORTCULLIS_TEST_ENGINES = "pglite";
  } finally {
    await client.end().catch(() => undefined);
  }
}
