/**
 * The cases of test/deadlines-pglite.test.ts and test/deadlines-postgres.test.ts, one engine
 * each, so the two run side by side (each case of an engine runs alone: it counts
 * the statements waiting on its lock).
 *
 * Deadlines and cancellation down to the database, on each engine, end to
 * end on a real port: a bulk grant write is made to wait (on Postgres the
 * test holds the application's lock exclusively, which the write takes shared; on
 * PGlite, one connection, the test holds the connection itself), and its
 * caller gives up: a gRPC deadline or cancel (@grpc/grpc-js), a Connect or
 * gRPC-Web timeout or abort (connect-node), a REST request aborted (fetch).
 * The caller sees DEADLINE_EXCEEDED or CANCELLED, and once the test lets go
 * no grant is in the database. On Postgres the statement was stopped on the
 * server before that: no Portcullis backend still waits on the lock.
 */
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import pg from "pg";
import { expect, it } from "vitest";
import { RelationshipService } from "../../gen/authz/v1/relationships_pb.js";
import type { EngineName } from "./engines.js";
import { useService } from "./use-service.js";
import { createApp, grant, storedGrants, type Grant } from "../helpers/authz.js";

const CATALOG = [{ resource: "document", description: "", actions: ["read", "update"] }];
const GRANTS: Grant[] = Array.from({ length: 50 }, (_, i) => grant(`user-${i}`, "document", "d1", i % 2 === 0 ? "viewer" : "editor"));
const BULK_PATH = "/api/v1/authorization/relationships/bulk";
/** How long a caller waits before giving up (deadline or cancel). */
const GIVE_UP_MS = 600;

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------
// @grpc/grpc-js, built from proto/ at run time.

const definition = protoLoader.loadSync(["authz/v1/relationships.proto"], {
  includeDirs: ["proto"],
  keepCase: false,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
const RelationshipClient = (((grpc.loadPackageDefinition(definition).authz as grpc.GrpcObject).v1 as grpc.GrpcObject)
  .RelationshipService as grpc.ServiceClientConstructor);
type BulkFn = (
  request: object,
  metadata: grpc.Metadata,
  options: grpc.CallOptions,
  callback: (error: grpc.ServiceError | null) => void,
) => grpc.ClientUnaryCall;

/** How a caller gives up, and what it must see. */
interface GiveUp {
  name: string;
  /** Sends the bulk write; resolves with what the caller saw once it gave up (or got an answer). */
  run(url: string, key: string, writes: Grant[]): Promise<string>;
  expected: string;
}

function grpcBulk(url: string, key: string, writes: Grant[], options: grpc.CallOptions, cancelAfterMs?: number): Promise<string> {
  const client = new RelationshipClient(new URL(url).host, grpc.credentials.createInsecure());
  const metadata = new grpc.Metadata();
  metadata.set("x-api-key", key);
  return new Promise<string>((resolve) => {
    const bulk = (client as unknown as { bulkWriteRelationships: BulkFn }).bulkWriteRelationships.bind(client);
    const call = bulk({ writes, deletes: [] }, metadata, options, (error) => {
      client.close();
      resolve(error === null ? "OK" : grpc.status[error.code]!);
    });
    if (cancelAfterMs !== undefined) setTimeout(() => call.cancel(), cancelAfterMs);
  });
}

async function connectBulk(
  transport: ReturnType<typeof createConnectTransport>,
  key: string,
  writes: Grant[],
  options: { timeoutMs?: number; abortAfterMs?: number },
): Promise<string> {
  const client = createClient(RelationshipService, transport);
  const controller = new AbortController();
  if (options.abortAfterMs !== undefined) setTimeout(() => controller.abort(), options.abortAfterMs);
  try {
    await client.bulkWriteRelationships(
      { writes, deletes: [] },
      { headers: { "x-api-key": key }, signal: controller.signal, ...(options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }) },
    );
    return "OK";
  } catch (error) {
    return Code[ConnectError.from(error).code];
  }
}

async function restBulk(url: string, key: string, writes: Grant[], contentType: string, abortAfterMs?: number): Promise<string> {
  const controller = new AbortController();
  if (abortAfterMs !== undefined) setTimeout(() => controller.abort(), abortAfterMs);
  try {
    const res = await fetch(url + BULK_PATH, {
      method: "POST",
      headers: { "x-api-key": key, "content-type": contentType },
      body: JSON.stringify({ writes, deletes: [] }),
      signal: controller.signal,
    });
    await res.text();
    return String(res.status);
  } catch (error) {
    return (error as Error).name; // AbortError
  }
}

const giveUps: GiveUp[] = [
  {
    name: "gRPC (grpc-js) with a deadline",
    run: (url, key, writes) => grpcBulk(url, key, writes, { deadline: Date.now() + GIVE_UP_MS }),
    expected: "DEADLINE_EXCEEDED",
  },
  {
    name: "gRPC (grpc-js), the client cancels",
    run: (url, key, writes) => grpcBulk(url, key, writes, {}, GIVE_UP_MS),
    expected: "CANCELLED",
  },
  {
    name: "Connect over HTTP/1.1 with timeoutMs",
    run: (url, key, writes) => connectBulk(createConnectTransport({ baseUrl: url, httpVersion: "1.1" }), key, writes, { timeoutMs: GIVE_UP_MS }),
    expected: "DeadlineExceeded",
  },
  {
    name: "Connect over HTTP/2 with timeoutMs",
    run: (url, key, writes) => connectBulk(createConnectTransport({ baseUrl: url, httpVersion: "2" }), key, writes, { timeoutMs: GIVE_UP_MS }),
    expected: "DeadlineExceeded",
  },
  {
    name: "Connect over HTTP/1.1, the client aborts",
    run: (url, key, writes) => connectBulk(createConnectTransport({ baseUrl: url, httpVersion: "1.1" }), key, writes, { abortAfterMs: GIVE_UP_MS }),
    expected: "Canceled",
  },
  {
    name: "gRPC-Web with timeoutMs",
    run: (url, key, writes) =>
      connectBulk(createGrpcWebTransport({ baseUrl: url, httpVersion: "1.1" }), key, writes, { timeoutMs: GIVE_UP_MS }),
    expected: "DeadlineExceeded",
  },
  {
    name: "REST (fetch, JSON: the fast path), the client aborts",
    run: (url, key, writes) => restBulk(url, key, writes, "application/json", GIVE_UP_MS),
    expected: "AbortError",
  },
  {
    name: "REST (fetch, text/plain: the Fastify route), the client aborts",
    run: (url, key, writes) => restBulk(url, key, writes, "text/plain", GIVE_UP_MS),
    expected: "AbortError",
  },
];

/** Every case, on `engine`: called inside the file's describe. */
export function deadlineCases(engine: EngineName): void {
  const used = useService(engine);
  let counter = 0;

  /**
   * Makes the application's writes wait until release(): on Postgres a
   * transaction of the test's own holds the application's advisory lock
   * exclusively (the grant writers take it shared); PGlite is one connection, so a
   * transaction of the test holds all of it.
   */
  async function hold(appId: string): Promise<{ release(): Promise<void> }> {
    if (engine === "pglite") {
      let open!: () => void;
      const gate = new Promise<void>((resolve) => (open = resolve));
      let held!: () => void;
      const holding = new Promise<void>((resolve) => (held = resolve));
      const done = used.database.db.transaction(async () => {
        held();
        await gate;
      });
      await holding;
      return {
        async release() {
          open();
          await done;
        },
      };
    }
    const client = new pg.Client({ connectionString: used.database.url, application_name: "deadline-test" });
    await client.connect();
    await client.query("BEGIN");
    // The lock applicationsStore.lock(…, "update") takes.
    await client.query("SELECT pg_advisory_xact_lock(2, hashtext($1))", [appId]);
    return {
      async release() {
        await client.query("ROLLBACK");
        await client.end();
      },
    };
  }

  /** Portcullis backends of this database waiting on a lock (Postgres). */
  const waitingOnLock = async () => {
    const { rows } = await used.database.db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'portcullis' AND wait_event_type = 'Lock'",
    );
    return rows[0]!.n;
  };
  async function until(condition: () => Promise<boolean>, ms: number): Promise<boolean> {
    const end = Date.now() + ms;
    while (Date.now() < end) {
      if (await condition()) return true;
      await pause(25);
    }
    return condition();
  }

  /** Lets what the service still runs finish after the hold is released. */
  async function settle(): Promise<void> {
    await pause(300);
    if (engine === "postgres") {
      await until(async () => {
        const { rows } = await used.database.db.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'portcullis' AND state <> 'idle' AND pid <> pg_backend_pid()",
        );
        return rows[0]!.n === 0;
      }, 5_000);
    }
    await pause(200);
  }

  it("control: a write held up for less than its deadline commits", async () => {
    const appId = `dl-control-${engine}`;
    const key = await createApp(used.service, appId, CATALOG);
    const held = await hold(appId);
    const call = grpcBulk(used.service.url, key, GRANTS, { deadline: Date.now() + 10_000 });
    await pause(300);
    await held.release();
    expect(await call).toBe("OK");
    expect(await storedGrants(used.database.db, appId)).toBe(GRANTS.length);
  });

  it.each(giveUps)("$name: the caller gets $expected and nothing is written", async ({ run, expected }) => {
    const appId = `dl-${counter++}-${engine}`;
    const key = await createApp(used.service, appId, CATALOG);
    const held = await hold(appId);
    let released = false;
    try {
      const started = Date.now();
      const call = run(used.service.url, key, GRANTS);
      if (engine === "postgres") {
        // The write reached the database and waits on the lock the test holds.
        expect(await until(async () => (await waitingOnLock()) === 1, GIVE_UP_MS - 100)).toBe(true);
      }
      const seen = await call;
      expect(seen).toBe(expected);
      expect(Date.now() - started).toBeLessThan(GIVE_UP_MS + 3_000);
      if (engine === "postgres") {
        // Stopped on the server, not merely abandoned: no backend still waits on the lock.
        expect(await until(async () => (await waitingOnLock()) === 0, 1_500)).toBe(true);
      } else {
        // The client's abort reaches the service as a socket event (a FIN, a
        // RST_STREAM) on this same thread; released in the same turn, the
        // in-process PGlite would let the write commit before that event is
        // read, as any write that ends before its caller leaves commits.
        await pause(200);
      }
      released = true;
      await held.release();
      await settle();
      expect(await storedGrants(used.database.db, appId)).toBe(0);
    } finally {
      if (!released) await held.release();
    }
  });
}
