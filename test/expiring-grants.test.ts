/**
 * Expiring grants (docs/decisions.md) through the public API on each engine:
 * the expiry's form and its refusals (naming the field, changing nothing),
 * replacing an expiry (single and bulk: written, unchanged), the instant the
 * database's clock passes it (check, batch check, explain, permissions,
 * lookup and lists all stop counting the grant at once, lists show it with
 * includeExpired), the catalog's 409 for expired grants not yet swept, and the
 * sweep (batches, writers not held up, a grant pushed forward meanwhile kept).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ExpirySweep } from "../src/domain/expiry-sweep.js";
import type { Queryable } from "../src/store/db.js";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { databaseClock, untilPast } from "./support/expiry-trials.js";
import { grpcCaller, type GrpcCaller } from "./support/grpc-client.js";
import { startTestService, type TestService } from "./support/service.js";
import { admin, apiTime, authz, createApp, expectError, expectGrpcError, expectStatus, grant, GRPC, question, type Authz, type Grant } from "./helpers/authz.js";

const CATALOG = [
  { resource: "document", description: "", actions: ["read", "update", "delete"], relations: [{ name: "contractor", actions: ["read", "update"] }] },
  { resource: "folder", description: "", actions: ["read"] },
];
const REL = "/api/v1/authorization/relationships";

/** The database's clock, in milliseconds: what expiries are measured against. */
const dbNow = (db: Queryable): Promise<number> => databaseClock(db)();

/** Waits until the database's clock has passed `ms`. */
const untilDbPasses = (db: Queryable, ms: number): Promise<void> => untilPast(databaseClock(db), ms);

const iso = (ms: number) => new Date(ms).toISOString();
const withExpiry = (g: Grant, expiresAt: string | undefined) => ({ ...g, ...(expiresAt === undefined ? {} : { expiresAt }) });

describe.each(oneEngine(import.meta.url))("expiring grants on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let grpc: GrpcCaller;
  let key: string;
  let x: Authz;
  /** An expiry a day ahead of the database's clock, to the millisecond. */
  let tomorrow: string;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    grpc = grpcCaller(service.url);
    key = await createApp(service, "exp", CATALOG);
    x = authz(service, key);
    tomorrow = apiTime(Math.floor(await dbNow(database.db)) + 86_400_000);
  });
  afterAll(async () => {
    grpc?.close();
    await service?.close();
    await database?.dispose();
  });

  const write = (g: Grant, expiresAt?: string) => service.call("POST", REL, { key, body: withExpiry(g, expiresAt) });

  describe("the expiry's form", () => {
    it("a grant with an expiry: 201 with it, listed with it; one without has none", async () => {
      const res = await write(grant("ann", "document", "form-1", "viewer"), tomorrow);
      expectStatus(res, 201);
      expect(res.body).toEqual({ userId: "ann", allUsers: false, resource: "document", resourceId: "form-1", relation: "viewer", createdAt: expect.any(String), expiresAt: tomorrow });
      const plain = await write(grant("ann", "document", "form-2", "viewer"));
      expectStatus(plain, 201);
      expect(plain.body).not.toHaveProperty("expiresAt");
      const listed = await x.list({ userId: "ann", resource: "document" });
      expect(listed.body.relationships.map((r: { resourceId: string; expiresAt?: string }) => [r.resourceId, r.expiresAt])).toEqual([
        ["form-1", tomorrow],
        ["form-2", undefined],
      ]);
    });

    it("any zone is accepted; finer digits than the millisecond are dropped", async () => {
      const ahead = Math.floor(await dbNow(database.db)) + 3_600_000;
      const local = new Date(ahead);
      // The same instant written at +05:30.
      const shifted = new Date(ahead + 5.5 * 3_600_000).toISOString().replace("Z", "+05:30");
      const res = await write(grant("ann", "document", "zone", "viewer"), shifted);
      expectStatus(res, 201);
      expect(res.body.expiresAt).toBe(apiTime(local.getTime()));
      const fine = iso(ahead).replace(/\.(\d{3})Z$/, ".$1987654Z");
      const res2 = await write(grant("ann", "document", "nanos", "viewer"), fine);
      expectStatus(res2, 201);
      expect(res2.body.expiresAt).toBe(apiTime(ahead));
    });

    it.each([
      ["no zone", "2099-01-01T00:00:00"],
      ["a date only", "2099-01-01"],
      ["not a date", "next friday"],
      ["a number", 4102444800],
      ["an object", { seconds: 4102444800 }],
      ["a month 13", "2099-13-01T00:00:00Z"],
      ["beyond year 9999", "10000-01-01T00:00:00Z"],
      ["in the past", "2001-01-01T00:00:00Z"],
      ["year 1", "0001-01-01T00:00:00Z"],
    ])("%s → 400 naming expiresAt, nothing written", async (_, expiresAt) => {
      const g = grant("ann", "document", `bad-${String(_).replace(/\W/g, "")}`, "viewer");
      const res = await service.call("POST", REL, { key, body: { ...g, expiresAt } });
      expectError(res, 400, "invalid_argument", "expiresAt");
      expect((await x.list({ resource: "document", resourceId: g.resourceId })).body.relationships).toEqual([]);
    });

    it("an expiry of this very instant is in the past; a millisecond ahead of the database's clock is not", async () => {
      const now = Math.floor(await dbNow(database.db));
      expectError(await write(grant("ann", "document", "edge", "viewer"), iso(now)), 400, "invalid_argument", "expiresAt", "is not in the future", "the database's clock reads");
      expectStatus(await write(grant("ann", "document", "edge", "viewer"), iso(now + 5_000)), 201);
    });

    it("over gRPC: a Timestamp; nanos outside 0..999,999,999 or seconds beyond year 9999 → INVALID_ARGUMENT naming expiresAt", async () => {
      const seconds = BigInt(Math.floor((await dbNow(database.db)) / 1000) + 7_200);
      const answer = await grpc.call("RelationshipService", "WriteRelationship", { ...grant("gus", "document", "g1", "viewer"), expiresAt: { seconds: String(seconds), nanos: 123_456_789 } }, key);
      expect(answer.relationship.expiresAt).toEqual({ seconds: String(seconds), nanos: 123_000_000 });
      for (const expiresAt of [{ seconds: String(seconds), nanos: -1 }, { seconds: String(seconds), nanos: 1_000_000_000 }, { seconds: "253402300800", nanos: 0 }]) {
        await expectGrpcError(
          grpc.call("RelationshipService", "WriteRelationship", { ...grant("gus", "document", "g2", "viewer"), expiresAt }, key),
          GRPC.INVALID_ARGUMENT,
          "expiresAt",
        );
      }
    });
  });

  describe("replacing an expiry", () => {
    it("another expiry, one added, one removed: 200 with the stored grant; the same again: 200, unchanged", async () => {
      const g = grant("bob", "document", "rep", "editor");
      const later = apiTime(Date.parse(tomorrow) + 60_000);
      expectStatus(await write(g), 201);
      const steps: [string | undefined, string | undefined][] = [
        [tomorrow, tomorrow], // added
        [tomorrow, tomorrow], // the same
        [later, later], // another
        [undefined, undefined], // removed
        [undefined, undefined], // the same (none)
      ];
      const created = (await x.list({ resource: "document", resourceId: "rep" })).body.relationships[0].createdAt;
      for (const [sent, stored] of steps) {
        const res = await write(g, sent);
        expectStatus(res, 200);
        expect(res.body.expiresAt).toBe(stored);
        expect(res.body.createdAt).toBe(created);
        const listed = (await x.list({ resource: "document", resourceId: "rep" })).body.relationships;
        expect(listed).toHaveLength(1);
        expect(listed[0].expiresAt).toBe(stored);
      }
    });

    it("bulk: new and changed expiries are written, the same one is unchanged; one transaction", async () => {
      const a = grant("cy", "document", "b1", "viewer");
      const b = grant("cy", "document", "b2", "viewer");
      const c = grant("cy", "document", "b3", "viewer");
      const later = apiTime(Date.parse(tomorrow) + 1_000);
      const bulk = (writes: unknown[], deletes?: unknown[]) => service.call("POST", `${REL}/bulk`, { key, body: { writes, ...(deletes ? { deletes } : {}) } });
      expect((await bulk([withExpiry(a, tomorrow), b, withExpiry(c, tomorrow)])).body).toEqual({ written: 3, unchanged: 0, deleted: 0 });
      // a: same; b: expiry added; c: expiry removed; a repeated with the same expiry: unchanged.
      expect((await bulk([withExpiry(a, tomorrow), withExpiry(b, later), c, withExpiry(a, tomorrow)])).body).toEqual({ written: 2, unchanged: 2, deleted: 0 });
      const listed = (await x.list({ userId: "cy", resource: "document" })).body.relationships;
      expect(listed.map((r: { resourceId: string; expiresAt?: string }) => [r.resourceId, r.expiresAt])).toEqual([
        ["b1", tomorrow],
        ["b2", later],
        ["b3", undefined],
      ]);
    });

    it("bulk refusals name the entry and write nothing: a past expiry, two expiries for one grant, an expiry on a delete", async () => {
      const fresh = grant("dee", "document", "r1", "viewer");
      const cases: [unknown[], unknown[] | undefined, string][] = [
        [[fresh, withExpiry(grant("dee", "document", "r2", "viewer"), "2001-01-01T00:00:00Z")], undefined, "writes[1].expiresAt"],
        [[withExpiry(fresh, tomorrow), withExpiry(fresh, iso(Date.parse(tomorrow) + 1))], undefined, "writes[1].expiresAt"],
        [[fresh], [withExpiry(grant("dee", "document", "r9", "viewer"), tomorrow)], "deletes[0].expiresAt"],
        [[fresh, { ...grant("dee", "document", "r3", "viewer"), expiresAt: "tomorrow" }], undefined, "writes[1].expiresAt"],
      ];
      for (const [writes, deletes, field] of cases) {
        const res = await service.call("POST", `${REL}/bulk`, { key, body: { writes, ...(deletes ? { deletes } : {}) } });
        expectError(res, 400, "invalid_argument", field);
        expect((await x.list({ userId: "dee", resource: "document" })).body.relationships).toEqual([]);
      }
    });

    it("5,000 entries with expiries are one transaction: one past expiry among them writes nothing; all good writes all", async () => {
      const now = Math.floor(await dbNow(database.db));
      const writes = Array.from({ length: 5_000 }, (_, i) => withExpiry(grant(`u${i % 50}`, "folder", `big-${i}`, "viewer"), iso(now + 3_600_000 + i)));
      const bad = [...writes];
      bad[4_321] = withExpiry(grant("u0", "folder", "big-bad", "viewer"), iso(now - 1));
      const refused = await service.call("POST", `${REL}/bulk`, { key, body: { writes: bad } });
      expectError(refused, 400, "invalid_argument", "writes[4321].expiresAt");
      expect(await countGrants(database.db, "exp", "folder")).toBe(0);
      const res = await service.call("POST", `${REL}/bulk`, { key, body: { writes } });
      expectStatus(res, 200);
      expect(res.body).toEqual({ written: 5_000, unchanged: 0, deleted: 0 });
      const again = await service.call("POST", `${REL}/bulk`, { key, body: { writes } });
      expect(again.body).toEqual({ written: 0, unchanged: 5_000, deleted: 0 });
      expect(await countGrants(database.db, "exp", "folder")).toBe(5_000);
      expectStatus(await service.call("POST", `${REL}/delete`, { key, body: { resource: "folder", resourceId: "big-0" } }), 200);
    });
  });

  describe("the instant the database's clock passes the expiry", () => {
    it("every answer counts the grant just before and none just after; lists show it with includeExpired", async () => {
      const users = ["eve", "fay"];
      const q = (userId: string) => question(userId, "document", "t1", "update");
      // eve: only an expiring grant; fay: an expiring grant and a permanent one on another instance.
      const expiresAt = Math.floor(await dbNow(database.db)) + 3_000;
      expectStatus(await write(grant("eve", "document", "t1", "contractor"), iso(expiresAt)), 201);
      expectStatus(await write(grant("fay", "document", "t1", "contractor"), iso(expiresAt)), 201);
      expectStatus(await write(grant("fay", "document", "t2", "editor")), 201);

      const answers = async (userId: string) => ({
        check: await x.allowed(q(userId)),
        batch: (await x.batch([q(userId)])).body.results[0].allowed,
        explain: (await service.call("POST", "/api/v1/authorization/check/explain", { key, body: q(userId) })).body,
        permissions: (await service.call("POST", "/api/v1/authorization/permissions", { key, body: { userId, resource: "document", resourceId: "t1" } })).body.actions,
        lookup: (await service.call("POST", "/api/v1/authorization/lookup", { key, body: { userId, resource: "document", action: "update" } })).body.resourceIds,
        listed: (await x.list({ userId, resource: "document" })).body.relationships.map((r: Grant) => r.resourceId),
        listedAll: (await x.list({ userId, resource: "document", includeExpired: "true" })).body.relationships.map((r: Grant) => r.resourceId),
        byInstance: (await x.list({ resource: "document", resourceId: "t1" })).body.relationships.map((r: Grant) => r.userId),
        grpc: (await grpc.call("CheckService", "Check", q(userId), key)).allowed,
      });

      const before = await Promise.all(users.map(answers));
      expect(await dbNow(database.db)).toBeLessThan(expiresAt); // the answers above were all taken before it
      for (const [i, a] of before.entries()) {
        expect(a.check).toBe(true);
        expect(a.batch).toBe(true);
        expect(a.grpc).toBe(true);
        expect(a.explain.allowed).toBe(true);
        expect(a.explain.reasons[0].grant.expiresAt).toBe(apiTime(expiresAt));
        expect(a.permissions).toEqual(["read", "update"]);
        expect(a.lookup).toEqual(i === 0 ? ["t1"] : ["t1", "t2"]);
        expect(a.listed).toEqual(i === 0 ? ["t1"] : ["t1", "t2"]);
        expect(a.byInstance).toEqual(["eve", "fay"]);
      }

      await untilDbPasses(database.db, expiresAt);
      const after = await Promise.all(users.map(answers));
      for (const [i, a] of after.entries()) {
        expect(a.check).toBe(false);
        expect(a.batch).toBe(false);
        expect(a.grpc).toBe(false);
        expect(a.explain).toMatchObject({ allowed: false, reasons: [], considered: { relations: [] } });
        expect(a.permissions).toEqual([]);
        expect(a.lookup).toEqual(i === 0 ? [] : ["t2"]);
        expect(a.listed).toEqual(i === 0 ? [] : ["t2"]);
        expect(a.listedAll).toEqual(i === 0 ? ["t1"] : ["t1", "t2"]);
        expect(a.byInstance).toEqual([]);
      }
      // includeExpired on the instance list too, and a bad value is a 400 naming it.
      expect((await x.list({ resource: "document", resourceId: "t1", includeExpired: "true" })).body.relationships.map((r: Grant) => r.userId)).toEqual(["eve", "fay"]);
      expectError(await x.list({ resource: "document", resourceId: "t1", includeExpired: "yes" }), 400, "invalid_argument", "includeExpired");
    });

    it("an expired grant written again with a new expiry (or none) counts again: 200, not created", async () => {
      const expiresAt = Math.floor(await dbNow(database.db)) + 300;
      const g = grant("gil", "document", "back", "viewer");
      expectStatus(await write(g, iso(expiresAt)), 201);
      await untilDbPasses(database.db, expiresAt);
      expect(await x.allowed(question("gil", "document", "back", "read"))).toBe(false);
      const res = await write(g, tomorrow);
      expectStatus(res, 200);
      expect(res.body.expiresAt).toBe(tomorrow);
      expect(await x.allowed(question("gil", "document", "back", "read"))).toBe(true);
    });
  });

  describe("the catalog and expired grants", () => {
    it("an expired grant not yet swept still blocks dropping its relation (409 says so); deleting it frees the relation", async () => {
      const own = await createApp(service, "exp-catalog", CATALOG);
      const o = authz(service, own);
      const expiresAt = Math.floor(await dbNow(database.db)) + 300;
      expectStatus(await service.call("POST", REL, { key: own, body: { ...grant("hal", "document", "c1", "contractor"), expiresAt: iso(expiresAt) } }), 201);
      await untilDbPasses(database.db, expiresAt);
      expect(await o.allowed(question("hal", "document", "c1", "read"))).toBe(false);
      const dropped = [{ resource: "document", description: "", actions: ["read", "update", "delete"] }, CATALOG[1]];
      const res = await admin(service, "exp-catalog").putCatalog(dropped);
      expectError(res, 409, "failed_precondition", "document#contractor (expired grants only, not yet swept)", "relationships/delete");
      expect(res.body.details).toContainEqual({ resource: "document", relation: "contractor", reason: "only expired grants, not yet swept, use this relation" });
      // A live grant is named in the 409.
      expectStatus(await service.call("POST", REL, { key: own, body: grant("ida", "document", "c2", "contractor") }), 201);
      const live = await admin(service, "exp-catalog").putCatalog(dropped);
      expectError(live, 409, "failed_precondition", "document#contractor used by grants");
      expect(live.body.message).not.toContain("expired grants only");
      const deleted = await service.call("POST", `${REL}/delete`, { key: own, body: { resource: "document", resourceId: "c1" } });
      expect(deleted.body).toEqual({ deleted: 1 });
      expectStatus(await service.call("POST", `${REL}/delete`, { key: own, body: { resource: "document", resourceId: "c2" } }), 200);
      expectStatus(await admin(service, "exp-catalog").putCatalog(dropped), 200);
    });
  });

  describe("the sweep", () => {
    it("deletes expired grants in batches and nothing else; a grant pushed forward before the sweep stays", async () => {
      const own = await createApp(service, "exp-sweep", CATALOG);
      const o = authz(service, own);
      const now = Math.floor(await dbNow(database.db));
      const expiring = Array.from({ length: 23 }, (_, i) => withExpiry(grant(`s${i}`, "document", "sw", "viewer"), iso(now + 300)));
      const lasting = [grant("keep-1", "document", "sw", "viewer"), withExpiry(grant("keep-2", "document", "sw", "viewer"), tomorrow)];
      expect((await service.call("POST", `${REL}/bulk`, { key: own, body: { writes: [...expiring, ...lasting] } })).body.written).toBe(25);
      // Pushed forward before it expires: it must survive the sweep.
      expectStatus(await service.call("POST", REL, { key: own, body: withExpiry(grant("s0", "document", "sw", "viewer"), tomorrow) }), 200);
      await untilDbPasses(database.db, now + 300);
      const sweep = new ExpirySweep(database.db, { intervalMs: 60_000, batchSize: 5, onError: () => undefined });
      expect(await sweep.sweepApplication("exp-sweep")).toBe(22);
      expect(await sweep.sweepApplication("exp-sweep")).toBe(0);
      const left = await o.listAll({ resource: "document", resourceId: "sw", includeExpired: "true" });
      expect(left.map((g) => g.userId).sort()).toEqual(["keep-1", "keep-2", "s0"]);
    });

    it("runs on its own every GRANT_SWEEP_INTERVAL_MS, across applications", async () => {
      const swept = await startTestService(database.db, { grantSweepIntervalMs: 100, grantSweepBatch: 3 });
      try {
        const keys = [await createApp(swept, "exp-auto-1", CATALOG), await createApp(swept, "exp-auto-2", CATALOG)];
        const now = Math.floor(await dbNow(database.db));
        for (const k of keys) {
          const writes = Array.from({ length: 7 }, (_, i) => withExpiry(grant(`a${i}`, "folder", "auto", "viewer"), iso(now + 300)));
          expectStatus(await swept.call("POST", `${REL}/bulk`, { key: k, body: { writes: [...writes, grant("stay", "folder", "auto", "viewer")] } }), 200);
        }
        await untilDbPasses(database.db, now + 300);
        for (const appId of ["exp-auto-1", "exp-auto-2"]) {
          for (let i = 0; (await countGrants(database.db, appId, "folder")) > 1; i++) {
            expect(i, "the sweep did not run within 10 s").toBeLessThan(200);
            await new Promise((resolve) => setTimeout(resolve, 50));
          }
          expect(await countGrants(database.db, appId, "folder")).toBe(1);
        }
      } finally {
        await swept.close();
      }
    });

    it("does not hold up writers: writes to the same application finish while a sweep of thousands of grants is still running", async () => {
      const own = await createApp(service, "exp-busy", CATALOG);
      for (let chunk = 0; chunk < 4; chunk++) {
        const writes = Array.from({ length: 5_000 }, (_, i) => withExpiry(grant(`b${i % 100}`, "document", `busy-${chunk}-${i}`, "viewer"), tomorrow));
        expectStatus(await service.call("POST", `${REL}/bulk`, { key: own, body: { writes } }), 200);
      }
      // Expired a minute ago: set here, as no call can write an expiry in the past.
      await database.db.query("UPDATE relationships SET expires_at = now() - interval '1 minute' WHERE app_id = 'exp-busy'");
      const sweep = new ExpirySweep(database.db, { intervalMs: 60_000, batchSize: 200, onError: () => undefined });
      let sweepDone = 0;
      const sweepStart = performance.now();
      const sweeping = sweep.sweepApplication("exp-busy").then((n) => {
        sweepDone = performance.now();
        return n;
      });
      const writesDone: number[] = [];
      for (let i = 0; i < 5; i++) {
        expectStatus(await service.call("POST", REL, { key: own, body: grant(`w${i}`, "document", `busy-${i}-${i}`, "editor") }), 201);
        writesDone.push(performance.now());
      }
      expect(await sweeping).toBe(20_000);
      // Each write went between two batches, not after the whole sweep.
      expect(Math.max(...writesDone)).toBeLessThan(sweepDone);
      expect(await countGrants(database.db, "exp-busy", "document")).toBe(5);
    });
  });
});

async function countGrants(db: Queryable, appId: string, resource: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>("SELECT count(*)::int AS n FROM relationships WHERE app_id = $1 AND resource = $2", [appId, resource]);
  return rows[0]!.n;
}
