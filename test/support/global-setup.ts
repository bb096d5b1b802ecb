/**
 * Runs once before the test files: finds out whether the real Postgres is
 * there. In CI it must be (the suite covers both engines); on a developer's
 * bare machine without one, the Postgres half is skipped with a warning so
 * `npm test` still runs everything else.
 */
import pg from "pg";
import { POSTGRES_ADMIN_URL } from "./engines.js";

export default async function setup(): Promise<void> {
  if (process.env.PORTCULLIS_TEST_ENGINES !== undefined) return;
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
