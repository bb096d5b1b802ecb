/**
 * Conditional grants on hierarchy paths (docs/conditions.md) through the REST API, on
 * each engine: a membership, a nested membership, a grant to a subject set,
 * a link, a grant on an ancestor and allUsers grants on nodes, each with a
 * condition: allowed where it holds with the question's facts, denied where
 * the facts are missing or make it false; a path with conditions on two
 * edges (both must hold), two paths of which one holds, expiry on a
 * conditional edge, the check, batch check, permissions and explain (its
 * path and every condition it evaluated), and that an application with no
 * conditional rows never asks the second statement. Lookup and who can list
 * what such a path reaches apart (`conditional`, with the conditions that
 * could allow it), never plainly, paged with the plain answers under one
 * cursor; the AuthZEN searches built on them list it where it holds.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countingDb, createApp, expectStatus } from "./helpers/authz.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { ALL_USERS_CATALOG, everyone, set, text, user, type AnyGrant, type EveryoneGrant } from "./support/graph.js";
import { startTestService, type TestService } from "./support/service.js";

/** Holds only for a question about a document (`resource` is the instance asked about, never a node on the way) with context.ok. */
const OK = "context.ok == true && resource.type == 'document'";

type Written = (AnyGrant | EveryoneGrant) & { condition?: string; expiresAt?: string };
const when = <T extends AnyGrant | EveryoneGrant>(g: T, condition: string): T & { condition: string } => ({ ...g, condition });

/**
 * Each kind of edge with a condition on it, on a path of its own; `asker` may read d<n> exactly where the condition holds.
 * `everyone`: the path starts from an allUsers grant, so every user may (who can lists no one for it).
 */
const KINDS: { kind: string; asker: string; doc: string; grants: Written[] }[] = [
  {
    kind: "a membership",
    asker: "u1",
    doc: "d1",
    grants: [when(user("u1", "team", "t1", "member"), OK), set("team:t1#member", "document", "d1", "viewer")],
  },
  {
    kind: "a nested membership (a team in a team)",
    asker: "u2",
    doc: "d2",
    grants: [user("u2", "team", "t2a", "member"), when(set("team:t2a#member", "team", "t2b", "member"), OK), set("team:t2b#member", "document", "d2", "viewer")],
  },
  {
    kind: "a grant to a subject set",
    asker: "u3",
    doc: "d3",
    grants: [user("u3", "team", "t3", "member"), when(set("team:t3#member", "document", "d3", "viewer"), OK)],
  },
  {
    kind: "a link",
    asker: "u4",
    doc: "d4",
    grants: [user("u4", "folder", "f4", "viewer"), when(set("folder:f4", "document", "d4", "parent"), OK)],
  },
  {
    kind: "a grant on an ancestor",
    asker: "u5",
    doc: "d5",
    grants: [when(user("u5", "folder", "f5", "viewer"), OK), set("folder:f5b", "folder", "f5", "parent"), set("folder:f5", "document", "d5", "parent")],
  },
  {
    kind: "a grant to a subject set on an ancestor",
    asker: "u6",
    doc: "d6",
    grants: [user("u6", "team", "t6", "member"), when(set("team:t6#member", "folder", "f6", "viewer"), OK), set("folder:f6", "document", "d6", "parent")],
  },
  {
    kind: "an allUsers grant on an ancestor",
    asker: "anyone-7",
    doc: "d7",
    grants: [when(everyone("folder", "f7", "viewer"), OK), set("folder:f7", "document", "d7", "parent")],
  },
  {
    kind: "an allUsers membership (a team everyone is in)",
    asker: "anyone-8",
    doc: "d8",
    grants: [when(everyone("team", "t8", "member"), OK), set("team:t8#member", "document", "d8", "viewer")],
  },
];

describe.each(engines)("conditional grants on paths, on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let statements: string[];
  let key: string;

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    const counting = countingDb(database.db);
    statements = counting.statements;
    service = await startTestService(counting.db);
    key = await createApp(service, "paths", ALL_USERS_CATALOG);
    const res = await call("POST", "/api/v1/authorization/relationships/bulk", { writes: KINDS.flatMap((k) => k.grants) });
    expectStatus(res, 200);
  }, 60_000);
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  const call = (method: string, path: string, body?: unknown, as = key) => service.call(method, path, { key: as, ...(body === undefined ? {} : { body }) });
  const write = async (writes: Written[], as = key) => expectStatus(await call("POST", "/api/v1/authorization/relationships/bulk", { writes }, as), 200);
  const check = async (body: object, as = key): Promise<boolean> => {
    const res = await call("POST", "/api/v1/authorization/check", body, as);
    expectStatus(res, 200);
    return res.body.allowed as boolean;
  };
  const explain = async (body: object) => {
    const res = await call("POST", "/api/v1/authorization/check/explain", body);
    expectStatus(res, 200);
    return res.body as { allowed: boolean; reasons: { kind: string; path: Written[] }[]; conditions: { relation: string; condition: string; holds: boolean; outcome: string; reads: unknown[] }[] };
  };
  const lookup = async (body: object, as = key) => {
    const res = await call("POST", "/api/v1/authorization/lookup", body, as);
    expectStatus(res, 200);
    return res.body as { resourceIds: string[]; conditional: { resourceId: string; conditions: string[] }[]; nextPageToken: string };
  };
  const subjects = async (body: object, as = key) => {
    const res = await call("POST", "/api/v1/authorization/subjects", body, as);
    expectStatus(res, 200);
    return res.body as {
      userIds: string[];
      conditional: { userId: string; conditions: string[] }[];
      allUsers: boolean;
      allUsersConditions: string[];
      nextPageToken: string;
    };
  };

  describe.each(KINDS)("$kind with a condition", ({ asker, doc }) => {
    const q = { userId: asker, resource: "document", resourceId: doc, action: "read" };

    it.each([
      { facts: { context: { ok: true } }, allowed: true },
      { facts: {}, allowed: false },
      { facts: { context: { ok: false } }, allowed: false },
      { facts: { context: { ok: "yes" } }, allowed: false },
    ])("check with $facts → $allowed; an action the path does not give stays denied", async ({ facts, allowed }) => {
      expect(await check({ ...q, ...facts })).toBe(allowed);
      expect(await check({ ...q, ...facts, action: "update" })).toBe(false);
    });

    it("batch check and permissions evaluate each question's facts", async () => {
      const res = await call("POST", "/api/v1/authorization/check/batch", { checks: [{ ...q, context: { ok: true } }, q, { ...q, userId: "nobody-at-all", context: { ok: true } }] });
      expectStatus(res, 200);
      const everyone = asker.startsWith("anyone");
      expect(res.body.results).toEqual([{ allowed: true }, { allowed: false }, { allowed: everyone }]);
      const { action: _, ...instance } = q;
      const held = await call("POST", "/api/v1/authorization/permissions", { ...instance, context: { ok: true } });
      expect(held.body.actions).toEqual(["read"]);
      expect((await call("POST", "/api/v1/authorization/permissions", instance)).body.actions).toEqual([]);
      const batch = await call("POST", "/api/v1/authorization/permissions/batch", { requests: [{ ...instance, context: { ok: true } }, instance] });
      expect(batch.body.results).toEqual([{ actions: ["read"] }, { actions: [] }]);
    });

    it("explain agrees, shows the path with its condition, and lists the condition it evaluated", async () => {
      const allowed = await explain({ ...q, context: { ok: true } });
      expect(allowed.allowed).toBe(true);
      const path = allowed.reasons[0]!.path;
      expect(path.filter((g) => g.condition === OK)).toHaveLength(1);
      expect([path.at(-1)!.resource, path.at(-1)!.resourceId]).toEqual(["document", doc]);
      expect(allowed.conditions).toEqual([
        expect.objectContaining({ condition: OK, holds: true, outcome: "true", reads: [{ path: "context.ok", found: true, value: true }, { path: "resource.type", found: true, value: "document" }] }),
      ]);
      const denied = await explain(q);
      expect(denied).toMatchObject({ allowed: false, reasons: [] });
      expect(denied.conditions).toEqual([expect.objectContaining({ condition: OK, holds: false, outcome: "error" })]);
      expect(denied.conditions[0]!.reads).toContainEqual({ path: "context.ok", found: false });
    });

    it("lookup and who can list it apart, with its condition, never plainly", async () => {
      const lookedUp = await lookup({ userId: asker, resource: "document", action: "read" });
      expect(lookedUp.resourceIds).not.toContain(doc);
      expect(lookedUp.conditional).toContainEqual({ resourceId: doc, conditions: [OK] });
      // An action the path does not give: neither.
      const update = await lookup({ userId: asker, resource: "document", action: "update" });
      expect([...update.resourceIds, ...update.conditional.map((c) => c.resourceId)]).not.toContain(doc);
      const who = await subjects({ resource: "document", resourceId: doc, action: "read" });
      expect(who.userIds).toEqual([]);
      // A path from an allUsers grant lists no user, and does not make every user (allUsers) one who may:
      // every user may where its condition holds (allUsersConditions).
      expect(who.conditional).toEqual(asker.startsWith("anyone") ? [] : [{ userId: asker, conditions: [OK] }]);
      expect(who.allUsers).toBe(false);
      expect(who.allUsersConditions).toEqual(asker.startsWith("anyone") ? [OK] : []);
    });
  });

  it("who can: every user may where a condition holds (allUsersConditions), never as allUsers", async () => {
    // An application of its own: its allUsers grants would give every other test's user these documents.
    const everyoneKey = await createApp(service, "everyone-conditions", ALL_USERS_CATALOG);
    await write([
      // On the instance itself.
      when(everyone("document", "ea", "viewer"), "context.ok == true"),
      user("ea-user", "document", "ea", "viewer"),
      // A plain allUsers grant behind a conditional link.
      everyone("folder", "eb", "viewer"),
      when(set("folder:eb", "document", "eb1", "parent"), "context.b == 1"),
      // Plain and conditional: every user may outright.
      everyone("document", "ec", "viewer"),
      when(everyone("folder", "ecf", "viewer"), "context.ok == true"),
      set("folder:ecf", "document", "ec", "parent"),
    ], everyoneKey);
    const ea = await subjects({ resource: "document", resourceId: "ea", action: "read" }, everyoneKey);
    expect(ea).toMatchObject({ userIds: ["ea-user"], allUsers: false, allUsersConditions: ["context.ok == true"] });
    // The viewer relation does not give update: neither every user nor a condition.
    expect(await subjects({ resource: "document", resourceId: "ea", action: "update" }, everyoneKey)).toMatchObject({ allUsers: false, allUsersConditions: [] });
    expect(await subjects({ resource: "document", resourceId: "eb1", action: "read" }, everyoneKey)).toMatchObject({ allUsers: false, allUsersConditions: ["context.b == 1"] });
    expect(await subjects({ resource: "document", resourceId: "ec", action: "read" }, everyoneKey)).toMatchObject({ allUsers: true, allUsersConditions: [] });
    // The check agrees, for a user no grant names.
    const check = async (resourceId: string, context: object) =>
      (await call("POST", "/api/v1/authorization/check", { userId: "nobody-named", resource: "document", resourceId, action: "read", context }, everyoneKey)).body.allowed;
    expect([await check("ea", { ok: true }), await check("ea", { ok: false }), await check("eb1", { b: 1 }), await check("eb1", {})]).toEqual([true, false, true, false]);
  });

  it("conditions on two edges of one path: both must hold", async () => {
    await write([
      when(user("w1", "team", "tw", "member"), "context.a == 1"),
      set("team:tw#member", "folder", "fw", "viewer"),
      when(set("folder:fw", "document", "dw", "parent"), "context.b == 1"),
    ]);
    const q = { userId: "w1", resource: "document", resourceId: "dw", action: "read" };
    expect(await check({ ...q, context: { a: 1, b: 1 } })).toBe(true);
    expect(await check({ ...q, context: { a: 1 } })).toBe(false);
    expect(await check({ ...q, context: { b: 1 } })).toBe(false);
    expect(await check({ ...q, context: { a: 2, b: 1 } })).toBe(false);
    const both = await explain({ ...q, context: { a: 1, b: 1 } });
    expect(both.allowed).toBe(true);
    expect(both.reasons[0]!.path.map((g) => [text(g), g.condition ?? null])).toEqual([
      ["w1 is member of team:tw", "context.a == 1"],
      ["team:tw#member is viewer of folder:fw", null],
      ["folder:fw is parent of document:dw", "context.b == 1"],
    ]);
    expect(both.conditions.map((c) => [c.relation, c.condition, c.outcome])).toEqual(
      expect.arrayContaining([
        ["member", "context.a == 1", "true"],
        ["parent", "context.b == 1", "true"],
      ]),
    );
    const one = await explain({ ...q, context: { a: 1 } });
    expect(one.allowed).toBe(false);
    // The link is met first from the instance: its condition fails, and the path ends there.
    expect(one.conditions).toEqual([expect.objectContaining({ relation: "parent", condition: "context.b == 1", holds: false, outcome: "error" })]);
    // Lookup and who can: the path's two conditions as one way, joined by &&.
    const way = "(context.a == 1) && (context.b == 1)";
    const lookedUp = await lookup({ userId: "w1", resource: "document", action: "read" });
    expect(lookedUp.resourceIds).not.toContain("dw");
    expect(lookedUp.conditional).toContainEqual({ resourceId: "dw", conditions: [way] });
    expect(await subjects({ resource: "document", resourceId: "dw", action: "read" })).toEqual(
      expect.objectContaining({ userIds: [], conditional: [{ userId: "w1", conditions: [way] }], allUsers: false }),
    );
  });

  it("two paths, each under its own condition: either allows, neither denies", async () => {
    await write([
      when(user("w2", "team", "ta", "member"), "context.via == 'a'"),
      when(user("w2", "team", "tb", "member"), "context.via == 'b'"),
      set("team:ta#member", "document", "d2p", "viewer"),
      set("team:tb#member", "folder", "f2p", "viewer"),
      set("folder:f2p", "document", "d2p", "parent"),
    ]);
    const q = { userId: "w2", resource: "document", resourceId: "d2p", action: "read" };
    expect(await check({ ...q, context: { via: "a" } })).toBe(true);
    expect(await check({ ...q, context: { via: "b" } })).toBe(true);
    expect(await check({ ...q, context: { via: "c" } })).toBe(false);
    expect(await check(q)).toBe(false);
    const viaB = await explain({ ...q, context: { via: "b" } });
    expect(viaB.allowed).toBe(true);
    expect(viaB.reasons[0]!.path.map(text)).toEqual(["w2 is member of team:tb", "team:tb#member is viewer of folder:f2p", "folder:f2p is parent of document:d2p"]);
    expect(viaB.conditions.map((c) => [c.condition, c.holds])).toEqual([
      ["context.via == 'a'", false],
      ["context.via == 'b'", true],
    ]);
    // Lookup and who can: either way, each path's condition.
    const ways = ["context.via == 'a'", "context.via == 'b'"];
    expect((await lookup({ userId: "w2", resource: "document", action: "read" })).conditional).toContainEqual({ resourceId: "d2p", conditions: ways });
    expect((await subjects({ resource: "document", resourceId: "d2p", action: "read" })).conditional).toEqual([{ userId: "w2", conditions: ways }]);
  });

  it("a plain path needs no condition: none is evaluated", async () => {
    await write([user("w3", "team", "tp", "member"), set("team:tp#member", "document", "d3p", "viewer"), when(user("w3", "team", "tq", "member"), "context.never")]);
    const explained = await explain({ userId: "w3", resource: "document", resourceId: "d3p", action: "read" });
    expect(explained).toMatchObject({ allowed: true, conditions: [] });
  });

  it("reached both plainly and through a condition: lookup and who can list it plainly only", async () => {
    await write([
      user("w6", "team", "tp6", "member"),
      set("team:tp6#member", "document", "d6p", "viewer"),
      when(user("w6", "team", "tq6", "member"), OK),
      set("team:tq6#member", "document", "d6p", "viewer"),
      user("w6", "folder", "f6p", "viewer"),
      when(set("folder:f6p", "document", "d6p", "parent"), OK),
    ]);
    const lookedUp = await lookup({ userId: "w6", resource: "document", action: "read" });
    expect(lookedUp.resourceIds).toContain("d6p");
    expect(lookedUp.conditional.map((c) => c.resourceId)).not.toContain("d6p");
    expect(await subjects({ resource: "document", resourceId: "d6p", action: "read" })).toEqual(expect.objectContaining({ userIds: ["w6"], conditional: [] }));
  });

  it("expiry still applies to a conditional edge", async () => {
    const expiresAt = new Date(Date.now() + 1500).toISOString();
    await write([{ ...when(user("w4", "team", "te", "member"), OK), expiresAt }, set("team:te#member", "document", "d4e", "viewer")]);
    const q = { userId: "w4", resource: "document", resourceId: "d4e", action: "read", context: { ok: true } };
    expect(await check(q)).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, Date.parse(expiresAt) - Date.now() + 200)));
    expect(await check(q)).toBe(false);
    expect((await explain(q)).allowed).toBe(false);
  });

  it("the 16-hop bound counts conditional hops as any other", async () => {
    // w5 is a member of c0 under a condition; c0 in c1 ... in c16. c15's members view "near" (16 hops
    // from the instance to w5's grant), c16's view "far" (17: one too many).
    const chain: Written[] = [when(user("w5", "team", "c0", "member"), "context.ok")];
    for (let i = 1; i <= 16; i++) chain.push(set(`team:c${i - 1}#member`, "team", `c${i}`, "member"));
    chain.push(set("team:c16#member", "document", "far", "viewer"), set("team:c15#member", "document", "near", "viewer"));
    await write(chain);
    expect(await check({ userId: "w5", resource: "document", resourceId: "near", action: "read", context: { ok: true } })).toBe(true);
    expect(await check({ userId: "w5", resource: "document", resourceId: "far", action: "read", context: { ok: true } })).toBe(false);
  });

  it("AuthZEN's resource and subject searches list what a conditional path reaches where its condition holds", async () => {
    const search = async (kind: "resource" | "subject", body: object) => {
      const res = await call("POST", `/access/v1/search/${kind}`, body);
      expectStatus(res, 200);
      return (res.body.results as { type: string; id: string }[]).map((r) => r.id);
    };
    const resources = { subject: { type: "user", id: "u1" }, action: { name: "read" }, resource: { type: "document" } };
    // u1's team membership gives d1; every user's conditional allUsers grants give d7 and d8.
    expect(await search("resource", { ...resources, context: { ok: true } })).toEqual(["d1", "d7", "d8"]);
    expect(await search("resource", { ...resources, context: { ok: false } })).toEqual([]);
    expect(await search("resource", resources)).toEqual([]);
    const users = { subject: { type: "user" }, action: { name: "read" }, resource: { type: "document", id: "d4" } };
    expect(await search("subject", { ...users, context: { ok: true } })).toEqual(["u4"]);
    expect(await search("subject", { ...users, context: { ok: false } })).toEqual([]);
    // d7: every user may where the allUsers grant's condition holds: every user the application knows, in order.
    const everyoneOn = { ...users, resource: { type: "document", id: "d7" } };
    const all = await search("subject", { ...everyoneOn, context: { ok: true } });
    expect(all).toEqual(expect.arrayContaining(["u1", "u4", "u5"]));
    expect(all).toEqual([...all].sort());
    expect(await search("subject", { ...everyoneOn, context: { ok: false } })).toEqual([]);
    expect(await search("subject", everyoneOn)).toEqual([]);
  });

  it("lookup and who can page plain and conditional answers together, under one cursor: none skipped, none repeated", async () => {
    const pagesKey = await createApp(service, "paths-pages", ALL_USERS_CATALOG);
    const C = "context.ok == true";
    await write(
      [
        // pg: p1, p3, p5, p7 plainly; p2, p4, p6 through a conditional membership (p7 both); p8 through a
        // conditional link; p9 by a conditional grant on the instance itself.
        user("pg", "team", "plain", "member"),
        when(user("pg", "team", "cond", "member"), C),
        ...["p1", "p3", "p5", "p7"].map((d) => set("team:plain#member", "document", d, "viewer")),
        ...["p2", "p4", "p6", "p7"].map((d) => set("team:cond#member", "document", d, "viewer")),
        user("pg", "folder", "fp", "viewer"),
        when(set("folder:fp", "document", "p8", "parent"), C),
        when(user("pg", "document", "p9", "viewer"), C),
        // On "shared": a1, a3, a5 plainly; a2, a4, a6 through a conditional membership (a7 both); a8 by its own conditional grant.
        ...["a1", "a3", "a5", "a7"].map((u) => user(u, "team", "wplain", "member")),
        ...["a2", "a4", "a6", "a7"].map((u) => when(user(u, "team", "wcond", "member"), C)),
        set("team:wplain#member", "document", "shared", "viewer"),
        set("team:wcond#member", "document", "shared", "viewer"),
        when(user("a8", "document", "shared", "viewer"), C),
      ],
      pagesKey,
    );
    const lookupAll = ["p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9"];
    const lookupConditional = ["p2", "p4", "p6", "p8", "p9"];
    const whoAll = ["a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8"];
    const whoConditional = ["a2", "a4", "a6", "a8"];
    for (const pageSize of [1, 2]) {
      for (const [ask, body, all, conditional] of [
        [lookup, { userId: "pg", resource: "document", action: "read" }, lookupAll, lookupConditional],
        [subjects, { resource: "document", resourceId: "shared", action: "read" }, whoAll, whoConditional],
      ] as const) {
        const seen: string[] = [];
        const apart: string[] = [];
        let pageToken = "";
        do {
          const page = (await (ask as typeof lookup | typeof subjects)({ ...body, pageSize, pageToken }, pagesKey)) as {
            resourceIds?: string[];
            userIds?: string[];
            conditional: { resourceId?: string; userId?: string; conditions: string[] }[];
            nextPageToken: string;
          };
          const plain = page.resourceIds ?? page.userIds!;
          const conditionalIds = page.conditional.map((c) => c.resourceId ?? c.userId!);
          for (const c of page.conditional) expect(c.conditions).toEqual([C]);
          const ids = [...plain, ...conditionalIds].sort();
          expect(ids.length, `a page of ${pageSize}: ${ids}`).toBe(Math.min(pageSize, all.length - seen.length));
          seen.push(...ids);
          apart.push(...conditionalIds);
          pageToken = page.nextPageToken;
        } while (pageToken !== "");
        expect(seen, `pages of ${pageSize}`).toEqual(all);
        expect(apart.sort()).toEqual(conditional);
      }
    }
  });

  it("an application with no conditional rows asks one statement per check, allowed or denied", async () => {
    const plainKey = await createApp(service, "paths-plain", ALL_USERS_CATALOG);
    await write([user("p1", "team", "pt", "member"), set("team:pt#member", "document", "pd", "viewer")], plainKey);
    const before = statements.length;
    expect(await check({ userId: "p1", resource: "document", resourceId: "pd", action: "read" }, plainKey)).toBe(true);
    expect(await check({ userId: "p2", resource: "document", resourceId: "pd", action: "read", context: { ok: true } }, plainKey)).toBe(false);
    // Lookup and who can there: one statement each, never the one through conditional paths.
    expect((await lookup({ userId: "p1", resource: "document", action: "read" }, plainKey)).resourceIds).toEqual(["pd"]);
    expect((await subjects({ resource: "document", resourceId: "pd", action: "read" }, plainKey)).userIds).toEqual(["p1"]);
    expect(statements.slice(before).filter((sql) => sql.includes("capped AS MATERIALIZED") || sql.includes("unnest(q.prior)"))).toEqual([]);
    // In the application with conditional rows, a denied check asks the second statement.
    const second = statements.length;
    expect(await check({ userId: "u1", resource: "document", resourceId: "d1", action: "read" })).toBe(false);
    expect(statements.slice(second).filter((sql) => sql.includes("capped AS MATERIALIZED"))).toHaveLength(1);
    // And a lookup there asks its page through conditional paths, once.
    const third = statements.length;
    expect((await lookup({ userId: "u1", resource: "document", action: "read" })).conditional).toContainEqual({ resourceId: "d1", conditions: [OK] });
    expect(statements.slice(third).filter((sql) => sql.includes("unnest(q.prior)"))).toHaveLength(1);
  });
});
