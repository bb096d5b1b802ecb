/**
 * A caller who gives up while its write's statement runs: nothing commits,
 * on either engine. The deadlines' files (support/deadline-cases.ts) hold a
 * write up before it starts; here the write is already inside its statement
 * when the cancel comes.
 *
 * The service runs as its own process (as in production: the client's
 * cancel travels over a socket while the service is busy), over a database
 * the test prepared with a statement-level trigger on `relationships` that
 * sleeps 600 ms in pg_sleep: on PGlite that blocks the service's only
 * thread, as a long bulk write does; on Postgres the backend sleeps and the
 * service's cancel interrupts it. A grpc-js client sends a bulk write of
 * 5,000 grants and cancels it 20, 50 or 100 ms later (the fault trial's
 * times). The call ends CANCELLED, no grant is stored, and the request log
 * records the call as cancelled (gRPC status 1), never OK.
 */
import * as grpc from "@grpc/grpc-js";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Db } from "../src/store/db.js";
import { migrate } from "../src/store/migrate.js";
import { PgliteDb } from "../src/store/pglite-db.js";
import { createApp, grant, storedGrants } from "./helpers/authz.js";
import { createTestDatabase, engines, type EngineName, type TestDatabase } from "./support/engines.js";
import { grpcServiceClient } from "./support/grpc-client.js";
import { ADMIN_KEY } from "./support/service.js";
import { cleanUpServiceProcesses, sleep, startService, stopService, tempDir, type ServiceProcess } from "./support/service-process.js";

cleanUpServiceProcesses({ per: "file" });

const CATALOG = [{ resource: "document", description: "", actions: ["read", "update"] }];
const WRITES = Array.from({ length: 5000 }, (_, i) => grant(`user-${i}`, "document", `d${i % 50}`, "viewer"));
const SLEEP_SECONDS = 0.6;

/** The slow trigger: every INSERT into relationships takes SLEEP_SECONDS longer. */
async function slowWrites(db: Db): Promise<void> {
  await migrate(db);
  await db.exec(`
    CREATE FUNCTION test_slow_write() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN PERFORM pg_sleep(${SLEEP_SECONDS}); RETURN NULL; END $$;
    CREATE TRIGGER test_slow_write AFTER INSERT ON relationships FOR EACH STATEMENT EXECUTE FUNCTION test_slow_write();`);
}

interface Prepared {
  env: Record<string, string>;
  /** Counts stored grants once the service has stopped (PGlite's folder is the service's while it runs). */
  stored(appId: string): Promise<number>;
  /** Resolves once the service has no statement running or transaction open. */
  settled(service: ServiceProcess): Promise<void>;
  dispose(): Promise<void>;
}

async function prepare(engine: EngineName): Promise<Prepared> {
  if (engine === "pglite") {
    const folder = join(await tempDir(), "data");
    const db = await PgliteDb.open(folder);
    await slowWrites(db);
    await db.close();
    return {
      env: { AUTHZ_DATA_DIR: folder },
      async stored(appId) {
        const reopened = await PgliteDb.open(folder);
        try {
          return await storedGrants(reopened, appId);
        } finally {
          await reopened.close();
        }
      },
      // One connection, and pg_sleep holds the service's thread: its readiness
      // query is answered only once the statement and its transaction ended.
      async settled(service) {
        expect((await fetch(`${service.url}/readyz`)).status).toBe(200);
      },
      dispose: async () => undefined,
    };
  }
  const database: TestDatabase = await createTestDatabase("postgres");
  await slowWrites(database.db);
  return {
    env: { DATABASE_URL: database.url!, AUTHZ_DATA_DIR: join(await tempDir(), "unused") },
    stored: (appId) => storedGrants(database.db, appId),
    async settled() {
      const giveUpAt = Date.now() + 10_000;
      for (;;) {
        const { rows } = await database.db.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'portcullis' AND state <> 'idle' AND pid <> pg_backend_pid()",
        );
        if (rows[0]!.n === 0) return;
        if (Date.now() > giveUpAt) throw new Error("the service still runs a statement 10 s after the cancel");
        await sleep(25);
      }
    },
    dispose: () => database.dispose(),
  };
}

type BulkFn = (request: object, metadata: grpc.Metadata, options: grpc.CallOptions, callback: (error: grpc.ServiceError | null) => void) => grpc.ClientUnaryCall;

/**
 * The bulk write over gRPC, cancelled by the client `cancelAfterMs` after it
 * is sent (on a channel already connected, so the call reaches the service
 * at once); resolves with the status name.
 */
async function cancelledBulk(url: string, key: string, cancelAfterMs: number): Promise<string> {
  const client = grpcServiceClient(url, "RelationshipService");
  await new Promise<void>((resolve, reject) => client.waitForReady(Date.now() + 10_000, (error) => (error ? reject(error) : resolve())));
  const metadata = new grpc.Metadata();
  metadata.set("x-api-key", key);
  return new Promise<string>((resolve) => {
    const bulk = (client as unknown as { bulkWriteRelationships: BulkFn }).bulkWriteRelationships.bind(client);
    const call = bulk({ writes: WRITES, deletes: [] }, metadata, {}, (error) => {
      client.close();
      resolve(error === null ? "OK" : grpc.status[error.code]!);
    });
    setTimeout(() => call.cancel(), cancelAfterMs);
  });
}

/** The request log's lines for bulk writes, by status. */
function bulkStatuses(service: ServiceProcess): number[] {
  return service.stdout
    .split("\n")
    .filter((line) => line.includes("BulkWriteRelationships") && line.includes('"msg":"request"'))
    .map((line) => (JSON.parse(line) as { status: number }).status);
}

describe.each(engines)("a cancel while the write's statement runs, on %s", { timeout: 120_000 }, (engine) => {
  let prepared: Prepared;
  let service: ServiceProcess;
  const apps: string[] = [];

  beforeAll(async () => {
    prepared = await prepare(engine);
    service = await startService({ ...prepared.env, AUTHZ_ADMIN_KEY: ADMIN_KEY }, { readyWithinMs: null });
  });
  afterAll(async () => {
    await prepared?.dispose();
  });

  it.each([20, 50, 100])("cancelled after %i ms: CANCELLED, and nothing is written", async (ms) => {
    const appId = `cancel-${ms}`;
    apps.push(appId);
    const key = await createApp(service, appId, CATALOG);
    expect(await cancelledBulk(service.url, key, ms)).toBe("CANCELLED");
    // Let the service finish the statement and decide (it must roll back) before the next call.
    await prepared.settled(service);
  });

  it("control: the same write, not cancelled, commits in full", async () => {
    const appId = "control";
    apps.push(appId);
    const key = await createApp(service, appId, CATALOG);
    expect(await cancelledBulk(service.url, key, 60_000)).toBe("OK");
  });

  it("the log records no cancelled call as OK; the database holds only the control's grants", async () => {
    expect(await stopService(service)).toEqual({ code: 0, signal: null });
    // The control is the one call logged OK. Each cancelled call that reached
    // the service is logged CANCELLED; one whose stream the client reset
    // before the service read its headers (the service busy in a previous
    // call's statement) never became a call, and has no line.
    const statuses = bulkStatuses(service);
    expect(statuses.at(-1)).toBe(grpc.status.OK);
    expect(statuses.slice(0, -1).length).toBeGreaterThanOrEqual(1);
    expect(new Set(statuses.slice(0, -1))).toEqual(new Set([grpc.status.CANCELLED]));
    const stored: Record<string, number> = {};
    for (const appId of apps) stored[appId] = await prepared.stored(appId); // one at a time: PGlite's folder takes one opener
    expect(stored).toEqual({ "cancel-20": 0, "cancel-50": 0, "cancel-100": 0, control: WRITES.length });
  });
});
