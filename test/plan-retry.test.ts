/**
 * A model plan racing a catalog write, on Postgres and Citus (PGlite is one
 * connection: a racer only queues). The plan reads in one READ ONLY,
 * REPEATABLE READ snapshot (docs/models.md, "Plan"): it writes nothing, so
 * a write committed after its snapshot cannot make it fail, and its answer
 * is the plan of the version that snapshot saw. Should an attempt still fail
 * with 40001 (serialization failure), the transaction runs again from the
 * start in a new snapshot (Db.transaction, at most 5 attempts); the test
 * allows only 40001 as an attempt's failure, and requires the answer to be
 * the plan of exactly the version it reports.
 *
 * The race is forced, not hoped for: the plan's own transaction, once it
 * has read the catalog (in its snapshot: on Citus, the worker's, taken at
 * the transaction's first statement there), lets the other write through
 * (one committed at once, one holding its locks while the plan goes on)
 * before going on.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";
import { createApp, expectStatus } from "./helpers/authz.js";
import { GRAPH_CATALOG, set, user } from "./support/graph.js";
import { Models, type ModelInput, type ModelPlan } from "../src/domain/models.js";
import { heldSnapshot, type AbortOptions, type Db, type Queryable, type QueryResult, type TransactionOptions } from "../src/store/db.js";
import { sqlState, SqlState } from "../src/store/sqlstate.js";

type Relation = { name: string; actions: string[]; builtIn: boolean; subjects?: string[]; inherits?: { through: string; relation: string }[] };
type Entry = { resource: string; description: string; actions: string[]; relations: Relation[] };

const CATALOG = (GRAPH_CATALOG as unknown as Entry[]).map((e) => ({ ...e, relations: e.relations.map((r) => ({ ...r, builtIn: false })) }));
const without = (resource: string, relation: string): ModelInput => ({
  catalog: CATALOG.map((e) => (e.resource !== resource ? e : { ...e, relations: e.relations.map((r) => (r.name === relation ? { ...r, inherits: [], requires: [], unless: [] } : r)) })),
  policies: [],
  roles: [],
});
const BASE: ModelInput = { catalog: CATALOG, policies: [], roles: [] };
/** The model the plan asks about, and the one another caller applies meanwhile. */
const PLANNED = without("document", "viewer");
const CONCURRENT = without("folder", "viewer");

const GRANTS = [
  user("ann", "folder", "f0", "viewer"),
  user("bob", "team", "ops", "member"),
  set("team:ops#member", "folder", "f0", "viewer"),
  set("folder:f0", "folder", "f1", "parent"),
  set("folder:f1", "document", "d1", "parent"),
];

/**
 * `inner` as Models uses it (transactions, and snapshots as transactions), with each attempt of a
 * transaction recorded: undefined when it committed, else the SQLSTATE it
 * failed with. `afterRead` runs once, on the first attempt, after the
 * first statement that reads the catalog.
 */
function racingDb(inner: Db, afterRead: () => Promise<void>) {
  const attempts: (string | undefined)[] = [];
  let raced = false;
  const db = {
    transaction<T>(fn: (tx: Queryable) => Promise<T>, options?: TransactionOptions): Promise<T> {
      return inner.transaction(async (tx) => {
        const attempt = attempts.push(undefined) - 1;
        const hooked: Queryable = {
          async query<R>(sql: string, params?: readonly unknown[]): Promise<QueryResult<R>> {
            const result = await tx.query<R>(sql, params);
            if (!raced && /\bFROM catalog_resources\b/.test(sql)) {
              raced = true;
              await afterRead();
            }
            return result;
          },
        };
        try {
          return await fn(hooked);
        } catch (error) {
          attempts[attempt] = sqlState(error) ?? String(error);
          throw error;
        }
      }, options);
    },
    // A plan's snapshot is a transaction on these engines (Db.snapshot): this one, raced.
    snapshotMarks: false,
    snapshot<T>(fn: (q: Queryable) => Promise<T>, options?: AbortOptions) {
      return heldSnapshot(db, fn, options);
    },
  } as unknown as Db;
  return { db, attempts };
}

describe.each(engines.filter((e) => e !== "pglite"))("a plan racing a catalog write on %s", (engine) => {
  let database: TestDatabase;
  let other: Db;
  let service: TestService;

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    other = await database.openAnother();
    service = await startTestService(other);
  }, 60_000);
  afterAll(async () => {
    await service?.close();
    await other?.close();
    await database?.dispose();
  });

  const path = (appId: string) => `/api/v1/applications/${appId}/model`;
  const put = async (appId: string, doc: ModelInput) => expectStatus(await service.call("PUT", path(appId), { body: doc }), 200);
  async function world(appId: string) {
    const key = await createApp(service, appId, []);
    await put(appId, BASE);
    expectStatus(await service.call("POST", "/api/v1/authorization/relationships/bulk", { body: { writes: GRANTS }, key }), 200);
  }
  /** The plan as an uncontended caller gets it now. */
  const quiet = (appId: string) => new Models(database.db).plan(appId, PLANNED);

  /**
   * The plan answered, each failed attempt a serialization failure, and its
   * answer is the quiet plan of the model it reports: before the write if
   * it never failed, after it if it ran again.
   */
  function expectOneSnapshot(plan: ModelPlan, attempts: (string | undefined)[], before: ModelPlan, after: ModelPlan) {
    expect(before.version).not.toBe(after.version);
    expect(attempts.at(-1)).toBeUndefined();
    expect(attempts.slice(0, -1).every((a) => a === SqlState.serializationFailure), JSON.stringify(attempts)).toBe(true);
    expect(plan).toEqual(attempts.length === 1 ? before : after);
  }

  it("a catalog write committed after the plan's snapshot: the plan answers on one version of the model", { timeout: 60_000 }, async () => {
    await world("committed");
    const before = await quiet("committed");
    const { db, attempts } = racingDb(database.db, () => put("committed", CONCURRENT));
    const plan = await new Models(db).plan("committed", PLANNED, { deadline: Date.now() + 30_000 });
    const after = await quiet("committed");
    // The write put folder.viewer's inherits away: planned against it, folder changes back.
    expect(after.catalog).toEqual({ created: [], changed: ["document", "folder"], removed: [] });
    expectOneSnapshot(plan, attempts, before, after);
  });

  it("a catalog write holding its locks while the plan goes on: the plan answers on one version of the model", { timeout: 60_000 }, async () => {
    await world("in-flight");
    const before = await quiet("in-flight");
    let commit!: () => void;
    const open = new Promise<void>((resolve) => (commit = resolve));
    let written!: () => void;
    const holding = new Promise<void>((resolve) => (written = resolve));
    // The other write: its whole transaction done, its COMMIT held back until `open`.
    const gated = {
      transaction: <T>(fn: (tx: Queryable) => Promise<T>, options?: TransactionOptions) =>
        other.transaction(async (tx) => {
          const result = await fn(tx);
          written();
          await open;
          return result;
        }, options),
    } as unknown as Db;
    /** Whether a statement of this database waits for a lock (on Citus the wait is a worker's: not seen here). */
    const waiting = async () => {
      if (engine !== "postgres") return false;
      const { rows } = await other.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'");
      return rows[0]!.n > 0;
    };
    let planned = false;
    let applied: Promise<unknown> | undefined;
    const { db, attempts } = racingDb(database.db, async () => {
      applied = new Models(gated).apply({ kind: "operator", keyId: "test", scopes: [] }, "in-flight", CONCURRENT, undefined);
      await holding;
      // The plan goes on; the write commits once a statement of the plan waits for its locks (or the plan is done, or 2 s passed).
      void (async () => {
        for (let n = 0; n < 200 && !planned && !(await waiting()); n++) await new Promise((r) => setTimeout(r, 10));
        commit();
      })();
    });
    const plan = await new Models(db).plan("in-flight", PLANNED).finally(() => (planned = true));
    await applied;
    expectOneSnapshot(plan, attempts, before, await quiet("in-flight"));
  });
});
