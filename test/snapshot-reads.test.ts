/**
 * Db.snapshot (store/db.ts): reads that see one state of the database, on
 * both engines; and on PGlite, one connection, reads that do not hold it,
 * so that a plan or a preview lets the checks through between its
 * statements and an apply holds it for its writes alone (issue 42, "the
 * embedded database while the model changes").
 *
 * Writes are made to come between the reads, not hoped for: a read's
 * caller starts another caller's write before its next read, and PGlite
 * runs statements in the order they were asked.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";
import { admin, createApp } from "./helpers/authz.js";
import { Models, type ModelInput, type ModelPlan } from "../src/domain/models.js";
import { SNAPSHOT_ATTEMPTS, writeMark, type Db, type Queryable, type Transaction, type TransactionOptions } from "../src/store/db.js";

const count = async (q: Queryable) => (await q.query<{ n: number }>("SELECT count(*)::int AS n FROM snapshot_probe")).rows[0]!.n;

describe.each(engines)("Db.snapshot on %s", (engine) => {
  let database: TestDatabase;
  let db: Db;

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    db = database.db;
    await db.exec("CREATE TABLE snapshot_probe (n int)");
  }, 60_000);
  afterAll(async () => {
    await database?.dispose();
  });

  /**
   * A snapshot of two counts of snapshot_probe with another caller's insert
   * committed between them on the attempts `writeOn` says (1-based): its
   * answer, its attempts, and what each attempt read.
   */
  async function twoCounts(writeOn: (attempt: number) => boolean) {
    const seen: [number, number][] = [];
    const writes: Promise<unknown>[] = [];
    const snapshot = await db.snapshot(async (q) => {
      const attempt = seen.length + 1;
      const first = await count(q);
      if (writeOn(attempt)) {
        const write = db.query("INSERT INTO snapshot_probe VALUES (1)");
        writes.push(write);
        // Awaited where the reads run apart (the attempts before the held one), or on another connection
        // (Postgres); on PGlite the held attempt's transaction has the one connection, and the write waits for it.
        if (!db.snapshotMarks || attempt <= SNAPSHOT_ATTEMPTS) await write;
      }
      const second = await count(q);
      seen.push([first, second]);
      return [first, second] as const;
    });
    await Promise.all(writes);
    return { ...snapshot, seen, writes: writes.length };
  }

  it("reads with a write between them are read again: the answer is one state, the write's", async () => {
    const before = await count(db);
    const { value, mark, seen } = await twoCounts((attempt) => attempt === 1);
    expect(value[0]).toBe(value[1]);
    if (db.snapshotMarks) {
      // The first attempt saw the write between its reads; the second, the state after it.
      expect(seen).toEqual([
        [before, before + 1],
        [before + 1, before + 1],
      ]);
      expect(mark).toBe(await writeMark(db));
    } else {
      // One transaction: both reads in its snapshot, whenever the write committed.
      expect(seen).toHaveLength(1);
      expect(mark).toBeUndefined();
    }
  });

  it("writes between the reads of every attempt: the last attempt holds a transaction, and answers one state", async () => {
    const { value, mark, seen } = await twoCounts(() => true);
    expect(value[0]).toBe(value[1]);
    expect(seen).toHaveLength(db.snapshotMarks ? SNAPSHOT_ATTEMPTS + 1 : 1);
    for (const [first, second] of seen.slice(0, -1)) expect(second).toBe(first + 1);
    expect(mark).toBeUndefined();
  });

  it("reads with no write between them: read once, with the mark a later write moves", async () => {
    const { value, mark, seen } = await twoCounts(() => false);
    expect(seen).toHaveLength(1);
    expect(value[0]).toBe(value[1]);
    if (!db.snapshotMarks) return;
    expect(mark).toBe(await writeMark(db));
    await count(db);
    expect(await writeMark(db)).toBe(mark);
    await db.query("INSERT INTO snapshot_probe VALUES (2)");
    expect(await writeMark(db)).not.toBe(mark);
  });

  it("a caller that gives up between the reads: the snapshot ends with the signal's reason, and no read runs after it", async () => {
    const gone = new AbortController();
    const reads: number[] = [];
    const snapshot = db.snapshot(
      async (q) => {
        reads.push(await count(q));
        gone.abort(new Error("the caller went away"));
        reads.push(await count(q));
      },
      { signal: gone.signal },
    );
    await expect(snapshot).rejects.toThrow("the caller went away");
    expect(reads).toHaveLength(1);
  });

  it.runIf(engine === "pglite")("another caller's statement runs between the reads, not after them", async () => {
    const order: string[] = [];
    await db.snapshot(async (q) => {
      const first = count(q);
      // Asked while the first read runs, and on its way before the second is asked.
      const other = db.query("SELECT 1").then(() => order.push("another caller"));
      await new Promise((resolve) => setImmediate(resolve));
      await first;
      await count(q);
      order.push("the snapshot's last read");
      await other;
    });
    expect(order).toEqual(["another caller", "the snapshot's last read"]);
  });
});

describe.runIf(engines.includes("pglite"))("a model's plan and apply on PGlite", () => {
  let database: TestDatabase;
  let service: TestService;
  const operator = { kind: "operator", keyId: "test", scopes: [] } as const;
  const catalog = [{ resource: "document", description: "", actions: ["read", "update"], relations: [] }];
  /** Readers hold document:read; the document to apply gives them document:update too. */
  const model = (permissions: string[]): ModelInput => ({
    catalog: catalog.map((e) => ({ ...e, relations: [] })),
    policies: [{ name: "reading", description: "", tenantId: undefined, permissions }],
    roles: [{ name: "readers", description: "", tenantId: undefined, policies: ["reading"] }],
  });
  const BASE = model(["document:read"]);
  const TARGET = model(["document:read", "document:update"]);

  beforeAll(async () => {
    database = await createTestDatabase("pglite", { migrated: true });
    service = await startTestService(database.db);
  }, 60_000);
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  /** An application at BASE with `users` readers; the role's id. */
  async function world(appId: string, users: number): Promise<string> {
    await createApp(service, appId, catalog);
    const a = admin(service, appId);
    const role = await a.createRole("readers", [await a.createPolicy("reading", ["document:read"])]);
    await new Models(database.db).apply(operator, appId, BASE, undefined);
    for (let i = 0; i < users; i++) await a.assign(role, `u${i}`);
    return role;
  }

  /**
   * The database as Models uses it, with the statements run inside each
   * transaction recorded, and `before` run once before the first
   * transaction starts (after the apply's plan: the race).
   */
  function watched(before: () => Promise<void> = async () => undefined) {
    const inTransaction: string[] = [];
    let raced = false;
    const inner = database.db;
    const db = new Proxy(inner, {
      get(target, name, receiver) {
        if (name !== "transaction") return Reflect.get(target, name, receiver);
        return async <T>(fn: (tx: Transaction) => Promise<T>, options?: TransactionOptions) => {
          if (!raced) {
            raced = true;
            await before();
          }
          return inner.transaction(
            (tx) =>
              fn({
                query: (sql, params) => {
                  inTransaction.push(sql);
                  return tx.query(sql, params);
                },
                atCommit: (sql, params) => tx.atCommit(sql, params),
              }),
            options,
          );
        };
      },
    });
    return { db, inTransaction };
  }
  const readsCatalog = (sql: string) => /\bFROM catalog_resources\b/.test(sql);
  const withoutVersion = ({ version: _, ...plan }: ModelPlan) => plan;

  it("apply plans before its transaction, which then reads nothing of the model and writes the plan it made", async () => {
    await world("quiet", 3);
    const plan = await new Models(database.db).plan("quiet", TARGET);
    expect(plan.impact).toEqual([expect.objectContaining({ permission: "document:update", gaining: 3, losing: 0 })]);
    const { db, inTransaction } = watched();
    const applied = await new Models(db).apply(operator, "quiet", TARGET, plan.version);
    expect(withoutVersion(applied)).toEqual(withoutVersion(plan));
    expect(applied.version).not.toBe(plan.version);
    expect(inTransaction.length).toBeGreaterThan(0);
    expect(inTransaction.filter(readsCatalog)).toEqual([]);
    expect((await new Models(database.db).export("quiet")).policies[0]!.permissions).toEqual(["document:read", "document:update"]);
  });

  it("a write between apply's plan and its transaction: the transaction plans again, and its answer is the new state's", async () => {
    const role = await world("raced", 2);
    let expected: ModelPlan | undefined;
    const { db, inTransaction } = watched(async () => {
      // A third reader, assigned after the apply planned: then the plan of the state it applies to.
      await admin(service, "raced").assign(role, "u-late");
      expected = await new Models(database.db).plan("raced", TARGET);
    });
    const applied = await new Models(db).apply(operator, "raced", TARGET, undefined);
    expect(expected!.impact).toEqual([expect.objectContaining({ permission: "document:update", gaining: 3 })]);
    expect(withoutVersion(applied)).toEqual(withoutVersion(expected!));
    expect(inTransaction.filter(readsCatalog).length).toBeGreaterThan(0);
  });

  it("a model change between apply's plan and its transaction: refused for the expected version it no longer is", async () => {
    await world("moved", 1);
    const { version } = await new Models(database.db).plan("moved", TARGET);
    const { db } = watched(async () => {
      await new Models(database.db).apply(operator, "moved", model(["document:update"]), undefined);
    });
    await expect(new Models(db).apply(operator, "moved", TARGET, version)).rejects.toThrow(/not the expected/);
    expect((await new Models(database.db).export("moved")).policies[0]!.permissions).toEqual(["document:update"]);
  });
});
