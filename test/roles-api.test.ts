/**
 * Roles and role assignments over REST and gRPC, on each engine: create
 * (defaults, folding, the tenant rule for policies, names unique within their
 * scope), list (paging, tenant filter), get, PATCH (policyIds replaces,
 * rename, no-ops, fixed tenant), delete with its assignments, assignments
 * (201 then 200, unassign, lists both ways), audit events of each, the effect
 * on checks, and who may call what.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { grpc, grpcCaller, type GrpcCaller } from "./support/grpc-client.js";
import { ADMIN_KEY, startTestService, type TestService } from "./support/service.js";
import {
  allPages,
  byCreation,
  expectError,
  expectGrpcError,
  expectRoleShape,
  grpcFail,
  newApp,
  newKey,
  ok,
  RFC3339,
  structJson,
  type AppApi,
  type Json,
} from "./helpers/authz-api.js";

describe.each(oneEngine(import.meta.url))("roles API on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let rpc: GrpcCaller;
  let otherKey: { keyId: string; key: string };
  let counter = 0;
  const fresh = (label: string) => newApp(service.call, `${label}-${++counter}`);

  /** A fresh application with an application-wide policy, two of tenant t1 and one of t2. */
  async function withPolicies(label: string) {
    const api = await fresh(label);
    const wide = await api.policy({ name: "Wide", permissions: ["document:read"] });
    const t1 = await api.policy({ name: "T1", permissions: ["document:update"], tenantId: "t1" });
    const t1b = await api.policy({ name: "T1b", permissions: ["invoice:read"], tenantId: "t1" });
    const t2 = await api.policy({ name: "T2", permissions: ["invoice:send"], tenantId: "t2" });
    return { api, wide: wide.policyId as string, t1: t1.policyId as string, t1b: t1b.policyId as string, t2: t2.policyId as string };
  }

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    rpc = grpcCaller(service.url);
    await newApp(service.call, "other");
    otherKey = await newKey(service.call, "other");
  });
  afterAll(async () => {
    rpc?.close();
    await service?.close();
    await database?.dispose();
  });

  describe("create", () => {
    it("with only a name: 201 {roleId, name, description: '', policyIds: [], createdAt, updatedAt}, and one role.created event", async () => {
      const api = await fresh("defaults");
      const role = ok(await api.createRole({ name: "Viewers" }), 201);
      expectRoleShape(role, false);
      expect(role).toMatchObject({ name: "Viewers", description: "", policyIds: [] });
      expect(ok(await api.getRole(role.roleId))).toEqual(role);
      const events = await api.events({ type: "role.created" });
      expect(events).toHaveLength(1);
      expect(events[0]).toMatchObject({ targetType: "role", targetId: role.roleId, actorKeyId: "operator" });
      expect(events[0]!.data).toEqual({ name: "Viewers", policyIds: [] });
    });

    it("with every field: policyIds folded in first order, tenantId kept", async () => {
      const { api, wide, t1, t1b } = await withPolicies("full");
      const role = await api.role({ name: "Clerks", description: "front desk", policyIds: [t1, wide, t1, t1b, wide], tenantId: "t1" });
      expectRoleShape(role, true);
      expect(role).toMatchObject({ name: "Clerks", description: "front desk", policyIds: [t1, wide, t1b], tenantId: "t1" });
      expect(ok(await api.getRole(role.roleId))).toEqual(role);
      const [event] = await api.events({ type: "role.created" });
      expect(event!.data).toEqual({ name: "Clerks", policyIds: [t1, wide, t1b], tenantId: "t1" });
    });

    it("an application-wide policy attaches to a role of any tenant; a tenant's policy to a role of that tenant", async () => {
      const { api, wide, t1, t2 } = await withPolicies("tenant-ok");
      expect((await api.role({ name: "A", policyIds: [wide] })).policyIds).toEqual([wide]);
      expect((await api.role({ name: "B", policyIds: [wide, t1], tenantId: "t1" })).policyIds).toEqual([wide, t1]);
      expect((await api.role({ name: "C", policyIds: [t2], tenantId: "t2" })).policyIds).toEqual([t2]);
    });

    /** Bad bodies: `body(ids)` → 400 naming `field` with the fragments (which may name ids). */
    const invalid: { name: string; body: (p: Record<string, string>) => Record<string, unknown>; field: string; fragments: (p: Record<string, string>) => string[] }[] = [
      { name: "no name", body: () => ({ description: "x" }), field: "name", fragments: () => ["required"] },
      { name: "a blank name", body: () => ({ name: " " }), field: "name", fragments: () => ["required"] },
      { name: "a name of 201 characters", body: () => ({ name: "r".repeat(201) }), field: "name", fragments: () => ["200", "201"] },
      { name: "a description of 2001 characters", body: () => ({ name: "r", description: "d".repeat(2001) }), field: "description", fragments: () => ["2001"] },
      { name: "an empty tenantId", body: () => ({ name: "r", tenantId: "" }), field: "tenantId", fragments: () => ["required"] },
      { name: "a tenantId of 257 characters", body: () => ({ name: "r", tenantId: "x".repeat(257) }), field: "tenantId", fragments: () => ["257"] },
      { name: "an unknown policyId", body: (p) => ({ name: "r", policyIds: [p.wide!, "pol_missing"] }), field: "policyIds[1]", fragments: () => ['"pol_missing"'] },
      { name: "a policy of another application", body: (p) => ({ name: "r", policyIds: [p.foreign!] }), field: "policyIds[0]", fragments: (p) => [`"${p.foreign}"`] },
      {
        name: "a tenant's policy on an application-wide role",
        body: (p) => ({ name: "r", policyIds: [p.t1!] }),
        field: "policyIds[0]",
        fragments: (p) => [`"${p.t1}"`, '"t1"', "application-wide"],
      },
      {
        name: "a tenant's policy on a role of another tenant",
        body: (p) => ({ name: "r", policyIds: [p.wide!, p.t1!], tenantId: "t2" }),
        field: "policyIds[1]",
        fragments: (p) => [`"${p.t1}"`, '"t1"', '"t2"'],
      },
      { name: "policyIds as a string", body: (p) => ({ name: "r", policyIds: p.wide }), field: "policyIds", fragments: () => ["array"] },
      { name: "an unknown field", body: () => ({ name: "r", permissions: ["document:read"] }), field: "permissions", fragments: () => [] },
      { name: "roleId in the body", body: () => ({ name: "r", roleId: "rol_mine" }), field: "roleId", fragments: () => [] },
    ];

    describe("validation", () => {
      let api: AppApi;
      let ids: Record<string, string>;
      beforeAll(async () => {
        const setup = await withPolicies("invalid");
        api = setup.api;
        const elsewhere = await fresh("foreign");
        ids = { wide: setup.wide, t1: setup.t1, t2: setup.t2, foreign: (await elsewhere.policy({ name: "Foreign" })).policyId };
      });

      it.each(invalid)("$name → 400 naming $field; nothing is created", async ({ body, field, fragments }) => {
        const eventsBefore = await api.events();
        const rolesBefore = ok(await api.listRoles()).roles;
        const res = await api.createRole(body(ids));
        expectError(res, 400, "invalid_argument", field, ...fragments(ids));
        expect(res.body.message.startsWith(field)).toBe(true);
        expect(res.body.details).toContainEqual(expect.objectContaining({ field }));
        expect(ok(await api.listRoles()).roles).toEqual(rolesBefore);
        expect(await api.events()).toEqual(eventsBefore);
        for (const policyId of [ids.wide!, ids.t1!, ids.t2!]) expect(ok(await api.getPolicy(policyId)).roleCount).toBe(0);
      });
    });

    it("names are unique within their scope: application-wide roles, or one tenant's → 409 already_exists", async () => {
      const api = await fresh("scopes");
      await api.role({ name: "Admins" });
      const wideDup = await api.createRole({ name: "Admins" });
      expectError(wideDup, 409, "already_exists", '"Admins"', "application-wide");
      expect(wideDup.body.details).toEqual([{ field: "name", value: "Admins" }]);

      await api.role({ name: "Admins", tenantId: "t1" });
      expectError(await api.createRole({ name: "Admins", tenantId: "t1" }), 409, "already_exists", '"Admins"', '"t1"');
      await api.role({ name: "Admins", tenantId: "t2" });

      const names = (ok(await api.listRoles()).roles as Json[]).map((r) => [r.name, r.tenantId ?? null]);
      expect(names).toHaveLength(3);
      expect(names).toEqual(expect.arrayContaining([["Admins", null], ["Admins", "t1"], ["Admins", "t2"]]));
      expect(await api.events({ type: "role.created" })).toHaveLength(3);
    });

    it("in an unknown application → 404 naming it", async () => {
      expectError(await service.call("POST", "/api/v1/applications/ghost/roles", { body: { name: "r" } }), 404, "not_found", '"ghost"');
    });
  });

  describe("get and list", () => {
    it("lists in creation order with paging; ?tenantId= lists only that tenant's roles", async () => {
      const api = await fresh("list");
      const roles: Json[] = [];
      for (let i = 0; i < 5; i++) roles.push(await api.role({ name: `R${i}`, ...(i % 2 ? { tenantId: "t1" } : {}) }));
      roles.splice(0, roles.length, ...byCreation(roles, "roleId"));
      expect(ok(await api.listRoles()).roles).toEqual(roles);
      const paged = await allPages((q) => api.listRoles(q), "roles", 2);
      expect(paged).toEqual({ items: roles, pages: 3 });
      expect(ok(await api.listRoles("?tenantId=t1")).roles).toEqual(roles.filter((r) => r.tenantId === "t1"));
      expect(roles.filter((r) => r.tenantId === "t1")).toHaveLength(2);
      expect(ok(await api.listRoles("?tenantId=t9")).roles).toEqual([]);
    });

    it.each([
      ["?pageSize=0", "pageSize"],
      ["?pageSize=1001", "pageSize"],
      ["?pageToken=zzz", "pageToken"],
      ["?tenantId=", "tenantId"],
      ["?name=Admins", "name"],
    ])("list %s → 400 naming %s", async (query, field) => {
      const api = await fresh("list-bad");
      expectError(await api.listRoles(query), 400, "invalid_argument", field);
    });

    it("an unknown role → 404 naming it, on every role route", async () => {
      const api = await fresh("unknown-role");
      const id = "rol_nope";
      for (const res of [
        await api.getRole(id),
        await api.patchRole(id, { name: "x" }),
        await api.deleteRole(id),
        await api.assign(id, { userId: "alice" }),
        await api.unassign(id, "alice"),
        await api.assignments(id),
      ]) {
        expectError(res, 404, "not_found", `"${id}"`, `"${api.appId}"`);
      }
      expect(await api.events()).toHaveLength(2); // application.created, catalog.replaced
    });

    it("a role of another application is unknown here", async () => {
      const a = await fresh("role-a");
      const b = await fresh("role-b");
      const role = await a.role({ name: "Mine" });
      expectError(await b.getRole(role.roleId), 404, "not_found", role.roleId);
      expectError(await b.deleteRole(role.roleId), 404, "not_found", role.roleId);
      expectError(await b.assign(role.roleId, { userId: "u" }), 404, "not_found", role.roleId);
      expect(ok(await a.getRole(role.roleId))).toEqual(role);
    });

    it("an unknown application → 404 on the role routes", async () => {
      for (const path of ["/roles", "/roles/rol_x", "/roles/rol_x/assignments", "/users/alice/roles"]) {
        expectError(await service.call("GET", `/api/v1/applications/ghost${path}`), 404, "not_found", '"ghost"');
      }
    });
  });

  describe("update (PATCH)", () => {
    it("policyIds replaces the list; the event lists the policies attached and detached", async () => {
      const { api, wide, t1, t1b } = await withPolicies("replace");
      const role = await api.role({ name: "R", policyIds: [wide, t1], tenantId: "t1" });
      const updated = ok(await api.patchRole(role.roleId, { policyIds: [t1b, wide, t1b] }));
      expectRoleShape(updated, true);
      expect(updated).toMatchObject({ roleId: role.roleId, name: "R", policyIds: [t1b, wide], tenantId: "t1", createdAt: role.createdAt });
      expect(ok(await api.getRole(role.roleId))).toEqual(updated);

      const [event] = await api.events({ type: "role.updated" });
      expect(event).toMatchObject({ targetType: "role", targetId: role.roleId, actorKeyId: "operator" });
      expect(event!.data).toEqual({ policiesAttached: [t1b], policiesDetached: [t1] });
      expect(ok(await api.getPolicy(t1)).roleCount).toBe(0);
      expect(ok(await api.getPolicy(t1b)).roleCount).toBe(1);
    });

    it("an empty list detaches every policy", async () => {
      const { api, wide } = await withPolicies("clear");
      const role = await api.role({ name: "R", policyIds: [wide] });
      expect(ok(await api.patchRole(role.roleId, { policyIds: [] })).policyIds).toEqual([]);
      const [event] = await api.events({ type: "role.updated" });
      expect(event!.data).toEqual({ policiesAttached: [], policiesDetached: [wide] });
    });

    it("name and description change alone; the event names the rename", async () => {
      const { api, wide } = await withPolicies("rename");
      const role = await api.role({ name: "R", description: "old", policyIds: [wide] });
      expect(ok(await api.patchRole(role.roleId, { name: "Readers" }))).toMatchObject({ name: "Readers", description: "old", policyIds: [wide] });
      expect(ok(await api.patchRole(role.roleId, { description: "new" }))).toMatchObject({ name: "Readers", description: "new", policyIds: [wide] });
      const events = await api.events({ type: "role.updated" });
      expect(events.map((e) => e.data)).toEqual([
        { descriptionChanged: true, policiesAttached: [], policiesDetached: [] },
        { name: { from: "R", to: "Readers" }, policiesAttached: [], policiesDetached: [] },
      ]);
    });

    it.each([
      ["an empty body", () => ({})],
      ["the same policyIds", (p: string[]) => ({ policyIds: p })],
      ["the same policyIds with duplicates", (p: string[]) => ({ policyIds: [p[0], p[0], p[1]] })],
      ["the same name", () => ({ name: "R" })],
    ])("a no-op PATCH (%s) → 200 unchanged, no event", async (_label, body) => {
      const { api, wide, t1 } = await withPolicies("noop");
      const role = await api.role({ name: "R", policyIds: [wide, t1], tenantId: "t1" });
      expect(ok(await api.patchRole(role.roleId, body([wide, t1])))).toEqual(role);
      expect(await api.events({ type: "role.updated" })).toEqual([]);
    });

    const badPatches: { name: string; body: (p: Record<string, string>) => Record<string, unknown>; field: string; fragments: (p: Record<string, string>) => string[] }[] = [
      { name: "tenantId (fixed at creation)", body: () => ({ tenantId: "t2" }), field: "tenantId", fragments: () => [] },
      { name: "an unknown policyId", body: (p) => ({ policyIds: [p.wide!, "pol_gone"] }), field: "policyIds[1]", fragments: () => ['"pol_gone"'] },
      { name: "another tenant's policy", body: (p) => ({ policyIds: [p.t2!] }), field: "policyIds[0]", fragments: (p) => [`"${p.t2}"`, '"t2"', '"t1"'] },
      { name: "an unknown policyId with a valid rename", body: () => ({ name: "Renamed", policyIds: ["pol_gone"] }), field: "policyIds[0]", fragments: () => ['"pol_gone"'] },
      { name: "an empty name", body: () => ({ name: "" }), field: "name", fragments: () => ["required"] },
      { name: "roleId (the path gives it)", body: () => ({ roleId: "rol_x" }), field: "roleId", fragments: () => ["path"] },
    ];

    it.each(badPatches)("$name → 400 naming $field; the role is unchanged, no event", async ({ body, field, fragments }) => {
      const setup = await withPolicies("bad-patch");
      const ids = { wide: setup.wide, t1: setup.t1, t2: setup.t2 };
      const role = await setup.api.role({ name: "R", policyIds: [setup.t1], tenantId: "t1" });
      const res = await setup.api.patchRole(role.roleId, body(ids));
      expectError(res, 400, "invalid_argument", field, ...fragments(ids));
      expect(res.body.details).toContainEqual(expect.objectContaining({ field }));
      expect(ok(await setup.api.getRole(role.roleId))).toEqual(role);
      expect(await setup.api.events({ type: "role.updated" })).toEqual([]);
    });

    it("a tenant's policy cannot be attached by PATCH to an application-wide role", async () => {
      const { api, t1 } = await withPolicies("patch-wide");
      const role = await api.role({ name: "Wide role" });
      expectError(await api.patchRole(role.roleId, { policyIds: [t1] }), 400, "invalid_argument", "policyIds[0]", '"t1"', "application-wide");
      expect(ok(await api.getRole(role.roleId)).policyIds).toEqual([]);
    });

    it("renaming to a name taken in the same scope → 409; taken only in another scope → 200", async () => {
      const api = await fresh("rename-scope");
      await api.role({ name: "Taken", tenantId: "t1" });
      const mine = await api.role({ name: "Mine", tenantId: "t1" });
      const wide = await api.role({ name: "Wide" });
      expectError(await api.patchRole(mine.roleId, { name: "Taken" }), 409, "already_exists", '"Taken"', '"t1"');
      expect(ok(await api.getRole(mine.roleId))).toEqual(mine);
      expect(ok(await api.patchRole(wide.roleId, { name: "Taken" })).name).toBe("Taken");
    });
  });

  describe("delete", () => {
    it("→ 200 {roleId, deleted: true}; its assignments and attachments go; one role.deleted event", async () => {
      const { api, wide } = await withPolicies("delete");
      const role = await api.role({ name: "Doomed", policyIds: [wide] });
      const keeper = await api.role({ name: "Keeper", policyIds: [wide] });
      for (const userId of ["alice", "bob"]) ok(await api.assign(role.roleId, { userId }), 201);
      ok(await api.assign(keeper.roleId, { userId: "alice" }), 201);
      expect(ok(await api.getPolicy(wide)).roleCount).toBe(2);

      expect(ok(await api.deleteRole(role.roleId))).toEqual({ roleId: role.roleId, deleted: true });
      expectError(await api.getRole(role.roleId), 404, "not_found", role.roleId);
      expectError(await api.deleteRole(role.roleId), 404, "not_found", role.roleId);
      expectError(await api.assignments(role.roleId), 404, "not_found", role.roleId);
      expect((ok(await api.userRoles("alice")).roles as Json[]).map((r) => r.roleId)).toEqual([keeper.roleId]);
      expect(ok(await api.userRoles("bob")).roles).toEqual([]);
      expect(ok(await api.getPolicy(wide)).roleCount).toBe(1);
      expect((ok(await api.policyRoles(wide)).roles as Json[]).map((r) => r.roleId)).toEqual([keeper.roleId]);

      const events = await api.events({ targetId: role.roleId });
      expect(events.map((e) => e.type)).toEqual(["role.deleted", "role.assigned", "role.assigned", "role.created"]);
      expect(events[0]).toMatchObject({ targetType: "role", actorKeyId: "operator" });
      expect(events[0]!.data).toEqual({ name: "Doomed", policyIds: [wide], assignmentsRemoved: 2 });
      // No separate unassign events: the deletion is one event.
      expect(await api.events({ type: "role.unassigned" })).toEqual([]);
      // The name is free again.
      expect((await api.createRole({ name: "Doomed" })).status).toBe(201);
    });
  });

  describe("assignments", () => {
    it("assign → 201 with the assignment; again → 200 with the stored one and no second event", async () => {
      const api = await fresh("assign");
      const role = await api.role({ name: "R" });
      const first = ok(await api.assign(role.roleId, { userId: "alice" }), 201);
      expect(Object.keys(first).sort()).toEqual(["createdAt", "roleId", "userId"]);
      expect(first).toMatchObject({ roleId: role.roleId, userId: "alice" });
      expect(first.createdAt).toMatch(RFC3339);
      const again = ok(await api.assign(role.roleId, { userId: "alice" }), 200);
      expect(again).toEqual(first);

      const events = await api.events({ type: "role.assigned" });
      expect(events).toHaveLength(1);
      expect(events[0]).toMatchObject({ targetType: "role", targetId: role.roleId, actorKeyId: "operator" });
      expect(events[0]!.data).toEqual({ userId: "alice" });
    });

    it("lists a role's assignments and a user's roles, with paging", async () => {
      const api = await fresh("lists");
      const roles: Json[] = [];
      for (let i = 0; i < 3; i++) roles.push(await api.role({ name: `R${i}`, ...(i === 2 ? { tenantId: "t1" } : {}) }));
      const users = ["alice", "bob", "carol", "dave"];
      const assigned: Json[] = [];
      for (const userId of users) assigned.push(ok(await api.assign(roles[0].roleId, { userId }), 201));
      ok(await api.assign(roles[2].roleId, { userId: "alice" }), 201);

      expect(ok(await api.assignments(roles[0].roleId))).toEqual({ assignments: assigned, nextPageToken: "" });
      const paged = await allPages((q) => api.assignments(roles[0].roleId, q), "assignments", 3);
      expect(paged).toEqual({ items: assigned, pages: 2 });
      expect(ok(await api.assignments(roles[1].roleId)).assignments).toEqual([]);

      const aliceRoles = ok(await api.userRoles("alice")).roles as Json[];
      expect(aliceRoles).toEqual(byCreation([roles[0], roles[2]], "roleId"));
      const pagedUser = await allPages((q) => api.userRoles("alice", q), "roles", 1);
      expect(pagedUser.items).toEqual(byCreation([roles[0], roles[2]], "roleId"));
      expect(ok(await api.userRoles("nobody"))).toEqual({ roles: [], nextPageToken: "" });
    });

    it("unassign → 200 {deleted: true} and one role.unassigned event; again → {deleted: false}, no event", async () => {
      const api = await fresh("unassign");
      const role = await api.role({ name: "R" });
      ok(await api.assign(role.roleId, { userId: "alice" }), 201);
      ok(await api.assign(role.roleId, { userId: "bob" }), 201);
      expect(ok(await api.unassign(role.roleId, "alice"))).toEqual({ deleted: true });
      expect(ok(await api.unassign(role.roleId, "alice"))).toEqual({ deleted: false });
      expect(ok(await api.unassign(role.roleId, "never-assigned"))).toEqual({ deleted: false });
      expect((ok(await api.assignments(role.roleId)).assignments as Json[]).map((a) => a.userId)).toEqual(["bob"]);
      expect(ok(await api.userRoles("alice")).roles).toEqual([]);

      const events = await api.events({ type: "role.unassigned" });
      expect(events).toHaveLength(1);
      expect(events[0]).toMatchObject({ targetType: "role", targetId: role.roleId, actorKeyId: "operator" });
      expect(events[0]!.data).toEqual({ userId: "alice" });
      // Assigning again after an unassign is a new assignment: 201.
      expect((await api.assign(role.roleId, { userId: "alice" })).status).toBe(201);
    });

    it.each([
      ["user ids with reserved URL characters", "alice@example.com"],
      ["a space and a plus", "a b+c"],
      ["unicode", "Zoë-\u{1F600}"],
      ["256 characters", "u".repeat(256)],
      ["a slash", "team/alice"],
      ["a percent sign", "100%"],
    ])("%s round-trip through the path routes", async (_label, userId) => {
      const api = await fresh("user-ids");
      const role = await api.role({ name: "R" });
      expect(ok(await api.assign(role.roleId, { userId }), 201).userId).toBe(userId);
      expect((ok(await api.userRoles(userId)).roles as Json[]).map((r) => r.roleId)).toEqual([role.roleId]);
      expect(ok(await api.unassign(role.roleId, userId))).toEqual({ deleted: true });
    });

    it.each([
      ["no userId", {}, "userId", "required"],
      ["an empty userId", { userId: "" }, "userId", "required"],
      ["a userId of 257 characters", { userId: "u".repeat(257) }, "userId", "257"],
      ["a userId with a control character", { userId: "a\u0000b" }, "userId", "control"],
      ["a userId of the wrong type", { userId: 42 }, "userId", "string"],
      ["an unknown field", { userId: "a", tenantId: "t1" }, "tenantId", "not a field"],
    ])("assign with %s → 400 naming %s; nothing assigned", async (_label, body, field, fragment) => {
      const api = await fresh("assign-bad");
      const role = await api.role({ name: "R" });
      expectError(await api.assign(role.roleId, body), 400, "invalid_argument", field, fragment);
      expect(ok(await api.assignments(role.roleId)).assignments).toEqual([]);
      expect(await api.events({ type: "role.assigned" })).toEqual([]);
    });

    it("a user id over 256 characters in the path → 400 on unassign and on the user's roles", async () => {
      const api = await fresh("path-bad");
      const role = await api.role({ name: "R" });
      expectError(await api.unassign(role.roleId, "u".repeat(257)), 400, "invalid_argument", "userId");
      expectError(await api.userRoles("u".repeat(257)), 400, "invalid_argument", "userId");
    });
  });

  describe("effect on checks", () => {
    it("an assigned role grants its policies' permissions; a tenant's role only with that tenantId; unassign revokes", async () => {
      const { api, wide, t1 } = await withPolicies("checks");
      const { key } = await newKey(service.call, api.appId);
      const global = await api.role({ name: "Global", policyIds: [wide] });
      const tenant = await api.role({ name: "Tenant", policyIds: [t1], tenantId: "t1" });
      ok(await api.assign(global.roleId, { userId: "alice" }), 201);
      ok(await api.assign(tenant.roleId, { userId: "alice" }), 201);
      const may = async (action: string, tenantId?: string) =>
        ok(
          await service.call("POST", "/api/v1/authorization/check", {
            key,
            body: { userId: "alice", resource: "document", resourceId: "d", action, ...(tenantId ? { tenantId } : {}) },
          }),
        ).allowed as boolean;

      expect(await may("read")).toBe(true);
      expect(await may("read", "t1")).toBe(true);
      expect(await may("update")).toBe(false);
      expect(await may("update", "t1")).toBe(true);
      expect(await may("update", "t2")).toBe(false);

      ok(await api.unassign(tenant.roleId, "alice"));
      expect(await may("update", "t1")).toBe(false);
      ok(await api.patchRole(global.roleId, { policyIds: [] }));
      expect(await may("read")).toBe(false);
    });
  });

  describe("keys", () => {
    it("an application key manages its roles, recorded under its key id", async () => {
      const api = await fresh("app-key");
      const { keyId, key } = await newKey(service.call, api.appId);
      const role = ok(await api.createRole({ name: "R" }, key), 201);
      ok(await api.patchRole(role.roleId, { name: "R2" }, key));
      ok(await api.assign(role.roleId, { userId: "u" }, key), 201);
      ok(await api.unassign(role.roleId, "u", key));
      ok(await api.deleteRole(role.roleId, key));
      const events = await api.events({ targetId: role.roleId });
      expect(events.map((e) => [e.type, e.actorKeyId])).toEqual([
        ["role.deleted", keyId],
        ["role.unassigned", keyId],
        ["role.assigned", keyId],
        ["role.updated", keyId],
        ["role.created", keyId],
      ]);
    });

    it("another application's key → 403 on every role route, and nothing changes", async () => {
      const api = await fresh("guarded");
      const role = await api.role({ name: "R" });
      ok(await api.assign(role.roleId, { userId: "alice" }), 201);
      const key = otherKey.key;
      for (const res of [
        await api.createRole({ name: "Intruder" }, key),
        await api.listRoles("", key),
        await api.getRole(role.roleId, key),
        await api.patchRole(role.roleId, { name: "Hijacked" }, key),
        await api.deleteRole(role.roleId, key),
        await api.assign(role.roleId, { userId: "mallory" }, key),
        await api.unassign(role.roleId, "alice", key),
        await api.assignments(role.roleId, "", key),
        await api.userRoles("alice", "", key),
      ]) {
        expectError(res, 403, "permission_denied", '"other"', `"${api.appId}"`);
      }
      expect(ok(await api.getRole(role.roleId))).toEqual(role);
      expect((ok(await api.assignments(role.roleId)).assignments as Json[]).map((a) => a.userId)).toEqual(["alice"]);
      expect(ok(await api.listRoles()).roles).toHaveLength(1);
    });

    it("no key → 401", async () => {
      const api = await fresh("nokey");
      expectError(await api.listRoles("", null), 401, "unauthenticated");
      expectError(await api.createRole({ name: "x" }, null), 401, "unauthenticated");
    });
  });

  describe("over gRPC", () => {
    const S = "RoleService";

    it("create, get, update with and without a mask, assign twice, list both ways, unassign, delete", async () => {
      const { api, wide, t1 } = await withPolicies("grpc");
      const appId = api.appId;
      const created = await rpc.call(S, "CreateRole", { appId, name: "G", policyIds: [t1, wide, t1], tenantId: "t1" }, ADMIN_KEY);
      const role = created.role;
      expect(role).toMatchObject({ name: "G", description: "", policyIds: [t1, wide], tenantId: "t1" });
      expect(ok(await api.getRole(role.roleId))).toMatchObject({ roleId: role.roleId, policyIds: [t1, wide], tenantId: "t1" });
      expect((await rpc.call(S, "GetRole", { appId, roleId: role.roleId }, ADMIN_KEY)).role).toEqual(role);

      const unmasked = await rpc.call(S, "UpdateRole", { appId, roleId: role.roleId, policyIds: [] }, ADMIN_KEY);
      expect(unmasked.role.policyIds).toEqual([t1, wide]);
      const masked = await rpc.call(S, "UpdateRole", { appId, roleId: role.roleId, policyIds: [], updateMask: { paths: ["policy_ids"] } }, ADMIN_KEY);
      expect(masked.role.policyIds).toEqual([]);
      const [event] = (await rpc.call("AuditService", "ListAuditEvents", { appId, type: "role.updated" }, ADMIN_KEY)).events;
      expect(structJson(event.data)).toEqual({ policiesAttached: [], policiesDetached: [t1, wide] });

      const a1 = await rpc.call(S, "AssignRole", { appId, roleId: role.roleId, userId: "alice" }, ADMIN_KEY);
      const a2 = await rpc.call(S, "AssignRole", { appId, roleId: role.roleId, userId: "alice" }, ADMIN_KEY);
      expect(a2).toEqual(a1);
      expect(a1.assignment).toMatchObject({ roleId: role.roleId, userId: "alice" });
      const listed = await rpc.call(S, "ListRoleAssignments", { appId, roleId: role.roleId }, ADMIN_KEY);
      expect(listed.assignments).toEqual([a1.assignment]);
      const userRoles = await rpc.call(S, "ListUserRoles", { appId, userId: "alice" }, ADMIN_KEY);
      expect(userRoles.roles.map((r: Json) => r.roleId)).toEqual([role.roleId]);

      expect(await rpc.call(S, "UnassignRole", { appId, roleId: role.roleId, userId: "alice" }, ADMIN_KEY)).toEqual({ deleted: true });
      expect(await rpc.call(S, "UnassignRole", { appId, roleId: role.roleId, userId: "alice" }, ADMIN_KEY)).toEqual({ deleted: false });
      expect(await rpc.call(S, "DeleteRole", { appId, roleId: role.roleId }, ADMIN_KEY)).toEqual({ roleId: role.roleId, deleted: true });
      expect((await api.events({ type: "role.assigned" })).length).toBe(1);
    });

    it("maps each error to its status", async () => {
      const { api, t1 } = await withPolicies("grpc-errors");
      const appId = api.appId;
      await api.role({ name: "Taken" });
      expectGrpcError(await grpcFail(rpc, S, "CreateRole", { appId, name: "Taken" }, ADMIN_KEY), grpc.status.ALREADY_EXISTS, '"Taken"');
      expectGrpcError(await grpcFail(rpc, S, "CreateRole", { appId, name: "x", policyIds: [t1] }, ADMIN_KEY), grpc.status.INVALID_ARGUMENT, "policyIds[0]", '"t1"');
      expectGrpcError(await grpcFail(rpc, S, "CreateRole", { appId, name: "x", policyIds: ["pol_nope"] }, ADMIN_KEY), grpc.status.INVALID_ARGUMENT, '"pol_nope"');
      expectGrpcError(await grpcFail(rpc, S, "GetRole", { appId, roleId: "rol_nope" }, ADMIN_KEY), grpc.status.NOT_FOUND, '"rol_nope"');
      expectGrpcError(await grpcFail(rpc, S, "AssignRole", { appId, roleId: "rol_nope", userId: "u" }, ADMIN_KEY), grpc.status.NOT_FOUND, '"rol_nope"');
      expectGrpcError(await grpcFail(rpc, S, "ListRoles", { appId }, otherKey.key), grpc.status.PERMISSION_DENIED);
      expectGrpcError(
        await grpcFail(rpc, S, "UpdateRole", { appId, roleId: "rol_nope", updateMask: { paths: ["tenant_id"] } }, ADMIN_KEY),
        grpc.status.INVALID_ARGUMENT,
        "updateMask[0]",
      );
      expectGrpcError(await grpcFail(rpc, S, "ListUserRoles", { appId, userId: "" }, ADMIN_KEY), grpc.status.INVALID_ARGUMENT, "userId");
    });
  });
});
