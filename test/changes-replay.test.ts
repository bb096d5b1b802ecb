/**
 * The change feed replays to the database's state: a reader that applies
 * the feed's changes in order to an empty copy holds exactly the grants and
 * assignments the database holds.
 *
 * The race an order by transaction id gets wrong: a transaction T1 takes
 * its id (its first write), then T2 begins, writes grant B and commits; only then does T1 write B, and commits. The database keeps
 * T1's B; an order by id gives T1's change first and T2's after it. Here T1
 * runs as the service's multi-statement writes do (the bulk's writeMany and
 * deleteMany then its seal, a delete by filter, an assignment with its audit
 * event), paused by the test between its first write and its write of B, and
 * T2 is a call to the service: grant writes, expiry changes, deletes, deletes
 * by filter, assignments added and removed, each way round.
 *
 * Readers read all the while through the API, at random moments, with
 * random page sizes; each keeps checkpoints (a token and its copy at that
 * token), and now and then starts again from a random checkpoint, its own
 * or another reader's. At the end every reader's copy must be the
 * database's. On PGlite (one connection) transactions cannot overlap, so T2
 * runs before T1 there: the same replay, without the race.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { auditStore } from "../src/store/audit-store.js";
import { changesStore } from "../src/store/changes-store.js";
import type { Queryable } from "../src/store/db.js";
import { relationshipsStore } from "../src/store/relationships-store.js";
import { rolesStore } from "../src/store/roles-store.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";
import { admin, createApp, expectStatus } from "./helpers/authz.js";

const APP = "replay";
const CATALOG = [{ resource: "document", description: "", actions: ["read"], relations: [{ name: "viewer", actions: ["read"] }] }];

/** A copy as a reader keeps it: grants by key (their expiry), assignments by key (their condition). */
type Copy = Map<string, string>;

interface FeedChange {
  kind: string;
  token: string;
  grant?: { userId: string; resource: string; resourceId: string; relation: string; expiresAt?: string | null };
  assignment?: { roleId: string; userId: string; condition?: string | null };
}

const grantKey = (g: { userId: string; resource: string; resourceId: string; relation: string }) => `grant ${g.userId} ${g.resource}:${g.resourceId}#${g.relation}`;
const assignmentKey = (a: { roleId: string; userId: string }) => `role ${a.roleId} ${a.userId}`;

function apply(copy: Copy, c: FeedChange): void {
  if (c.kind === "grant_written") copy.set(grantKey(c.grant!), c.grant!.expiresAt ? new Date(c.grant!.expiresAt).toISOString() : "-");
  else if (c.kind === "grant_deleted") copy.delete(grantKey(c.grant!));
  else if (c.kind === "assignment_added") copy.set(assignmentKey(c.assignment!), c.assignment!.condition ?? "-");
  else if (c.kind === "assignment_removed") copy.delete(assignmentKey(c.assignment!));
}

const sorted = (copy: Copy) => [...copy.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));

describe.each(engines)("the change feed replays to the database's state on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    service = await startTestService(database.db);
    key = await createApp(service, APP, CATALOG);
  }, 120_000);

  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  /** What the database holds: every grant and assignment of the application. */
  async function databaseState(): Promise<Copy> {
    const copy: Copy = new Map();
    const grants = await database.db.query<{ userId: string; resource: string; resourceId: string; relation: string; expiresAt: Date | null }>(
      `SELECT user_id AS "userId", resource, resource_id AS "resourceId", relation, expires_at AS "expiresAt" FROM relationships WHERE app_id = $1`,
      [APP],
    );
    for (const g of grants.rows) copy.set(grantKey(g), g.expiresAt === null ? "-" : new Date(g.expiresAt).toISOString());
    const assignments = await database.db.query<{ roleId: string; userId: string; condition: string | null }>(
      `SELECT role_id AS "roleId", user_id AS "userId", condition FROM role_assignments WHERE app_id = $1`,
      [APP],
    );
    for (const a of assignments.rows) copy.set(assignmentKey(a), a.condition ?? "-");
    return copy;
  }

  it(
    "a transaction with the lower id writing a grant after one with a higher id committed: every reader's replay is the database",
    { timeout: 120_000 },
    async () => {
      const call = (method: string, path: string, body?: unknown) => service.call(method, path, { key, ...(body === undefined ? {} : { body }) });
      const a = admin(service, APP);
      const roleId = await a.createRole("member", []);
      let random = 39;
      const next = () => ((random = (random * 48_271) % 2_147_483_647) / 2_147_483_647);
      const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
      const hour = 3_600_000;
      const expiry = (hours: number) => new Date(Date.now() + hours * hour).toISOString();
      const grant = (userId: string, resourceId: string, expiresAt?: string) => ({ userId, resource: "document", resourceId, relation: "viewer", expiresAt: expiresAt === undefined ? null : new Date(expiresAt) });
      /** What each race must leave: T1's write (its expiry, "-" for none), or nothing ("gone"). */
      const wants = new Map<string, string>();

      // Checkpoints every reader may start again from: a token and the copy at it.
      const start = (await call("GET", "/api/v1/authorization/changes")).body.nextToken as string;
      const checkpoints: { token: string; copy: Copy }[] = [{ token: start, copy: new Map() }];
      let stop = false;
      const reader = async (): Promise<Copy> => {
        let at = checkpoints[0]!;
        let copy: Copy = new Map(at.copy);
        let token = at.token;
        for (;;) {
          const finished = stop;
          const pageSize = 1 + Math.floor(next() * 12);
          const page = await call("GET", `/api/v1/authorization/changes?pageSize=${pageSize}&after=${token}`);
          expectStatus(page, 200);
          for (const change of page.body.changes as FeedChange[]) apply(copy, change);
          token = page.body.nextToken as string;
          if (next() < 0.3) checkpoints.push({ token, copy: new Map(copy) });
          // A crash: start again from a checkpoint, this reader's or another's.
          if (!finished && next() < 0.1) {
            at = checkpoints[Math.floor(next() * checkpoints.length)]!;
            copy = new Map(at.copy);
            token = at.token;
            continue;
          }
          if ((page.body.changes as FeedChange[]).length < pageSize) {
            if (finished) return copy;
            await sleep(Math.floor(next() * 6));
          }
        }
      };
      const readers = [reader(), reader(), reader()];

      /**
       * T1 takes its id with a write of its own grant, waits while `t2` runs
       * and commits, then writes what `t1` writes (B), and commits last.
       */
      const raced = async (n: string, t1: (tx: Queryable) => Promise<void>, t2: () => Promise<void>) => {
        const first = async (tx: Queryable) => {
          expect(await relationshipsStore.writeMany(tx, APP, [grant(`t1-${n}`, `first-${n}`)])).toBe(1);
        };
        if (engine === "pglite") {
          await t2();
          await database.db.transaction(async (tx) => {
            await first(tx);
            await t1(tx);
          });
          return;
        }
        let wrote!: () => void;
        const idTaken = new Promise<void>((resolve) => (wrote = resolve));
        let resume!: () => void;
        const t2Committed = new Promise<void>((resolve) => (resume = resolve));
        const transaction = database.db.transaction(async (tx) => {
          await first(tx);
          wrote();
          await t2Committed;
          await t1(tx);
        });
        await idTaken;
        await t2();
        resume();
        await transaction;
        // The race happened: the later commit (the greater number) has the smaller transaction id.
        const { rows } = await database.db.query<{ seq: string; xid: string }>(
          "SELECT t.seq::text AS seq, t.xid::text AS xid FROM change_commits t WHERE t.app_id = $1 ORDER BY t.seq DESC LIMIT 2",
          [APP],
        );
        expect(BigInt(rows[0]!.xid), `T1 of ${n} has the smaller id and the later place`).toBeLessThan(BigInt(rows[1]!.xid));
      };
      /** T1's bulk write of grants, sealed as the bulk route seals it. */
      const bulkWrite = (...grants: ReturnType<typeof grant>[]) => async (tx: Queryable) => {
        expect(await relationshipsStore.writeMany(tx, APP, grants)).toBeGreaterThan(0);
        await changesStore.seal(tx, APP);
      };
      const bulkDelete = (...grants: ReturnType<typeof grant>[]) => async (tx: Queryable) => {
        expect(await relationshipsStore.deleteMany(tx, APP, grants)).toBeGreaterThan(0);
        await changesStore.seal(tx, APP);
      };
      const write = async (g: { userId: string; resourceId: string }, expiresAt?: string) =>
        expect([200, 201]).toContain((await call("POST", "/api/v1/authorization/relationships", { userId: g.userId, resource: "document", resourceId: g.resourceId, relation: "viewer", ...(expiresAt === undefined ? {} : { expiresAt }) })).status);
      const remove = async (g: { userId: string; resourceId: string }) =>
        expectStatus(await call("DELETE", `/api/v1/authorization/relationships?userId=${g.userId}&resource=document&resourceId=${g.resourceId}&relation=viewer`), 200);

      const scenarios: [string, () => Promise<void>][] = [
        // A bulk whose entry B has expiry X; a single write of B with Y commits first.
        ["write", async () => {
          const n = `w${rounds}`;
          const x = expiry(2);
          wants.set(grantKey(grant(`b-${n}`, "d")), x);
          await raced(n, bulkWrite(grant(`b-${n}`, "d", x)), () => write({ userId: `b-${n}`, resourceId: "d" }, expiry(1)));
        }],
        ["expiry change", async () => {
          const n = `e${rounds}`;
          await write({ userId: `b-${n}`, resourceId: "d" }, expiry(5));
          const x = expiry(2);
          wants.set(grantKey(grant(`b-${n}`, "d")), x);
          await raced(n, bulkWrite(grant(`b-${n}`, "d", x)), () => write({ userId: `b-${n}`, resourceId: "d" }, expiry(3)));
        }],
        // A revoke that an order by id would turn into a grant, and the reverse.
        ["delete after a write", async () => {
          const n = `dw${rounds}`;
          wants.set(grantKey(grant(`b-${n}`, "d")), "gone");
          await raced(n, bulkDelete(grant(`b-${n}`, "d")), () => write({ userId: `b-${n}`, resourceId: "d" }));
        }],
        ["write after a delete", async () => {
          const n = `wd${rounds}`;
          wants.set(grantKey(grant(`b-${n}`, "d")), "-");
          await write({ userId: `b-${n}`, resourceId: "d" });
          await raced(n, bulkWrite(grant(`b-${n}`, "d")), () => remove({ userId: `b-${n}`, resourceId: "d" }));
        }],
        ["delete by filter after a write", async () => {
          const n = `fw${rounds}`;
          wants.set(grantKey(grant(`b-${n}`, "d")), "gone");
          await raced(
            n,
            async (tx) => void expect(await relationshipsStore.deleteMatching(tx, APP, { userId: `b-${n}` })).toBe(1),
            () => write({ userId: `b-${n}`, resourceId: "d" }),
          );
        }],
        ["write after a delete by filter", async () => {
          const n = `wf${rounds}`;
          wants.set(grantKey(grant(`b-${n}`, "d")), "-");
          await write({ userId: `b-${n}`, resourceId: "d" });
          await raced(n, bulkWrite(grant(`b-${n}`, "d")), async () =>
            expect((await call("POST", "/api/v1/authorization/relationships/delete", { userId: `b-${n}` })).body).toEqual({ deleted: 1 }),
          );
        }],
        ["unassign after an assign", async () => {
          const n = `ua${rounds}`;
          wants.set(assignmentKey({ roleId, userId: `m-${n}` }), "gone");
          await raced(
            n,
            async (tx) => {
              expect(await rolesStore.unassign(tx, APP, roleId, `m-${n}`)).toBe(true);
              await auditStore.append(tx, { appId: APP, type: "role.unassigned", actorKeyId: "test", targetType: "role", targetId: roleId, data: { userId: `m-${n}` } });
            },
            async () => void (await a.assign(roleId, `m-${n}`)),
          );
        }],
        ["assign after an unassign", async () => {
          const n = `au${rounds}`;
          wants.set(assignmentKey({ roleId, userId: `m-${n}` }), "-");
          await a.assign(roleId, `m-${n}`);
          await raced(
            n,
            async (tx) => {
              expect((await rolesStore.assign(tx, APP, roleId, `m-${n}`)).created).toBe(true);
              await auditStore.append(tx, { appId: APP, type: "role.assigned", actorKeyId: "test", targetType: "role", targetId: roleId, data: { userId: `m-${n}` } });
            },
            async () => void (await a.unassign(roleId, `m-${n}`)),
          );
        }],
      ];
      let rounds = 0;
      for (; rounds < 3; rounds++) {
        for (const [, scenario] of [...scenarios].sort(() => next() - 0.5)) {
          await scenario();
          await sleep(Math.floor(next() * 5));
        }
      }
      stop = true;
      const copies = await Promise.all(readers);

      const state = await databaseState();
      // The races left what T1 wrote: X, the revoke, the grant written again, the assignment gone or back.
      expect(wants.size).toBe(scenarios.length * 3);
      for (const [k, want] of wants) expect(state.get(k) ?? "gone", k).toBe(want);
      for (const copy of copies) expect(sorted(copy)).toEqual(sorted(state));
      // And a reader from the start, in one page and in pages of one.
      for (const pageSize of [1_000, 1]) {
        const copy: Copy = new Map();
        let token = start;
        for (;;) {
          const page = await call("GET", `/api/v1/authorization/changes?pageSize=${pageSize}&after=${token}`);
          for (const change of page.body.changes as FeedChange[]) apply(copy, change);
          token = page.body.nextToken as string;
          if ((page.body.changes as FeedChange[]).length < pageSize) break;
        }
        expect(sorted(copy)).toEqual(sorted(state));
      }
      // Every change the writes recorded has its place in the order: none is left out of the feed.
      const { rows } = await database.db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM changes c
         WHERE c.app_id = $1 AND NOT EXISTS (SELECT 1 FROM change_commits t WHERE t.app_id = $1 AND t.xid = c.xid)`,
        [APP],
      );
      expect(rows).toEqual([{ n: 0 }]);
    },
  );
});
