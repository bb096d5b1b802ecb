/**
 * Groups and hierarchy (docs/hierarchy.md) through the REST API, on every
 * engine: a catalog with teams (nested), folders (a forest, with a cycle)
 * and documents; grants to users, subject sets and links; every question
 * (check, batch, permissions, explain with its path, lookup, who can); the
 * 16-hop bound (16 reach, 17 do not); expiring memberships; delete by
 * subject; and the 400s and 409s of bad input.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";
import { admin, createApp, expectError, expectStatus, queryString } from "./helpers/authz.js";
import { GRAPH_CATALOG, OPEN_GROUPS_CATALOG, set, text, user, type AnyGrant } from "./support/graph.js";

describe.each(engines)("groups and hierarchy on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;
  const call = (method: string, path: string, body?: unknown) => service.call(method, path, { key, ...(body === undefined ? {} : { body }) });
  const bulk = async (writes: AnyGrant[], deletes: AnyGrant[] = []) => {
    const res = await call("POST", "/api/v1/authorization/relationships/bulk", { writes, deletes });
    expectStatus(res, 200);
    return res.body;
  };
  const allowed = async (userId: string, resource: string, resourceId: string, action: string) => {
    const res = await call("POST", "/api/v1/authorization/check", { userId, resource, resourceId, action });
    expectStatus(res, 200);
    return res.body.allowed as boolean;
  };
  const lookupAll = async (userId: string, resource: string, action: string, pageSize = 2) => {
    const ids: string[] = [];
    let pageToken = "";
    for (let i = 0; i < 1000; i++) {
      const res = await call("POST", "/api/v1/authorization/lookup", { userId, resource, action, pageSize, pageToken });
      expectStatus(res, 200);
      ids.push(...(res.body.resourceIds as string[]));
      pageToken = res.body.nextPageToken as string;
      if (pageToken === "") return ids;
    }
    throw new Error("lookup never ended");
  };
  const whoCanAll = async (resource: string, resourceId: string, action: string, pageSize = 2) => {
    const ids: string[] = [];
    let pageToken = "";
    for (let i = 0; i < 1000; i++) {
      const res = await call("POST", "/api/v1/authorization/subjects", { resource, resourceId, action, pageSize, pageToken });
      expectStatus(res, 200);
      ids.push(...(res.body.userIds as string[]));
      pageToken = res.body.nextPageToken as string;
      if (pageToken === "") return ids;
    }
    throw new Error("who can never ended");
  };

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    service = await startTestService(database.db);
    key = await createApp(service, "graph", GRAPH_CATALOG);
    await bulk([
      user("alice", "team", "platform", "member"),
      set("team:platform#member", "team", "eng", "member"), // platform is inside eng
      user("bob", "team", "eng", "member"),
      set("team:eng#member", "folder", "runbooks", "viewer"),
      set("folder:root", "folder", "runbooks", "parent"),
      set("folder:runbooks", "document", "42", "parent"),
      set("folder:runbooks", "document", "43", "parent"),
      user("carol", "folder", "root", "editor"),
      user("dave", "document", "42", "viewer"),
      // A cycle: team a in b in a; folder x parent of y parent of x.
      set("team:b#member", "team", "a", "member"),
      set("team:a#member", "team", "b", "member"),
      user("erin", "team", "a", "member"),
      set("team:a#member", "document", "cyc", "viewer"),
      set("folder:y", "folder", "x", "parent"),
      set("folder:x", "folder", "y", "parent"),
      set("folder:x", "document", "inloop", "parent"),
      user("frank", "folder", "y", "viewer"),
    ]);
  }, 60_000);
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  it.each([
    ["alice", "document", "42", "read", true], // alice → platform → eng → runbooks viewer → doc parent
    ["alice", "document", "42", "update", false],
    ["bob", "document", "43", "read", true],
    ["bob", "folder", "runbooks", "list", true],
    ["carol", "document", "42", "update", true], // root editor → runbooks → doc
    ["carol", "folder", "runbooks", "update", true],
    ["dave", "document", "42", "read", true],
    ["dave", "document", "43", "read", false],
    ["mallory", "document", "42", "read", false],
    ["erin", "document", "cyc", "read", true], // through the cycle of teams
    ["frank", "document", "inloop", "read", true], // x's parent y, frank views y
    ["nobody", "document", "inloop", "read", false], // the folder cycle ends the walk
  ] as const)("check %s %s:%s %s → %s", async (userId, resource, resourceId, action, expected) => {
    expect(await allowed(userId, resource, resourceId, action)).toBe(expected);
  });

  it("batch check and permissions follow the same rules", async () => {
    const res = await call("POST", "/api/v1/authorization/check/batch", {
      checks: [
        { userId: "alice", resource: "document", resourceId: "42", action: "read" },
        { userId: "alice", resource: "document", resourceId: "42", action: "delete" },
        { userId: "carol", resource: "document", resourceId: "43", action: "update" },
      ],
    });
    expectStatus(res, 200);
    expect(res.body.results).toEqual([{ allowed: true }, { allowed: false }, { allowed: true }]);
    const perms = await call("POST", "/api/v1/authorization/permissions", { userId: "carol", resource: "document", resourceId: "42" });
    expectStatus(perms, 200);
    expect(perms.body.actions).toEqual(["read", "update"]);
  });

  it("explain shows the whole path, grant by grant, from the user's own grant to the instance's", async () => {
    const res = await call("POST", "/api/v1/authorization/check/explain", { userId: "alice", resource: "document", resourceId: "42", action: "read" });
    expectStatus(res, 200);
    expect(res.body.allowed).toBe(true);
    const reasons = res.body.reasons as { kind: string; relation: string; grant: AnyGrant; path: AnyGrant[] }[];
    expect(reasons).toHaveLength(1);
    expect(reasons[0]!.path.map(text)).toEqual([
      "alice is member of team:platform",
      "team:platform#member is member of team:eng",
      "team:eng#member is viewer of folder:runbooks",
      "folder:runbooks is parent of document:42",
    ]);
    expect(text(reasons[0]!.grant)).toEqual(text(reasons[0]!.path[3]!));
    // Fewest hops: dave holds viewer on 42 directly.
    const direct = await call("POST", "/api/v1/authorization/check/explain", { userId: "dave", resource: "document", resourceId: "42", action: "read" });
    expect((direct.body.reasons as { path: AnyGrant[] }[])[0]!.path).toHaveLength(1);
    const denied = await call("POST", "/api/v1/authorization/check/explain", { userId: "alice", resource: "document", resourceId: "42", action: "update" });
    expect(denied.body.allowed).toBe(false);
    expect(denied.body.considered.relations).toEqual([{ relation: "viewer", actions: ["read"] }]);
  });

  it("lookup is complete and paged, ascending", async () => {
    expect(await lookupAll("alice", "document", "read")).toEqual(["42", "43"]);
    expect(await lookupAll("carol", "document", "update")).toEqual(["42", "43"]);
    expect(await lookupAll("carol", "folder", "read")).toEqual(["root", "runbooks"]);
    expect(await lookupAll("dave", "document", "read")).toEqual(["42"]);
    expect(await lookupAll("frank", "folder", "read")).toEqual(["x", "y"]);
    expect(await lookupAll("frank", "document", "read", 1)).toEqual(["inloop"]);
    expect(await lookupAll("erin", "document", "read")).toEqual(["cyc"]);
  });

  it("who can: every user, through sets, links and roles, ascending and paged", async () => {
    expect(await whoCanAll("document", "42", "read")).toEqual(["alice", "bob", "carol", "dave"]);
    expect(await whoCanAll("document", "42", "update", 1)).toEqual(["carol"]);
    expect(await whoCanAll("document", "inloop", "read")).toEqual(["frank"]);
    const a = admin(service, "graph");
    const policy = await a.createPolicy("doc-readers", ["document:read"]);
    const role = await a.createRole("readers", [policy]);
    await a.assign(role, "zed");
    expect(await whoCanAll("document", "42", "read", 3)).toEqual(["alice", "bob", "carol", "dave", "zed"]);
    await a.unassign(role, "zed");
  });

  it("leaving a team, unlinking a folder and an expired membership are seen by the very next answer", async () => {
    await bulk([], [user("alice", "team", "platform", "member")]);
    expect(await allowed("alice", "document", "42", "read")).toBe(false);
    await bulk([user("alice", "team", "platform", "member")]);
    expect(await allowed("alice", "document", "42", "read")).toBe(true);
    await bulk([], [set("folder:runbooks", "document", "43", "parent")]);
    expect(await allowed("bob", "document", "43", "read")).toBe(false);
    await bulk([set("folder:runbooks", "document", "43", "parent")]);
    const soon = new Date(Date.now() + 1500).toISOString();
    await bulk([{ ...user("gina", "team", "eng", "member"), expiresAt: soon }]);
    expect(await allowed("gina", "document", "42", "read")).toBe(true);
    await new Promise((r) => setTimeout(r, 1600));
    expect(await allowed("gina", "document", "42", "read")).toBe(false);
    expect(await whoCanAll("document", "42", "read")).not.toContain("gina");
  });

  it("the hop bound is exact: 16 reach, 17 do not", async () => {
    // A chain of nested teams: hop-0 holds viewer on the document; member of hop-k is in hop-(k-1).
    const writes: AnyGrant[] = [set("team:hop-0#member", "document", "deep", "viewer")];
    for (let k = 1; k <= 17; k++) writes.push(set(`team:hop-${k}#member`, "team", `hop-${k - 1}`, "member"));
    for (let k = 0; k <= 17; k++) writes.push(user(`u${k}`, "team", `hop-${k}`, "member"));
    await bulk(writes);
    // u_k's path: u_k in hop-k (k nested hops) → hop-0#member viewer of deep: k + 1 hops.
    expect(await allowed("u15", "document", "deep", "read")).toBe(true); // 16 hops
    expect(await allowed("u16", "document", "deep", "read")).toBe(false); // 17 hops
    const who = await whoCanAll("document", "deep", "read", 100);
    expect(who).toContain("u15");
    expect(who).not.toContain("u16");
    expect(await lookupAll("u15", "document", "read")).toEqual(["deep"]);
    expect(await lookupAll("u16", "document", "read")).toEqual([]);
    const explain = await call("POST", "/api/v1/authorization/check/explain", { userId: "u15", resource: "document", resourceId: "deep", action: "read" });
    expect((explain.body.reasons as { path: unknown[] }[])[0]!.path).toHaveLength(17); // the user's grant and 16 hops
  });

  it("the hop bound is exact where the walk from the instance meets the user's teams: 16 reach, 17 do not", async () => {
    // document split ← folder split-0 ← ... ← split-7 (8 links); team:split-t0#member views split-7; split-tk is in split-t(k-1).
    const writes: AnyGrant[] = [set("folder:split-0", "document", "split", "parent"), set("team:split-t0#member", "folder", "split-7", "viewer")];
    for (let k = 1; k <= 7; k++) writes.push(set(`folder:split-${k}`, "folder", `split-${k - 1}`, "parent"));
    for (let k = 1; k <= 9; k++) writes.push(set(`team:split-t${k}#member`, "team", `split-t${k - 1}`, "member"));
    for (let k = 0; k <= 9; k++) writes.push(user(`s${k}`, "team", `split-t${k}`, "member"));
    await bulk(writes);
    // s_k: k nested hops, team t0 → folder split-7 (1), 8 links to the document: k + 9 hops.
    for (let k = 0; k <= 9; k++) expect(await allowed(`s${k}`, "document", "split", "read"), `s${k}: ${k + 9} hops`).toBe(k + 9 <= 16);
    const who = await whoCanAll("document", "split", "read", 100);
    expect(who.filter((u) => u.startsWith("s"))).toEqual(["s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"]);
    const permissions = await call("POST", "/api/v1/authorization/permissions/batch", {
      requests: ["s7", "s8"].map((userId) => ({ userId, resource: "document", resourceId: "split" })),
    });
    expectStatus(permissions, 200);
    expect((permissions.body.results as { actions: string[] }[]).map((r) => r.actions)).toEqual([["read"], []]);
  });

  it("groups that are not only nested groups are walked down from the instance, and teams still met from the user's side", async () => {
    // group#member's members may be a folder's viewers (fed by links): the
    // walk cannot meet it from the user's side, and goes through it to the team.
    const groupsKey = await createApp(service, "graph-open-groups", OPEN_GROUPS_CATALOG);
    const as = (method: string, path: string, body: unknown) => service.call(method, path, { key: groupsKey, body });
    expectStatus(
      await as("POST", "/api/v1/authorization/relationships/bulk", {
        writes: [
          user("ann", "folder", "fx", "viewer"),
          set("folder:fx", "folder", "fy", "parent"),
          set("folder:fy#viewer", "group", "g", "member"), // the viewers of fy, fx's included, are in g
          set("team:t#member", "group", "g", "member"),
          set("team:inner#member", "team", "t", "member"),
          user("ben", "team", "inner", "member"),
          user("cas", "group", "h", "member"),
          set("group:h#member", "group", "g", "member"),
          set("group:g#member", "document", "dx", "viewer"),
        ],
      }),
      200,
    );
    const checks = ["ann", "ben", "cas", "dan"].map((userId) => ({ userId, resource: "document", resourceId: "dx", action: "read" }));
    const batch = await as("POST", "/api/v1/authorization/check/batch", { checks });
    expectStatus(batch, 200);
    expect((batch.body.results as { allowed: boolean }[]).map((r) => r.allowed)).toEqual([true, true, true, false]);
    const single = await as("POST", "/api/v1/authorization/check", checks[0]);
    expectStatus(single, 200);
    expect(single.body.allowed).toBe(true);
    const explained = await as("POST", "/api/v1/authorization/check/explain", checks[1]);
    expectStatus(explained, 200);
    expect((explained.body.reasons as { path: AnyGrant[] }[])[0]!.path.map(text)).toEqual([
      "ben is member of team:inner",
      "team:inner#member is member of team:t",
      "team:t#member is member of group:g",
      "group:g#member is viewer of document:dx",
    ]);
  });

  it("grants to subjects are listed, deleted singly and by subject", async () => {
    await bulk([set("team:gone#member", "document", "t1", "viewer"), set("team:gone#member", "document", "t2", "editor"), set("folder:old", "document", "t3", "parent")]);
    const listed = await call("GET", `/api/v1/authorization/relationships${queryString({ resource: "document", resourceId: "t1" })}`);
    expectStatus(listed, 200);
    expect(listed.body.relationships).toHaveLength(1);
    expect(listed.body.relationships[0].subject).toEqual({ resource: "team", resourceId: "gone", relation: "member" });
    const held = await call("GET", `/api/v1/authorization/relationships${queryString({ subjectResource: "team", subjectResourceId: "gone", subjectRelation: "member", resource: "document" })}`);
    expect((held.body.relationships as AnyGrant[]).map((g) => g.resourceId)).toEqual(["t1", "t2"]);
    const single = await call(
      "DELETE",
      `/api/v1/authorization/relationships${queryString({ resource: "document", resourceId: "t3", relation: "parent", subjectResource: "folder", subjectResourceId: "old" })}`,
    );
    expect(single.body).toEqual({ deleted: true });
    const bySubject = await call("POST", "/api/v1/authorization/relationships/delete", { subject: { resource: "team", resourceId: "gone" } });
    expectStatus(bySubject, 200);
    expect(bySubject.body).toEqual({ deleted: 2 });
  });

  it.each([
    ["a subject of the wrong type", { subject: { resource: "folder", resourceId: "f" }, resource: "document", resourceId: "d", relation: "viewer" }, "subject"],
    ["both userId and subject", { userId: "u", subject: { resource: "team", resourceId: "t", relation: "member" }, resource: "document", resourceId: "d", relation: "viewer" }, "subject"],
    ["neither userId nor subject", { resource: "document", resourceId: "d", relation: "viewer" }, "userId"],
    ["a user on a link relation", { userId: "u", resource: "document", resourceId: "d", relation: "parent" }, "userId"],
    ["a subject set of an unknown relation", { subject: { resource: "team", resourceId: "t", relation: "lead" }, resource: "document", resourceId: "d", relation: "viewer" }, "subject"],
  ])("a grant with %s is a 400 naming the field, and writes nothing", async (_name, body, field) => {
    const res = await call("POST", "/api/v1/authorization/relationships", body);
    expectError(res, 400, "invalid_argument", field);
  });

  it.each([
    ["a link relation with actions", [{ name: "parent", actions: ["read"], subjects: ["folder"] }], "resources[0].relations[0].actions"],
    ["inherits through a non-link", [{ name: "viewer", actions: ["read"], inherits: [{ through: "editor", relation: "viewer" }] }], "resources[0].relations[0].inherits[0].through"],
    ["inherits a relation the linked type lacks", [{ name: "parent", actions: [], subjects: ["folder"] }, { name: "viewer", actions: ["read"], inherits: [{ through: "parent", relation: "nope" }] }], "resources[0].relations[1].inherits[0].relation"],
    ["an unknown subject resource", [{ name: "viewer", actions: ["read"], subjects: ["group#member"] }], "resources[0].relations[0].subjects[0]"],
    ["a link mixed with users", [{ name: "parent", actions: [], subjects: ["folder", "user"] }], "resources[0].relations[0].subjects"],
  ])("a catalog with %s is a 400 naming the path", async (_name, relations, field) => {
    const a = admin(service, "graph");
    const res = await a.putCatalog([{ resource: "document", description: "", actions: ["read"], relations }, { resource: "folder", description: "", actions: ["read"], relations: [] }]);
    expectError(res, 400, "invalid_argument", field);
  });

  it("a catalog that drops a subject type or link live grants use is a 409 naming them", async () => {
    const a = admin(service, "graph");
    const without = structuredClone(GRAPH_CATALOG);
    without[2]!.relations[1]!.subjects = ["user"];
    const res = await a.putCatalog(without);
    expectError(res, 409, "failed_precondition", "team#member", "document#viewer");
    const noLink = structuredClone(GRAPH_CATALOG);
    noLink[2]!.relations = noLink[2]!.relations.filter((r) => r.name !== "parent").map((r) => ({ ...r, inherits: [], requires: [], unless: [] }));
    expectError(await a.putCatalog(noLink), 409, "failed_precondition", "document#parent");
    // The catalog round-trips: subjects and inherits as written.
    const got = (await a.getCatalog()) as { resource: string; relations: { name: string; subjects: string[]; inherits?: unknown[] }[] }[];
    const doc = got.find((e) => e.resource === "document")!;
    expect(doc.relations.find((r) => r.name === "viewer")).toMatchObject({ subjects: ["user", "team#member"], inherits: [{ through: "parent", relation: "viewer" }] });
    expect(doc.relations.find((r) => r.name === "owner")).toMatchObject({ subjects: ["user"], inherits: [], requires: [], unless: [] });
  });
});
