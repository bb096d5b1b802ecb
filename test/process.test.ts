/**
 * The real entry point, as a child process (support/entry-points.ts),
 * configured only through its environment, on embedded PGlite (a data
 * folder) and on Postgres (DATABASE_URL). Start (the embedded folder made
 * from the build's template when compiled), the generated operator key,
 * graceful stop, restart on the same storage, AUTHZ_ADMIN_KEY. The
 * configuration it cannot start with: process-config.test.ts.
 */
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, engines, type EngineName, type TestDatabase } from "./support/engines.js";
import { distIsCurrent } from "./support/entry-points.js";
import { cleanUpServiceProcesses, printedKeys, sleep, spawnService, startService, stopService, tempDir, waitUntil } from "./support/service-process.js";

cleanUpServiceProcesses();

// ---------------------------------------------------------------- storage

interface Storage {
  name: string;
  engine: EngineName;
  /** The environment that points the service at a fresh, empty store. */
  open(): Promise<{ env: Record<string, string>; dispose(): Promise<void> }>;
}

const allStorages: Storage[] = [
  {
    name: "embedded PGlite in AUTHZ_DATA_DIR",
    engine: "pglite",
    async open() {
      const dir = await tempDir();
      return { env: { AUTHZ_DATA_DIR: join(dir, "data") }, dispose: () => rm(dir, { recursive: true, force: true }) };
    },
  },
  {
    name: "Postgres via DATABASE_URL",
    engine: "postgres",
    async open() {
      const database: TestDatabase = await createTestDatabase("postgres");
      // AUTHZ_DATA_DIR points at an empty folder that must stay unused.
      const dir = await tempDir();
      return { env: { DATABASE_URL: database.url!, AUTHZ_DATA_DIR: join(dir, "unused") }, dispose: () => database.dispose() };
    },
  },
];
const storages = allStorages.filter((s) => engines.includes(s.engine));

const catalog = {
  resources: [
    { resource: "document", description: "A document", actions: ["read", "update", "comment"], relations: [{ name: "reviewer", actions: ["read", "comment"] }] },
    { resource: "invoice", description: "", actions: ["send", "read"] },
  ],
};

describe.each(storages)("the service process on $name", { timeout: 120_000 }, (storage) => {
  let store: { env: Record<string, string>; dispose(): Promise<void> };
  // Carried from one start to the next: the whole point is that they survive restarts.
  let operatorKey = "";
  let appKey = "";
  let storedCatalog: unknown;

  beforeAll(async () => {
    store = await storage.open();
  });
  afterAll(async () => {
    await store?.dispose();
  });

  it("first start: healthy within 10 s, prints an operator key exactly once, serves with it, exits 0 on SIGTERM", async () => {
    const service = await startService(store.env);
    const keys = printedKeys(service);
    expect(keys, "operator keys printed").toHaveLength(1);
    operatorKey = keys[0]!;
    expect(service.stdout).toContain(`Operator API key (shown once, store it now): ${operatorKey}`);

    const ready = await service.call("GET", "/readyz", { key: null });
    expect(ready.status).toBe(200);
    expect(ready.body.database).toBe(storage.engine);

    expect((await service.call("GET", "/api/v1/applications", { key: null })).status).toBe(401);
    const created = await service.call("POST", "/api/v1/applications", { key: operatorKey, body: { appId: "shop", name: "Shop" } });
    expect(created.status).toBe(201);
    const put = await service.call("PUT", "/api/v1/applications/shop/resources", { key: operatorKey, body: catalog });
    expect(put.status).toBe(200);
    storedCatalog = put.body;
    const key = await service.call("POST", "/api/v1/applications/shop/api-keys", { key: operatorKey, body: { name: "ci" } });
    expect(key.status).toBe(201);
    appKey = key.body.key;

    expect(await stopService(service)).toEqual({ code: 0, signal: null });
    expect(printedKeys(service).filter((k) => k === operatorKey), "times the operator key appears in the output").toHaveLength(1);
    expect(service.stdout).toContain("portcullis stopped");
    if (storage.engine === "pglite") {
      // Compiled, the build's template is beside the service; run from the sources there is none.
      const how = distIsCurrent() ? "from the build's template" : "by initdb";
      expect(service.stdout).toContain(`"created the PGlite data folder ${how}, in a child process"`);
    }
  });

  it("second start on the same storage: no key printed; the application, catalog and keys are still there", async () => {
    expect(operatorKey, "the first start must have run").not.toBe("");
    const service = await startService(store.env);
    expect(printedKeys(service)).toEqual([]);

    const apps = await service.call("GET", "/api/v1/applications", { key: operatorKey });
    expect(apps.status).toBe(200);
    expect(apps.body.applications.map((a: { appId: string }) => a.appId)).toEqual(["shop"]);
    const app = await service.call("GET", "/api/v1/applications/shop", { key: operatorKey });
    expect(app.status).toBe(200);
    expect(app.body).toMatchObject({ appId: "shop", name: "Shop" });
    const got = await service.call("GET", "/api/v1/applications/shop/resources", { key: operatorKey });
    expect(got.status).toBe(200);
    expect(got.body).toEqual(storedCatalog);
    const byAppKey = await service.call("GET", "/api/v1/applications/shop/resources", { key: appKey });
    expect(byAppKey.status).toBe(200);

    expect(await stopService(service)).toEqual({ code: 0, signal: null });
  });

  it("with AUTHZ_ADMIN_KEY set: the env key works, the generated stored key gets 401, nothing is printed", async () => {
    const adminKey = "process-test-admin-key-0123456789";
    const service = await startService({ ...store.env, AUTHZ_ADMIN_KEY: adminKey });
    expect(printedKeys(service)).toEqual([]);

    const withEnvKey = await service.call("GET", "/api/v1/applications", { key: adminKey });
    expect(withEnvKey.status).toBe(200);
    expect(withEnvKey.body.applications.map((a: { appId: string }) => a.appId)).toEqual(["shop"]);
    const withStoredKey = await service.call("GET", "/api/v1/applications", { key: operatorKey });
    expect(withStoredKey.status).toBe(401);
    expect(withStoredKey.body.code).toBe("unauthenticated");
    // Application keys are unaffected.
    expect((await service.call("GET", "/api/v1/applications/shop/resources", { key: appKey })).status).toBe(200);

    expect(await stopService(service)).toEqual({ code: 0, signal: null });
    expect(`${service.stdout}${service.stderr}`).not.toContain(adminKey);
  });

  it("without AUTHZ_ADMIN_KEY again: the stored key opens the operator routes again, and no new key is generated", async () => {
    const service = await startService(store.env);
    expect(printedKeys(service)).toEqual([]);
    expect((await service.call("GET", "/api/v1/applications", { key: operatorKey })).status).toBe(200);
    expect(await stopService(service)).toEqual({ code: 0, signal: null });
  });
});

describe("a stop before the database is ready", { timeout: 120_000 }, () => {
  it("SIGTERM while a fresh embedded database is still being created: exits 0, and the next start on that folder is healthy", async () => {
    const env = { AUTHZ_DATA_DIR: join(await tempDir(), "data") };
    const service = await spawnService(env);
    // The port listens at once; creating the database takes seconds.
    await waitUntil(
      service,
      "200 on /healthz",
      async () => (await fetch(`${service.url}/healthz`, { signal: AbortSignal.timeout(1_000) }).then((r) => r.status, () => 0)) === 200,
      10_000,
    );
    expect(service.stdout).not.toContain("database ready");
    service.child.kill("SIGTERM");
    // Heeded at once (before, a signal that came this early killed the
    // process outright, wherever the database's creation was); the process
    // exits once the database has finished opening, never half-created.
    await waitUntil(service, "the shutdown line", () => service.stdout.includes("shutting down"), 2_000);
    const exit = await Promise.race([service.exited, sleep(30_000).then(() => undefined)]);
    expect(exit).toEqual({ code: 0, signal: null });
    expect(service.stderr).not.toContain("failed to start");
    expect(service.stdout).toContain("shutting down");

    const again = await startService(env);
    expect((await again.call("GET", "/readyz", { key: null })).status).toBe(200);
    expect(await stopService(again)).toEqual({ code: 0, signal: null });
  });
});
