/**
 * The AuthZEN Search APIs on each engine, through a real port with fetch:
 * who can (grants, roles, teams), which instances (grants, and every known
 * instance where a role allows the action on all), which actions (with
 * conditions fed by the request's context), each ascending and paged with
 * the standard's page.limit, page.token and page.next_token; empty results,
 * not 400s, for what the catalog or a user cannot be; a 400 naming each
 * missing part and each token that is not this search's.
 */
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AccessService } from "../gen/authzen/v1/access_pb.js";
import { admin, createApp } from "./helpers/authz.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";

const CATALOG = [
  {
    resource: "document",
    description: "",
    actions: ["read", "update", "delete", "share", "comment"],
    relations: [
      { name: "reviewer", actions: ["read", "comment"] },
      { name: "viewer", actions: ["read"], subjects: ["user", "team#member"] },
    ],
  },
  { resource: "team", description: "", actions: [], relations: [{ name: "member", actions: [], subjects: ["user"] }] },
];

const SUBJECT = "/access/v1/search/subject";
const RESOURCE = "/access/v1/search/resource";
const ACTION = "/access/v1/search/action";

type Json = Record<string, unknown>;

const user = (id?: string) => ({ type: "user", ...(id === undefined ? {} : { id }) });
const doc = (id?: string) => ({ type: "document", ...(id === undefined ? {} : { id }) });

describe.each(engines)("AuthZEN searches, on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;

  const post = async (path: string, body: Json) => {
    const res = await fetch(`${service.url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, text, body: JSON.parse(text) };
  };
  /** Every page of a search at `limit`, checking each page's shape; the ids (or names) in order and the pages' sizes. */
  const all = async (path: string, body: Json, limit?: number) => {
    const ids: string[] = [];
    const sizes: number[] = [];
    let token = "";
    for (let pages = 0; pages < 100; pages++) {
      const res = await post(path, { ...body, page: { ...(limit === undefined ? {} : { limit }), ...(token === "" ? {} : { token }) } });
      expect(res.status, res.text).toBe(200);
      expect(Object.keys(res.body)).toEqual(["page", "results"]);
      const results = res.body.results as { id?: string; name?: string }[];
      expect(res.body.page.count).toBe(results.length);
      ids.push(...results.map((r) => r.id ?? r.name!));
      sizes.push(results.length);
      token = res.body.page.next_token as string;
      if (token === "") return { ids, sizes };
    }
    throw new Error("the search never ended");
  };
  const grant = async (body: Json) => expect([200, 201]).toContain((await service.call("POST", "/api/v1/authorization/relationships", { key, body })).status);

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    service = await startTestService(database.db);
    key = await createApp(service, "azs", CATALOG);
    const a = admin(service, "azs");
    const role = await a.createRole("Readers", [await a.createPolicy("read documents", ["document:read"])]);
    for (const id of ["ron", "rita"]) await a.assign(role, id);
    const grants: [string, string, string][] = [
      ["ann", "d1", "editor"],
      ["bob", "d1", "viewer"],
      ["carl", "d1", "reviewer"],
      ["bob", "d3", "viewer"],
      ["bob", "d2", "viewer"],
      ["olga", "d6", "owner"],
      ["tess", "eng", "member"],
    ];
    for (const [userId, resourceId, relation] of grants) {
      await grant({ userId, resource: resourceId === "eng" ? "team" : "document", resourceId, relation });
    }
    // d5 is known by a team's grant only (a subject set): tess reads it through her team.
    await grant({ subject: { resource: "team", resourceId: "eng", relation: "member" }, resource: "document", resourceId: "d5", relation: "viewer" });
    await grant({ userId: "cat", resource: "document", resourceId: "d4", relation: "reviewer", condition: "context.ok == true" });
    // An expired grant names an instance no longer known (written straight to the table: the API refuses a past expiry).
    await database.db.query(
      "INSERT INTO relationships (app_id, resource, resource_id, relation, user_id, expires_at) VALUES ('azs', 'document', 'd0', 'viewer', 'zoe', now() - interval '1 hour')",
    );
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  describe("Subject Search", () => {
    it.each([
      ["read d1: grants and roles, ascending", "read", "d1", ["ann", "bob", "carl", "rita", "ron"]],
      ["update d1: the editor", "update", "d1", ["ann"]],
      ["share d1: nobody", "share", "d1", []],
      ["read d5: through the team, and the roles", "read", "d5", ["rita", "ron", "tess"]],
      ["read d4: a conditional grant is not listed (not evaluated yet), the roles are", "read", "d4", ["rita", "ron"]],
    ])("%s", async (_, action, id, expected) => {
      const res = await post(SUBJECT, { subject: user(), action: { name: action }, resource: doc(id) });
      expect(res.status, res.text).toBe(200);
      expect(res.body.results).toEqual(expected.map((u) => ({ type: "user", id: u })));
    });

    it("pages by page.limit, each page's count given, next_token \"\" on the last", async () => {
      const body = { subject: user(), action: { name: "read" }, resource: doc("d1") };
      expect(await all(SUBJECT, body, 2)).toEqual({ ids: ["ann", "bob", "carl", "rita", "ron"], sizes: [2, 2, 1] });
      expect(await all(SUBJECT, body, 5)).toEqual({ ids: ["ann", "bob", "carl", "rita", "ron"], sizes: [5] });
      expect(await all(SUBJECT, body)).toEqual({ ids: ["ann", "bob", "carl", "rita", "ron"], sizes: [5] });
    });

    it("subject.id is ignored", async () => {
      const res = await post(SUBJECT, { subject: user("whoever"), action: { name: "update" }, resource: doc("d1") });
      expect(res.body.results).toEqual([{ type: "user", id: "ann" }]);
    });
  });

  describe("Resource Search", () => {
    it.each([
      ["bob's grants, ascending", "bob", "read", ["d1", "d2", "d3"]],
      ["olga owns d6: she may share it", "olga", "share", ["d6"]],
      ["a role allows read on every document: every known one (live grants; a team's too; not the expired)", "rita", "read", ["d1", "d2", "d3", "d4", "d5", "d6"]],
      ["through the team", "tess", "read", ["d5"]],
      ["nothing", "zed", "read", []],
    ])("%s", async (_, subject, action, expected) => {
      const res = await post(RESOURCE, { subject: user(subject), action: { name: action }, resource: doc() });
      expect(res.status, res.text).toBe(200);
      expect(res.body.results).toEqual(expected.map((id) => ({ type: "document", id })));
    });

    it("pages, whether the ids come from grants or from every known instance", async () => {
      expect(await all(RESOURCE, { subject: user("bob"), action: { name: "read" }, resource: doc() }, 2)).toEqual({ ids: ["d1", "d2", "d3"], sizes: [2, 1] });
      expect(await all(RESOURCE, { subject: user("rita"), action: { name: "read" }, resource: doc() }, 4)).toEqual({ ids: ["d1", "d2", "d3", "d4", "d5", "d6"], sizes: [4, 2] });
      expect(await all(RESOURCE, { subject: user("rita"), action: { name: "read" }, resource: doc() }, 1)).toEqual({ ids: ["d1", "d2", "d3", "d4", "d5", "d6"], sizes: [1, 1, 1, 1, 1, 1] });
    });

    it("a page never repeats what an earlier one listed, whatever is granted between pages", async () => {
      const body = { subject: user("bob"), action: { name: "read" }, resource: doc(), page: { limit: 2 } };
      const first = await post(RESOURCE, body);
      await grant({ userId: "bob", resource: "document", resourceId: "d0a", relation: "viewer" });
      const second = await post(RESOURCE, { ...body, page: { limit: 2, token: first.body.page.next_token } });
      expect([...first.body.results, ...second.body.results].map((r: { id: string }) => r.id)).toEqual(["d1", "d2", "d3"]);
      expectStatus200(await service.call("DELETE", "/api/v1/authorization/relationships?userId=bob&resource=document&resourceId=d0a&relation=viewer", { key }));
    });

    it("resource.id is ignored", async () => {
      const res = await post(RESOURCE, { subject: user("olga"), action: { name: "delete" }, resource: doc("nope") });
      expect(res.body.results).toEqual([{ type: "document", id: "d6" }]);
    });
  });

  describe("conditional candidates: listed where their condition holds with the request's context", () => {
    beforeAll(async () => {
      for (const id of ["c1", "c3", "c5"]) await grant({ userId: "cora", resource: "document", resourceId: id, relation: "viewer" });
      for (const id of ["c2", "c4"]) await grant({ userId: "cora", resource: "document", resourceId: id, relation: "reviewer", condition: "context.ok == true" });
      await grant({ userId: "dora", resource: "document", resourceId: "c2", relation: "reviewer", condition: "context.ok == false" });
    });

    it.each([
      ["holds", { ok: true }, ["c1", "c2", "c3", "c4", "c5"]],
      ["does not hold", { ok: false }, ["c1", "c3", "c5"]],
      ["lacks its fact", {}, ["c1", "c3", "c5"]],
    ])("Resource Search, the condition %s: one cursor pages both kinds, never skipping", async (_name, context, expected) => {
      const body = { subject: user("cora"), action: { name: "read" }, resource: doc(), context };
      for (const limit of [1, 2, 3, 10]) {
        const { ids } = await all(RESOURCE, body, limit);
        expect(ids.filter((id) => id.startsWith("c")), `limit ${limit}`).toEqual(expected);
      }
    });

    it("Subject Search evaluates each user's own condition", async () => {
      const read = (context: Json) => all(SUBJECT, { subject: user(), action: { name: "read" }, resource: doc("c2"), context }, 1);
      // rita and ron read every document by their role.
      expect((await read({ ok: true })).ids).toEqual(["cora", "rita", "ron"]);
      expect((await read({ ok: false })).ids).toEqual(["dora", "rita", "ron"]);
      expect((await read({})).ids).toEqual(["rita", "ron"]);
    });
  });

  describe("an allUsers grant: Subject Search lists every user the application knows", () => {
    let publicKey: string;
    beforeAll(async () => {
      publicKey = await createApp(service, "azs-public", [
        { resource: "page", description: "", actions: ["read", "edit"], relations: [{ name: "viewer", actions: ["read"], subjects: ["user", "user:*"] }] },
      ]);
      const write = async (body: Json) => expect([200, 201]).toContain((await service.call("POST", "/api/v1/authorization/relationships", { key: publicKey, body })).status);
      await write({ allUsers: true, resource: "page", resourceId: "p1", relation: "viewer" });
      await write({ userId: "ann", resource: "page", resourceId: "p2", relation: "owner" });
      const a = admin(service, "azs-public");
      await a.assign(await a.createRole("Editors", [await a.createPolicy("edit pages", ["page:edit"])]), "bob");
      expect((await service.call("PUT", "/api/v1/applications/azs-public/users/cid/properties", { body: { email: "cid@example.com" } })).status).toBe(200);
    });

    it("named by grants, role assignments or stored properties; ascending and paged; the allUsers id is no user", async () => {
      const search = async (resourceId: string, limit: number) => {
        const ids: string[] = [];
        let token = "";
        for (let pages = 0; pages < 20; pages++) {
          const res = await fetch(`${service.url}${SUBJECT}`, {
            method: "POST",
            headers: { "content-type": "application/json", authorization: `Bearer ${publicKey}` },
            body: JSON.stringify({ subject: user(), action: { name: "read" }, resource: { type: "page", id: resourceId }, page: { limit, ...(token === "" ? {} : { token }) } }),
          });
          const body = (await res.json()) as { results: { id: string }[]; page: { next_token: string } };
          expect(res.status).toBe(200);
          ids.push(...body.results.map((r) => r.id));
          token = body.page.next_token;
          if (token === "") return ids;
        }
        throw new Error("the search never ended");
      };
      for (const limit of [1, 2, 10]) expect(await search("p1", limit), `limit ${limit}`).toEqual(["ann", "bob", "cid"]);
      // Where no allUsers grant reaches: who can's users.
      expect(await search("p2", 10)).toEqual(["ann"]);
    });
  });

  describe("Action Search", () => {
    it.each([
      ["an editor's, ascending", "ann", "d1", {}, ["read", "update"]],
      ["an owner's: every action", "olga", "d6", {}, ["comment", "delete", "read", "share", "update"]],
      ["a role's on any instance", "rita", "anything", {}, ["read"]],
      ["a conditional grant's, where its condition holds with the request's context", "cat", "d4", { context: { ok: true } }, ["comment", "read"]],
      ["...and not where it does not", "cat", "d4", { context: { ok: false } }, []],
    ])("%s", async (_, subject, id, extra, expected) => {
      const res = await post(ACTION, { subject: user(subject), resource: doc(id), ...extra });
      expect(res.status, res.text).toBe(200);
      expect(res.body.results).toEqual(expected.map((name) => ({ name })));
    });

    it("pages", async () => {
      expect(await all(ACTION, { subject: user("olga"), resource: doc("d6") }, 2)).toEqual({ ids: ["comment", "delete", "read", "share", "update"], sizes: [2, 2, 1] });
    });

    it("an action in the request is ignored (the standard leaves it out)", async () => {
      const res = await post(ACTION, { subject: user("ann"), action: { name: "delete" }, resource: doc("d1") });
      expect(res.body.results).toEqual([{ name: "read" }, { name: "update" }]);
    });
  });

  describe("what cannot be found is an empty search, not an error", () => {
    const empty = '{"page":{"next_token":"","count":0},"results":[]}';
    it.each([
      ["Subject Search, an unknown resource type", SUBJECT, { subject: user(), action: { name: "read" }, resource: { type: "spaceship", id: "x" } }],
      ["Subject Search, an unknown action", SUBJECT, { subject: user(), action: { name: "launch" }, resource: doc("d1") }],
      ["Subject Search, a subject type that is not user", SUBJECT, { subject: { type: "group" }, action: { name: "read" }, resource: doc("d1") }],
      ["Resource Search, an unknown resource type", RESOURCE, { subject: user("rita"), action: { name: "read" }, resource: { type: "spaceship" } }],
      ["Resource Search, an unknown action", RESOURCE, { subject: user("rita"), action: { name: "launch" }, resource: doc() }],
      ["Resource Search, a subject type that is not user", RESOURCE, { subject: { type: "group", id: "rita" }, action: { name: "read" }, resource: doc() }],
      ["Resource Search, a type outside the catalog's format", RESOURCE, { subject: user("rita"), action: { name: "read" }, resource: { type: "Document" } }],
      ["Action Search, an unknown resource type", ACTION, { subject: user("olga"), resource: { type: "spaceship", id: "d6" } }],
      ["Action Search, a subject type that is not user", ACTION, { subject: { type: "group", id: "olga" }, resource: doc("d6") }],
      ["Action Search, an id no grant can hold", ACTION, { subject: user("o".repeat(300)), resource: doc("d6") }],
    ])("%s", async (_, path, body) => {
      const res = await post(path, body);
      expect(res.status, res.text).toBe(200);
      expect(res.text).toBe(empty);
    });
  });

  describe("bad requests: a 400 naming the field", () => {
    it.each([
      ["Subject Search without subject.type", SUBJECT, { subject: {}, action: { name: "read" }, resource: doc("d1") }, "subject.type"],
      ["Subject Search whose resource lacks its id", SUBJECT, { subject: user(), action: { name: "read" }, resource: doc() }, "resource.id"],
      ["Subject Search without action", SUBJECT, { subject: user(), resource: doc("d1") }, "action"],
      ["Resource Search whose subject lacks its id", RESOURCE, { subject: user(), action: { name: "read" }, resource: doc() }, "subject.id"],
      ["Resource Search without resource.type", RESOURCE, { subject: user("bob"), action: { name: "read" }, resource: {} }, "resource.type"],
      ["Action Search without resource", ACTION, { subject: user("bob") }, "resource"],
      ["a page limit below zero", ACTION, { subject: user("bob"), resource: doc("d1"), page: { limit: -1 } }, "page.limit"],
      ["a page that is not an object", ACTION, { subject: user("bob"), resource: doc("d1"), page: 3 }, "page"],
      ["a token this service never made", ACTION, { subject: user("bob"), resource: doc("d1"), page: { token: "not-a-token" } }, "page.token"],
      ["a token that is not a string", ACTION, { subject: user("bob"), resource: doc("d1"), page: { token: 7 } }, "page.token"],
      ["context that is not an object", SUBJECT, { subject: user(), action: { name: "read" }, resource: doc("d1"), context: [] }, "context"],
    ])("%s", async (_, path, body, field) => {
      const res = await post(path, body);
      expect(res.status, res.text).toBe(400);
      expect((res.body.details as { field: string }[]).map((d) => d.field)).toContain(field);
    });

    it("a token of another search is refused: the request must be the one that gave it", async () => {
      const first = await post(SUBJECT, { subject: user(), action: { name: "read" }, resource: doc("d1"), page: { limit: 1 } });
      const token = first.body.page.next_token as string;
      expect(token).not.toBe("");
      const same = await post(SUBJECT, { subject: user(), action: { name: "read" }, resource: doc("d1"), page: { limit: 1, token } });
      expect(same.body.results).toEqual([{ type: "user", id: "bob" }]);
      for (const [path, body] of [
        [SUBJECT, { subject: user(), action: { name: "read" }, resource: doc("d2") }],
        [SUBJECT, { subject: user(), action: { name: "update" }, resource: doc("d1") }],
        [RESOURCE, { subject: user("bob"), action: { name: "read" }, resource: doc() }],
      ] as const) {
        const res = await post(path, { ...body, page: { token } });
        expect(res.status, res.text).toBe(400);
        expect(res.body.message).toContain("page.token: belongs to another search");
      }
    });

    it("limits: 0 is the default, past 1,000 is 1,000", async () => {
      for (const limit of [0, 4_294_967_295]) {
        const res = await post(SUBJECT, { subject: user(), action: { name: "read" }, resource: doc("d1"), page: { limit } });
        expect(res.status, res.text).toBe(200);
        expect(res.body.page).toEqual({ next_token: "", count: 5 });
      }
    });
  });

  it("a typed Connect client pages the same way", async () => {
    const client = createClient(AccessService, createConnectTransport({ baseUrl: service.url, httpVersion: "1.1" }));
    const headers = { "x-api-key": key };
    const first = await client.searchResource({ subject: { type: "user", id: "bob" }, action: { name: "read" }, resource: { type: "document" }, page: { limit: 2 } }, { headers });
    expect(first.results.map((r) => r.id)).toEqual(["d1", "d2"]);
    const next = await client.searchResource(
      { subject: { type: "user", id: "bob" }, action: { name: "read" }, resource: { type: "document" }, page: { limit: 2, token: first.page!.nextToken } },
      { headers },
    );
    expect(next.results.map((r) => r.id)).toEqual(["d3"]);
    expect(next.page).toMatchObject({ nextToken: "", count: 1 });
  });
});

function expectStatus200(res: { status: number; body: unknown }): void {
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}
