/**
 * The pages of lookup and who can through the graph (graph-store.ts,
 * PAGE_CTES), table-driven, on every engine, through the REST API: each
 * shape of sources the page's bound can meet (many sources with one id
 * each under it, a few sources read several ids deep, sources whose ids
 * are clustered so the heads never hold a page, the same id from several
 * sources, an expired link among them), each paged through at several page
 * sizes: every id exactly once, ascending, the set equal to the world's.
 * Then the same questions asked at once, mixed with others, so that the
 * service coalesces them into shared statements: each answer equals the one
 * asked alone.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";
import { createApp, expectStatus } from "./helpers/authz.js";
import { GRAPH_CATALOG, set, user, type AnyGrant } from "./support/graph.js";

const pad = (n: number) => String(n).padStart(4, "0");
/** Expiring grants lapse this long after the world is written (a grant cannot be written already expired); the tests start after. */
const LAPSE_MS = 2_000;


interface Shape {
  name: string;
  grants: AnyGrant[];
  /** Lookup: u's readable documents. */
  documents: string[];
  /** Who can: the users who may read document `target`. */
  target: string;
  users: string[];
}

/** u in team t; t views `folders` folders; document i is in folder i mod folders (ids interleaved across sources). */
function interleaved(name: string, folders: number, documents: number): Shape {
  const grants: AnyGrant[] = [user("u", "team", "t", "member")];
  for (let f = 0; f < folders; f++) grants.push(set("team:t#member", "folder", `f${pad(f)}`, "viewer"));
  for (let i = 0; i < documents; i++) grants.push(set(`folder:f${pad(i % folders)}`, "document", `d${pad(i)}`, "parent"));
  // Who can: the target's folder is viewed by `folders` teams, user j in team j mod folders.
  const users = Array.from({ length: documents }, (_, j) => `w${pad(j)}`);
  grants.push(set("folder:wf", "document", "target", "parent"));
  for (let t = 0; t < folders; t++) grants.push(set(`team:wt${pad(t)}#member`, "folder", "wf", "viewer"));
  users.forEach((w, j) => grants.push(user(w, "team", `wt${pad(j % folders)}`, "member")));
  return { name, grants, documents: Array.from({ length: documents }, (_, i) => `d${pad(i)}`), target: "target", users };
}

/** Each source holds one contiguous run of ids: the heads of all sources hold only each run's start. */
function clustered(name: string, sources: number, each: number): Shape {
  const grants: AnyGrant[] = [user("u", "team", "t", "member"), set("folder:wf", "document", "target", "parent")];
  const documents: string[] = [];
  const users: string[] = [];
  for (let s = 0; s < sources; s++) {
    grants.push(set("team:t#member", "folder", `f${pad(s)}`, "viewer"), set(`team:wt${pad(s)}#member`, "folder", "wf", "viewer"));
    for (let k = 0; k < each; k++) {
      const doc = `d${pad(s)}-${pad(k)}`;
      const w = `w${pad(s)}-${pad(k)}`;
      grants.push(set(`folder:f${pad(s)}`, "document", doc, "parent"), user(w, "team", `wt${pad(s)}`, "member"));
      documents.push(doc);
      users.push(w);
    }
  }
  return { name, grants, documents, target: "target", users };
}

/** The same ids from several sources: every document in two folders, some also granted to u directly, one link expired. */
function overlapping(name: string): Shape {
  const base = interleaved(name, 6, 60);
  const grants = [...base.grants];
  for (let i = 0; i < 60; i++) grants.push(set(`folder:f${pad((i + 1) % 6)}`, "document", `d${pad(i)}`, "parent"));
  for (let i = 0; i < 60; i += 7) grants.push(user("u", "document", `d${pad(i)}`, "viewer"));
  grants.push(user("u", "document", "x-only-mine", "viewer"));
  // An expired link adds nothing, and a lapsed member of a team nothing.
  grants.push({ ...set("folder:f0000", "document", "x-expired", "parent"), expiresAt: "lapse" });
  grants.push({ ...user("x-lapsed", "team", "wt0000", "member"), expiresAt: "lapse" });
  // Users in several teams, and one holding the relation directly too.
  for (let j = 0; j < 60; j += 5) grants.push(user(`w${pad(j)}`, "team", `wt${pad((j + 3) % 6)}`, "member"));
  grants.push(user("w0001", "document", "target", "viewer"), user("x-direct", "document", "target", "viewer"));
  return {
    name,
    grants,
    documents: [...base.documents, "x-only-mine"].sort(),
    target: "target",
    users: [...base.users, "x-direct"].sort(),
  };
}

const SHAPES: Shape[] = [
  interleaved("40 folders of 10, interleaved (one head each under the bound)", 40, 400),
  interleaved("3 folders of 50, interleaved (heads several deep)", 3, 150),
  clustered("5 sources of 30 contiguous ids (the heads hold no page)", 5, 30),
  overlapping("the same ids from two folders and a direct grant, an expired link"),
];
const PAGE_SIZES = [1, 7, 39, 40, 41, 100, 1000];

describe.each(engines)("graph pages on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  const keys: string[] = [];

  const all = async (key: string, path: string, body: Record<string, unknown>, field: string, pageSize: number) => {
    const ids: string[] = [];
    let pageToken = "";
    for (let i = 0; i < 2000; i++) {
      const res = await service.call("POST", path, { key, body: { ...body, pageSize, pageToken } });
      expectStatus(res, 200);
      const page = res.body[field] as string[];
      expect(page.length).toBeLessThanOrEqual(pageSize);
      ids.push(...page);
      pageToken = res.body.nextPageToken as string;
      if (pageToken === "") return ids;
    }
    throw new Error("never ended");
  };
  const LOOKUP = ["/api/v1/authorization/lookup", { userId: "u", resource: "document", action: "read" }, "resourceIds"] as const;
  const whoCan = (s: Shape) => ["/api/v1/authorization/subjects", { resource: "document", resourceId: s.target, action: "read" }, "userIds"] as const;

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    service = await startTestService(database.db);
    // Each shape's lapse is set right before its writes (a loaded machine may take seconds for the
    // shapes before it), and the loading waits until the last one has passed.
    let lapsed = 0;
    for (const [i, shape] of SHAPES.entries()) {
      const key = await createApp(service, `pages-${i}`, GRAPH_CATALOG);
      lapsed = Date.now() + LAPSE_MS;
      const lapse = new Date(lapsed).toISOString();
      const writes = shape.grants.map((g) => (g.expiresAt === "lapse" ? { ...g, expiresAt: lapse } : g));
      for (let at = 0; at < writes.length; at += 5000) {
        const res = await service.call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes: writes.slice(at, at + 5000) } });
        expectStatus(res, 200);
      }
      keys.push(key);
    }
    await new Promise((r) => setTimeout(r, Math.max(0, lapsed + 50 - Date.now())));
  }, 120_000);
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  // Each walk reads only, its pages in order: the walks of a shape run side by side. A walk
  // of pages of 1 is 400 statements in a row; on Citus each is planned on the coordinator and
  // again on its worker, so a walk's bound is a per-page bound times its pages.
  const walkBound = (pages: number) => Math.max(30_000, pages * 250);
  describe.each(SHAPES.map((s, i) => [s.name, i] as const))("%s", (_, i) => {
    it.concurrent.each(PAGE_SIZES)(
      "lookup, pages of %i: every document once, ascending",
      async (pageSize) => expect(await all(keys[i]!, ...LOOKUP, pageSize)).toEqual(SHAPES[i]!.documents),
      walkBound(SHAPES[i]!.documents.length),
    );
    it.concurrent.each(PAGE_SIZES)(
      "who can, pages of %i: every user once, ascending",
      async (pageSize) => expect(await all(keys[i]!, ...whoCan(SHAPES[i]!), pageSize)).toEqual(SHAPES[i]!.users),
      walkBound(SHAPES[i]!.users.length),
    );
  });

  it("questions asked at once (coalesced, identical ones shared) get the answers they get alone", async () => {
    const questions = SHAPES.flatMap((s, i) =>
      [3, 3, 10, 41].flatMap((pageSize) => [
        { key: keys[i]!, path: LOOKUP[0], body: { ...LOOKUP[1], pageSize } },
        { key: keys[i]!, path: whoCan(s)[0], body: { ...whoCan(s)[1], pageSize } },
        { key: keys[i]!, path: whoCan(s)[0], body: { ...whoCan(s)[1], resourceId: "no-such-document", pageSize } },
      ]),
    );
    const ask = (q: (typeof questions)[number]) => service.call("POST", q.path, { key: q.key, body: q.body });
    const alone: unknown[] = [];
    for (const q of questions) alone.push((await ask(q)).body);
    for (let round = 0; round < 3; round++) {
      const together = await Promise.all([...questions, ...questions].map(ask));
      together.forEach((res, k) => {
        expectStatus(res, 200);
        expect(res.body).toEqual(alone[k % questions.length]);
      });
    }
  }, 60_000);
});
