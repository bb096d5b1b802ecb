/**
 * Bulk grant writes over REST and gRPC, on each engine: the 5,000-entry
 * limit (exactly at it and one over), all or nothing when any entry is bad
 * (each bad entry named by index, the first 100), the counts of written,
 * unchanged and deleted grants, and set-based SQL (a full call is a handful
 * of statements, counted on a real database).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Relationships } from "../src/domain/relationships.js";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { grpcCaller, type GrpcCaller } from "./support/grpc-client.js";
import { startTestService, type TestService } from "./support/service.js";
import {
  authz,
  countingDb,
  createApp,
  expectError,
  expectGrpcError,
  expectStatus,
  grant,
  GRPC,
  question,
  storedGrants,
  type Authz,
  type Grant,
} from "./helpers/authz.js";

const CATALOG = [
  {
    resource: "document",
    description: "",
    actions: ["create", "read", "update", "delete", "list", "comment"],
    relations: [{ name: "reviewer", actions: ["read", "comment"] }],
  },
  { resource: "folder", description: "", actions: ["read", "list"] },
];

const LIMIT = 5000;

/** `n` distinct valid grants, on instance `resourceId`, spread over the relations. */
const many = (n: number, resourceId = "big", from = 0): Grant[] =>
  Array.from({ length: n }, (_, i) =>
    grant(`user-${from + i}`, "document", resourceId, ["owner", "editor", "viewer", "commenter", "reviewer"][(from + i) % 5]!),
  );

/** Ways one entry can be bad, and a fragment its reason names. */
const badEntries: { name: string; entry: Grant; field: string; fragment: string }[] = [
  { name: "resource not in the catalog", entry: grant("u", "spaceship", "s1", "owner"), field: "resource", fragment: "spaceship" },
  { name: "relation not of the resource", entry: grant("u", "folder", "f1", "reviewer"), field: "relation", fragment: "reviewer" },
  { name: "unknown relation", entry: grant("u", "document", "d1", "approver"), field: "relation", fragment: "approver" },
  { name: "malformed resource", entry: grant("u", "Document", "d1", "owner"), field: "resource", fragment: "Document" },
  { name: "empty userId", entry: grant("", "document", "d1", "owner"), field: "userId", fragment: "required" },
  { name: "userId of 257 characters", entry: grant("u".repeat(257), "document", "d1", "owner"), field: "userId", fragment: "256" },
  { name: "resourceId with a control character", entry: grant("u", "document", "d\u00011", "owner"), field: "resourceId", fragment: "control" },
];

describe.each(oneEngine(import.meta.url))("bulk grants on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let grpc: GrpcCaller;
  let counter = 0;

  /** A fresh application with the catalog, so stored counts are exact. */
  const freshApp = async (): Promise<{ appId: string; x: Authz }> => {
    const appId = `bulk-${counter++}`;
    return { appId, x: authz(service, await createApp(service, appId, CATALOG)) };
  };
  const stored = (appId: string) => storedGrants(database.db, appId);

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    grpc = grpcCaller(service.url);
  });
  afterAll(async () => {
    grpc?.close();
    await service?.close();
    await database?.dispose();
  });

  describe("the 5,000-entry limit", () => {
    it("exactly 5,000 writes → 200, all stored, and every one listed and checked", async () => {
      const { appId, x } = await freshApp();
      const writes = many(LIMIT);
      const res = await x.bulk(writes);
      expectStatus(res, 200);
      expect(res.body).toEqual({ written: LIMIT, unchanged: 0, deleted: 0 });
      expect(await stored(appId)).toBe(LIMIT);
      const listed = await x.listAll({ resource: "document", resourceId: "big", pageSize: 1000 });
      expect(listed).toHaveLength(LIMIT);
      expect(new Set(listed.map((g) => g.userId)).size).toBe(LIMIT);
      const checks = [0, 1, 2, 3, 4, 2500, 4999].map((i) => question(writes[i]!.userId, "document", "big", "read"));
      expect((await x.batch(checks)).body.results).toEqual(checks.map(() => ({ allowed: true })));
    });

    it("5,000 entries split over writes and deletes → 200", async () => {
      const { appId, x } = await freshApp();
      const existing = many(1000, "split");
      expectStatus(await x.bulk(existing), 200);
      const res = await x.bulk(many(4000, "split", 1000), existing);
      expectStatus(res, 200);
      expect(res.body).toEqual({ written: 4000, unchanged: 0, deleted: 1000 });
      expect(await stored(appId)).toBe(4000);
    });

    it.each([
      { name: "5,001 writes", writes: LIMIT + 1, deletes: 0 },
      { name: "4,001 writes and 1,000 deletes", writes: 4001, deletes: 1000 },
      { name: "5,001 deletes", writes: 0, deletes: LIMIT + 1 },
      { name: "10,000 writes", writes: 10_000, deletes: 0 },
    ])("$name → 400 naming the limit, nothing written or deleted", async ({ writes, deletes }) => {
      const { appId, x } = await freshApp();
      const toDelete = many(deletes, "over-del");
      // The grants the call would delete exist (the first 5,000 of them), so a partial run would show.
      if (deletes > 0) expectStatus(await x.bulk(toDelete.slice(0, LIMIT)), 200);
      const before = await stored(appId);
      const res = await x.bulk(many(writes, "over"), toDelete);
      expectError(res, 400, "invalid_argument", "5000", String(writes + deletes));
      expect(await stored(appId)).toBe(before);
    });
  });

  describe("all or nothing", () => {
    it.each(badEntries)("one bad entry at writes[2500] ($name) → 400 naming writes[2500] and why; nothing stored", async ({ entry, field, fragment }) => {
      const { appId, x } = await freshApp();
      const writes = many(LIMIT);
      writes[2500] = entry;
      const res = await x.bulk(writes);
      expectError(res, 400, "invalid_argument", `writes[2500].${field}`, fragment);
      expect(res.body.details).toHaveLength(1);
      expect(res.body.details[0]).toMatchObject({ list: "writes", index: 2500, field: `writes[2500].${field}` });
      expect(res.body.details[0].reason).toContain(fragment);
      expect(await stored(appId)).toBe(0);
    });

    it("a bad delete → 400 naming deletes[i]; the writes are not stored and the other deletes not done", async () => {
      const { appId, x } = await freshApp();
      const existing = many(20, "keep");
      expectStatus(await x.bulk(existing), 200);
      const deletes = [...existing];
      deletes[7] = grant("u", "folder", "f1", "reviewer");
      const res = await x.bulk(many(100, "new"), deletes);
      expectError(res, 400, "invalid_argument", "deletes[7].relation", "reviewer");
      expect(res.body.details).toEqual([expect.objectContaining({ list: "deletes", index: 7 })]);
      expect(await stored(appId)).toBe(20);
    });

    it("several bad entries → every one named, in writes and deletes alike", async () => {
      const { appId, x } = await freshApp();
      const writes = many(LIMIT - 10);
      const positions = [0, 17, 2500, 4989];
      positions.forEach((i, k) => (writes[i] = badEntries[k]!.entry));
      const deletes = [grant("a", "document", "d", "owner"), badEntries[4]!.entry];
      const res = await x.bulk(writes, deletes);
      expectStatus(res, 400);
      for (const i of positions) expect(res.body.message).toContain(`writes[${i}]`);
      expect(res.body.message).toContain("deletes[1]");
      const named = res.body.details.map((d: { list: string; index: number }) => `${d.list}[${d.index}]`);
      expect(named).toEqual([...positions.map((i) => `writes[${i}]`), "deletes[1]"]);
      expect(await stored(appId)).toBe(0);
    });

    it("an entry bad in several fields has each field named", async () => {
      const { x } = await freshApp();
      const res = await x.bulk([grant("ok", "document", "d1", "owner"), grant("", "document", "", "Nope")]);
      expectStatus(res, 400);
      const fields = res.body.details.map((d: { field: string }) => d.field);
      expect(fields).toEqual(expect.arrayContaining(["writes[1].userId", "writes[1].resourceId", "writes[1].relation"]));
    });

    it("more than 100 bad entries → the first 100 in details, the message telling how many in all", async () => {
      const { appId, x } = await freshApp();
      const writes = many(1000);
      const bad = Array.from({ length: 250 }, (_, k) => 3 * k + 1); // indexes 1, 4, 7, ... 748
      for (const i of bad) writes[i] = grant(`bad-${i}`, "spaceship", "s", "owner");
      const res = await x.bulk(writes);
      expectError(res, 400, "invalid_argument", "250", "writes[1]");
      expect(res.body.details).toHaveLength(100);
      expect(res.body.details.map((d: { index: number }) => d.index)).toEqual(bad.slice(0, 100));
      for (const d of res.body.details) expect(d.reason).toContain("spaceship");
      expect(res.body.message).not.toContain(`writes[${bad[100]}]`);
      expect(await stored(appId)).toBe(0);
    });

    it("the same grant in writes and deletes → 400 naming both; nothing written", async () => {
      const { appId, x } = await freshApp();
      const g = grant("both", "document", "d1", "viewer");
      const res = await x.bulk([grant("other", "document", "d1", "owner"), g], [grant("x", "document", "d9", "owner"), g]);
      expectError(res, 400, "invalid_argument", "deletes[1]", "writes[1]");
      expect(await stored(appId)).toBe(0);
    });

    it.each([
      { name: "writes is not an array", body: { writes: { userId: "u" } } },
      { name: "an entry is a string", body: { writes: ["document:d1#owner@u"] } },
      { name: "an entry has an unknown field", body: { writes: [{ ...grant("u", "document", "d1", "owner"), action: "read" }] } },
      { name: "an unknown top-level field", body: { writes: [], upserts: [] } },
    ])("malformed body: $name → 400", async ({ body }) => {
      const { appId, x } = await freshApp();
      expectError(await service.call("POST", "/api/v1/authorization/relationships/bulk", { key: x.key, body }), 400, "invalid_argument");
      expect(await stored(appId)).toBe(0);
    });
  });

  describe("counts", () => {
    it("writes of grants that already exist are unchanged, new ones written; counts always emitted", async () => {
      const { appId, x } = await freshApp();
      const first = many(3, "c1");
      const res1 = await x.bulk(first);
      expect(res1.body).toEqual({ written: 3, unchanged: 0, deleted: 0 });
      const single = grant("solo", "document", "c1", "viewer");
      const created = await x.write(single);
      expectStatus(created, 201);
      const res2 = await x.bulk([...first, single, ...many(2, "c1", 3)]);
      expectStatus(res2, 200);
      expect(res2.body).toEqual({ written: 2, unchanged: 4, deleted: 0 });
      expect(await stored(appId)).toBe(6);
      // Unchanged means untouched: the stored createdAt is the original one.
      const listed = await x.list({ resource: "document", resourceId: "c1", relation: "viewer" });
      expect(listed.body.relationships).toContainEqual(created.body);
    });

    it("deletes count the grants that existed; absent ones count nothing", async () => {
      const { appId, x } = await freshApp();
      const existing = many(10, "d1");
      expectStatus(await x.bulk(existing), 200);
      const res = await x.bulk([], [...existing, ...many(5, "d-absent")]);
      expectStatus(res, 200);
      expect(res.body).toEqual({ written: 0, unchanged: 0, deleted: 10 });
      expect(await stored(appId)).toBe(0);
      expect(await x.allowed(question(existing[0]!.userId, "document", "d1", "read"))).toBe(false);
    });

    it("writes and deletes together, one transaction", async () => {
      const { appId, x } = await freshApp();
      const old = many(4, "mix");
      expectStatus(await x.bulk(old), 200);
      const res = await x.bulk([old[0]!, ...many(3, "mix", 100)], [old[1]!, old[2]!]);
      expect(res.body).toEqual({ written: 3, unchanged: 1, deleted: 2 });
      expect(await stored(appId)).toBe(5);
    });

    it("the same grant twice in writes is stored once; every write is counted as written or unchanged", async () => {
      const { appId, x } = await freshApp();
      const g = grant("twice", "document", "d1", "owner");
      const res = await x.bulk([g, g]);
      expectStatus(res, 200);
      expect(res.body.written).toBe(1);
      expect(res.body.written + res.body.unchanged).toBe(2);
      expect(await stored(appId)).toBe(1);
    });

    it("concurrent calls over the same grants, in different orders: all succeed, each grant is written exactly once", async () => {
      const { appId, x } = await freshApp();
      const grants = many(1000, "race");
      const orders = [grants, [...grants].reverse(), [...grants.slice(500), ...grants.slice(0, 500)], grants.filter((_, i) => i % 2 === 0)];
      const answers = await Promise.all(orders.map((o) => x.bulk(o)));
      answers.forEach((a, i) => {
        expectStatus(a, 200);
        expect(a.body.written + a.body.unchanged).toBe(orders[i]!.length);
      });
      expect(answers.reduce((sum, a) => sum + (a.body.written as number), 0)).toBe(1000);
      expect(await stored(appId)).toBe(1000);
    });

    it("an empty call → 200 with zeros", async () => {
      const { x } = await freshApp();
      const res = await x.bulk([]);
      expectStatus(res, 200);
      expect(res.body).toEqual({ written: 0, unchanged: 0, deleted: 0 });
    });
  });

  describe("set-based SQL", () => {
    it.each([
      { name: "5,000 writes", writes: LIMIT, deletes: 0 },
      { name: "2,500 writes and 2,500 deletes", writes: 2500, deletes: 2500 },
      { name: "5,000 deletes", writes: 0, deletes: LIMIT },
    ])("$name take a handful of statements, not one per entry", async ({ writes, deletes }) => {
      const { appId, x } = await freshApp();
      const toDelete = many(deletes, "sql-del");
      if (deletes > 0) expectStatus(await x.bulk(toDelete), 200);
      const counting = countingDb(database.db);
      const result = await new Relationships(counting.db).bulk(appId, many(writes, "sql"), toDelete);
      expect(result).toEqual({ written: writes, unchanged: 0, deleted: deletes });
      expect(counting.statements.length, counting.statements.join("\n---\n")).toBeLessThanOrEqual(10);
      expect(counting.statements.length).toBeGreaterThanOrEqual(2); // the wrapper saw the work
      expect(await stored(appId)).toBe(writes);
    });

    it("the statement count does not grow with the number of entries", async () => {
      const { appId } = await freshApp();
      const counts: number[] = [];
      for (const [n, from] of [[1, 0], [5000, 10]] as const) {
        const counting = countingDb(database.db);
        await new Relationships(counting.db).bulk(appId, many(n, "grow", from), []);
        counts.push(counting.statements.length);
      }
      expect(counts[1]).toBe(counts[0]);
    });
  });

  describe("over gRPC", () => {
    it("5,000 → counts; 5,001 → INVALID_ARGUMENT; a bad writes[2500] → INVALID_ARGUMENT naming it; nothing stored on failure", async () => {
      const { appId, x } = await freshApp();
      const ok = await grpc.call("RelationshipService", "BulkWriteRelationships", { writes: many(LIMIT, "g") }, x.key);
      expect(ok).toEqual({ written: LIMIT, unchanged: 0, deleted: 0 });
      expect(await stored(appId)).toBe(LIMIT);

      const again = await grpc.call("RelationshipService", "BulkWriteRelationships", { writes: many(10, "g"), deletes: many(5, "g", 10) }, x.key);
      expect(again).toEqual({ written: 0, unchanged: 10, deleted: 5 });

      await expectGrpcError(
        grpc.call("RelationshipService", "BulkWriteRelationships", { writes: many(LIMIT + 1, "g2") }, x.key),
        GRPC.INVALID_ARGUMENT,
        "5000",
      );
      const writes = many(LIMIT, "g3");
      writes[2500] = grant("u", "spaceship", "s1", "owner");
      await expectGrpcError(
        grpc.call("RelationshipService", "BulkWriteRelationships", { writes }, x.key),
        GRPC.INVALID_ARGUMENT,
        "writes[2500]",
        "spaceship",
      );
      expect(await stored(appId)).toBe(LIMIT - 5);
    });
  });
});
