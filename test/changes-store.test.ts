/**
 * The change feed's storage (store/changes-store.ts, migrations 011 and 021)
 * on every engine: changes read back in commit order, exactly once, whatever
 * transactions run side by side, in one order for every reader. The proof: writers that take their
 * transaction ids in one order and commit in another (each holds its
 * transaction open for a random while after its first write), some rolling
 * back, while readers page through from random positions, each resuming
 * from the position the last page gave. Every reader must see every
 * committed change exactly once, never a rolled-back one, each transaction's
 * changes together and in their order, and a transaction that committed
 * before another began before it. Per application: another application's
 * changes are never read. Readers hold their positions as tokens
 * (domain/change-tokens.ts), as clients will.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeChangeToken, encodeChangeToken } from "../src/domain/change-tokens.js";
import { changesStore, isSnapshotText, type ChangePosition, type NewChange, type StoredChange } from "../src/store/changes-store.js";
import type { Queryable } from "../src/store/db.js";
import { loadMigrations, migrate } from "../src/store/migrate.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";

describe("snapshot text as a position carries it", () => {
  it.each([
    ["10:20:", true],
    ["10:20:10,15,19", true],
    ["1:1:", true],
    ["0:5:", false],
    ["20:10:", false],
    ["10:20:9", false],
    ["10:20:20", false],
    ["10:20:15,12", false],
    ["10:20:15,15", false],
    ["10:20", false],
    ["10:20:,", false],
    [" 10:20:", false],
    ["10:99999999999999999999:", false],
  ])("%s: %s", (text, ok) => {
    expect(isSnapshotText(text)).toBe(ok);
  });
});

/** A position as a client holds it: through its token and back (the start, from the oldest, has none). */
const viaToken = (position: ChangePosition): ChangePosition =>
  position.seq === undefined && position.legacy === undefined ? position : decodeChangeToken(encodeChangeToken(position));

/** Records changes and seals them, as a transaction's last write. */
async function recordSealed(tx: Queryable, appId: string, changes: NewChange[]): Promise<void> {
  await changesStore.record(tx, appId, changes);
  await changesStore.seal(tx, appId);
}

describe.each(engines)("the change feed's storage on %s", (engine) => {
  let database: TestDatabase;

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    for (const app of ["feed", "other"]) {
      await database.db.query("INSERT INTO applications (app_id, name) VALUES ($1, $1)", [app]);
      await database.db.query("INSERT INTO model_versions (app_id) VALUES ($1)", [app]);
    }
  }, 120_000);
  afterAll(async () => {
    await database?.dispose();
  });

  /** Every change from `from` on, page by page; the position after the last. */
  async function readAll(appId: string, from: ChangePosition, pageSize: number): Promise<{ changes: StoredChange[]; at: ChangePosition }> {
    const changes: StoredChange[] = [];
    let at = from;
    for (;;) {
      const page = await changesStore.read(database.db, appId, at, pageSize);
      changes.push(...page.changes);
      at = viaToken(page.next);
      if (page.changes.length < pageSize) return { changes, at };
    }
  }

  it("reads a transaction's changes together, in their order, once; a rolled-back one never; per application", async () => {
    const start = await changesStore.read(database.db, "feed", { seq: undefined }, 100);
    expect(start.changes).toEqual([]);
    await database.db.transaction(async (tx) => {
      await changesStore.record(tx, "feed", [
        { kind: "grant_written", body: { n: 1 } },
        { kind: "grant_written", body: { n: 2 } },
      ]);
      await changesStore.record(tx, "feed", [{ kind: "assignment_added", body: { n: 3 } }]);
      await changesStore.record(tx, "other", [{ kind: "grant_written", body: { n: 99 } }]);
      await changesStore.seal(tx, "feed");
      await changesStore.seal(tx, "other");
      // A second seal keeps the transaction's first place.
      await changesStore.seal(tx, "feed");
    });
    await database.db
      .transaction(async (tx) => {
        await changesStore.record(tx, "feed", [{ kind: "grant_deleted", body: { n: -1 } }]);
        await changesStore.seal(tx, "feed");
        throw new Error("roll back");
      })
      .catch(() => undefined);
    const read = await readAll("feed", start.next, 2);
    // Numbered by statement (stmt, greater for each later one), then within it (ord, from 1).
    expect(read.changes.map((c) => [c.kind, c.body, c.ord])).toEqual([
      ["grant_written", { n: 1 }, 1],
      ["grant_written", { n: 2 }, 2],
      ["assignment_added", { n: 3 }, 1],
    ]);
    expect(read.changes[0]!.stmt).toBe(read.changes[1]!.stmt);
    expect(BigInt(read.changes[2]!.stmt)).toBeGreaterThan(BigInt(read.changes[0]!.stmt));
    expect(new Set(read.changes.map((c) => c.seq)).size).toBe(1);
    // Nothing more from where it ended; from the start (undefined), the same three.
    expect((await changesStore.read(database.db, "feed", read.at, 10)).changes).toEqual([]);
    expect((await readAll("feed", { seq: undefined }, 10)).changes.map((c) => c.body)).toEqual([{ n: 1 }, { n: 2 }, { n: 3 }]);
    expect((await readAll("other", { seq: undefined }, 10)).changes.map((c) => c.body)).toEqual([{ n: 99 }]);
    // Each xid is the writing transaction's own on the node that stores the row (on Citus, the
    // worker's, set by the trigger there; a coordinator's would differ from the row's xmin).
    const { rows } = await database.db.query<{ same: boolean }>(
      "SELECT bool_and((xid::text::numeric % 4294967296) = xmin::text::numeric) AS same FROM changes WHERE app_id = $1",
      ["feed"],
    );
    expect(rows).toEqual([{ same: true }]);
  });

  it("sweeps changes past retention in batches, oldest first, and tells a reader that had not seen them to start again", async () => {
    await database.db.query("INSERT INTO applications (app_id, name) VALUES ('swept', 'swept')");
    await database.db.query("INSERT INTO model_versions (app_id) VALUES ('swept')");
    const before = (await changesStore.read(database.db, "swept", { seq: undefined }, 10)).next;
    for (const n of [1, 2, 3]) await database.db.transaction((tx) => recordSealed(tx, "swept", [{ kind: "grant_written", body: { n } }]));
    const afterOne = (await changesStore.read(database.db, "swept", before, 1)).next;
    const afterAll = (await readAll("swept", before, 10)).at;
    // Made old by hand: a day ago; then one more, new.
    for (const table of ["changes", "change_commits"]) {
      await database.db.query(`UPDATE ${table} SET created_at = $1::timestamptz WHERE app_id = 'swept'`, [new Date(Date.now() - 86_400_000).toISOString()]);
    }
    await database.db.transaction((tx) => recordSealed(tx, "swept", [{ kind: "grant_written", body: { n: 4 } }]));

    expect(await changesStore.sweep(database.db, "swept", 3_600_000, 2)).toBe(2);
    // A reader that had not seen them: expired. One that had: reads on.
    expect(await changesStore.read(database.db, "swept", before, 10)).toMatchObject({ refused: "retention", changes: [] });
    expect(await changesStore.read(database.db, "swept", afterOne, 10)).toMatchObject({ refused: "retention", changes: [] });
    expect((await changesStore.read(database.db, "swept", afterAll, 10)).changes.map((c) => c.body)).toEqual([{ n: 4 }]);
    expect(await changesStore.sweep(database.db, "swept", 3_600_000, 2)).toBe(1);
    expect(await changesStore.sweep(database.db, "swept", 3_600_000, 2)).toBe(0);
    // From the oldest kept: the new one only. Other applications' changes untouched.
    expect((await readAll("swept", { seq: undefined }, 10)).changes.map((c) => c.body)).toEqual([{ n: 4 }]);
    expect((await readAll("other", { seq: undefined }, 10)).changes.map((c) => c.body)).toEqual([{ n: 99 }]);
    // Within retention nothing goes.
    expect(await changesStore.sweep(database.db, "swept", 3_600_000, 10)).toBe(0);
  });

  it(
    "concurrent writers committing out of id order, readers resuming from random positions: every committed change exactly once, in an order the commits allow",
    { timeout: 120_000 },
    async () => {
      // PGlite is one connection: its transactions cannot overlap, so the race is Postgres's (and Citus's).
      const writers = engine === "pglite" ? 1 : 8;
      const perWriter = engine === "pglite" ? 30 : 25;
      const begin = (await changesStore.read(database.db, "feed", { seq: undefined }, 1000)).next;
      expect(begin.within).toBeUndefined();

      /** What committed: each transaction's tag, the time its first write returned, and when its commit returned. */
      const committed: { tag: string; wrote: number; done: number; size: number }[] = [];
      const rolledBack = new Set<string>();
      let stop = false;
      let random = 7;
      const next = () => ((random = (random * 48_271) % 2_147_483_647) / 2_147_483_647);
      const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

      const write = async (w: number) => {
        for (let i = 0; i < perWriter; i++) {
          const tag = `${w}-${i}`;
          const size = 1 + Math.floor(next() * 3);
          const rollBack = next() < 0.15;
          const hold = Math.floor(next() * 15);
          let wrote = 0;
          try {
            await database.db.transaction(async (tx) => {
              await changesStore.record(tx, "feed", [{ kind: "grant_written", body: { tag, i: 0 } }]);
              wrote = performance.now();
              await sleep(hold); // the id is taken; the commit comes later, after others' maybe
              const rest = Array.from({ length: size - 1 }, (_, k) => ({ kind: "grant_written" as const, body: { tag, i: k + 1 } }));
              await changesStore.record(tx, "feed", rest);
              await changesStore.seal(tx, "feed");
              if (rollBack) throw new Error("roll back");
            });
            committed.push({ tag, wrote, done: performance.now(), size });
          } catch {
            rolledBack.add(tag);
          }
        }
      };

      /** A reader from `from` that polls until the writers stop and it has caught up; every change it read. */
      const reader = async (from: ChangePosition, pageSize: number) => {
        const seen: StoredChange[] = [];
        let at = from;
        for (;;) {
          const finished = stop;
          const page = await changesStore.read(database.db, "feed", at, pageSize);
          seen.push(...page.changes);
          at = viaToken(page.next);
          if (page.changes.length === 0) {
            if (finished) return seen;
            await sleep(2);
          }
        }
      };

      const readers = [reader(begin, 1), reader(begin, 7), reader(begin, 100)];
      await Promise.all(Array.from({ length: writers }, (_, w) => write(w)));
      stop = true;
      const results = await Promise.all(readers);
      // One order for every reader, however it paged: the commits'.
      const orders = results.map((seen) => seen.map((c) => `${(c.body as { tag: string }).tag}/${(c.body as { i: number }).i}`).join(" "));
      expect(orders[1]).toBe(orders[0]);
      expect(orders[2]).toBe(orders[0]);

      expect(committed.length).toBeGreaterThan(writers * perWriter * 0.6);
      const expected = committed.reduce((n, c) => n + c.size, 0);
      for (const seen of results) {
        const tags = seen.map((c) => (c.body as { tag: string }).tag);
        // Exactly once: as many as committed, no change twice, none rolled back.
        const missing = committed.filter((c) => !tags.includes(c.tag)).map((c) => c.tag);
        expect(missing, "committed, never read").toEqual([]);
        expect(seen.length).toBe(expected);
        expect(new Set(seen.map((c) => `${(c.body as { tag: string }).tag}/${(c.body as { i: number }).i}`)).size).toBe(expected);
        expect(tags.filter((t) => rolledBack.has(t))).toEqual([]);
        // A transaction's changes together and in order.
        const order: string[] = [];
        for (const [k, c] of seen.entries()) {
          const body = c.body as { tag: string; i: number };
          if (k === 0 || (seen[k - 1]!.body as { tag: string }).tag !== body.tag) {
            expect(order).not.toContain(body.tag);
            order.push(body.tag);
            expect(body.i).toBe(0);
          } else {
            expect(body.i).toBe((seen[k - 1]!.body as { i: number }).i + 1);
          }
        }
        // Consistent with the commits: if T1's commit returned before T2's first write, T1 comes first.
        const place = new Map(order.map((t, k) => [t, k]));
        for (const a of committed) {
          for (const b of committed) {
            if (a.done < b.wrote) expect(place.get(a.tag)!, `${a.tag} committed before ${b.tag} wrote`).toBeLessThan(place.get(b.tag)!);
          }
        }
      }

      // Resuming from random positions of one reader's path reads the same tail as that reader did after it.
      const path: { at: ChangePosition; read: number }[] = [];
      let at = begin;
      let read = 0;
      for (;;) {
        path.push({ at, read });
        const page = await changesStore.read(database.db, "feed", at, 5);
        read += page.changes.length;
        at = page.next;
        if (page.changes.length < 5) break;
      }
      const all = (await readAll("feed", begin, 1000)).changes;
      for (let k = 0; k < 5; k++) {
        const pick = path[Math.floor(next() * path.length)]!;
        const tail = (await readAll("feed", pick.at, 1 + Math.floor(next() * 20))).changes;
        expect(tail.map((c) => `${c.seq}/${c.stmt}/${c.ord}`)).toEqual(all.slice(pick.read).map((c) => `${c.seq}/${c.stmt}/${c.ord}`));
      }
    },
  );
});

describe.each(engines)("tokens from before the commit order on %s", (engine) => {
  it("a database with changes is upgraded; an old token is placed in the commit order, or refused when it cannot be", async () => {
    const database = await createTestDatabase(engine);
    try {
      const all = await loadMigrations();
      await migrate(database.db, all.slice(0, 20));
      await database.db.query("INSERT INTO applications (app_id, name) VALUES ('old', 'old')");
      await database.db.query("INSERT INTO model_versions (app_id) VALUES ('old')");
      // Changes as the previous version recorded them, and a token it gave after the first two transactions.
      const record = (n: number) =>
        database.db.transaction((tx) =>
          tx.query("INSERT INTO changes (app_id, stmt, ord, kind, body) SELECT 'old', (SELECT nextval('change_statement_seq')), 1, 'grant_written', $1::jsonb", [JSON.stringify({ n })]),
        );
      await record(1);
      await record(2);
      const { rows } = await database.db.query<{ snap: string }>("SELECT pg_current_snapshot()::text AS snap");
      await record(3);
      await migrate(database.db, all);
      const old: ChangePosition = { seq: undefined, legacy: { seen: rows[0]!.snap } };
      const page = await changesStore.read(database.db, "old", viaToken(old), 10);
      expect(page.changes.map((c) => c.body)).toEqual([{ n: 3 }]);
      expect(page.next.legacy).toBeUndefined();
      // A token whose snapshot had the second transaction in progress while it saw the third: no place in the order.
      const [, xmax, inProgress] = rows[0]!.snap.split(":");
      const { rows: xids } = await database.db.query<{ xid: string }>("SELECT xid::text AS xid FROM change_commits WHERE app_id = 'old' ORDER BY seq");
      const gap: ChangePosition = { seq: undefined, legacy: { seen: `${xids[1]!.xid}:${BigInt(xids[2]!.xid) + 1n}:${xids[1]!.xid}` } };
      // The real token's snapshot saw the first two committed: each below its xmax, neither in progress. (Its xmin is
      // not theirs to say: other files' transactions on the same server hold it back or move it on.)
      for (const { xid } of xids.slice(0, 2)) {
        expect(BigInt(xid)).toBeLessThan(BigInt(xmax!));
        expect(inProgress!.split(",")).not.toContain(xid);
      }
      expect(BigInt(xids[2]!.xid)).toBeGreaterThanOrEqual(BigInt(xmax!));
      expect(await changesStore.read(database.db, "old", gap, 10)).toMatchObject({ refused: "order", changes: [] });
      // Writes of the previous version's kind fail from now on, rather than record a change without a place.
      await expect(record(4)).rejects.toThrow(/change_statement_seq/);
    } finally {
      await database.dispose();
    }
  });
});
