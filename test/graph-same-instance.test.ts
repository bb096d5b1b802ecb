/**
 * Relations within an instance (API.md, "Round 4 additions": `inherits`
 * without `through`), every question through the REST API, on every
 * engine (and on Citus in the Citus leg): editors of a document read it
 * (viewer inherits editor), owners of it read and update it through two
 * rules, a team's admins are its members (member inherits admin), so a
 * subject set team#member includes them, nested and through a folder; the
 * hop bound counts no step within an instance; the plan's impact counts a
 * rule added or removed. Each case is asked as check, batch check,
 * permissions, explain (the path: grants only), lookup (every page) and
 * who can (every page).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";
import { createApp, expectStatus } from "./helpers/authz.js";
import { set, user, type AnyGrant } from "./support/graph.js";

const CATALOG = [
  {
    resource: "team",
    description: "",
    actions: ["read"],
    relations: [
      { name: "admin", actions: [], subjects: ["user", "team#member"] },
      { name: "member", actions: ["read"], subjects: ["user", "team#member"], inherits: [{ relation: "admin" }] },
    ],
  },
  {
    resource: "folder",
    description: "",
    actions: ["read"],
    relations: [
      { name: "parent", actions: [], subjects: ["folder"] },
      { name: "editor", actions: [], subjects: ["user", "team#member"] },
      { name: "viewer", actions: ["read"], subjects: ["user", "team#member"], inherits: [{ through: "parent", relation: "viewer" }, { relation: "editor" }] },
    ],
  },
  {
    resource: "document",
    description: "",
    actions: ["read", "update", "delete"],
    relations: [
      { name: "parent", actions: [], subjects: ["folder"] },
      { name: "owner", actions: ["delete"], subjects: ["user"] },
      { name: "editor", actions: ["update"], subjects: ["user", "team#member"], inherits: [{ relation: "owner" }] },
      { name: "viewer", actions: ["read"], subjects: ["user", "team#member"], inherits: [{ relation: "editor" }, { through: "parent", relation: "viewer" }] },
    ],
  },
];

const GRANTS: AnyGrant[] = [
  user("ed", "document", "d1", "editor"),
  user("olive", "document", "d2", "owner"),
  user("ada", "team", "core", "admin"),
  user("mem", "team", "core", "member"),
  set("team:core#member", "team", "eng", "member"), // core's members (its admins too) are eng's
  set("team:eng#member", "document", "d3", "viewer"),
  user("fe", "folder", "f1", "editor"), // folder viewer inherits editor: f1's documents
  set("folder:f1", "document", "d4", "parent"),
  set("team:eng#member", "folder", "f2", "editor"),
  set("folder:f2", "document", "d5", "parent"),
];

/** Who may do what where, from the rules by hand. */
const EXPECTED: { userId: string; documentId: string; actions: string[]; hops: number | null }[] = [
  { userId: "ed", documentId: "d1", actions: ["read", "update"], hops: 0 },
  { userId: "olive", documentId: "d2", actions: ["read", "update", "delete"], hops: 0 },
  { userId: "ada", documentId: "d3", actions: ["read"], hops: 2 },
  { userId: "mem", documentId: "d3", actions: ["read"], hops: 2 },
  { userId: "fe", documentId: "d4", actions: ["read"], hops: 1 },
  { userId: "ada", documentId: "d5", actions: ["read"], hops: 3 },
  { userId: "mem", documentId: "d5", actions: ["read"], hops: 3 },
  { userId: "ed", documentId: "d2", actions: [], hops: null },
  { userId: "olive", documentId: "d1", actions: [], hops: null },
  { userId: "fe", documentId: "d5", actions: [], hops: null },
];
const USERS = ["ada", "ed", "fe", "mem", "olive"];
const DOCS = ["d1", "d2", "d3", "d4", "d5"];
const ACTIONS = ["read", "update", "delete"];
const allowedBy = (userId: string, documentId: string, action: string) =>
  EXPECTED.find((e) => e.userId === userId && e.documentId === documentId)?.actions.includes(action) ?? false;

describe.each(engines)("relations within an instance on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;
  const call = async (path: string, body: unknown) => {
    const res = await service.call("POST", path, { key, body });
    expectStatus(res, 200);
    return res.body;
  };
  const pages = async (path: string, body: Record<string, unknown>, field: string) => {
    const ids: string[] = [];
    let pageToken = "";
    do {
      const page = await call(path, { ...body, pageSize: 1, pageToken });
      ids.push(...(page[field] as string[]));
      pageToken = page.nextPageToken as string;
    } while (pageToken !== "");
    return ids;
  };

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    service = await startTestService(database.db);
    key = await createApp(service, "within", CATALOG);
    await call("/api/v1/authorization/relationships/bulk", { writes: GRANTS });
  }, 60_000);
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  it("check and batch check: every user, document and action as the rules give", async () => {
    const questions = USERS.flatMap((u) => DOCS.flatMap((d) => ACTIONS.map((action) => ({ userId: u, resource: "document", resourceId: d, action }))));
    const batch = await call("/api/v1/authorization/check/batch", { checks: questions });
    const got = (batch.results as { allowed: boolean }[]).map((r) => r.allowed);
    expect(got).toEqual(questions.map((q) => allowedBy(q.userId, q.resourceId, q.action)));
    for (const q of questions.filter((_, i) => i % 4 === 0)) {
      expect((await call("/api/v1/authorization/check", q)).allowed, JSON.stringify(q)).toBe(allowedBy(q.userId, q.resourceId, q.action));
    }
  });

  it("permissions: the actions each user holds on each document", async () => {
    const requests = USERS.flatMap((u) => DOCS.map((d) => ({ userId: u, resource: "document", resourceId: d })));
    const answer = await call("/api/v1/authorization/permissions/batch", { requests });
    expect((answer.results as { actions: string[] }[]).map((r) => r.actions)).toEqual(requests.map((r) => ACTIONS.filter((a) => allowedBy(r.userId, r.resourceId, a))));
  });

  it.each(EXPECTED)("explain $userId read $documentId: allowed as the check, by a path of $hops hops (grants only)", async ({ userId, documentId, hops }) => {
    const explained = await call("/api/v1/authorization/check/explain", { userId, resource: "document", resourceId: documentId, action: "read" });
    expect(explained.allowed).toBe(hops !== null);
    const reasons = (explained.reasons as { kind: string; path: AnyGrant[] }[]).filter((r) => r.kind === "relation");
    if (hops === null) {
      expect(reasons).toEqual([]);
      return;
    }
    expect(Math.min(...reasons.map((r) => r.path.length - 1))).toBe(hops);
    for (const reason of reasons) {
      expect(reason.path[0]!.userId).toBe(userId);
      expect([reason.path.at(-1)!.resource, reason.path.at(-1)!.resourceId]).toEqual(["document", documentId]);
    }
  });

  it("lookup, every page: the documents each user may read, update and delete", async () => {
    for (const u of USERS) {
      for (const action of ACTIONS) {
        expect(await pages("/api/v1/authorization/lookup", { userId: u, resource: "document", action }, "resourceIds"), `${u} ${action}`).toEqual(DOCS.filter((d) => allowedBy(u, d, action)));
      }
    }
  });

  it("who can, every page: the users who may read, update and delete each document", async () => {
    for (const d of DOCS) {
      for (const action of ACTIONS) {
        expect(await pages("/api/v1/authorization/subjects", { resource: "document", resourceId: d, action }, "userIds"), `${action} ${d}`).toEqual(USERS.filter((u) => allowedBy(u, d, action)));
      }
    }
  });

  it("the hop bound counts subject sets and links only: 16 reach through 15 steps within teams, 17 do not", async () => {
    const chainKey = await createApp(service, "within-chain", CATALOG);
    // c0's member holds c1's admin, and so c1's membership, and so on: each a hop and a step within the team.
    const chain = (length: number, prefix: string, doc: string): AnyGrant[] => [
      user("chained", "team", `${prefix}0`, "member"),
      ...Array.from({ length: length - 1 }, (_, i) => set(`team:${prefix}${i}#member`, "team", `${prefix}${i + 1}`, "admin")),
      set(`team:${prefix}${length - 1}#member`, "document", doc, "viewer"),
    ];
    const res = await service.call("POST", "/api/v1/authorization/relationships/bulk", { key: chainKey, body: { writes: [...chain(16, "a", "reach"), ...chain(17, "b", "beyond")] } });
    expectStatus(res, 200);
    const ask = async (path: string, body: unknown) => {
      const answer = await service.call("POST", path, { key: chainKey, body });
      expectStatus(answer, 200);
      return answer.body;
    };
    const check = (resourceId: string) => ask("/api/v1/authorization/check", { userId: "chained", resource: "document", resourceId, action: "read" });
    expect((await check("reach")).allowed).toBe(true);
    expect((await check("beyond")).allowed).toBe(false);
    const explained = await ask("/api/v1/authorization/check/explain", { userId: "chained", resource: "document", resourceId: "reach", action: "read" });
    expect((explained.reasons as { kind: string; path: unknown[] }[]).find((r) => r.kind === "relation")!.path).toHaveLength(17);
    expect((await ask("/api/v1/authorization/lookup", { userId: "chained", resource: "document", action: "read" })).resourceIds).toEqual(["reach"]);
    expect((await ask("/api/v1/authorization/subjects", { resource: "document", resourceId: "reach", action: "read" })).userIds).toEqual(["chained"]);
    expect((await ask("/api/v1/authorization/subjects", { resource: "document", resourceId: "beyond", action: "read" })).userIds).toEqual([]);
  });

  it("the plan's impact counts a rule within the instance removed, and one added, as apply then answers", async () => {
    const planKey = await createApp(service, "within-plan", []);
    const model = (catalog: unknown) => ({ catalog, policies: [], roles: [] });
    expectStatus(await service.call("PUT", "/api/v1/applications/within-plan/model", { body: model(CATALOG) }), 200);
    expectStatus(await service.call("POST", "/api/v1/authorization/relationships/bulk", { key: planKey, body: { writes: GRANTS } }), 200);
    const withViewer = (inherits: unknown[]) =>
      CATALOG.map((e) => (e.resource !== "document" ? e : { ...e, relations: e.relations.map((r) => (r.name === "viewer" ? { ...r, inherits } : r)) }));
    const plan = async (catalog: unknown) => {
      const planned = await service.call("POST", "/api/v1/applications/within-plan/model/plan", { body: model(catalog) });
      expectStatus(planned, 200);
      return planned.body.impact as { permission: string; gaining: number; losing: number; gainingSample: string[]; losingSample: string[]; losingPairs: { userId: string; resourceId: string }[]; atLeast: boolean }[];
    };
    // Editors (and owners, through editor) no longer read: ed on d1, olive on d2.
    const withoutRule = withViewer([{ through: "parent", relation: "viewer" }]);
    expect(await plan(withoutRule)).toEqual([
      {
        permission: "document:read",
        gaining: 0,
        losing: 2,
        gainingSample: [],
        losingSample: ["ed", "olive"],
        gainingPairs: [],
        losingPairs: [
          { userId: "ed", resourceId: "d1" },
          { userId: "olive", resourceId: "d2" },
        ],
        atLeast: false,
      },
    ]);
    expectStatus(await service.call("PUT", "/api/v1/applications/within-plan/model", { body: model(withoutRule) }), 200);
    const reads = async (userId: string, resourceId: string) =>
      (await service.call("POST", "/api/v1/authorization/check", { key: planKey, body: { userId, resource: "document", resourceId, action: "read" } })).body.allowed;
    expect([await reads("ed", "d1"), await reads("olive", "d2")]).toEqual([false, false]);
    // And back: the rule added gains them again.
    const back = await plan(CATALOG);
    expect(back.map((i) => [i.permission, i.gaining, i.losing, i.gainingSample])).toEqual([["document:read", 2, 0, ["ed", "olive"]]]);
  });

  it("a team's admins are its members: check and lookup on the team itself", async () => {
    expect((await call("/api/v1/authorization/check", { userId: "ada", resource: "team", resourceId: "core", action: "read" })).allowed).toBe(true);
    expect((await call("/api/v1/authorization/check", { userId: "ada", resource: "team", resourceId: "eng", action: "read" })).allowed).toBe(true);
    expect(await pages("/api/v1/authorization/lookup", { userId: "ada", resource: "team", action: "read" }, "resourceIds")).toEqual(["core", "eng"]);
    expect(await pages("/api/v1/authorization/subjects", { resource: "team", resourceId: "eng", action: "read" }, "userIds")).toEqual(["ada", "mem"]);
  });
});
