/**
 * Freshness: after any committed change the very next check answers
 * accordingly, on the replica that made the change and on another replica
 * over the same Postgres database (each with its own pool). Every kind of
 * change: policy permissions, role policies, assignments, roles, policies
 * force-deleted, grants (single and bulk), and catalog changes (custom
 * relations edited, actions added that owner then implies, built-ins
 * redefined, actions removed), and the changes of groups and hierarchy (a
 * user leaving or joining a team, a nested team removed or added, a folder
 * unlinked or linked, a team's grants deleted by subject, a catalog made
 * hierarchical or flat, memberships and links expiring). PGlite runs the
 * single-replica half. The other questions (explain, permissions, lookup,
 * who can) are held to the same rule: right after each change, half the
 * cases ask them before the check; lookup and who can are walked page by
 * page.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, engines, type EngineName, type TestDatabase } from "./support/engines.js";
import { grpcCaller, type GrpcCaller } from "./support/grpc-client.js";
import { GRAPH_CATALOG, set, SMALL_WORLD, user, type AnyGrant } from "./support/graph.js";
import { startTestService, type RestAnswer, type TestService } from "./support/service.js";
import { databaseClock, justBeforeExpiry } from "./support/expiry-trials.js";
import {
  admin,
  apiTime,
  authz,
  createApp,
  expectError,
  expectStatus,
  grant,
  GRPC,
  question,
  queryString,
  type Admin,
  type Authz,
  type CheckQuestion,
} from "./helpers/authz.js";

/** What a check answers: allowed, denied, or refused (400: the action or resource is not in the catalog). */
type Answer = true | false | "invalid";

const DOCUMENT = {
  resource: "document",
  description: "",
  actions: ["create", "read", "update", "delete", "list", "comment"],
  relations: [{ name: "reviewer", actions: ["read", "comment"] }],
};
const CATALOG = [DOCUMENT];
const withDocument = (over: Partial<typeof DOCUMENT>) => [{ ...DOCUMENT, ...over }];

interface Ctx {
  ops: Admin;
  x: Authz;
  ids: Record<string, string>;
  /** REST with the application's key, for grants to subjects (x's helpers take users only). */
  call(method: string, path: string, body?: unknown): Promise<RestAnswer>;
}

interface FreshCase {
  name: string;
  catalog?: unknown[];
  setup(ctx: Ctx): Promise<void>;
  change(ctx: Ctx): Promise<void>;
  /** Each question with its answer before and after the change. */
  questions: { q: CheckQuestion; before: Answer; after: Answer }[];
}

/** A role "reader" holding policy P (document:read) assigned to "ulla". */
async function roleWithPolicy(ctx: Ctx, permissions = ["document:read"], tenantId?: string): Promise<void> {
  ctx.ids.policy = await ctx.ops.createPolicy("P", permissions, tenantId);
  ctx.ids.role = await ctx.ops.createRole("Reader", [ctx.ids.policy], tenantId);
  await ctx.ops.assign(ctx.ids.role, "ulla");
}

const ulla = (action: string, tenantId?: string) => question("ulla", "document", "d1", action, tenantId);
const owner = (action: string) => question("olga", "document", "d1", action);

const cases: FreshCase[] = [
  {
    name: "a permission added to a policy",
    setup: (c) => roleWithPolicy(c),
    change: async (c) => void (await c.ops.setPermissions(c.ids.policy!, ["document:read", "document:update"])),
    questions: [
      { q: ulla("update"), before: false, after: true },
      { q: ulla("read"), before: true, after: true },
    ],
  },
  {
    name: "a permission removed from a policy",
    setup: (c) => roleWithPolicy(c, ["document:read", "document:delete"]),
    change: async (c) => void (await c.ops.setPermissions(c.ids.policy!, ["document:read"])),
    questions: [
      { q: ulla("delete"), before: true, after: false },
      { q: ulla("read"), before: true, after: true },
    ],
  },
  {
    name: "every permission removed from a tenant policy",
    setup: (c) => roleWithPolicy(c, ["document:read"], "t1"),
    change: async (c) => void (await c.ops.setPermissions(c.ids.policy!, [])),
    questions: [{ q: ulla("read", "t1"), before: true, after: false }],
  },
  {
    name: "a policy detached from a role",
    setup: (c) => roleWithPolicy(c),
    change: async (c) => void (await c.ops.setRolePolicies(c.ids.role!, [])),
    questions: [{ q: ulla("read"), before: true, after: false }],
  },
  {
    name: "a role's policy swapped for another",
    setup: async (c) => {
      await roleWithPolicy(c);
      c.ids.other = await c.ops.createPolicy("Q", ["document:comment"]);
    },
    change: async (c) => void (await c.ops.setRolePolicies(c.ids.role!, [c.ids.other!])),
    questions: [
      { q: ulla("read"), before: true, after: false },
      { q: ulla("comment"), before: false, after: true },
    ],
  },
  {
    name: "an attached policy force-deleted",
    setup: (c) => roleWithPolicy(c),
    change: async (c) => void (await c.ops.deletePolicy(c.ids.policy!, true)),
    questions: [{ q: ulla("read"), before: true, after: false }],
  },
  {
    name: "a role unassigned",
    setup: (c) => roleWithPolicy(c),
    change: async (c) => void (await c.ops.unassign(c.ids.role!, "ulla")),
    questions: [{ q: ulla("read"), before: true, after: false }],
  },
  {
    name: "a role assigned",
    setup: async (c) => {
      c.ids.policy = await c.ops.createPolicy("P", ["document:read"]);
      c.ids.role = await c.ops.createRole("Reader", [c.ids.policy]);
    },
    change: async (c) => void (await c.ops.assign(c.ids.role!, "ulla")),
    questions: [{ q: ulla("read"), before: false, after: true }],
  },
  {
    name: "a role deleted",
    setup: (c) => roleWithPolicy(c),
    change: async (c) => void (await c.ops.deleteRole(c.ids.role!)),
    questions: [{ q: ulla("read"), before: true, after: false }],
  },
  {
    name: "a grant written",
    setup: async () => undefined,
    change: async (c) => expectStatus(await c.x.write(grant("olga", "document", "d1", "owner")), 201),
    questions: [
      { q: owner("delete"), before: false, after: true },
      { q: question("olga", "document", "d2", "delete"), before: false, after: false },
    ],
  },
  {
    name: "a grant deleted",
    setup: async (c) => expectStatus(await c.x.write(grant("olga", "document", "d1", "owner")), 201),
    change: async (c) => expect((await c.x.delete(grant("olga", "document", "d1", "owner"))).body).toEqual({ deleted: true }),
    questions: [{ q: owner("delete"), before: true, after: false }],
  },
  {
    name: "a user's grants deleted by filter",
    setup: async (c) => expectStatus(await c.x.bulk([grant("olga", "document", "d1", "owner"), grant("olga", "document", "d2", "viewer")]), 200),
    change: async (c) => expect((await c.x.deleteMatching({ userId: "olga" })).body).toEqual({ deleted: 2 }),
    questions: [
      { q: owner("delete"), before: true, after: false },
      { q: question("olga", "document", "d2", "read"), before: true, after: false },
    ],
  },
  {
    name: "an instance's grants deleted by filter",
    setup: async (c) => expectStatus(await c.x.bulk([grant("olga", "document", "d1", "owner"), grant("vera", "document", "d1", "viewer")]), 200),
    change: async (c) => expect((await c.x.deleteMatching({ resource: "document", resourceId: "d1" })).body).toEqual({ deleted: 2 }),
    questions: [
      { q: owner("delete"), before: true, after: false },
      { q: question("vera", "document", "d1", "read"), before: true, after: false },
    ],
  },
  {
    name: "a user offboarded: every role assignment removed in one call",
    setup: async (c) => {
      await roleWithPolicy(c, ["document:read"]);
      const acme = await c.ops.createPolicy("Acme update", ["document:update"], "acme");
      await c.ops.assign(await c.ops.createRole("Acme editor", [acme], "acme"), "ulla");
    },
    change: async (c) => expect(await c.ops.offboard("ulla")).toMatchObject({ deleted: 2 }),
    questions: [
      { q: ulla("read"), before: true, after: false },
      { q: ulla("update", "acme"), before: true, after: false },
    ],
  },
  {
    name: "grants written and deleted in one bulk call",
    setup: async (c) => expectStatus(await c.x.write(grant("olga", "document", "d1", "owner")), 201),
    change: async (c) =>
      expect((await c.x.bulk([grant("vera", "document", "d1", "viewer")], [grant("olga", "document", "d1", "owner")])).body).toEqual({
        written: 1,
        unchanged: 0,
        deleted: 1,
      }),
    questions: [
      { q: owner("delete"), before: true, after: false },
      { q: question("vera", "document", "d1", "list"), before: false, after: true },
    ],
  },
  {
    name: "catalog: an action removed from a custom relation",
    setup: async (c) => expectStatus(await c.x.write(grant("rex", "document", "d1", "reviewer")), 201),
    change: async (c) => void (await c.ops.setCatalog(withDocument({ relations: [{ name: "reviewer", actions: ["read"] }] }))),
    questions: [
      { q: question("rex", "document", "d1", "comment"), before: true, after: false },
      { q: question("rex", "document", "d1", "read"), before: true, after: true },
    ],
  },
  {
    name: "catalog: an action added to a custom relation",
    catalog: withDocument({ relations: [{ name: "reviewer", actions: ["read"] }] }),
    setup: async (c) => expectStatus(await c.x.write(grant("rex", "document", "d1", "reviewer")), 201),
    change: async (c) => void (await c.ops.setCatalog(CATALOG)),
    questions: [{ q: question("rex", "document", "d1", "comment"), before: false, after: true }],
  },
  {
    name: "catalog: an action added to the resource, which owner then implies",
    setup: async (c) => {
      expectStatus(await c.x.bulk([grant("olga", "document", "d1", "owner"), grant("vera", "document", "d1", "viewer")]), 200);
    },
    change: async (c) => void (await c.ops.setCatalog(withDocument({ actions: [...DOCUMENT.actions, "archive"] }))),
    questions: [
      { q: owner("archive"), before: "invalid", after: true },
      { q: question("vera", "document", "d1", "archive"), before: "invalid", after: false },
      { q: owner("read"), before: true, after: true },
    ],
  },
  {
    name: "catalog: an action added that a role's policy can then hold (no change for roles until a policy holds it)",
    setup: (c) => roleWithPolicy(c),
    change: async (c) => {
      await c.ops.setCatalog(withDocument({ actions: [...DOCUMENT.actions, "archive"] }));
      await c.ops.setPermissions(c.ids.policy!, ["document:read", "document:archive"]);
    },
    questions: [{ q: ulla("archive"), before: "invalid", after: true }],
  },
  {
    name: "catalog: an action removed from the resource",
    setup: async (c) => expectStatus(await c.x.write(grant("olga", "document", "d1", "owner")), 201),
    change: async (c) => void (await c.ops.setCatalog(withDocument({ actions: ["create", "read", "update", "list", "comment"] }))),
    questions: [
      { q: owner("delete"), before: true, after: "invalid" },
      { q: owner("update"), before: true, after: true },
    ],
  },
  {
    name: "catalog: a built-in redefined as a custom relation, then restored",
    setup: async (c) => expectStatus(await c.x.write(grant("vera", "document", "d1", "viewer")), 201),
    change: async (c) =>
      void (await c.ops.setCatalog(withDocument({ relations: [...DOCUMENT.relations, { name: "viewer", actions: ["read"] }] }))),
    questions: [
      { q: question("vera", "document", "d1", "list"), before: true, after: false },
      { q: question("vera", "document", "d1", "read"), before: true, after: true },
    ],
  },
];

// Groups and hierarchy (docs/hierarchy.md): the world of GRAPH_CATALOG.
const REL = "/api/v1/authorization/relationships";
const W = SMALL_WORLD;
const WORLD = Object.values(W);
const worldWithout = (...left: AnyGrant[]) => WORLD.filter((g) => !left.includes(g));

/** A flat catalog (users only: no subject sets, links or inherits) with a team resource. */
const FLAT_TEAMS = (documentActions: string[]) => [
  { resource: "team", description: "", actions: ["read"], relations: [{ name: "member", actions: ["read"] }] },
  { resource: "document", description: "", actions: documentActions, relations: [] },
];

async function graphBulk(c: Ctx, writes: AnyGrant[], deletes: AnyGrant[] = []): Promise<void> {
  const res = await c.call("POST", `${REL}/bulk`, { writes, deletes });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  expect(res.body, JSON.stringify(res.body)).toMatchObject({ written: writes.length, deleted: deletes.length });
}
async function graphWrite(c: Ctx, g: AnyGrant): Promise<void> {
  expectStatus(await c.call("POST", REL, g), 201);
}
/** The single DELETE, the holder as userId or as subjectResource, subjectResourceId and subjectRelation. */
async function graphDelete(c: Ctx, g: AnyGrant): Promise<void> {
  const { subject, ...rest } = g;
  const holder = subject === undefined ? {} : { subjectResource: subject.resource, subjectResourceId: subject.resourceId, subjectRelation: subject.relation };
  expect((await c.call("DELETE", REL + queryString({ ...rest, ...holder }))).body).toEqual({ deleted: true });
}

const q = question;

const graphCases: FreshCase[] = [
  {
    name: "hierarchy: a user leaves a team (single delete)",
    catalog: GRAPH_CATALOG,
    setup: (c) => graphBulk(c, WORLD),
    change: (c) => graphDelete(c, W.alice),
    questions: [
      { q: q("alice", "document", "d1", "read"), before: true, after: false },
      { q: q("alice", "folder", "runbooks", "list"), before: true, after: false },
      { q: q("bob", "document", "d1", "read"), before: true, after: true },
    ],
  },
  {
    name: "hierarchy: a nested team removed from its parent team (single delete by subject set)",
    catalog: GRAPH_CATALOG,
    setup: (c) => graphBulk(c, WORLD),
    change: (c) => graphDelete(c, W.nested),
    questions: [
      { q: q("alice", "document", "d2", "read"), before: true, after: false },
      { q: q("alice", "team", "eng", "read"), before: true, after: false },
      { q: q("alice", "team", "platform", "read"), before: true, after: true },
      { q: q("bob", "document", "d2", "read"), before: true, after: true },
    ],
  },
  {
    name: "hierarchy: a user joins a team",
    catalog: GRAPH_CATALOG,
    setup: (c) => graphBulk(c, worldWithout(W.alice)),
    change: (c) => graphWrite(c, W.alice),
    questions: [
      { q: q("alice", "document", "d1", "read"), before: false, after: true },
      { q: q("alice", "folder", "runbooks", "list"), before: false, after: true },
      { q: q("alice", "document", "d1", "update"), before: false, after: false },
    ],
  },
  {
    name: "hierarchy: a nested team added to its parent team (bulk)",
    catalog: GRAPH_CATALOG,
    setup: (c) => graphBulk(c, worldWithout(W.nested)),
    change: (c) => graphBulk(c, [W.nested]),
    questions: [
      { q: q("alice", "document", "d2", "read"), before: false, after: true },
      { q: q("bob", "document", "d2", "read"), before: true, after: true },
    ],
  },
  {
    name: "hierarchy: a document's folder unlinked (bulk delete of the link)",
    catalog: GRAPH_CATALOG,
    setup: (c) => graphBulk(c, WORLD),
    change: (c) => graphBulk(c, [], [W.d1Link]),
    questions: [
      { q: q("alice", "document", "d1", "read"), before: true, after: false },
      { q: q("carol", "document", "d1", "update"), before: true, after: false },
      { q: q("bob", "document", "d2", "read"), before: true, after: true },
    ],
  },
  {
    name: "hierarchy: a folder unlinked from its parent folder (single delete of the link)",
    catalog: GRAPH_CATALOG,
    setup: (c) => graphBulk(c, WORLD),
    change: (c) => graphDelete(c, W.rootLink),
    questions: [
      { q: q("carol", "document", "d1", "update"), before: true, after: false },
      { q: q("carol", "folder", "runbooks", "update"), before: true, after: false },
      { q: q("carol", "folder", "root", "update"), before: true, after: true },
      { q: q("alice", "document", "d1", "read"), before: true, after: true },
    ],
  },
  {
    name: "hierarchy: a document linked to a folder",
    catalog: GRAPH_CATALOG,
    setup: (c) => graphBulk(c, worldWithout(W.d1Link)),
    change: (c) => graphWrite(c, W.d1Link),
    questions: [
      { q: q("alice", "document", "d1", "read"), before: false, after: true },
      { q: q("carol", "document", "d1", "update"), before: false, after: true },
    ],
  },
  {
    name: "hierarchy: a team's grants deleted by subject (the team gone)",
    catalog: GRAPH_CATALOG,
    setup: (c) => graphBulk(c, WORLD),
    change: async (c) => expect((await c.call("POST", `${REL}/delete`, { subject: { resource: "team", resourceId: "eng" } })).body).toEqual({ deleted: 1 }),
    questions: [
      { q: q("alice", "document", "d1", "read"), before: true, after: false },
      { q: q("bob", "folder", "runbooks", "read"), before: true, after: false },
      { q: q("carol", "document", "d1", "read"), before: true, after: true },
    ],
  },
  {
    name: "hierarchy: one member leaves and another joins in one bulk call",
    catalog: GRAPH_CATALOG,
    setup: (c) => graphBulk(c, WORLD),
    change: (c) => graphBulk(c, [user("dan", "team", "platform", "member")], [W.alice]),
    questions: [
      { q: q("alice", "document", "d1", "read"), before: true, after: false },
      { q: q("dan", "document", "d1", "read"), before: false, after: true },
    ],
  },
  {
    name: "hierarchy: a flat catalog made hierarchical, and a team granted, seen together",
    catalog: FLAT_TEAMS(["read", "update"]),
    setup: (c) => graphBulk(c, [user("alice", "team", "eng", "member"), user("olga", "document", "d1", "owner")]),
    change: async (c) => {
      await c.ops.setCatalog(GRAPH_CATALOG); // adds "delete" to documents
      await graphWrite(c, set("team:eng#member", "document", "d1", "viewer"));
    },
    questions: [
      { q: q("alice", "document", "d1", "read"), before: false, after: true },
      { q: q("alice", "document", "d1", "update"), before: false, after: false },
      { q: q("olga", "document", "d1", "delete"), before: "invalid", after: true },
    ],
  },
  {
    name: "hierarchy: a team's grant removed and the catalog made flat, seen together",
    catalog: GRAPH_CATALOG,
    setup: (c) => graphBulk(c, [user("alice", "team", "eng", "member"), set("team:eng#member", "document", "d1", "viewer"), user("olga", "document", "d1", "owner")]),
    change: async (c) => {
      await graphDelete(c, set("team:eng#member", "document", "d1", "viewer"));
      await c.ops.setCatalog(FLAT_TEAMS(["read", "update", "delete", "archive"]));
    },
    questions: [
      { q: q("alice", "document", "d1", "read"), before: true, after: false },
      { q: q("olga", "document", "d1", "archive"), before: "invalid", after: true },
      { q: q("olga", "document", "d1", "delete"), before: true, after: true },
    ],
  },
];

describe.each(engines)("freshness on %s", (engine: EngineName) => {
  let database: TestDatabase;
  const services: Record<"A" | "B", TestService | undefined> = { A: undefined, B: undefined };
  const grpcs: Record<"A" | "B", GrpcCaller | undefined> = { A: undefined, B: undefined };
  // PGlite is one in-process database: one replica. Postgres: both directions and the same replica.
  const directions: { writer: "A" | "B"; reader: "A" | "B" }[] =
    engine === "postgres"
      ? [
          { writer: "A", reader: "A" },
          { writer: "A", reader: "B" },
          { writer: "B", reader: "A" },
        ]
      : [{ writer: "A", reader: "A" }];
  let counter = 0;
  const context = (w: TestService, appId: string, key: string): Ctx => ({
    ops: admin(w, appId),
    x: authz(w, key),
    ids: {},
    call: (method, path, body) => w.call(method, path, { key, ...(body === undefined ? {} : { body }) }),
  });

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    services.A = await startTestService(database.db);
    grpcs.A = grpcCaller(services.A.url);
    if (engine === "postgres") {
      services.B = await startTestService(await database.openAnother());
      grpcs.B = grpcCaller(services.B.url);
    }
  });
  afterAll(async () => {
    grpcs.A?.close();
    grpcs.B?.close();
    await Promise.allSettled([services.A?.close(), services.B?.close()]);
    await database?.dispose();
  });

  /** Asks `q` on a replica over REST (single and batch) and gRPC; each must give `expected`. */
  async function expectAnswer(replica: "A" | "B", key: string, q: CheckQuestion, expected: Answer, when: string): Promise<void> {
    const service = services[replica]!;
    const grpc = grpcs[replica]!;
    const label = `${when}, on ${replica}: ${JSON.stringify(q)}`;
    const single = await service.call("POST", "/api/v1/authorization/check", { key, body: q });
    const batch = await service.call("POST", "/api/v1/authorization/check/batch", { key, body: { checks: [q, q] } });
    if (expected === "invalid") {
      expectError(single, 400, "invalid_argument");
      expectError(batch, 400, "invalid_argument");
      const error = await grpc.call("CheckService", "Check", q, key).then(
        () => undefined,
        (e: { code: number }) => e,
      );
      expect(error?.code, label).toBe(GRPC.INVALID_ARGUMENT);
      return;
    }
    expect(single.status, `${label} ${JSON.stringify(single.body)}`).toBe(200);
    expect(single.body, label).toStrictEqual({ allowed: expected });
    expect(batch.body, label).toStrictEqual({ results: [{ allowed: expected }, { allowed: expected }] });
    expect((await grpc.call("CheckService", "Check", q, key)).allowed, `${label} (gRPC)`).toBe(expected);
  }

  /**
   * Every page of a lookup or who can, small pages so that an answer spans
   * several; stops at the first answer that is not a 200 and returns it.
   */
  async function allPages(service: TestService, key: string, path: string, body: object, field: "resourceIds" | "userIds") {
    const ids: string[] = [];
    let allInstances = false;
    let pageToken = "";
    for (let page = 0; page < 100; page++) {
      const answer = await service.call("POST", path, { key, body: { ...body, pageSize: 1, pageToken } });
      if (answer.status !== 200) return { answer, ids, allInstances };
      ids.push(...(answer.body[field] as string[]));
      allInstances ||= answer.body.allInstances === true;
      pageToken = answer.body.nextPageToken as string;
      if (pageToken === "") return { answer, ids, allInstances };
    }
    throw new Error(`${path} never ended`);
  }

  /** Asks explain, permissions, lookup and who can about `q` on a replica; each must agree with `expected`. */
  async function expectQuestions(replica: "A" | "B", key: string, q: CheckQuestion, expected: Answer, when: string): Promise<void> {
    const service = services[replica]!;
    const grpc = grpcs[replica]!;
    const label = `${when}, on ${replica}: ${JSON.stringify(q)}`;
    const explained = await service.call("POST", "/api/v1/authorization/check/explain", { key, body: q });
    const { action, resourceId, ...which } = q;
    const permissions = await grpc.call("CheckService", "Permissions", { ...which, resourceId }, key);
    const lookup = await allPages(service, key, "/api/v1/authorization/lookup", { ...which, action }, "resourceIds");
    const { userId, ...instance } = q;
    const whoCan = await allPages(service, key, "/api/v1/authorization/subjects", instance, "userIds");
    if (expected === "invalid") {
      expectError(explained, 400, "invalid_argument");
      expectError(lookup.answer, 400, "invalid_argument");
      expectError(whoCan.answer, 400, "invalid_argument");
      expect(permissions.actions, label).not.toContain(action);
      return;
    }
    expect(explained.status, `${label} ${JSON.stringify(explained.body)}`).toBe(200);
    expect(explained.body.allowed, `${label} (explain)`).toBe(expected);
    // Each relation reason's path runs from the user's own grant to the grant on the instance.
    for (const reason of explained.body.reasons as { kind: string; grant: AnyGrant; path: AnyGrant[] }[]) {
      if (reason.kind !== "relation") continue;
      expect(reason.path[0], `${label} (explain path)`).toMatchObject({ userId });
      expect(reason.path.at(-1), `${label} (explain path)`).toEqual(reason.grant);
      expect(reason.grant, `${label} (explain path)`).toMatchObject({ resource: q.resource, resourceId });
    }
    expect(permissions.actions.includes(action), `${label} (permissions)`).toBe(expected);
    expect(lookup.answer.status, `${label} ${JSON.stringify(lookup.answer.body)}`).toBe(200);
    expect(lookup.ids, `${label} (lookup: ascending, once each)`).toEqual([...new Set(lookup.ids)].sort());
    expect(lookup.allInstances || lookup.ids.includes(resourceId), `${label} (lookup)`).toBe(expected);
    expect(whoCan.answer.status, `${label} ${JSON.stringify(whoCan.answer.body)}`).toBe(200);
    expect(whoCan.ids, `${label} (who can: ascending, once each)`).toEqual([...new Set(whoCan.ids)].sort());
    expect(whoCan.ids.includes(userId), `${label} (who can)`).toBe(expected);
  }

  describe.each(directions)("changed through $writer, checked on $reader", ({ writer, reader }) => {
    // Each case is an application of its own, its steps in order: the cases run side by side, those below them one at a time.
    it.concurrent.each([...cases, ...graphCases].map((c, i) => ({ ...c, questionsFirst: i % 2 === 0 })))("$name", async (c) => {
      const w = services[writer]!;
      const appId = `fresh-${counter++}`;
      const key = await createApp(w, appId, c.catalog ?? CATALOG);
      const ctx = context(w, appId, key);
      await c.setup(ctx);
      // Warm both replicas with the old answer (several times: anything they might cache is filled).
      for (let round = 0; round < 3; round++) {
        for (const { q, before } of c.questions) {
          await expectAnswer(reader, key, q, before, "before the change");
          await expectAnswer(writer, key, q, before, "before the change");
        }
      }
      for (const replica of new Set([reader, writer])) {
        for (const { q, before } of c.questions) await expectQuestions(replica, key, q, before, "before the change");
      }
      await c.change(ctx);
      // The very next answer, on the reader first, then the writer: the
      // check first in half the cases, the other questions first in the rest.
      for (const replica of [reader, writer]) {
        for (const { q, after } of c.questions) {
          if (c.questionsFirst) await expectQuestions(replica, key, q, after, "right after the change");
          await expectAnswer(replica, key, q, after, "right after the change");
          if (!c.questionsFirst) await expectQuestions(replica, key, q, after, "right after the change");
        }
      }
    });

    it("a grant expiring 2 s ahead: counted by every question on both replicas just before, by none just after, with no write between", async () => {
      const w = services[writer]!;
      const appId = `expiry-${counter++}`;
      const key = await createApp(w, appId, CATALOG);
      const asked = [question("olga", "document", "d1", "comment"), question("olga", "document", "d1", "read")];
      await justBeforeExpiry({
        clock: databaseClock(database.db),
        firstAheadMs: 2_000,
        write: async (expiresAt, trial) => {
          const written = await w.call("POST", "/api/v1/authorization/relationships", {
            key,
            body: { ...grant("olga", "document", "d1", "reviewer"), expiresAt: new Date(expiresAt).toISOString() },
          });
          // Written again, the grant's expiry moves: 200 with the new expiresAt.
          expectStatus(written, trial === 0 ? 201 : 200);
          expect(written.body.expiresAt).toBe(apiTime(expiresAt));
        },
        before: () =>
          [reader, writer].flatMap((replica) =>
            asked.map(async (q) => {
              await expectAnswer(replica, key, q, true, "just before the expiry");
              await expectQuestions(replica, key, q, true, "just before the expiry");
            }),
          ),
      });
      for (const replica of [reader, writer]) {
        for (const q of asked) {
          await expectAnswer(replica, key, q, false, "just after the expiry");
          await expectQuestions(replica, key, q, false, "just after the expiry");
        }
      }
    });

    it("hierarchy: a membership and a folder link expiring 1.5 s ahead: counted by every question on both replicas from their write to just before, by none just after, with no write between", async () => {
      const w = services[writer]!;
      const appId = `expiry-graph-${counter++}`;
      const key = await createApp(w, appId, GRAPH_CATALOG);
      const ctx = context(w, appId, key);
      await graphBulk(ctx, worldWithout(W.alice, W.d2Link));
      const asked: { q: CheckQuestion; after: boolean }[] = [
        { q: q("alice", "document", "d1", "read"), after: false }, // alice's membership of platform expired
        { q: q("alice", "team", "eng", "read"), after: false },
        { q: q("bob", "document", "d2", "read"), after: false }, // d2's link to runbooks expired
        { q: q("bob", "document", "d1", "read"), after: true },
      ];
      // Both replicas warmed first, with what they will answer once the grants expired.
      for (const replica of new Set([reader, writer])) {
        for (const { q, after } of asked) {
          await expectAnswer(replica, key, q, after, "before the expiring grants");
          await expectQuestions(replica, key, q, after, "before the expiring grants");
        }
      }
      await justBeforeExpiry({
        clock: databaseClock(database.db),
        firstAheadMs: 1_500,
        write: async (expiresAt) => {
          const expiring = new Date(expiresAt).toISOString();
          await graphBulk(ctx, [{ ...W.alice, expiresAt: expiring }, { ...W.d2Link, expiresAt: expiring }]);
        },
        // Just before: every question on both replicas, side by side (the time is short).
        before: () =>
          [...new Set([reader, writer])].flatMap((replica) =>
            asked.map(async ({ q }) => {
              await expectAnswer(replica, key, q, true, "just before the expiry");
              await expectQuestions(replica, key, q, true, "just before the expiry");
            }),
          ),
      });
      for (const replica of new Set([reader, writer])) {
        for (const { q, after } of asked) {
          await expectAnswer(replica, key, q, after, "just after the expiry");
          await expectQuestions(replica, key, q, after, "just after the expiry");
        }
      }
    });

    it("hierarchy: a user joins and leaves a team ten times, alternating single and bulk calls, each answer right after its change", async () => {
      const w = services[writer]!;
      const appId = `flip-graph-${counter++}`;
      const key = await createApp(w, appId, GRAPH_CATALOG);
      const ctx = context(w, appId, key);
      await graphBulk(ctx, worldWithout(W.alice));
      const asked = q("alice", "document", "d1", "read");
      for (let round = 0; round < 10; round++) {
        const on = round % 2 === 0;
        const viaBulk = round % 4 >= 2;
        if (on) await (viaBulk ? graphBulk(ctx, [W.alice]) : graphWrite(ctx, W.alice));
        else await (viaBulk ? graphBulk(ctx, [], [W.alice]) : graphDelete(ctx, W.alice));
        // The very next answer: the check in even rounds, the other questions in odd ones.
        if (round % 2 === 1) await expectQuestions(reader, key, asked, on, `round ${round}`);
        await expectAnswer(reader, key, asked, on, `round ${round}`);
        if (round % 2 === 0) await expectQuestions(reader, key, asked, on, `round ${round}`);
      }
    });

    it("flip-flop: a permission added and removed ten times, each answer right after its change", async () => {
      const w = services[writer]!;
      const appId = `flip-${counter++}`;
      const key = await createApp(w, appId, CATALOG);
      const ctx = context(w, appId, key);
      await roleWithPolicy(ctx, []);
      for (let round = 0; round < 10; round++) {
        const on = round % 2 === 0;
        await ctx.ops.setPermissions(ctx.ids.policy!, on ? ["document:update"] : []);
        await expectAnswer(reader, key, ulla("update"), on, `round ${round}`);
      }
    });

    it("with other checks in flight on the reader all along, each change is seen by the next check", async () => {
      const w = services[writer]!;
      const appId = `busy-${counter++}`;
      const key = await createApp(w, appId, CATALOG);
      const x = authz(w, key);
      const r = services[reader]!;
      expectStatus(await x.write(grant("bg", "document", "bg", "viewer")), 201);
      // Background load: 8 workers asking unrelated questions back to back on the reader.
      let stop = false;
      let backgroundChecks = 0;
      const workers = Array.from({ length: 8 }, async (_, n) => {
        while (!stop) {
          const res = await r.call("POST", "/api/v1/authorization/check", { key, body: question("bg", "document", "bg", n % 2 ? "read" : "list") });
          expect(res.body).toEqual({ allowed: true });
          backgroundChecks++;
        }
      });
      try {
        const g = grant("gil", "document", "d1", "editor");
        for (let round = 0; round < 20; round++) {
          const on = round % 2 === 0;
          expect((on ? await x.write(g) : await x.delete(g)).status).toBeLessThan(300);
          const next = await r.call("POST", "/api/v1/authorization/check", { key, body: question("gil", "document", "d1", "update") });
          expect(next.body, `round ${round}`).toEqual({ allowed: on });
        }
      } finally {
        stop = true;
        await Promise.all(workers);
      }
      expect(backgroundChecks).toBeGreaterThan(20);
    });

    it("flip-flop: a grant written and deleted ten times, alternating single and bulk calls", async () => {
      const w = services[writer]!;
      const appId = `flip-${counter++}`;
      const key = await createApp(w, appId, CATALOG);
      const x = authz(w, key);
      const g = grant("gil", "document", "d1", "editor");
      for (let round = 0; round < 10; round++) {
        const on = round % 2 === 0;
        const viaBulk = round % 4 >= 2;
        if (on) expect((viaBulk ? await x.bulk([g]) : await x.write(g)).status).toBeLessThan(300);
        else expect((viaBulk ? await x.bulk([], [g]) : await x.delete(g)).status).toBe(200);
        await expectAnswer(reader, key, question("gil", "document", "d1", "update"), on, `round ${round}`);
      }
    });
  });
});
