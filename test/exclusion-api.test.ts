/**
 * Intersection (`requires`) and exclusion (`unless`), API.md's "Relations within an instance,
 * intersection and exclusion", through the real REST API on every engine: the catalog takes
 * them, reads them back and refuses, naming the path and changing nothing,
 * every case the contract lists; the check, batch check, permissions,
 * lookup and who can follow them exactly (a blocked user, a blocked team
 * nested in another, a team whose membership has its own exclusion, an
 * intersection through a link with none linked and with the wrong
 * instance), and a removal from the blocked team is seen by the very next
 * check. Explain says which entry took a relation away and where each
 * requires entry held; a plan of a catalog change with them is refused
 * (409) rather than counted without them.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { createAppWithKey, startTestService, type TestService } from "./support/service.js";
import { expectError } from "./helpers/authz.js";
import { explainLines, type ExplainAnswer } from "../src/cli/questions.js";

interface Ref {
  through?: string;
  relation: string;
}
interface RelationJson {
  name: string;
  actions: string[];
  subjects?: string[];
  inherits?: Ref[];
  requires?: Ref[];
  unless?: Ref[];
}
interface EntryJson {
  resource: string;
  description: string;
  actions: string[];
  relations: RelationJson[];
}

const team: EntryJson = {
  resource: "team",
  description: "",
  actions: ["read"],
  relations: [
    { name: "banned", actions: [] },
    { name: "member", actions: ["read"], subjects: ["user", "team#member"], unless: [{ relation: "banned" }] },
  ],
};
const org: EntryJson = { resource: "org", description: "", actions: ["read"], relations: [{ name: "member", actions: ["read"], subjects: ["user", "team#member"] }] };
/** `document` relations: parent (0), org (1), blocked (2), viewer (3), editor (4). */
const document = (viewer: Partial<RelationJson> = {}, editor: Partial<RelationJson> = {}): EntryJson => ({
  resource: "document",
  description: "",
  actions: ["read", "update"],
  relations: [
    { name: "parent", actions: [], subjects: ["folder"] },
    { name: "org", actions: [], subjects: ["org"] },
    { name: "blocked", actions: [], subjects: ["user", "team#member"] },
    { name: "viewer", actions: ["read"], subjects: ["user", "team#member"], unless: [{ relation: "blocked" }], ...viewer },
    { name: "editor", actions: ["read", "update"], subjects: ["user", "team#member"], requires: [{ through: "org", relation: "member" }], ...editor },
  ],
});
const folder: EntryJson = {
  resource: "folder",
  description: "",
  actions: ["read"],
  relations: [{ name: "viewer", actions: ["read"], subjects: ["user", "team#member"] }],
};
const CATALOG = [team, org, folder, document()];

const refused: { name: string; resources: EntryJson[]; field: string; fragment: string }[] = [
  {
    name: "an unknown relation",
    resources: [team, org, folder, document({ unless: [{ relation: "nosuch" }] })],
    field: "resources[3].relations[3].unless[0].relation",
    fragment: '"nosuch" is not a relation of resource "document"',
  },
  {
    name: "a through that is not a relation",
    resources: [team, org, folder, document({}, { requires: [{ through: "nosuch", relation: "member" }] })],
    field: "resources[3].relations[4].requires[0].through",
    fragment: '"nosuch" is not a relation of resource "document"',
  },
  {
    name: "a through that is not a link",
    resources: [team, org, folder, document({}, { requires: [{ through: "blocked", relation: "member" }] })],
    field: "resources[3].relations[4].requires[0].through",
    fragment: '"blocked" is not a link relation of resource "document"',
  },
  {
    name: "a linked type that lacks the relation",
    resources: [team, org, folder, document({}, { requires: [{ through: "org", relation: "owner_of_nothing" }] })],
    field: "resources[3].relations[4].requires[0].relation",
    fragment: '"owner_of_nothing" is not a relation of resource "org", which "org" links to',
  },
  {
    name: "a link relation as the target",
    resources: [team, org, folder, document({ unless: [{ relation: "parent" }] })],
    field: "resources[3].relations[3].unless[0].relation",
    fragment: '"document#parent" is a link relation',
  },
  {
    name: "an entry listed twice",
    resources: [team, org, folder, document({ unless: [{ relation: "blocked" }, { through: "", relation: "blocked" }] })],
    field: "resources[3].relations[3].unless[1]",
    fragment: '{relation: "blocked"} is listed twice',
  },
  {
    name: "a relation that excludes itself",
    resources: [team, org, folder, document({ unless: [{ relation: "viewer" }] })],
    field: "resources[3].relations[3].unless[0].relation",
    fragment: "would depend on its own negation: document#viewer → document#viewer",
  },
  {
    name: "a cycle through an unless and a subject set",
    resources: [
      { ...team, relations: [{ name: "banned", actions: [], subjects: ["user", "team#member"] }, team.relations[1]!] },
      org,
      folder,
      document(),
    ],
    field: "resources[0].relations[1].unless[0].relation",
    fragment: "would depend on its own negation: team#member → team#banned → team#member",
  },
];

describe.each(engines)("requires and unless on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;
  const catalogPath = "/api/v1/applications/excl/resources";
  const call = async (path: string, body: unknown, status = 200) => {
    const res = await service.call("POST", path, { key, body });
    expect(res.status, JSON.stringify(res.body)).toBe(status);
    return res.body;
  };
  const grant = (g: Record<string, unknown>) => call("/api/v1/authorization/relationships", g, 201);
  const setOf = (resource: string, resourceId: string, relation: string) => ({ resource, resourceId, relation });
  const allowed = async (userId: string, resourceId: string, action = "read") =>
    (await call("/api/v1/authorization/check", { userId, resource: "document", resourceId, action })).allowed as boolean;

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    service = await startTestService(database.db);
    key = await createAppWithKey(service, "excl");
    const put = await service.call("PUT", catalogPath, { key, body: { resources: CATALOG } });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    // Teams: eng holds alice, bob, carol, dave (dave banned); trouble nests rogue, which holds carol.
    for (const u of ["alice", "bob", "carol", "dave"]) await grant({ userId: u, resource: "team", resourceId: "eng", relation: "member" });
    await grant({ userId: "dave", resource: "team", resourceId: "eng", relation: "banned" });
    await grant({ userId: "carol", resource: "team", resourceId: "rogue", relation: "member" });
    await grant({ subject: setOf("team", "rogue", "member"), resource: "team", resourceId: "trouble", relation: "member" });
    // Document d1: eng may view; bob and the trouble team are blocked.
    await grant({ subject: setOf("team", "eng", "member"), resource: "document", resourceId: "d1", relation: "viewer" });
    await grant({ userId: "bob", resource: "document", resourceId: "d1", relation: "blocked" });
    await grant({ subject: setOf("team", "trouble", "member"), resource: "document", resourceId: "d1", relation: "blocked" });
    await grant({ userId: "bob", resource: "document", resourceId: "d2", relation: "viewer" });
    // Editors must be members of the document's org: d1 in acme (erin is a member), d2 in none, d3 in globex.
    for (const d of ["d1", "d2", "d3"]) for (const u of ["erin", "frank"]) await grant({ userId: u, resource: "document", resourceId: d, relation: "editor" });
    await grant({ subject: { resource: "org", resourceId: "acme" }, resource: "document", resourceId: "d1", relation: "org" });
    await grant({ subject: { resource: "org", resourceId: "globex" }, resource: "document", resourceId: "d3", relation: "org" });
    await grant({ userId: "erin", resource: "org", resourceId: "acme", relation: "member" });
    await grant({ userId: "frank", resource: "org", resourceId: "initech", relation: "member" });
  }, 60_000);
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  it("stores requires and unless in their order and reads them back, same instance as through \"\"", async () => {
    const res = await service.call("GET", catalogPath, { key });
    expect(res.status).toBe(200);
    const doc = (res.body.resources as EntryJson[]).find((e) => e.resource === "document")!;
    const viewer = doc.relations.find((r) => r.name === "viewer")!;
    const editor = doc.relations.find((r) => r.name === "editor")!;
    expect(viewer.unless).toEqual([{ through: "", relation: "blocked" }]);
    expect(viewer.requires).toEqual([]);
    expect(editor.requires).toEqual([{ through: "org", relation: "member" }]);
    expect(editor.unless).toEqual([]);
  });

  it.each(refused)("refuses $name with a 400 naming the path, changing nothing", async ({ resources, field, fragment }) => {
    const before = await service.call("GET", catalogPath, { key });
    const res = await service.call("PUT", catalogPath, { key, body: { resources } });
    expectError(res, 400, "invalid_argument", field, fragment);
    expect((res.body.details as { field: string }[]).map((d) => d.field)).toEqual([field]);
    expect((await service.call("GET", catalogPath, { key })).body).toEqual(before.body);
  });

  it("check: an unless on the instance, on a nested team, and inside a subject set", async () => {
    expect(await allowed("alice", "d1")).toBe(true); // eng, not blocked
    expect(await allowed("bob", "d1")).toBe(false); // blocked by his own grant
    expect(await allowed("bob", "d2")).toBe(true); // not blocked there
    expect(await allowed("carol", "d1")).toBe(false); // blocked through trouble ⊃ rogue
    expect(await allowed("dave", "d1")).toBe(false); // banned from eng: not a member, so not a viewer
    expect(await allowed("zed", "d1")).toBe(false);
  });

  it("check: a requires through a link holds on a linked instance only, and never with none linked", async () => {
    expect(await allowed("erin", "d1", "update")).toBe(true); // member of acme, d1's org
    expect(await allowed("frank", "d1", "update")).toBe(false); // member of initech, not acme
    expect(await allowed("erin", "d2", "update")).toBe(false); // d2 has no org
    expect(await allowed("erin", "d3", "update")).toBe(false); // globex: the wrong instance
  });

  it("batch check and permissions answer alike", async () => {
    const checks = ["alice", "bob", "carol", "dave", "erin", "frank"].flatMap((userId) =>
      ["d1", "d2"].flatMap((resourceId) => ["read", "update"].map((action) => ({ userId, resource: "document", resourceId, action }))),
    );
    const batch = (await call("/api/v1/authorization/check/batch", { checks })).results as { allowed: boolean }[];
    const singles = await Promise.all(checks.map((c) => allowed(c.userId, c.resourceId, c.action)));
    expect(batch.map((r) => r.allowed)).toEqual(singles);
    const requests = ["alice", "bob", "erin", "frank"].map((userId) => ({ userId, resource: "document", resourceId: "d1" }));
    const permissions = (await call("/api/v1/authorization/permissions/batch", { requests })).results as { actions: string[] }[];
    expect(permissions.map((p) => p.actions)).toEqual([["read"], [], ["read", "update"], []]);
  });

  it("lookup and who can list exactly what the check allows, page by page", async () => {
    const lookup = async (userId: string) => {
      const ids: string[] = [];
      let pageToken = "";
      do {
        const page = await call("/api/v1/authorization/lookup", { userId, resource: "document", action: "read", pageSize: 1, pageToken });
        ids.push(...(page.resourceIds as string[]));
        pageToken = page.nextPageToken as string;
      } while (pageToken !== "");
      return ids;
    };
    expect(await lookup("alice")).toEqual(["d1"]);
    expect(await lookup("bob")).toEqual(["d2"]);
    expect(await lookup("carol")).toEqual([]);
    expect(await lookup("erin")).toEqual(["d1"]);
    const whoCan = async (resourceId: string, action: string) => {
      const ids: string[] = [];
      let pageToken = "";
      do {
        const page = await call("/api/v1/authorization/subjects", { resource: "document", resourceId, action, pageSize: 1, pageToken });
        expect(page.allUsers).toBe(false);
        ids.push(...(page.userIds as string[]));
        pageToken = page.nextPageToken as string;
      } while (pageToken !== "");
      return ids;
    };
    expect(await whoCan("d1", "read")).toEqual(["alice", "erin"]);
    expect(await whoCan("d1", "update")).toEqual(["erin"]);
    expect(await whoCan("d3", "update")).toEqual([]);
  });

  it("a removal from the blocked team is seen by the very next check", async () => {
    expect(await allowed("carol", "d1")).toBe(false);
    const res = await service.call("DELETE", `/api/v1/authorization/relationships?userId=carol&resource=team&resourceId=rogue&relation=member`, { key });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(await allowed("carol", "d1")).toBe(true);
  });

  it("explain: the entry that took a relation away, and each requires entry that held, with where and its path", async () => {
    const explain = (userId: string, resourceId: string, action: string) => call("/api/v1/authorization/check/explain", { userId, resource: "document", resourceId, action });
    const grantPath = (path: { userId: string; resource: string; resourceId: string; relation: string; subject?: unknown }[]) =>
      path.map((g) => [g.userId, g.subject === undefined ? "" : JSON.stringify(g.subject), `${g.resource}:${g.resourceId}#${g.relation}`]);
    const bob = await explain("bob", "d1", "read");
    expect(bob.allowed).toBe(false);
    expect(bob.reasons).toEqual([]);
    const bobBlocked = bob.blocked as { relation: string; entry: { path: never[] } & Record<string, unknown> }[];
    expect(bobBlocked.map((b) => ({ ...b, entry: { ...b.entry, path: grantPath(b.entry.path) } }))).toEqual([
      {
        relation: "viewer",
        entry: { rule: "unless", index: 0, through: "", relation: "blocked", holds: "true", resource: "document", resourceId: "d1", path: [["bob", "", "document:d1#blocked"]] },
      },
    ]);
    const alice = await explain("alice", "d1", "read");
    expect(alice.allowed).toBe(true);
    expect(alice.blocked).toEqual([]);
    const aliceViewer = (alice.reasons as { relation: string; path: never[]; requires: unknown[] }[]).find((r) => r.relation === "viewer")!;
    expect(grantPath(aliceViewer.path)).toEqual([
      ["alice", "", "team:eng#member"],
      ["", JSON.stringify({ resource: "team", resourceId: "eng", relation: "member" }), "document:d1#viewer"],
    ]);
    expect(aliceViewer.requires).toEqual([]);
    const erin = await explain("erin", "d1", "update");
    expect(erin.allowed).toBe(true);
    const erinEditor = (erin.reasons as { relation: string; requires: ({ path: never[] } & Record<string, unknown>)[] }[]).find((r) => r.relation === "editor")!;
    expect(erinEditor.requires.map((e) => ({ ...e, path: grantPath(e.path) }))).toEqual([
      { rule: "requires", index: 0, through: "org", relation: "member", holds: "true", resource: "org", resourceId: "acme", path: [["erin", "", "org:acme#member"]] },
    ]);
    const frank = await explain("frank", "d1", "update");
    expect(frank.allowed).toBe(false);
    expect(frank.blocked).toEqual([
      { relation: "editor", entry: { rule: "requires", index: 0, through: "org", relation: "member", holds: "false", resource: "", resourceId: "", path: [] } },
    ]);
    // `portcullis explain` says the same for people.
    const q = (userId: string, action: string) => ({ userId, resource: "document", resourceId: "d1", action });
    expect(explainLines(q("bob", "read"), bob as ExplainAnswer).slice(0, 3)).toEqual([
      "denied: bob document:d1 read",
      "taken away:",
      "  viewer: unless blocked: holds on document:d1 (bob is blocked of document:d1)",
    ]);
    expect(explainLines(q("erin", "update"), erin as ExplainAnswer)).toContain("    and requires member through org: holds on org:acme (erin is member of org:acme)");
    expect(explainLines(q("frank", "update"), frank as ExplainAnswer)).toContain("  editor: requires member through org: does not hold");
    // On every question the others ask, explain allows exactly where the check does.
    for (const userId of ["alice", "bob", "carol", "dave", "erin", "frank", "zed"]) {
      for (const resourceId of ["d1", "d2", "d3"]) {
        for (const action of ["read", "update"]) expect((await explain(userId, resourceId, action)).allowed, `${userId} ${resourceId} ${action}`).toBe(await allowed(userId, resourceId, action));
      }
    }
  });

  it("a catalog that gains or loses an unless is followed by the very next check, explain, lookup and who can", async () => {
    const setCatalog = async (viewer: Partial<RelationJson>) => {
      const res = await service.call("PUT", catalogPath, { key, body: { resources: [team, org, folder, document(viewer)] } });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    };
    const lookup = async (userId: string) => (await call("/api/v1/authorization/lookup", { userId, resource: "document", action: "read" })).resourceIds;
    const whoCan = async () => (await call("/api/v1/authorization/subjects", { resource: "document", resourceId: "d1", action: "read" })).userIds;
    expect(await allowed("bob", "d1")).toBe(false);
    await setCatalog({ unless: [] });
    expect(await allowed("bob", "d1")).toBe(true);
    expect((await call("/api/v1/authorization/check/explain", { userId: "bob", resource: "document", resourceId: "d1", action: "read" })).allowed).toBe(true);
    expect(await lookup("bob")).toEqual(["d1", "d2"]);
    expect(await whoCan()).toContain("bob");
    await setCatalog({});
    expect(await allowed("bob", "d1")).toBe(false);
    expect((await call("/api/v1/authorization/check/explain", { userId: "bob", resource: "document", resourceId: "d1", action: "read" })).allowed).toBe(false);
    expect(await lookup("bob")).toEqual(["d2"]);
    expect(await whoCan()).not.toContain("bob");
  });

  it("a plan counts who gains and loses through requires and unless, decided as the check decides", async () => {
    type Impact = { permission: string; gaining: number; losing: number; gainingPairs: { userId: string; resourceId: string }[]; losingPairs: { userId: string; resourceId: string }[]; atLeast: boolean };
    const plan = async (resources: EntryJson[]) => {
      const res = await service.call("POST", "/api/v1/applications/excl/model/plan", { key, body: { catalog: resources } });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return Object.fromEntries(((res.body.impact ?? []) as Impact[]).map((i) => [i.permission, i]));
    };
    const pairs = (list: { userId: string; resourceId: string }[]) => list.map((p) => `${p.userId}@${p.resourceId}`);
    // Without the unless: bob, blocked by his own grant, gains read on d1 (dana stays out: banned from eng).
    const noUnless = await plan([team, org, folder, document({ unless: [] })]);
    expect(noUnless["document:read"]).toMatchObject({ gaining: 1, losing: 0, atLeast: false });
    expect(pairs(noUnless["document:read"]!.gainingPairs)).toEqual(["bob@d1"]);
    // Without the requires: erin gains d2 and d3, frank all three, for read and update (the editor's actions).
    const noRequires = await plan([team, org, folder, document({}, { requires: [] })]);
    expect(noRequires["document:update"]).toMatchObject({ gaining: 2, losing: 0, atLeast: false });
    expect(pairs(noRequires["document:update"]!.gainingPairs)).toEqual(["erin@d2", "erin@d3", "frank@d1", "frank@d2", "frank@d3"]);
    // A new unless through a link that cancels the editor's requires: erin, its one holder (a member of d1's org), loses d1.
    const viaOrg = await plan([team, org, folder, document({}, { requires: [{ through: "org", relation: "member" }], unless: [{ through: "org", relation: "member" }] })]);
    expect(viaOrg["document:update"]).toMatchObject({ gaining: 0, losing: 1, atLeast: false });
    expect(pairs(viaOrg["document:update"]!.losingPairs)).toEqual(["erin@d1"]);
    // A change of no relation's rules (a description): no impact.
    expect(await plan([team, org, folder, { ...document(), description: "documents" }])).toEqual({});
    // Each plan is what the check answers once applied.
    for (const [resources, who] of [[[team, org, folder, document({ unless: [] })], ["bob", "d1", "read", true]], [[team, org, folder, document({}, { requires: [] })], ["frank", "d3", "update", true]]] as const) {
      const applied = await service.call("PUT", "/api/v1/applications/excl/model", { key, body: { catalog: resources } });
      expect(applied.status, JSON.stringify(applied.body)).toBe(200);
      expect(await allowed(who[0], who[1], who[2])).toBe(who[3]);
      const back = await service.call("PUT", "/api/v1/applications/excl/model", { key, body: { catalog: CATALOG } });
      expect(back.status, JSON.stringify(back.body)).toBe(200);
    }
  });
});
