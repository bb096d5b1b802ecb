/**
 * Direct grants over REST and gRPC, on each engine: write (201 new / 200
 * existing with the stored createdAt), delete, the two list modes with
 * paging, validation against the formats and the catalog, the operator key
 * refused, isolation between applications, and the catalog's 409 when it
 * would orphan grants.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { grpcCaller, type GrpcCaller } from "./support/grpc-client.js";
import { ADMIN_KEY, startTestService, type TestService } from "./support/service.js";
import {
  admin,
  authz,
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

const LONG_RESOURCE = `r${"x".repeat(63)}`; // 64 characters: the longest name
const LONG_RELATION = `q${"y".repeat(63)}`;

const CATALOG = [
  {
    resource: "document",
    description: "",
    actions: ["create", "read", "update", "delete", "list", "comment", "share"],
    relations: [{ name: "reviewer", actions: ["read", "comment"] }],
  },
  { resource: "folder", description: "", actions: ["read", "list", "delete"] },
  { resource: LONG_RESOURCE, description: "", actions: ["read"], relations: [{ name: LONG_RELATION, actions: ["read"] }] },
];

const REL_KEYS = ["allUsers", "createdAt", "relation", "resource", "resourceId", "userId"];

/** A write that must be refused: the field and value its message names. */
const invalidWrites: { name: string; body: Record<string, unknown>; names: string[] }[] = [
  { name: "resource not in the catalog", body: { ...grant("u", "spaceship", "s1", "owner") }, names: ['"spaceship"', "resource"] },
  { name: "relation defined for another resource only", body: { ...grant("u", "folder", "f1", "reviewer") }, names: ['"reviewer"', "relation"] },
  { name: "relation neither built in nor defined", body: { ...grant("u", "document", "d1", "approver") }, names: ['"approver"', "relation"] },
  { name: "an action is not a relation", body: { ...grant("u", "document", "d1", "read") }, names: ['"read"', "relation"] },
  { name: "resource in upper case", body: { ...grant("u", "Document", "d1", "owner") }, names: ["resource", "Document"] },
  { name: "relation in upper case", body: { ...grant("u", "document", "d1", "Owner") }, names: ["relation", "Owner"] },
  { name: "relation with a hyphen", body: { ...grant("u", "document", "d1", "co-owner") }, names: ["relation", "co-owner"] },
  { name: "resource of 65 characters", body: { ...grant("u", `${LONG_RESOURCE}z`, "d1", "owner") }, names: ["resource"] },
  { name: "relation of 65 characters", body: { ...grant("u", LONG_RESOURCE, "d1", `${LONG_RELATION}z`) }, names: ["relation"] },
  { name: "empty userId", body: { ...grant("", "document", "d1", "owner") }, names: ["userId"] },
  { name: "userId of 257 characters", body: { ...grant("u".repeat(257), "document", "d1", "owner") }, names: ["userId", "256"] },
  { name: "userId of 257 astral characters", body: { ...grant("😀".repeat(257), "document", "d1", "owner") }, names: ["userId", "256"] },
  { name: "userId with a newline", body: { ...grant("al\nice", "document", "d1", "owner") }, names: ["userId", "control"] },
  { name: "userId with NUL", body: { ...grant("al\u0000ice", "document", "d1", "owner") }, names: ["userId"] },
  { name: "empty resourceId", body: { ...grant("u", "document", "", "owner") }, names: ["resourceId"] },
  { name: "resourceId of 257 characters", body: { ...grant("u", "document", "d".repeat(257), "owner") }, names: ["resourceId", "256"] },
  { name: "resourceId with DEL", body: { ...grant("u", "document", "d\u007f1", "owner") }, names: ["resourceId", "control"] },
  { name: "resourceId with a C1 control", body: { ...grant("u", "document", "d\u00851", "owner") }, names: ["resourceId", "control"] },
  { name: "relation missing", body: { userId: "u", resource: "document", resourceId: "d1" }, names: ["relation"] },
  { name: "userId missing", body: { resource: "document", resourceId: "d1", relation: "owner" }, names: ["userId"] },
  { name: "an unknown field", body: { ...grant("u", "document", "d1", "owner"), tenantId: "t1" }, names: ["tenantId"] },
  { name: "userId a number", body: { ...grant("u", "document", "d1", "owner"), userId: 7 }, names: ["userId"] },
];

/** Identifiers at the edge of the rules that must be accepted and round-trip through list and delete. */
const oddButValid: { name: string; g: Grant }[] = [
  { name: "userId of 256 characters", g: grant("u".repeat(256), "document", "odd1", "owner") },
  { name: "resourceId of 256 astral characters", g: grant("astral", "document", "📄".repeat(256), "viewer") },
  { name: "URL-hostile resourceId", g: grant("url", "document", "a/b?c&d=e #f%20+g", "editor") },
  { name: "userId with spaces and unicode", g: grant("Zoë Ünïcode <z@x.io>", "document", "odd2", "commenter") },
  { name: "64-character resource and relation", g: grant("long", LONG_RESOURCE, "l1", LONG_RELATION) },
];

/** Query combinations the list refuses, naming the accepted ones. */
const badListQueries: Record<string, string>[] = [
  {},
  { resourceId: "d1" },
  { userId: "ann" },
  { relation: "owner" },
  { userId: "ann", resourceId: "d1" },
  { resourceId: "d1", relation: "owner" },
  { userId: "ann", resource: "document", resourceId: "d1" },
];

describe.each(oneEngine(import.meta.url))("direct grants on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let grpc: GrpcCaller;
  let a: Authz;
  let b: Authz;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    grpc = grpcCaller(service.url);
    a = authz(service, await createApp(service, "grants-a", CATALOG));
    b = authz(service, await createApp(service, "grants-b", CATALOG));
  });
  afterAll(async () => {
    grpc?.close();
    await service?.close();
    await database?.dispose();
  });

  describe("write", () => {
    it("a new grant → 201 with exactly the grant; writing it again → 200 with the stored one, same createdAt", async () => {
      const g = grant("writer", "document", "w1", "owner");
      const before = Date.now();
      const first = await a.write(g);
      expectStatus(first, 201);
      expect(Object.keys(first.body).sort()).toEqual(REL_KEYS);
      expect(first.body).toMatchObject(g);
      const createdAt = Date.parse(first.body.createdAt);
      expect(createdAt).toBeGreaterThanOrEqual(before - 5_000);
      expect(createdAt).toBeLessThanOrEqual(Date.now() + 5_000);

      await new Promise((r) => setTimeout(r, 20));
      const again = await a.write(g);
      expectStatus(again, 200);
      expect(again.body).toEqual(first.body);
      expect(await storedGrants(database.db, "grants-a")).toBeGreaterThan(0);
      const listed = await a.list({ resource: "document", resourceId: "w1" });
      expect(listed.body.relationships).toEqual([first.body]);
    });

    it("the same new grant written ten times at once: exactly one 201, the others 200 with the same stored grant", async () => {
      const g = grant("racer", "document", "w3", "editor");
      const answers = await Promise.all(Array.from({ length: 10 }, () => a.write(g)));
      expect(answers.map((r) => r.status).sort()).toEqual([200, 200, 200, 200, 200, 200, 200, 200, 200, 201]);
      for (const r of answers) expect(r.body).toEqual(answers[0]!.body);
      expect((await a.list({ resource: "document", resourceId: "w3" })).body.relationships).toEqual([answers[0]!.body]);
    });

    it.each(["owner", "editor", "viewer", "commenter", "reviewer"])("built-in and custom relations are accepted: %s", async (relation) => {
      const res = await a.write(grant("rel-user", "document", "w2", relation));
      expectStatus(res, 201);
      expect(res.body.relation).toBe(relation);
    });

    it.each(invalidWrites)("refused: $name → 400 naming it, nothing stored", async ({ body, names }) => {
      const before = await storedGrants(database.db, "grants-a");
      const res = await service.call("POST", "/api/v1/authorization/relationships", { key: a.key, body });
      expectError(res, 400, "invalid_argument", ...names);
      expect(await storedGrants(database.db, "grants-a")).toBe(before);
    });

    it.each(oddButValid)("accepted and round-trips through list and delete: $name", async ({ g }) => {
      const res = await a.write(g);
      expectStatus(res, 201);
      expect(res.body).toMatchObject(g);
      const byInstance = await a.list({ resource: g.resource, resourceId: g.resourceId });
      expectStatus(byInstance, 200);
      expect(byInstance.body.relationships).toEqual([res.body]);
      const byUser = await a.list({ userId: g.userId, resource: g.resource });
      expect(byUser.body.relationships).toContainEqual(res.body);
      expect(await a.allowed(question(g.userId, g.resource, g.resourceId, "read"))).toBe(true);
      expect((await a.delete(g)).body).toEqual({ deleted: true });
      expect((await a.list({ resource: g.resource, resourceId: g.resourceId })).body.relationships).toEqual([]);
    });

    it("over gRPC: created true, then false with the stored grant; invalid → INVALID_ARGUMENT naming it", async () => {
      const g = grant("grpc-user", "document", "g1", "reviewer");
      const first = await grpc.call("RelationshipService", "WriteRelationship", g, a.key);
      expect(first.created).toBe(true);
      expect(first.relationship).toMatchObject(g);
      const again = await grpc.call("RelationshipService", "WriteRelationship", g, a.key);
      expect(again.created).toBe(false);
      expect(again.relationship).toEqual(first.relationship);
      const rest = await a.list({ resource: "document", resourceId: "g1" });
      expect(rest.body.relationships).toHaveLength(1);
      expect(Date.parse(rest.body.relationships[0].createdAt)).toBe(
        Number(first.relationship.createdAt.seconds) * 1000 + Math.floor(first.relationship.createdAt.nanos / 1e6),
      );
      await expectGrpcError(grpc.call("RelationshipService", "WriteRelationship", grant("u", "spaceship", "s", "owner"), a.key), GRPC.INVALID_ARGUMENT, "spaceship");
      await expectGrpcError(grpc.call("RelationshipService", "WriteRelationship", grant("u", "folder", "f", "reviewer"), a.key), GRPC.INVALID_ARGUMENT, "reviewer");
    });
  });

  describe("delete", () => {
    it("an existing grant → {deleted: true}, then {deleted: false}; other grants stay", async () => {
      const g = grant("del-user", "folder", "df1", "viewer");
      const keep = grant("del-user", "folder", "df1", "owner");
      expectStatus(await a.write(g), 201);
      expectStatus(await a.write(keep), 201);
      const first = await a.delete(g);
      expectStatus(first, 200);
      expect(first.body).toEqual({ deleted: true });
      const second = await a.delete(g);
      expectStatus(second, 200);
      expect(second.body).toEqual({ deleted: false });
      expect((await a.list({ resource: "folder", resourceId: "df1" })).body.relationships.map((r: Grant) => r.relation)).toEqual(["owner"]);
    });

    it("a grant that never existed → {deleted: false}", async () => {
      const res = await a.delete(grant("nobody", "document", "never", "viewer"));
      expectStatus(res, 200);
      expect(res.body).toEqual({ deleted: false });
    });

    it.each([
      { name: "resource not in the catalog", g: grant("u", "spaceship", "s1", "owner"), names: ["spaceship"] },
      { name: "relation not defined for the resource", g: grant("u", "folder", "f1", "reviewer"), names: ["reviewer"] },
    ])("$name → 400 naming it", async ({ g, names }) => {
      expectError(await a.delete(g), 400, "invalid_argument", ...names);
    });

    it.each([
      { name: "userId missing", params: { resource: "document", resourceId: "d1", relation: "owner" }, field: "userId" },
      { name: "relation missing", params: { userId: "u", resource: "document", resourceId: "d1" }, field: "relation" },
      { name: "bad resource", params: { userId: "u", resource: "Doc", resourceId: "d1", relation: "owner" }, field: "resource" },
      { name: "resourceId with a control character", params: { userId: "u", resource: "document", resourceId: "d\t1", relation: "owner" }, field: "resourceId" },
      { name: "an unknown query parameter", params: { userId: "u", resource: "document", resourceId: "d1", relation: "owner", force: "true" }, field: "force" },
    ])("malformed: $name → 400 naming $field", async ({ params, field }) => {
      const qs = new URLSearchParams(params as Record<string, string>).toString();
      expectError(await service.call("DELETE", `/api/v1/authorization/relationships?${qs}`, { key: a.key }), 400, "invalid_argument", field);
    });

    it("over gRPC", async () => {
      const g = grant("grpc-del", "document", "gd1", "viewer");
      expectStatus(await a.write(g), 201);
      expect(await grpc.call("RelationshipService", "DeleteRelationship", g, a.key)).toEqual({ deleted: true });
      expect(await grpc.call("RelationshipService", "DeleteRelationship", g, a.key)).toEqual({ deleted: false });
    });
  });

  describe("list", () => {
    // Instance doc l1: six users with various relations; ann also holds grants elsewhere.
    const onL1 = [
      grant("ann", "document", "l1", "owner"),
      grant("bob", "document", "l1", "editor"),
      grant("cat", "document", "l1", "viewer"),
      grant("dan", "document", "l1", "viewer"),
      grant("eve", "document", "l1", "reviewer"),
      grant("ann", "document", "l1", "viewer"),
    ];
    const annElsewhere = [
      grant("ann", "document", "l2", "viewer"),
      grant("ann", "document", "l3", "commenter"),
      grant("ann", "document", "l4", "viewer"),
      grant("ann", "folder", "l1", "owner"),
    ];
    const noise = [grant("bob", "document", "l2", "owner"), grant("zed", "folder", "l1", "viewer")];
    const key = (g: Grant) => `${g.userId}|${g.resource}|${g.resourceId}|${g.relation}`;
    const keys = (gs: Grant[]) => gs.map(key).sort();

    beforeAll(async () => {
      expectStatus(await a.bulk([...onL1, ...annElsewhere, ...noise]), 200);
    });

    it("resource + resourceId: everyone with a relation on that instance, and nothing else", async () => {
      const res = await a.list({ resource: "document", resourceId: "l1" });
      expectStatus(res, 200);
      expect(keys(res.body.relationships)).toEqual(keys(onL1));
      for (const r of res.body.relationships) expect(Object.keys(r).sort()).toEqual(REL_KEYS);
      expect(res.body.nextPageToken ?? "").toBe("");
    });

    it("userId + resource: every instance of that type the user has a relation on", async () => {
      const res = await a.list({ userId: "ann", resource: "document" });
      expectStatus(res, 200);
      const expected = [...onL1, ...annElsewhere].filter((g) => g.userId === "ann" && g.resource === "document");
      expect(keys(res.body.relationships)).toEqual(keys(expected));
    });

    it("resource alone: every grant on instances of that type, in (resourceId, relation, userId) order", async () => {
      const all = await a.listAll({ resource: "document", pageSize: 1000 });
      expect(all.every((g) => g.resource === "document")).toBe(true);
      const ofType = [...onL1, ...annElsewhere, ...noise].filter((g) => g.resource === "document");
      expect(keys(all)).toEqual(expect.arrayContaining(keys(ofType)));
      const order = (g: Grant) => [g.resourceId, g.relation, g.userId];
      const sorted = [...all].sort((x, y) => {
        const [p, q] = [order(x), order(y)];
        for (let i = 0; i < 3; i++) if (p[i] !== q[i]) return p[i]! < q[i]! ? -1 : 1;
        return 0;
      });
      expect(all).toEqual(sorted);
      // The other modes see the same grants: the instance l1's and ann's are all in it.
      expect(keys(all.filter((g) => g.resourceId === "l1"))).toEqual(keys(await a.listAll({ resource: "document", resourceId: "l1" })));
      expect(keys(all.filter((g) => g.userId === "ann"))).toEqual(keys(await a.listAll({ userId: "ann", resource: "document" })));
      // relation narrows it.
      expect(keys(await a.listAll({ resource: "document", relation: "viewer" }))).toEqual(keys(all.filter((g) => g.relation === "viewer")));
      // Another application's grants never show.
      expect(await b.listAll({ resource: "document", relation: "commenter" })).toEqual([]);
    });

    it.each([
      { params: { resource: "document", resourceId: "l1", relation: "viewer" }, expected: () => onL1.filter((g) => g.relation === "viewer") },
      { params: { userId: "ann", resource: "document", relation: "viewer" }, expected: () => [onL1[5]!, annElsewhere[0]!, annElsewhere[2]!] },
      { params: { userId: "ann", resource: "folder", relation: "viewer" }, expected: () => [] },
      { params: { resource: "document", resourceId: "nothing-here" }, expected: () => [] },
      { params: { userId: "ghost", resource: "document" }, expected: () => [] },
    ])("relation filter and empty answers: %j", async ({ params, expected }) => {
      const res = await a.list(params);
      expectStatus(res, 200);
      expect(keys(res.body.relationships)).toEqual(keys(expected()));
    });

    it.each([1, 2, 3, 5, 6, 1000])("paging with pageSize %i walks every grant exactly once", async (pageSize) => {
      for (const params of [
        { resource: "document", resourceId: "l1", pageSize },
        { userId: "ann", resource: "document", pageSize },
        { resource: "document", pageSize },
      ]) {
        const pages: number[] = [];
        let pageToken: string | undefined;
        const seen: Grant[] = [];
        do {
          const res = await a.list({ ...params, pageToken });
          expectStatus(res, 200);
          pages.push(res.body.relationships.length);
          expect(res.body.relationships.length).toBeLessThanOrEqual(pageSize);
          seen.push(...res.body.relationships);
          pageToken = res.body.nextPageToken || undefined;
        } while (pageToken !== undefined && pages.length < 50);
        expect(keys(seen)).toEqual(keys(await a.listAll({ ...params, pageSize: 1000 })));
        expect(new Set(seen.map(key)).size).toBe(seen.length);
        expect(pages.slice(0, -1).every((n) => n === pageSize)).toBe(true);
      }
    });

    it.each(badListQueries)("any other combination → 400 naming the accepted ones: %j", async (params) => {
      expectError(await a.list(params), 400, "invalid_argument", "resourceId", "userId");
    });

    it.each([
      { name: "pageSize 0", params: { pageSize: 0 }, field: "pageSize" },
      { name: "pageSize 1001", params: { pageSize: 1001 }, field: "pageSize" },
      { name: "pageSize -1", params: { pageSize: -1 }, field: "pageSize" },
      { name: "pageSize not a number", params: { pageSize: "ten" }, field: "pageSize" },
      { name: "a forged pageToken", params: { pageToken: "bm90LWEtdG9rZW4" }, field: "pageToken" },
      { name: "an unknown parameter", params: { tenantId: "t1" }, field: "tenantId" },
      { name: "resource not in the catalog", params: { resource: "spaceship" }, field: "spaceship" },
      { name: "relation not of the resource", params: { relation: "reviewer", resource: "folder" }, field: "reviewer" },
      { name: "relation malformed", params: { relation: "Viewer" }, field: "relation" },
    ])("$name → 400 naming it", async ({ params, field }) => {
      for (const base of [{ resource: "document", resourceId: "l1" }, { userId: "ann", resource: "document" }, { resource: "document" }]) {
        expectError(await a.list({ ...base, ...params }), 400, "invalid_argument", field);
      }
    });

    it("a page token of one list mode is refused by the others", async () => {
      const modes = [
        { resource: "document", resourceId: "l1" },
        { userId: "ann", resource: "document" },
        { resource: "document" },
      ];
      const tokens: string[] = [];
      for (const params of modes) {
        const res = await a.list({ ...params, pageSize: 1 });
        expect(res.body.nextPageToken).toBeTruthy();
        tokens.push(res.body.nextPageToken);
      }
      for (const [i, params] of modes.entries()) {
        for (const [j, pageToken] of tokens.entries()) {
          if (i !== j) expectError(await a.list({ ...params, pageToken }), 400, "invalid_argument", "pageToken");
        }
      }
    });

    it("over gRPC: both modes, paging, and the bad combination", async () => {
      const first = await grpc.call("RelationshipService", "ListRelationships", { resource: "document", resourceId: "l1", pageSize: 4 }, a.key);
      expect(first.relationships).toHaveLength(4);
      expect(first.nextPageToken).not.toBe("");
      const rest = await grpc.call("RelationshipService", "ListRelationships", { resource: "document", resourceId: "l1", pageSize: 4, pageToken: first.nextPageToken }, a.key);
      expect(keys([...first.relationships, ...rest.relationships])).toEqual(keys(onL1));
      expect(rest.nextPageToken).toBe("");
      const mine = await grpc.call("RelationshipService", "ListRelationships", { userId: "ann", resource: "folder" }, a.key);
      expect(keys(mine.relationships)).toEqual(keys([annElsewhere[3]!]));
      await expectGrpcError(grpc.call("RelationshipService", "ListRelationships", { userId: "ann" }, a.key), GRPC.INVALID_ARGUMENT, "resourceId", "userId");
    });
  });

  describe("credentials and isolation", () => {
    const g = grant("iso-user", "document", "iso1", "owner");
    const restCalls: { name: string; method: string; path: string; body?: unknown }[] = [
      { name: "write", method: "POST", path: "/api/v1/authorization/relationships", body: g },
      { name: "delete", method: "DELETE", path: "/api/v1/authorization/relationships?userId=u&resource=document&resourceId=d1&relation=owner" },
      { name: "list", method: "GET", path: "/api/v1/authorization/relationships?resource=document&resourceId=d1" },
      { name: "bulk", method: "POST", path: "/api/v1/authorization/relationships/bulk", body: { writes: [g] } },
      { name: "check", method: "POST", path: "/api/v1/authorization/check", body: question("u", "document", "d1", "read") },
      { name: "batch check", method: "POST", path: "/api/v1/authorization/check/batch", body: { checks: [question("u", "document", "d1", "read")] } },
    ];

    it.each(restCalls)("operator key on $name → 403 saying an application key is needed; no key → 401", async ({ method, path, body }) => {
      const before = await storedGrants(database.db, "grants-a");
      expectError(await service.call(method, path, { key: ADMIN_KEY, ...(body ? { body } : {}) }), 403, "permission_denied", "application key");
      expectError(await service.call(method, path, { key: null, ...(body ? { body } : {}) }), 401, "unauthenticated");
      expectError(await service.call(method, path, { key: "not-a-key", ...(body ? { body } : {}) }), 401, "unauthenticated");
      expect(await storedGrants(database.db, "grants-a")).toBe(before);
    });

    it.each([
      { service: "RelationshipService" as const, method: "WriteRelationship", req: g },
      { service: "RelationshipService" as const, method: "ListRelationships", req: { resource: "document", resourceId: "d1" } },
      { service: "RelationshipService" as const, method: "DeleteRelationship", req: g },
      { service: "RelationshipService" as const, method: "BulkWriteRelationships", req: { writes: [g] } },
      { service: "CheckService" as const, method: "Check", req: question("u", "document", "d1", "read") },
      { service: "CheckService" as const, method: "BatchCheck", req: { checks: [question("u", "document", "d1", "read")] } },
    ])("gRPC $method with the operator key → PERMISSION_DENIED", async ({ service: svc, method, req }) => {
      await expectGrpcError(grpc.call(svc, method, req, ADMIN_KEY), GRPC.PERMISSION_DENIED, "application key");
    });

    it("a grant in application A is invisible to B's key: lists, checks, deletes", async () => {
      const written = await a.write(g);
      expectStatus(written, 201);
      expect(await a.allowed(question(g.userId, "document", "iso1", "share"))).toBe(true);

      expect((await b.list({ resource: "document", resourceId: "iso1" })).body.relationships).toEqual([]);
      expect((await b.list({ userId: g.userId, resource: "document" })).body.relationships).toEqual([]);
      expect(await b.allowed(question(g.userId, "document", "iso1", "share"))).toBe(false);
      expect((await b.batch([question(g.userId, "document", "iso1", "read")])).body).toEqual({ results: [{ allowed: false }] });
      expect(await grpc.call("CheckService", "Check", question(g.userId, "document", "iso1", "read"), b.key)).toEqual({ allowed: false });
      // B deleting "the same" grant deletes nothing in A.
      expect((await b.delete(g)).body).toEqual({ deleted: false });
      expect(await a.allowed(question(g.userId, "document", "iso1", "share"))).toBe(true);
      // B writing it creates B's own (201), A's stays as it was.
      expectStatus(await b.write(g), 201);
      expect((await a.list({ resource: "document", resourceId: "iso1" })).body.relationships).toEqual([written.body]);
      expect((await b.delete(g)).body).toEqual({ deleted: true });
      expect((await a.list({ resource: "document", resourceId: "iso1" })).body.relationships).toEqual([written.body]);
      // B's bulk delete cannot reach it either.
      expect((await b.bulk([], [g])).body).toMatchObject({ deleted: 0 });
      expect(await a.allowed(question(g.userId, "document", "iso1", "read"))).toBe(true);
    });

    it("B's catalog decides B's grants: a resource only A has is unknown to B's key", async () => {
      const only = await createApp(service, "grants-c", [{ resource: "folder", description: "", actions: ["read"] }]);
      const c = authz(service, only);
      expectError(await c.write(grant("u", "document", "d1", "owner")), 400, "invalid_argument", "document");
      expectError(await c.list({ resource: "document", resourceId: "d1" }), 400, "invalid_argument", "document");
    });
  });

  describe("catalog changes that would orphan grants (409)", () => {
    const docWithout = (relations: unknown[]) => ({ ...CATALOG[0]!, relations });
    const folder = CATALOG[1]!;
    const cases: {
      name: string;
      grants: Grant[];
      next: unknown[];
      names: string[];
      details: Record<string, unknown>[];
    }[] = [
      {
        name: "dropping a resource type grants use",
        grants: [grant("u1", "folder", "f1", "viewer"), grant("u2", "folder", "f2", "owner")],
        next: [CATALOG[0]!],
        names: ["folder"],
        details: [{ resource: "folder" }],
      },
      {
        name: "dropping a custom relation grants use",
        grants: [grant("u1", "document", "d1", "reviewer")],
        next: [docWithout([]), folder],
        names: ["document", "reviewer"],
        details: [{ resource: "document", relation: "reviewer" }],
      },
      {
        name: "renaming a custom relation grants use",
        grants: [grant("u1", "document", "d1", "reviewer"), grant("u1", "document", "d1", "owner")],
        next: [docWithout([{ name: "critic", actions: ["read", "comment"] }]), folder],
        names: ["reviewer"],
        details: [{ resource: "document", relation: "reviewer" }],
      },
      {
        name: "dropping a resource and a custom relation, both used: both named",
        grants: [grant("u1", "document", "d1", "reviewer"), grant("u3", "folder", "f1", "editor")],
        next: [docWithout([])],
        names: ["folder", "reviewer"],
        details: [{ resource: "folder" }, { resource: "document", relation: "reviewer" }],
      },
      {
        name: "dropping every resource",
        grants: [grant("u1", "document", "d1", "owner")],
        next: [],
        names: ["document"],
        details: [{ resource: "document" }],
      },
    ];

    it.each(cases.map((c, i) => ({ ...c, i })))("$name → 409 naming them, nothing changes; accepted once the grants are gone", async ({ i, grants, next, names, details }) => {
      const appId = `orphan-${i}`;
      const x = authz(service, await createApp(service, appId, CATALOG));
      const ops = admin(service, appId);
      const [first, ...more] = grants;
      expectStatus(await x.write(first!), 201); // one single write
      if (more.length > 0) expectStatus(await x.bulk(more), 200); // the rest in bulk
      const before = await ops.getCatalog();

      const refused = await ops.putCatalog(next);
      expectError(refused, 409, "failed_precondition", ...names);
      for (const d of details) expect(refused.body.details).toContainEqual(expect.objectContaining(d));
      expect(await ops.getCatalog()).toEqual(before);
      expect(await storedGrants(database.db, appId)).toBe(grants.length);
      // The grants still work.
      for (const g of grants) expect(await x.allowed(question(g.userId, g.resource, g.resourceId, "read"))).toBe(true);
      // And over gRPC: FAILED_PRECONDITION.
      await expectGrpcError(grpc.call("CatalogService", "PutCatalog", { appId, resources: next }, ADMIN_KEY), GRPC.FAILED_PRECONDITION, ...names);

      // Deleting all but one still blocks.
      for (const g of more) expect((await x.delete(g)).body).toEqual({ deleted: true });
      expectError(await ops.putCatalog(next), 409, "failed_precondition");
      expect(await ops.getCatalog()).toEqual(before);
      // Once the last is gone the same catalog is accepted.
      expect((await x.delete(first!)).body).toEqual({ deleted: true });
      const accepted = await ops.putCatalog(next);
      expectStatus(accepted, 200);
      expect(await ops.getCatalog()).toEqual(accepted.body.resources);
    });

    it("not an orphan: dropping a redefinition of a built-in leaves the built-in, so its grants stay and follow the built-in", async () => {
      const appId = "orphan-builtin";
      const x = authz(service, await createApp(service, appId, [
        { resource: "board", description: "", actions: ["read", "list", "update"], relations: [{ name: "viewer", actions: ["update"] }] },
      ]));
      expectStatus(await x.write(grant("val", "board", "b1", "viewer")), 201);
      expect(await x.allowed(question("val", "board", "b1", "update"))).toBe(true);
      expect(await x.allowed(question("val", "board", "b1", "list"))).toBe(false);
      expectStatus(await admin(service, appId).putCatalog([{ resource: "board", description: "", actions: ["read", "list", "update"] }]), 200);
      expect(await x.allowed(question("val", "board", "b1", "update"))).toBe(false);
      expect(await x.allowed(question("val", "board", "b1", "list"))).toBe(true);
    });

    it("not an orphan: dropping an action a granted relation implies, or an unused relation, is accepted", async () => {
      const appId = "orphan-action";
      const x = authz(service, await createApp(service, appId, CATALOG));
      expectStatus(await x.write(grant("own", "document", "d1", "owner")), 201);
      const next = [{ ...CATALOG[0]!, actions: ["create", "read", "update", "delete", "list", "comment"], relations: [] }, CATALOG[1]!];
      expectStatus(await admin(service, appId).putCatalog(next), 200);
      expect(await x.allowed(question("own", "document", "d1", "delete"))).toBe(true);
      expectError(await x.check(question("own", "document", "d1", "share")), 400, "invalid_argument", "share");
    });

    it("grant writes racing catalog changes that drop their resource never leave an orphan", async () => {
      const appId = "orphan-race";
      const x = authz(service, await createApp(service, appId, CATALOG));
      const ops = admin(service, appId);
      for (let round = 0; round < 6; round++) {
        expectStatus(await ops.putCatalog(CATALOG), 200);
        const writes = Array.from({ length: 50 }, (_, i) => grant(`u${i}`, "folder", `race${round}`, "viewer"));
        const [bulk, single, put] = await Promise.all([
          x.bulk(writes),
          x.write(grant("solo", "folder", `race${round}`, "owner")),
          ops.putCatalog([CATALOG[0]!]),
        ]);
        // Each either happened or was refused for the right reason.
        expect([200, 400], JSON.stringify(bulk.body)).toContain(bulk.status);
        expect([201, 400], JSON.stringify(single.body)).toContain(single.status);
        expect([200, 409], JSON.stringify(put.body)).toContain(put.status);
        const catalog = (await ops.getCatalog()) as { resource: string }[];
        const { rows } = await database.db.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM relationships WHERE app_id = $1 AND resource = 'folder'",
          [appId],
        );
        const folderGrants = Number(rows[0]!.n);
        if (!catalog.some((r) => r.resource === "folder")) expect(folderGrants).toBe(0);
        if (put.status === 200) {
          expect(bulk.status).toBe(400);
          expect(single.status).toBe(400);
        } else {
          expect(folderGrants).toBeGreaterThan(0);
        }
        // Clean up for the next round (folder back in the catalog first, so its grants can be named).
        expectStatus(await ops.putCatalog(CATALOG), 200);
        expectStatus(await x.bulk([], await x.listAll({ resource: "folder", resourceId: `race${round}` })), 200);
      }
    });
  });
});
