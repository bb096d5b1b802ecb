/**
 * The change feed's promise under load, through the API (docs/change-feed.md): writers
 * of every kind run side by side (single grants, bulk writes, deletes by
 * filter, role assignments added and removed, model edits, and transactions
 * that write and then roll back), while readers page through the feed and
 * now and then "crash", resuming from a token they were given earlier.
 *
 * At the end every reader must hold every acknowledged change exactly once,
 * each call's changes together, no rolled-back change, and an order the
 * commits allow: a call acknowledged before another was sent comes first.
 * The expected changes are the test's own account of its calls, tagged by
 * the ids each call wrote, not read back from the service.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { relationshipsStore } from "../src/store/relationships-store.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";
import { admin, createApp, expectStatus, queryString } from "./helpers/authz.js";

const CATALOG = [{ resource: "document", description: "", actions: ["read"], relations: [{ name: "viewer", actions: ["read"] }, { name: "reader", actions: ["read"] }] }];

interface Op {
  /** The tag every change of this call carries (in a user id, a resource id, a policy name). */
  tag: string;
  /** How many changes it made. */
  size: number;
  sent: number;
  acked: number;
}

interface FeedChange {
  kind: string;
  token: string;
  grant?: { userId: string; resourceId: string };
  assignment?: { userId: string };
  modelEvent?: { data: { name?: string; policy?: { name?: string } } };
}

/** The tag a change carries: which call made it. */
function tagOf(c: FeedChange): string {
  if (c.grant !== undefined) return c.kind === "grant_deleted" ? `del:${c.grant.userId}` : c.grant.resourceId;
  if (c.assignment !== undefined) return `${c.kind === "assignment_added" ? "add" : "rm"}:${c.assignment.userId}`;
  const data = c.modelEvent!.data;
  return `model:${data.name ?? data.policy?.name ?? JSON.stringify(data)}`;
}

describe.each(engines)("the change feed under concurrent writers and crashing readers on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    service = await startTestService(database.db);
    key = await createApp(service, "order", CATALOG);
  }, 120_000);

  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  it("every reader sees every committed change exactly once, each call's together, in an order the commits allow", async () => {
    const call = (method: string, path: string, body?: unknown) => service.call(method, path, { key, ...(body === undefined ? {} : { body }) });
    const a = admin(service, "order");
    const roleId = await a.createRole("member", []);
    const start = (await call("GET", "/api/v1/authorization/changes?waitMs=0")).body.nextToken as string;

    const ops: Op[] = [];
    let rolledBack = 0;
    const until = Date.now() + 3_000;
    const run = async (tag: string, size: number, fn: () => Promise<void>) => {
      const op: Op = { tag, size, sent: performance.now(), acked: 0 };
      await fn();
      op.acked = performance.now();
      ops.push(op);
    };
    const writer = async (w: number) => {
      // Every kind of write at least once, however slow the machine: then for the rest of the 3 s.
      for (let i = 0; i < 6 || Date.now() < until; i++) {
        const tag = `w${w}-${i}`;
        switch (i % 6) {
          case 0: // a single grant
            await run(tag, 1, async () => expectStatus(await call("POST", "/api/v1/authorization/relationships", { userId: `u-${tag}`, resource: "document", resourceId: tag, relation: "viewer" }), 201));
            break;
          case 1: { // a bulk write of 5 to 40 grants, one user
            const n = 5 + ((w * 7 + i) % 36);
            const writes = Array.from({ length: n }, (_, k) => ({ userId: `bulk-${tag}-${k}`, resource: "document", resourceId: tag, relation: "viewer" }));
            await run(tag, n, async () => expectStatus(await call("POST", "/api/v1/authorization/relationships/bulk", { writes }), 200));
            break;
          }
          case 2: { // a delete by filter of a user holding three grants
            const userId = `del-${tag}`;
            const writes = [
              { userId, resource: "document", resourceId: `${tag}-d0`, relation: "viewer" },
              { userId, resource: "document", resourceId: `${tag}-d1`, relation: "viewer" },
              { userId, resource: "document", resourceId: `${tag}-d1`, relation: "reader" },
            ];
            await run(`${tag}-d0`, 1, async () => expectStatus(await call("POST", "/api/v1/authorization/relationships/bulk", { writes: [writes[0]] }), 200));
            await run(`${tag}-d1`, 2, async () => expectStatus(await call("POST", "/api/v1/authorization/relationships/bulk", { writes: writes.slice(1) }), 200));
            await run(`del:${userId}`, 3, async () => expect((await call("POST", "/api/v1/authorization/relationships/delete", { userId })).body).toEqual({ deleted: 3 }));
            break;
          }
          case 3: // an assignment added, then removed
            await run(`add:m-${tag}`, 1, async () => void (await a.assign(roleId, `m-${tag}`)));
            await run(`rm:m-${tag}`, 1, async () => void (await a.unassign(roleId, `m-${tag}`)));
            break;
          case 4: // a model edit: a policy created
            await run(`model:p-${tag}`, 1, async () => void (await a.createPolicy(`p-${tag}`, ["document:read"])));
            break;
          case 5: // a transaction that writes grants and rolls back: never seen
            await database.db
              .transaction(async (tx) => {
                await relationshipsStore.writeMany(tx, "order", [{ userId: `gone-${tag}`, resource: "document", resourceId: `gone-${tag}`, relation: "viewer", expiresAt: null }]);
                await new Promise((resolve) => setTimeout(resolve, 5));
                throw new Error("roll back");
              })
              .catch(() => undefined);
            rolledBack++;
            break;
        }
      }
    };

    let writing = true;
    const reader = async (r: number) => {
      const log: FeedChange[] = [];
      let token = start;
      let resumes = 0;
      for (let round = 0; ; round++) {
        const pageSize = [1, 7, 50, 500][(r + round) % 4]!;
        // Read before the read is sent: a page asked for while the last writes were in flight may
        // come back short after they were acknowledged, and is not yet the end.
        const last = !writing;
        const res = await call("GET", `/api/v1/authorization/changes${queryString({ after: token, pageSize, waitMs: last ? 0 : 50 })}`);
        expectStatus(res, 200);
        log.push(...(res.body.changes as FeedChange[]));
        token = res.body.nextToken as string;
        // A reader that has not crashed yet (a slow machine gave it few rounds while the writers
        // ran) reads on until it does: every reader resumes at least once.
        if (last && res.body.changes.length < pageSize && resumes > 0) return { log };
        // A crash now and then: resume from a token this reader was given earlier, forgetting what came after it.
        if (log.length > 0 && (round * 7 + r) % 11 === 0) {
          const at = (round * 13 + r) % log.length;
          log.length = at + 1;
          token = log[at]!.token;
          resumes++;
        }
      }
    };

    const readers = [0, 1, 2].map(reader);
    await Promise.all([0, 1, 2, 3, 4, 5].map(writer));
    writing = false;
    const logs = await Promise.all(readers);

    expect(rolledBack).toBeGreaterThan(0);
    const expected = new Map(ops.map((op) => [op.tag, op]));
    const total = ops.reduce((n, op) => n + op.size, 0);
    for (const { log } of logs) {
      // Exactly once: the right number, no token twice, nothing rolled back.
      expect(log).toHaveLength(total);
      expect(new Set(log.map((c) => c.token)).size).toBe(total);
      expect(log.filter((c) => JSON.stringify(c).includes("gone-"))).toEqual([]);
      // Each call's changes together and complete.
      const firstIndex = new Map<string, number>();
      let i = 0;
      while (i < log.length) {
        const tag = tagOf(log[i]!);
        const op = expected.get(tag);
        expect(op, `an unexpected change ${JSON.stringify(log[i])}`).toBeDefined();
        expect(firstIndex.has(tag), `${tag} comes twice`).toBe(false);
        firstIndex.set(tag, i);
        for (let k = 0; k < op!.size; k++) expect(tagOf(log[i + k]!), `${tag}'s changes together`).toBe(tag);
        i += op!.size;
      }
      expect(firstIndex.size).toBe(ops.length);
      // An order the commits allow: a call acknowledged before another was sent comes first. Calls
      // in flight together may come in either order, and two readers may differ there: one read
      // both in one window (in transaction id order), the other each in its own.
      const byAck = [...ops].sort((x, y) => x.acked - y.acked);
      const bySent = [...ops].sort((x, y) => x.sent - y.sent);
      const wrong: string[] = [];
      let acked = 0;
      let latest: Op | undefined; // of the calls acknowledged so far, the one the reader has last
      for (const later of bySent) {
        for (; acked < byAck.length && byAck[acked]!.acked < later.sent; acked++) {
          const op = byAck[acked]!;
          if (latest === undefined || firstIndex.get(op.tag)! > firstIndex.get(latest.tag)!) latest = op;
        }
        if (latest !== undefined && firstIndex.get(latest.tag)! > firstIndex.get(later.tag)!) wrong.push(`${latest.tag} was acknowledged before ${later.tag} was sent, and comes after it`);
      }
      expect(wrong).toEqual([]);
    }
  }, 120_000);
});
