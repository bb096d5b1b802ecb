/**
 * Everyone (API.md, "Conditions and AuthZEN": a relation whose subjects
 * include "user:*" may be granted with allUsers: true, and every user holds
 * it) through the API, on each engine: the catalog's word for it, writes
 * (single, bulk, delete, delete by filter) and what they refuse, the lists,
 * every question (check, batch, permissions, explain, lookup, who can) in a
 * flat catalog and through subject sets and links, conditions and expiry on
 * an allUsers grant, the change feed, the catalog's refusal to strand one,
 * and gRPC. The file runs on the Citus leg too (scripts/test-citus.mjs).
 */
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CheckService } from "../gen/authz/v1/check_pb.js";
import { RelationshipService } from "../gen/authz/v1/relationships_pb.js";
import { admin, createApp, expectError, expectStatus, queryString } from "./helpers/authz.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { ALL_USERS_CATALOG, everyone, set, user } from "./support/graph.js";
import { startTestService, type RestAnswer, type TestService } from "./support/service.js";

const REL = "/api/v1/authorization/relationships";

/**
 * A flat catalog: documents anyone may be given to read ("user:*" beside
 * "user"), an editor only users hold, and a resource named `user` (whose
 * name does not change what "user" and "user:*" mean in subjects).
 */
const FLAT = [
  {
    resource: "doc",
    description: "",
    actions: ["read", "update", "delete"],
    relations: [
      { name: "viewer", actions: ["read"], subjects: ["user", "user:*"] },
      { name: "publisher", actions: ["read", "update"], subjects: ["user:*"] },
    ],
  },
  { resource: "user", description: "profiles", actions: ["read"], relations: [{ name: "viewer", actions: ["read"], subjects: ["user:*", "user"] }] },
];

describe.each(engines)("allUsers grants on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;
  let graphKey: string;

  const as = (k: () => string) => (method: string, path: string, body?: unknown) => service.call(method, path, { key: k(), ...(body === undefined ? {} : { body }) });
  const call = as(() => key);
  const graphCall = as(() => graphKey);
  const ok = async (answer: Promise<RestAnswer>, status = 200) => {
    const res = await answer;
    expectStatus(res, status);
    return res.body;
  };
  const allowed = async (c: typeof call, userId: string, resource: string, resourceId: string, action: string, extra: object = {}) =>
    (await ok(c("POST", "/api/v1/authorization/check", { userId, resource, resourceId, action, ...extra }))).allowed as boolean;
  const pages = async (c: typeof call, path: string, body: object, field: string, pageSize: number) => {
    const ids: string[] = [];
    const flags: boolean[] = [];
    let pageToken = "";
    for (let i = 0; i < 1000; i++) {
      const page = await ok(c("POST", path, { ...body, pageSize, pageToken }));
      ids.push(...(page[field] as string[]));
      flags.push(page.allUsers === true);
      pageToken = page.nextPageToken as string;
      if (pageToken === "") return { ids, flags };
    }
    throw new Error(`${path} never ended`);
  };

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    service = await startTestService(database.db);
    key = await createApp(service, "everyone", FLAT);
    graphKey = await createApp(service, "everyone-graph", ALL_USERS_CATALOG);
  }, 60_000);
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  describe("the catalog", () => {
    it('takes "user:*" in a relation\'s subjects and answers it as given', async () => {
      const catalog = await ok(service.call("GET", "/api/v1/applications/everyone/resources"));
      const doc = (catalog.resources as { resource: string; relations: { name: string; subjects: string[] }[] }[]).find((r) => r.resource === "doc")!;
      expect(doc.relations.find((r) => r.name === "viewer")!.subjects).toEqual(["user", "user:*"]);
      expect(doc.relations.find((r) => r.name === "publisher")!.subjects).toEqual(["user:*"]);
      // Built-ins keep users only.
      expect(doc.relations.find((r) => r.name === "editor")!.subjects).toEqual(["user"]);
    });

    it.each([
      { name: "a resource with *", subjects: ["user", "doc:*"], field: "resources[0].relations[0].subjects[1]", fragment: '"user:*" (every user) is the only one with "*"' },
      { name: "user with an id", subjects: ["user:alice"], field: "resources[0].relations[0].subjects[0]", fragment: "is not a subject" },
      { name: "user:* listed twice", subjects: ["user:*", "user:*"], field: "resources[0].relations[0].subjects[1]", fragment: "listed twice" },
      { name: "user:* in a link relation", subjects: ["doc", "user:*"], field: "resources[0].relations[0].subjects", fragment: "a link relation names resources only" },
      { name: "a star alone", subjects: ["*"], field: "resources[0].relations[0].subjects[0]", fragment: "is not a subject" },
    ])("refuses $name: 400 naming the subject", async ({ subjects, field, fragment }) => {
      const res = await service.call("PUT", "/api/v1/applications/everyone/resources", {
        body: { resources: [{ resource: "doc", description: "", actions: ["read"], relations: [{ name: "viewer", actions: ["read"], subjects }] }] },
      });
      expectError(res, 400, "invalid_argument", field, fragment);
    });

    it("a model exported with user:* applies to another application unchanged", async () => {
      const exported = await ok(service.call("GET", "/api/v1/applications/everyone/model"));
      await createApp(service, "everyone-copy", []);
      expectStatus(await service.call("PUT", "/api/v1/applications/everyone-copy/model", { body: exported }), 200);
      const copied = await ok(service.call("GET", "/api/v1/applications/everyone-copy/model"));
      expect(copied.catalog).toEqual(exported.catalog);
      expect(JSON.stringify(copied.catalog)).toContain('"user:*"');
    });
  });

  describe("writes and lists", () => {
    it("a single write: 201 with allUsers and no userId, 200 the second time; listed by instance and by allUsers", async () => {
      const first = await call("POST", REL, everyone("doc", "public-1", "viewer"));
      expectStatus(first, 201);
      expect(first.body).toMatchObject({ userId: "", allUsers: true, resource: "doc", resourceId: "public-1", relation: "viewer" });
      expect(first.body.subject).toBeUndefined();
      const again = await call("POST", REL, everyone("doc", "public-1", "viewer"));
      expectStatus(again, 200);
      expect(again.body.createdAt).toBe(first.body.createdAt);
      expectStatus(await call("POST", REL, { userId: "ann", resource: "doc", resourceId: "public-1", relation: "viewer" }), 201);
      const byInstance = await ok(call("GET", REL + queryString({ resource: "doc", resourceId: "public-1" })));
      // The allUsers grant first among the relation's holders, then users by id; a user's grant says allUsers false.
      expect((byInstance.relationships as Record<string, unknown>[]).map((r) => [r.userId, r.allUsers])).toEqual([
        ["", true],
        ["ann", false],
      ]);
      const byAll = await ok(call("GET", `${REL}?allUsers=true&resource=doc`));
      expect((byAll.relationships as Record<string, unknown>[]).map((r) => r.resourceId)).toEqual(["public-1"]);
      // A user's list holds the user's grants only.
      const ann = await ok(call("GET", REL + queryString({ userId: "ann", resource: "doc" })));
      expect((ann.relationships as Record<string, unknown>[]).map((r) => [r.resourceId, r.allUsers])).toEqual([["public-1", false]]);
    });

    it("bulk writes and deletes them, unchanged on a repeat, in one call with user grants", async () => {
      const writes = [everyone("doc", "b1", "viewer"), everyone("doc", "b2", "publisher"), { userId: "bo", resource: "doc", resourceId: "b1", relation: "viewer" }];
      expect(await ok(call("POST", `${REL}/bulk`, { writes }))).toEqual({ written: 3, unchanged: 0, deleted: 0 });
      expect(await ok(call("POST", `${REL}/bulk`, { writes }))).toEqual({ written: 0, unchanged: 3, deleted: 0 });
      expect(await allowed(call, "anyone-at-all", "doc", "b2", "update")).toBe(true);
      expect(await ok(call("POST", `${REL}/bulk`, { writes: [], deletes: [everyone("doc", "b2", "publisher")] }))).toEqual({ written: 0, unchanged: 0, deleted: 1 });
      expect(await allowed(call, "anyone-at-all", "doc", "b2", "update")).toBe(false);
      expect(await allowed(call, "anyone-at-all", "doc", "b1", "read")).toBe(true);
    });

    it("bulk at the limit: 5,000 allUsers grants in one call, one transaction; 5,001 refused whole; lookup pages through them for anyone", async () => {
      const writes = Array.from({ length: 5000 }, (_, i) => everyone("user", `pub-${String(i).padStart(4, "0")}`, "viewer"));
      expect(await ok(call("POST", `${REL}/bulk`, { writes }))).toEqual({ written: 5000, unchanged: 0, deleted: 0 });
      const over = await call("POST", `${REL}/bulk`, { writes: [...writes, everyone("user", "one-more", "viewer")] });
      expectError(over, 400, "invalid_argument", "at most 5000 entries");
      expect((await ok(call("GET", REL + queryString({ resource: "user", resourceId: "one-more" })))).relationships).toEqual([]);
      const page = await ok(call("POST", "/api/v1/authorization/lookup", { userId: "someone", resource: "user", action: "read", pageSize: 1000 }));
      expect((page.resourceIds as string[]).slice(0, 2)).toEqual(["pub-0000", "pub-0001"]);
      expect(page.resourceIds).toHaveLength(1000);
      const last = await ok(call("POST", "/api/v1/authorization/lookup", { userId: "someone", resource: "user", action: "read", pageSize: 1000, pageToken: page.nextPageToken }));
      expect((last.resourceIds as string[])[0]).toBe("pub-1000");
      expect(await ok(call("POST", `${REL}/delete`, { allUsers: true, resource: "user" }))).toEqual({ deleted: 5000 });
    });

    it("the single delete takes allUsers=true; delete by filter takes allUsers alone or with resource", async () => {
      expectStatus(await call("POST", REL, everyone("doc", "d1", "viewer")), 201);
      expectStatus(await call("POST", REL, everyone("doc", "d2", "viewer")), 201);
      expectStatus(await call("POST", REL, everyone("user", "profile-1", "viewer")), 201);
      expectStatus(await call("POST", REL, { userId: "cy", resource: "doc", resourceId: "d1", relation: "viewer" }), 201);
      expect(await ok(call("DELETE", `${REL}?allUsers=true&resource=doc&resourceId=d1&relation=viewer`))).toEqual({ deleted: true });
      expect(await ok(call("DELETE", `${REL}?allUsers=true&resource=doc&resourceId=d1&relation=viewer`))).toEqual({ deleted: false });
      expect(await allowed(call, "cy", "doc", "d1", "read")).toBe(true); // cy's own grant stays
      expect(await allowed(call, "dee", "doc", "d1", "read")).toBe(false);
      expect(await ok(call("POST", `${REL}/delete`, { allUsers: true, resource: "doc", relation: "viewer", resourceId: undefined }))).toMatchObject({ deleted: expect.any(Number) });
      expect(await allowed(call, "dee", "doc", "d2", "read")).toBe(false);
      expect(await allowed(call, "dee", "user", "profile-1", "read")).toBe(true);
      expect(await ok(call("POST", `${REL}/delete`, { allUsers: true }))).toMatchObject({ deleted: expect.any(Number) });
      expect(await allowed(call, "dee", "user", "profile-1", "read")).toBe(false);
      expect(await allowed(call, "cy", "doc", "d1", "read")).toBe(true);
    });

    it.each([
      { name: "allUsers with a userId", body: { ...everyone("doc", "x", "viewer"), userId: "ann" }, field: "allUsers", fragment: "exactly one of them" },
      { name: "allUsers with a subject", body: { ...everyone("doc", "x", "viewer"), subject: { resource: "doc", resourceId: "y" } }, field: "allUsers", fragment: "exactly one of them" },
      { name: "allUsers on a relation without user:*", body: everyone("doc", "x", "editor"), field: "allUsers", fragment: 'lists "user:*" in its subjects' },
      { name: "allUsers on a built-in of another resource", body: everyone("user", "x", "owner"), field: "allUsers", fragment: "held by a userId" },
      { name: "a userId where only user:* is taken", body: { userId: "ann", resource: "doc", resourceId: "x", relation: "publisher" }, field: "userId", fragment: "held by allUsers: true (every user)" },
      { name: "allUsers false and no other holder", body: { allUsers: false, resource: "doc", resourceId: "x", relation: "viewer" }, field: "userId", fragment: "by allUsers: true" },
      { name: "allUsers as a string", body: { allUsers: "true", resource: "doc", resourceId: "x", relation: "viewer" }, field: "allUsers", fragment: "" },
      { name: "allUsers as a number", body: { allUsers: 1, resource: "doc", resourceId: "x", relation: "viewer" }, field: "allUsers", fragment: "" },
      { name: "a link to the resource named user (user means user ids)", body: { subject: { resource: "user", resourceId: "u1" }, resource: "doc", resourceId: "x", relation: "viewer" }, field: "subject", fragment: '"user" means user ids' },
      { name: "a link to a resource named user where only users are taken", body: { subject: { resource: "user", resourceId: "u1" }, resource: "doc", resourceId: "x", relation: "editor" }, field: "subject", fragment: "not a linked user" },
    ])("a single write with $name → 400 naming $field, nothing written", async ({ body, field, fragment }) => {
      const res = await call("POST", REL, body);
      expectError(res, 400, "invalid_argument", field, fragment);
      expect((await ok(call("GET", REL + queryString({ resource: "doc", resourceId: "x" })))).relationships).toEqual([]);
    });

    it("bulk: every bad allUsers entry named by its index, nothing written", async () => {
      const res = await call("POST", `${REL}/bulk`, {
        writes: [everyone("doc", "ok", "viewer"), { ...everyone("doc", "x", "viewer"), userId: "ann" }, everyone("doc", "x", "editor")],
        deletes: [{ ...everyone("doc", "y", "viewer"), subject: { resource: "doc", resourceId: "z" } }, everyone("doc", "ok", "viewer")],
      });
      expectError(res, 400, "invalid_argument", "writes[1].allUsers", "writes[2].allUsers", "deletes[0].allUsers", "deletes[1]");
      expect(res.body.details).toEqual(
        expect.arrayContaining([expect.objectContaining({ list: "writes", index: 1, field: "writes[1].allUsers" }), expect.objectContaining({ list: "writes", index: 2 })]),
      );
      expect((await ok(call("GET", REL + queryString({ resource: "doc", resourceId: "ok" })))).relationships).toEqual([]);
    });

    it.each([
      { name: "the single delete on a relation without user:*", method: "DELETE", path: `${REL}?allUsers=true&resource=doc&resourceId=x&relation=editor`, field: "allUsers" },
      { name: "the single delete with a userId too", method: "DELETE", path: `${REL}?allUsers=true&userId=ann&resource=doc&resourceId=x&relation=viewer`, field: "allUsers" },
      { name: "allUsers=yes", method: "DELETE", path: `${REL}?allUsers=yes&resource=doc&resourceId=x&relation=viewer`, field: "allUsers" },
      { name: "a list with allUsers and resourceId", method: "GET", path: `${REL}?allUsers=true&resource=doc&resourceId=x`, field: "allUsers" },
      { name: "a list with allUsers and userId", method: "GET", path: `${REL}?allUsers=true&userId=ann&resource=doc`, field: "allUsers" },
      { name: "a list with allUsers and a subject", method: "GET", path: `${REL}?allUsers=true&subjectResource=doc&subjectResourceId=y&resource=doc`, field: "query" },
      { name: "delete by filter with allUsers and userId", method: "POST", path: `${REL}/delete`, body: { allUsers: true, userId: "ann" }, field: "filter" },
      { name: "delete by filter with allUsers and resourceId", method: "POST", path: `${REL}/delete`, body: { allUsers: true, resource: "doc", resourceId: "x" }, field: "filter" },
      { name: "delete by filter with allUsers and a subject", method: "POST", path: `${REL}/delete`, body: { allUsers: true, subject: { resource: "doc", resourceId: "y" } }, field: "subject" },
    ])("$name → 400 naming $field", async ({ method, path, body, field }) => {
      const res = await call(method, path, body);
      expectError(res, 400, "invalid_argument");
      expect(res.body.details).toContainEqual(expect.objectContaining({ field }));
    });

    it('no user id is the allUsers one: "" is refused everywhere a user is named, and a user called "*" is only that user', async () => {
      expectError(await call("POST", "/api/v1/authorization/check", { userId: "", resource: "doc", resourceId: "x", action: "read" }), 400, "invalid_argument", "userId");
      expectError(await call("POST", "/api/v1/authorization/lookup", { userId: "", resource: "doc", action: "read" }), 400, "invalid_argument", "userId");
      expectError(await call("POST", `${REL}/delete`, { userId: "" }), 400, "invalid_argument");
      expectStatus(await call("POST", REL, { userId: "*", resource: "doc", resourceId: "star", relation: "viewer" }), 201);
      expectStatus(await call("POST", REL, { userId: "user:*", resource: "doc", resourceId: "star", relation: "viewer" }), 201);
      expect(await allowed(call, "*", "doc", "star", "read")).toBe(true);
      expect(await allowed(call, "someone", "doc", "star", "read")).toBe(false);
      const who = await ok(call("POST", "/api/v1/authorization/subjects", { resource: "doc", resourceId: "star", action: "read" }));
      expect(who).toMatchObject({ userIds: ["*", "user:*"], allUsers: false });
    });
  });

  describe("questions in a flat catalog", () => {
    beforeAll(async () => {
      await ok(call("POST", `${REL}/bulk`, {
        writes: [everyone("doc", "q-pub", "viewer"), everyone("doc", "q-both", "viewer"), { userId: "ann", resource: "doc", resourceId: "q-both", relation: "owner" }, { userId: "ann", resource: "doc", resourceId: "q-own", relation: "viewer" }],
      }));
    });

    it.each([
      { userId: "ann", resourceId: "q-pub", action: "read", allowed: true },
      { userId: "never-seen-before", resourceId: "q-pub", action: "read", allowed: true },
      { userId: "never-seen-before", resourceId: "q-pub", action: "update", allowed: false },
      { userId: "never-seen-before", resourceId: "q-own", action: "read", allowed: false },
      { userId: "ann", resourceId: "q-both", action: "delete", allowed: true },
      { userId: "bob", resourceId: "q-both", action: "delete", allowed: false },
      { userId: "bob", resourceId: "q-both", action: "read", allowed: true },
      { userId: "a\u00e9\u{1F600}", resourceId: "q-pub", action: "read", allowed: true },
    ])("check $userId $action doc:$resourceId → $allowed; batch and permissions agree", async ({ userId, resourceId, action, allowed: expected }) => {
      expect(await allowed(call, userId, "doc", resourceId, action)).toBe(expected);
      const batch = await ok(call("POST", "/api/v1/authorization/check/batch", { checks: [{ userId, resource: "doc", resourceId, action }, { userId, resource: "doc", resourceId: "nothing", action }] }));
      expect(batch.results).toEqual([{ allowed: expected }, { allowed: false }]);
      const permissions = await ok(call("POST", "/api/v1/authorization/permissions", { userId, resource: "doc", resourceId }));
      expect((permissions.actions as string[]).includes(action)).toBe(expected);
    });

    it("explain shows the allUsers grant as one (userId empty, allUsers true); a user's own grant of the same relation is preferred", async () => {
      const pub = await ok(call("POST", "/api/v1/authorization/check/explain", { userId: "zed", resource: "doc", resourceId: "q-pub", action: "read" }));
      expect(pub.allowed).toBe(true);
      expect(pub.reasons).toEqual([
        {
          kind: "relation",
          relation: "viewer",
          grant: expect.objectContaining({ userId: "", allUsers: true, resource: "doc", resourceId: "q-pub", relation: "viewer" }),
          path: [expect.objectContaining({ userId: "", allUsers: true })],
          requires: [],
        },
      ]);
      expect(pub.considered).toMatchObject({ relations: [{ relation: "viewer", actions: ["read"] }] });
      expectStatus(await call("POST", REL, { userId: "zed", resource: "doc", resourceId: "q-pub", relation: "viewer" }), 201);
      const own = await ok(call("POST", "/api/v1/authorization/check/explain", { userId: "zed", resource: "doc", resourceId: "q-pub", action: "read" }));
      expect((own.reasons as { grant: Record<string, unknown> }[])[0]!.grant).toMatchObject({ userId: "zed", allUsers: false });
      expectStatus(await call("DELETE", REL + queryString({ userId: "zed", resource: "doc", resourceId: "q-pub", relation: "viewer" })), 200);
    });

    it("lookup lists the allUsers instances among the user's own, in order and paged, for any user", async () => {
      for (const pageSize of [1, 2, 100]) {
        expect((await pages(call, "/api/v1/authorization/lookup", { userId: "ann", resource: "doc", action: "read" }, "resourceIds", pageSize)).ids.filter((id) => id.startsWith("q-"))).toEqual([
          "q-both",
          "q-own",
          "q-pub",
        ]);
      }
      const stranger = await pages(call, "/api/v1/authorization/lookup", { userId: "stranger", resource: "doc", action: "read" }, "resourceIds", 1);
      expect(stranger.ids.filter((id) => id.startsWith("q-"))).toEqual(["q-both", "q-pub"]);
      expect(new Set(stranger.ids).size).toBe(stranger.ids.length);
      // An action only the owner's relation implies: the public instances are not in it.
      expect((await pages(call, "/api/v1/authorization/lookup", { userId: "stranger", resource: "doc", action: "delete" }, "resourceIds", 2)).ids).toEqual([]);
    });

    it("who can answers allUsers beside the ids it lists, on every page", async () => {
      const both = await pages(call, "/api/v1/authorization/subjects", { resource: "doc", resourceId: "q-both", action: "read" }, "userIds", 1);
      expect(both.ids).toEqual(["ann"]);
      expect(both.flags.every(Boolean)).toBe(true);
      const pub = await ok(call("POST", "/api/v1/authorization/subjects", { resource: "doc", resourceId: "q-pub", action: "read" }));
      expect(pub).toEqual({ userIds: [], nextPageToken: "", allUsers: true, conditional: [], allUsersConditions: [] });
      expect(await ok(call("POST", "/api/v1/authorization/subjects", { resource: "doc", resourceId: "q-pub", action: "update" }))).toEqual({
        userIds: [],
        nextPageToken: "",
        allUsers: false,
        conditional: [],
        allUsersConditions: [],
      });
      expect((await ok(call("POST", "/api/v1/authorization/subjects", { resource: "doc", resourceId: "q-own", action: "read" }))).allUsers).toBe(false);
    });
  });

  describe("conditions and expiry", () => {
    it("a conditional allUsers grant counts for each user where its condition holds; lookup and who can count it not", async () => {
      const g = { ...everyone("doc", "staff-only", "viewer"), condition: "subject.id.startsWith('staff-')" };
      const written = await call("POST", REL, g);
      expectStatus(written, 201);
      expect(written.body).toMatchObject({ allUsers: true, condition: g.condition });
      expect(await allowed(call, "staff-1", "doc", "staff-only", "read")).toBe(true);
      expect(await allowed(call, "guest", "doc", "staff-only", "read")).toBe(false);
      const explained = await ok(call("POST", "/api/v1/authorization/check/explain", { userId: "staff-2", resource: "doc", resourceId: "staff-only", action: "read" }));
      expect(explained.allowed).toBe(true);
      expect(explained.conditions).toEqual([expect.objectContaining({ relation: "viewer", condition: g.condition, holds: true })]);
      expect((explained.reasons as { grant: Record<string, unknown> }[])[0]!.grant).toMatchObject({ allUsers: true, condition: g.condition });
      expect((await ok(call("POST", "/api/v1/authorization/subjects", { resource: "doc", resourceId: "staff-only", action: "read" }))).allUsers).toBe(false);
      expect((await pages(call, "/api/v1/authorization/lookup", { userId: "staff-1", resource: "doc", action: "read" }, "resourceIds", 100)).ids).not.toContain("staff-only");
      // Written again without it: every user.
      expectStatus(await call("POST", REL, everyone("doc", "staff-only", "viewer")), 200);
      expect(await allowed(call, "guest", "doc", "staff-only", "read")).toBe(true);
    });

    it("an expiring allUsers grant counts until its instant, then nowhere", async () => {
      const expiresAt = new Date(Date.now() + 1500).toISOString();
      expectStatus(await call("POST", REL, { ...everyone("doc", "soon", "viewer"), expiresAt }), 201);
      expect(await allowed(call, "guest", "doc", "soon", "read")).toBe(true);
      expect((await ok(call("POST", "/api/v1/authorization/subjects", { resource: "doc", resourceId: "soon", action: "read" }))).allUsers).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, Date.parse(expiresAt) - Date.now() + 100)));
      expect(await allowed(call, "guest", "doc", "soon", "read")).toBe(false);
      expect((await ok(call("POST", "/api/v1/authorization/subjects", { resource: "doc", resourceId: "soon", action: "read" }))).allUsers).toBe(false);
      expect((await ok(call("GET", `${REL}?allUsers=true&resource=doc&relation=viewer`))).relationships).not.toContainEqual(expect.objectContaining({ resourceId: "soon" }));
      expect((await ok(call("GET", `${REL}?allUsers=true&resource=doc&relation=viewer&includeExpired=true`))).relationships).toContainEqual(
        expect.objectContaining({ resourceId: "soon", allUsers: true }),
      );
    });
  });

  describe("hierarchy: an allUsers grant on a path", () => {
    beforeAll(async () => {
      await ok(graphCall("POST", `${REL}/bulk`, {
        writes: [
          // A public folder: its documents inherit its viewer.
          everyone("folder", "public", "viewer"),
          set("folder:public", "folder", "sub", "parent"),
          set("folder:sub", "document", "in-sub", "parent"),
          set("folder:private", "document", "in-private", "parent"),
          user("ann", "folder", "private", "viewer"),
          // A team everyone is in: what it may do, everyone may.
          everyone("team", "all-hands", "member"),
          set("team:all-hands#member", "document", "handbook", "viewer"),
          set("team:all-hands#member", "team", "nested", "member"),
          set("team:nested#member", "document", "nested-doc", "editor"),
          user("bob", "document", "handbook", "editor"),
        ],
      }));
    });

    it.each([
      { userId: "anyone", resourceId: "in-sub", action: "read", allowed: true, hops: 2 },
      { userId: "anyone", resourceId: "in-sub", action: "update", allowed: false, hops: undefined },
      { userId: "anyone", resourceId: "in-private", action: "read", allowed: false, hops: undefined },
      { userId: "ann", resourceId: "in-private", action: "read", allowed: true, hops: 1 },
      { userId: "anyone", resourceId: "handbook", action: "read", allowed: true, hops: 1 },
      { userId: "anyone", resourceId: "nested-doc", action: "update", allowed: true, hops: 2 },
      { userId: "bob", resourceId: "handbook", action: "update", allowed: true, hops: 0 },
      { userId: "anyone", resourceId: "handbook", action: "update", allowed: false, hops: undefined },
    ])("check $userId $action document:$resourceId → $allowed (explain's path: $hops hops)", async ({ userId, resourceId, action, allowed: expected, hops }) => {
      expect(await allowed(graphCall, userId, "document", resourceId, action)).toBe(expected);
      const permissions = await ok(graphCall("POST", "/api/v1/authorization/permissions", { userId, resource: "document", resourceId }));
      expect((permissions.actions as string[]).includes(action)).toBe(expected);
      const explained = await ok(graphCall("POST", "/api/v1/authorization/check/explain", { userId, resource: "document", resourceId, action }));
      expect(explained.allowed).toBe(expected);
      if (hops === undefined) return;
      const paths = (explained.reasons as { path: Record<string, unknown>[] }[]).map((r) => r.path);
      const shortest = paths.reduce((a, b) => (b.length < a.length ? b : a));
      expect(shortest.length - 1).toBe(hops);
      if (userId === "anyone") expect(shortest[0]).toMatchObject({ userId: "", allUsers: true });
    });

    it("lookup reaches through the allUsers grants, for any user", async () => {
      expect((await pages(graphCall, "/api/v1/authorization/lookup", { userId: "anyone", resource: "document", action: "read" }, "resourceIds", 1)).ids).toEqual([
        "handbook",
        "in-sub",
        "nested-doc",
      ]);
      expect((await pages(graphCall, "/api/v1/authorization/lookup", { userId: "ann", resource: "document", action: "read" }, "resourceIds", 2)).ids).toEqual([
        "handbook",
        "in-private",
        "in-sub",
        "nested-doc",
      ]);
      expect((await pages(graphCall, "/api/v1/authorization/lookup", { userId: "anyone", resource: "folder", action: "list" }, "resourceIds", 1)).ids).toEqual(["public", "sub"]);
    });

    it("who can answers allUsers where a path starts with an allUsers grant", async () => {
      const cases: [string, string, string[], boolean][] = [
        ["in-sub", "read", [], true],
        ["in-private", "read", ["ann"], false],
        ["handbook", "read", ["bob"], true],
        ["handbook", "update", ["bob"], false],
        ["nested-doc", "update", [], true],
      ];
      for (const [resourceId, action, ids, all] of cases) {
        const answer = await pages(graphCall, "/api/v1/authorization/subjects", { resource: "document", resourceId, action }, "userIds", 1);
        expect(answer.ids, `${action} ${resourceId}`).toEqual(ids);
        expect(answer.flags.every((f) => f === all), `${action} ${resourceId}`).toBe(true);
      }
    });

    it("removing the public folder's allUsers grant is seen by the very next check", async () => {
      expect(await allowed(graphCall, "anyone", "document", "in-sub", "read")).toBe(true);
      expectStatus(await graphCall("DELETE", `${REL}?allUsers=true&resource=folder&resourceId=public&relation=viewer`), 200);
      expect(await allowed(graphCall, "anyone", "document", "in-sub", "read")).toBe(false);
      expectStatus(await graphCall("POST", REL, everyone("folder", "public", "viewer")), 201);
      expect(await allowed(graphCall, "anyone", "document", "in-sub", "read")).toBe(true);
    });
  });

  describe("the change feed and the catalog", () => {
    it("the feed carries allUsers grants written and deleted, as the API shows them", async () => {
      const start = await ok(call("GET", "/api/v1/authorization/changes?pageSize=1000"));
      let token = start.nextToken as string;
      for (let more = (start.changes as unknown[]).length === 1000; more; ) {
        const page = await ok(call("GET", `/api/v1/authorization/changes?after=${encodeURIComponent(token)}&pageSize=1000`));
        token = page.nextToken as string;
        more = (page.changes as unknown[]).length === 1000;
      }
      expectStatus(await call("POST", REL, everyone("doc", "feed", "viewer")), 201);
      expectStatus(await call("POST", `${REL}/bulk`, { writes: [everyone("doc", "feed-2", "viewer")], deletes: [everyone("doc", "feed", "viewer")] }), 200);
      const page = await ok(call("GET", `/api/v1/authorization/changes?after=${encodeURIComponent(token)}`));
      expect((page.changes as { kind: string; grant: Record<string, unknown> }[]).map((c) => [c.kind, c.grant.resourceId, c.grant.userId, c.grant.allUsers])).toEqual([
        ["grant_written", "feed", "", true],
        ["grant_deleted", "feed", "", true],
        ["grant_written", "feed-2", "", true],
      ]);
    });

    it('a catalog that drops "user:*" while allUsers grants use it is refused (409 naming it); dropping "user" is not, when only allUsers grants are left', async () => {
      await createApp(service, "everyone-strand", FLAT);
      const strandKey = (await ok(service.call("POST", "/api/v1/applications/everyone-strand/api-keys", { body: { name: "k" } }), 201)).key as string;
      expectStatus(await service.call("POST", REL, { key: strandKey, body: everyone("doc", "s1", "viewer") }), 201);
      const withSubjects = (subjects: string[]) => [{ ...FLAT[0]!, relations: FLAT[0]!.relations.map((r) => (r.name === "viewer" ? { ...r, subjects } : r)) }, FLAT[1]!];
      const put = (catalog: unknown[]) => service.call("PUT", "/api/v1/applications/everyone-strand/resources", { body: { resources: catalog } });
      const refused = await put(withSubjects(["user"]));
      expectError(refused, 409, "failed_precondition", '"user:*" of doc#viewer');
      expect(refused.body.details).toContainEqual(expect.objectContaining({ resource: "doc", relation: "viewer", subject: "user:*" }));
      expectStatus(await put(withSubjects(["user:*"])), 200);
      // Dropping the relation, or the resource, counts the allUsers grant too.
      expectError(await put([{ ...FLAT[0]!, relations: FLAT[0]!.relations.filter((r) => r.name !== "viewer") }, FLAT[1]!]), 409, "failed_precondition", "doc#viewer");
      expectError(await put([FLAT[1]!]), 409, "failed_precondition", "doc");
      // A user's grant now where only "user:*" is taken: refused, and the catalog keeps user:* as given.
      expectError(await service.call("POST", REL, { key: strandKey, body: { userId: "ann", resource: "doc", resourceId: "s1", relation: "viewer" } }), 400, "invalid_argument", "userId");
      const doc = (await admin(service, "everyone-strand").getCatalog()).find((e) => (e as { resource: string }).resource === "doc") as { relations: { name: string; subjects: string[] }[] };
      expect(doc.relations.find((r) => r.name === "viewer")!.subjects).toEqual(["user:*"]);
    });
  });

  it("gRPC (typed Connect clients): write, list and who can carry allUsers", async () => {
    const transport = createGrpcTransport({ baseUrl: service.url });
    const headers = { "x-api-key": key };
    const relationships = createClient(RelationshipService, transport);
    const written = await relationships.writeRelationship({ allUsers: true, resource: "doc", resourceId: "grpc", relation: "viewer" }, { headers });
    expect(written.relationship).toMatchObject({ userId: "", allUsers: true, resourceId: "grpc" });
    const listed = await relationships.listRelationships({ allUsers: true, resource: "doc", relation: "viewer" }, { headers });
    expect(listed.relationships.map((r) => r.resourceId)).toContain("grpc");
    const check = createClient(CheckService, transport);
    expect((await check.check({ userId: "grpc-user", resource: "doc", resourceId: "grpc", action: "read" }, { headers })).allowed).toBe(true);
    expect((await check.whoCan({ resource: "doc", resourceId: "grpc", action: "read" }, { headers })).allUsers).toBe(true);
    await expect(relationships.writeRelationship({ allUsers: true, userId: "x", resource: "doc", resourceId: "grpc", relation: "viewer" }, { headers })).rejects.toThrow(/allUsers/);
  });
});
