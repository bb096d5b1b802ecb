/**
 * The real entry point, as a child process (support/entry-points.ts), given
 * configuration it cannot start with: it exits non-zero with a message
 * naming what is wrong, and never says it listens. No assertion here is
 * about time, so this runs beside other files (process.test.ts, the start
 * and stop of a healthy service, runs alone).
 */
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { cleanUpServiceProcesses, printedKeys, sleep, spawnService, tempDir } from "./support/service-process.js";

cleanUpServiceProcesses();

describe("configuration the service cannot start with", { timeout: 60_000 }, () => {
  // Configuration errors stop the process before it listens; a database that
  // cannot be reached is found after (the port is bound at once), and stops it
  // too. Either way the process never says it listens: it says so once its
  // database is open.
  it.each<{ name: string; env: Record<string, string>; names: RegExp; listens: boolean }>([
    { name: "PORT that is not a number", env: { PORT: "abc" }, names: /PORT/, listens: false },
    { name: "PORT out of range", env: { PORT: "70000" }, names: /PORT/, listens: false },
    { name: "negative PORT", env: { PORT: "-1" }, names: /PORT/, listens: false },
    { name: "unknown LOG_LEVEL", env: { LOG_LEVEL: "chatty" }, names: /LOG_LEVEL/, listens: false },
    { name: "PG_POOL_MAX of 0", env: { PG_POOL_MAX: "0" }, names: /PG_POOL_MAX/, listens: false },
    { name: "a headers timeout above the request timeout", env: { HTTP_HEADERS_TIMEOUT_MS: "20000", HTTP_REQUEST_TIMEOUT_MS: "10000" }, names: /HTTP_HEADERS_TIMEOUT_MS/, listens: false },
    { name: "unreachable DATABASE_URL", env: { DATABASE_URL: "postgres://postgres@127.0.0.1:1/x" }, names: /database/i, listens: false },
  ])("$name: exits non-zero with a message naming it", async ({ env, names, listens }) => {
    const service = await spawnService({ AUTHZ_DATA_DIR: join(await tempDir(), "data"), ...env });
    const exit = await Promise.race([service.exited, sleep(20_000).then(() => undefined)]);
    expect(exit, `the service kept running\nstdout:\n${service.stdout}`).toBeDefined();
    expect(exit!.code).not.toBe(0);
    expect(exit!.code).not.toBeNull();
    expect(service.stderr).toMatch(names);
    if (!listens) expect(service.stdout).not.toContain("portcullis listening");
    expect(service.stdout).not.toContain("database ready");
    expect(printedKeys(service)).toEqual([]);
  });
});
