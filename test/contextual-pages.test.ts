/**
 * Lookup and who can with contextual grants (API.md, "Contextual grants";
 * docs/contextual-grants.md), through the REST API on every engine: a
 * contextual membership, a link moving a document into a folder, an
 * allUsers grant, a condition and an expiry each counted as if stored;
 * pages of one and two across contextual and stored ids with no repeat and
 * no skip; a refused grant a 400 naming it; nothing written and no change
 * in the feed. Then a differential over random small worlds: each world's
 * grants split into stored and contextual, every page of every lookup and
 * who can asked with the contextual part equal to the same questions asked
 * of an application that stores everything.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";
import { createApp, expectError, expectStatus, queryString } from "./helpers/authz.js";
import { ALL_USERS_CATALOG, everyone, set, user, type AnyGrant, type EveryoneGrant } from "./support/graph.js";
import { sqlRuleViolations } from "./support/sql-rules.js";
import { CONTEXTUAL_PAGES_SQL } from "../src/store/contextual-pages-store.js";
import { random } from "../bench/random.js";

type Grant = (AnyGrant | EveryoneGrant) & { condition?: string };
type Json = Record<string, unknown>;

const LOOKUP = "/api/v1/authorization/lookup";
const WHO_CAN = "/api/v1/authorization/subjects";
const CHANGES = "/api/v1/authorization/changes";

/** ALL_USERS_CATALOG with a document relation grants may put a condition on ("user" only, so any grant of it may carry one). */
const CATALOG = ALL_USERS_CATALOG.map((entry) =>
  entry.resource !== "document" ? entry : { ...entry, relations: [...entry.relations, { name: "reader", actions: ["read"], subjects: ["user"] }] },
);

describe("the contextual statements keep the SQL rules", () => {
  it.each(Object.entries(CONTEXTUAL_PAGES_SQL))("%s", (_, sql) => {
    expect(sqlRuleViolations(sql)).toEqual([]);
  });
});

describe.each(engines)("lookup and who can with contextual grants on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  const keys: Record<string, string> = {};
  const call = (app: string, method: string, path: string, body?: unknown) => service.call(method, path, { key: keys[app]!, ...(body === undefined ? {} : { body }) });
  const bulk = async (app: string, writes: Grant[], deletes: Grant[] = []) => expectStatus(await call(app, "POST", "/api/v1/authorization/relationships/bulk", { writes, deletes }), 200);

  /** Every page of a question (`pageSize` each), the ids in order; each page checked to be no longer than asked. */
  async function pages(app: string, path: string, body: Json, pageSize: number, idsOf: "resourceIds" | "userIds"): Promise<{ ids: string[]; first: Json }> {
    const ids: string[] = [];
    let pageToken = "";
    let first: Json | undefined;
    for (let i = 0; i < 200; i++) {
      const res = await call(app, "POST", path, { ...body, pageSize, pageToken });
      expectStatus(res, 200);
      first ??= res.body;
      const page = res.body[idsOf] as string[];
      expect(page.length).toBeLessThanOrEqual(pageSize);
      expect(res.body.conditional ?? []).toEqual([]);
      ids.push(...page);
      pageToken = res.body.nextPageToken as string;
      if (pageToken === "") return { ids, first: first! };
      expect(page).toHaveLength(pageSize);
    }
    throw new Error("the pages never ended");
  }
  const lookup = async (app: string, body: Json, pageSize = 100) => (await pages(app, LOOKUP, body, pageSize, "resourceIds")).ids;
  const whoCan = async (app: string, body: Json, pageSize = 100) => (await pages(app, WHO_CAN, body, pageSize, "userIds")).ids;

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    service = await startTestService(database.db);
    for (const app of ["ctx", "split", "whole"]) keys[app] = await createApp(service, app, CATALOG);
    // alice is in eng, whose members view runbooks: its documents d1, d2 and d4. carol edits root. bob reads d5.
    await bulk("ctx", [
      user("alice", "team", "eng", "member"),
      set("team:eng#member", "folder", "runbooks", "viewer"),
      set("folder:runbooks", "document", "d1", "parent"),
      set("folder:runbooks", "document", "d2", "parent"),
      set("folder:runbooks", "document", "d4", "parent"),
      user("carol", "folder", "root", "editor"),
      user("bob", "document", "d5", "viewer"),
    ]);
  }, 120_000);
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  it("a contextual membership: erin reads what eng reads, and is among who can", async () => {
    const erin = [user("erin", "team", "eng", "member")];
    expect(await lookup("ctx", { userId: "erin", resource: "document", action: "read" })).toEqual([]);
    expect(await lookup("ctx", { userId: "erin", resource: "document", action: "read", contextualGrants: erin })).toEqual(["d1", "d2", "d4"]);
    expect(await whoCan("ctx", { resource: "document", resourceId: "d1", action: "read", contextualGrants: erin })).toEqual(["alice", "erin"]);
    // Another user's contextual grant gives alice nothing she lacks, and erin nothing on d5.
    expect(await lookup("ctx", { userId: "alice", resource: "document", action: "read", contextualGrants: erin })).toEqual(["d1", "d2", "d4"]);
    expect(await whoCan("ctx", { resource: "document", resourceId: "d5", action: "read", contextualGrants: erin })).toEqual(["bob"]);
  });

  it("a contextual link: would alice see d9 if it moved to runbooks? would carol edit runbooks' documents if root were its parent?", async () => {
    const moved = [set("folder:runbooks", "document", "d9", "parent")];
    expect(await lookup("ctx", { userId: "alice", resource: "document", action: "read", contextualGrants: moved })).toEqual(["d1", "d2", "d4", "d9"]);
    expect(await whoCan("ctx", { resource: "document", resourceId: "d9", action: "read", contextualGrants: moved })).toEqual(["alice"]);
    expect(await whoCan("ctx", { resource: "document", resourceId: "d9", action: "read" })).toEqual([]);
    const under = [set("folder:root", "folder", "runbooks", "parent")];
    expect(await lookup("ctx", { userId: "carol", resource: "document", action: "update" })).toEqual([]);
    expect(await lookup("ctx", { userId: "carol", resource: "document", action: "update", contextualGrants: under })).toEqual(["d1", "d2", "d4"]);
    expect(await lookup("ctx", { userId: "carol", resource: "folder", action: "update", contextualGrants: under })).toEqual(["root", "runbooks"]);
    expect(await whoCan("ctx", { resource: "document", resourceId: "d2", action: "update", contextualGrants: under })).toEqual(["carol"]);
  });

  it("a contextual allUsers grant: anyone finds d7; who can lists the users it reaches otherwise, and says every user may", async () => {
    const open = [everyone("document", "d7", "viewer"), set("folder:runbooks", "document", "d7", "parent")];
    expect(await lookup("ctx", { userId: "zed", resource: "document", action: "read", contextualGrants: open })).toEqual(["d7"]);
    expect(await lookup("ctx", { userId: "alice", resource: "document", action: "read", contextualGrants: open })).toEqual(["d1", "d2", "d4", "d7"]);
    const allUsersOf = async (body: Json) => {
      const res = await pages("ctx", WHO_CAN, { resource: "document", action: "read", ...body }, 1, "userIds");
      return [res.ids, res.first.allUsers === true, res.first.allUsersConditions ?? []];
    };
    expect(await allUsersOf({ resourceId: "d7", contextualGrants: open })).toEqual([["alice"], true, []]);
    // A contextual grant that gives no one everything: false, as without it.
    expect(await allUsersOf({ resourceId: "d7", contextualGrants: [set("folder:runbooks", "document", "d7", "parent")] })).toEqual([["alice"], false, []]);
    // A stored allUsers grant reached only through a contextual link: every user may.
    await bulk("ctx", [everyone("folder", "lobby", "viewer")]);
    expect(await allUsersOf({ resourceId: "d6" })).toEqual([[], false, []]);
    expect(await allUsersOf({ resourceId: "d6", contextualGrants: [set("folder:lobby", "document", "d6", "parent")] })).toEqual([[], true, []]);
    // A contextual allUsers grant with a condition: every user may where it holds with the question's facts.
    const when = [{ ...everyone("document", "d6", "viewer"), condition: "context.ok == true" }];
    expect(await allUsersOf({ resourceId: "d6", contextualGrants: when, context: { ok: true } })).toEqual([[], true, []]);
    expect(await allUsersOf({ resourceId: "d6", contextualGrants: when, context: { ok: false } })).toEqual([[], false, []]);
    await bulk("ctx", [], [everyone("folder", "lobby", "viewer")]);
  });

  it("a contextual grant with a condition counts where it holds; one with an expiry counts until it passes", async () => {
    const when = [{ ...user("frank", "document", "d8", "reader"), condition: "context.ok == true" }];
    expect(await lookup("ctx", { userId: "frank", resource: "document", action: "read", contextualGrants: when, context: { ok: true } })).toEqual(["d8"]);
    expect(await lookup("ctx", { userId: "frank", resource: "document", action: "read", contextualGrants: when, context: { ok: false } })).toEqual([]);
    expect(await whoCan("ctx", { resource: "document", resourceId: "d8", action: "read", contextualGrants: when, context: { ok: true } })).toEqual(["frank"]);
    expect(await whoCan("ctx", { resource: "document", resourceId: "d8", action: "read", contextualGrants: when, context: { ok: false } })).toEqual([]);
    const soon = [{ ...user("gina", "document", "d8", "viewer"), expiresAt: new Date(Date.now() + 3_600_000).toISOString() }];
    expect(await lookup("ctx", { userId: "gina", resource: "document", action: "read", contextualGrants: soon })).toEqual(["d8"]);
    expect(await whoCan("ctx", { resource: "document", resourceId: "d8", action: "read", contextualGrants: soon })).toEqual(["gina"]);
  });

  it("pages of one and two run across contextual and stored ids with no repeat and no skip", async () => {
    const mine = ["d0", "d3", "d6"].map((d) => user("alice", "document", d, "viewer"));
    const asked = { userId: "alice", resource: "document", action: "read", contextualGrants: mine };
    for (const size of [1, 2]) expect(await lookup("ctx", asked, size)).toEqual(["d0", "d1", "d2", "d3", "d4", "d6"]);
    const more = ["ann", "ben", "zoe"].map((u) => user(u, "document", "d1", "viewer"));
    for (const size of [1, 2]) {
      expect(await whoCan("ctx", { resource: "document", resourceId: "d1", action: "read", contextualGrants: [...more, user("erin", "team", "eng", "member")] }, size)).toEqual([
        "alice",
        "ann",
        "ben",
        "erin",
        "zoe",
      ]);
    }
  });

  it.each([
    { name: "an unknown relation", grant: user("erin", "document", "d1", "nosuch"), field: "contextualGrants[0].relation" },
    { name: "a subject the relation does not take", grant: set("folder:runbooks", "document", "d1", "viewer"), field: "contextualGrants[0].subject" },
    { name: "an expiry already passed", grant: { ...user("erin", "document", "d1", "viewer"), expiresAt: "2001-01-01T00:00:00Z" }, field: "contextualGrants[0].expiresAt" },
    { name: "a condition that does not compile", grant: { ...user("erin", "document", "d1", "reader"), condition: "context.ok ==" }, field: "contextualGrants[0].condition" },
  ])("$name is a 400 naming $field, on lookup and who can", async ({ grant, field }) => {
    for (const [path, body] of [
      [LOOKUP, { userId: "erin", resource: "document", action: "read" }],
      [WHO_CAN, { resource: "document", resourceId: "d1", action: "read" }],
    ] as const) {
      const res = await call("ctx", "POST", path, { ...body, contextualGrants: [grant] });
      expectError(res, 400, "invalid_argument");
      expect((res.body.details as { field: string }[]).map((d) => d.field)).toContain(field);
    }
  });

  it("more than 100 contextual grants are a 400 naming contextualGrants", async () => {
    const many = Array.from({ length: 101 }, (_, i) => user(`u${i}`, "document", "d1", "viewer"));
    for (const [path, body] of [
      [LOOKUP, { userId: "erin", resource: "document", action: "read" }],
      [WHO_CAN, { resource: "document", resourceId: "d1", action: "read" }],
    ] as const) {
      const res = await call("ctx", "POST", path, { ...body, contextualGrants: many });
      expectError(res, 400, "invalid_argument", "at most 100");
      expect((res.body.details as { field: string }[]).map((d) => d.field)).toEqual(["contextualGrants"]);
    }
  });

  it("writes nothing: the grants listed and the feed are as before", async () => {
    const feedEnd = async () => {
      let token = "";
      for (;;) {
        const res = await call("ctx", "GET", CHANGES + queryString({ after: token === "" ? undefined : token, pageSize: 500 }));
        expectStatus(res, 200);
        token = res.body.nextToken as string;
        if ((res.body.changes as unknown[]).length < 500) return token;
      }
    };
    const listed = async () => (await call("ctx", "GET", "/api/v1/authorization/relationships" + queryString({ resource: "document", pageSize: 1000 }))).body;
    const token = await feedEnd();
    const before = await listed();
    const grants = [set("folder:runbooks", "document", "d9", "parent"), user("erin", "team", "eng", "member"), everyone("document", "d7", "viewer")];
    await lookup("ctx", { userId: "erin", resource: "document", action: "read", contextualGrants: grants });
    await whoCan("ctx", { resource: "document", resourceId: "d9", action: "read", contextualGrants: grants });
    expect(await listed()).toEqual(before);
    const after = await call("ctx", "GET", CHANGES + queryString({ after: token }));
    expectStatus(after, 200);
    expect(after.body.changes).toEqual([]);
  });

  // ------------------------------------------------------------ the differential

  const USERS = ["u1", "u2", "u3", "u4"];
  const TEAMS = ["t1", "t2", "t3"];
  const FOLDERS = ["f1", "f2", "f3"];
  const DOCS = ["d1", "d2", "d3", "d4", "d5"];

  /** A random small world on CATALOG: memberships, nested teams, folder trees (cycles too), documents in folders, grants to users, teams and everyone. */
  function world(seed: number): Grant[] {
    const r = random(seed);
    const out = new Map<string, Grant>();
    const add = (g: Grant) => out.set(JSON.stringify(g), g);
    const n = 8 + r.int(14);
    for (let i = 0; i < n; i++) {
      switch (r.int(8)) {
        case 0:
          add(user(r.pick(USERS), "team", r.pick(TEAMS), "member"));
          break;
        case 1:
          add(set(`team:${r.pick(TEAMS)}#member`, "team", r.pick(TEAMS), "member"));
          break;
        case 2:
          add(set(`folder:${r.pick(FOLDERS)}`, "folder", r.pick(FOLDERS), "parent"));
          break;
        case 3:
          add(set(`folder:${r.pick(FOLDERS)}`, "document", r.pick(DOCS), "parent"));
          break;
        case 4: {
          const resource = r.pick(["folder", "document"]);
          add(set(`team:${r.pick(TEAMS)}#member`, resource, r.pick(resource === "folder" ? FOLDERS : DOCS), r.pick(["viewer", "editor"])));
          break;
        }
        case 5: {
          const resource = r.pick(["folder", "document"]);
          add(user(r.pick(USERS), resource, r.pick(resource === "folder" ? FOLDERS : DOCS), r.pick(["viewer", "editor"])));
          break;
        }
        case 6:
          if (r.int(2) === 0) add(r.pick([everyone("folder", r.pick(FOLDERS), "viewer"), everyone("document", r.pick(DOCS), "viewer"), everyone("team", r.pick(TEAMS), "member")]));
          else add(user(r.pick(USERS), "document", r.pick(DOCS), "reader"));
          break;
        default:
          add(set(`team:${r.pick(TEAMS)}#member`, "folder", r.pick(FOLDERS), "viewer"));
      }
    }
    return [...out.values()];
  }

  it("random worlds: every page with the contextual part equals the same question with everything stored", async () => {
    // Fewer on Citus, where each call costs more.
    for (let seed = 1; seed <= (engine === "citus" ? 2 : 8); seed++) {
      const all = world(seed * 7919);
      const r = random(seed);
      const contextual = all.filter(() => r.next() < 0.45);
      const stored = all.filter((g) => !contextual.includes(g));
      await bulk("split", stored);
      await bulk("whole", all);
      const what = (q: Json) => `seed ${seed}: ${JSON.stringify(q)} with ${JSON.stringify(contextual)} contextual of ${JSON.stringify(all)}`;
      // The questions asked at once, as a busy application asks (the service coalesces those in flight
      // into shared statements); each listing's pages in order.
      await Promise.all(
        USERS.flatMap((userId) =>
          (
            [
              ["document", "read"],
              ["document", "update"],
              ["folder", "read"],
            ] as const
          ).map(async ([resource, action]) => {
            const q = { userId, resource, action };
            const expected = await lookup("whole", q);
            expect(await lookup("split", { ...q, contextualGrants: contextual }, 1 + (seed % 2)), what(q)).toEqual(expected);
          }),
        ),
      );
      await Promise.all(
        ([["document", DOCS], ["folder", FOLDERS]] as const).flatMap(([resource, ids]) =>
          ids.flatMap((resourceId) =>
            ["read", "update"].map(async (action) => {
              const q = { resource, resourceId, action };
              const expected = await pages("whole", WHO_CAN, q, 100, "userIds");
              const got = await pages("split", WHO_CAN, { ...q, contextualGrants: contextual }, 1 + (seed % 2), "userIds");
              expect(got.ids, what(q)).toEqual(expected.ids);
              // Every user may exactly where they may with every grant stored (these worlds have no condition).
              expect(got.first.allUsers === true, `allUsers: ${what(q)}`).toBe(expected.first.allUsers === true);
            }),
          ),
        ),
      );
      await bulk("split", [], stored);
      await bulk("whole", [], all);
    }
  }, 600_000);
});
