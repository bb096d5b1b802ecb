/**
 * Cleanup (docs/decisions.md) on each engine: delete grants by filter (the
 * accepted filters and every other combination refused naming them, the
 * catalog's 400s, counts that equal the rows removed, expired grants
 * included, other users and applications untouched, REST and gRPC) and
 * offboarding a user's role assignments (one audit event naming the roles,
 * none when there was nothing to remove). The race of a delete by filter
 * with concurrent writes runs on Postgres, where they truly overlap.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Queryable } from "../src/store/db.js";
import { createTestDatabase, engines, oneEngine, type TestDatabase } from "./support/engines.js";
import { grpcCaller, type GrpcCaller } from "./support/grpc-client.js";
import { ADMIN_KEY, startTestService, type TestService } from "./support/service.js";
import { admin, authz, createApp, expectError, expectGrpcError, expectStatus, grant, GRPC, question, type Grant } from "./helpers/authz.js";

const CATALOG = [
  { resource: "document", description: "", actions: ["read", "update"], relations: [{ name: "contractor", actions: ["read"] }] },
  { resource: "folder", description: "", actions: ["read"] },
];
const DELETE = "/api/v1/authorization/relationships/delete";

/** Every grant of an application, as sorted keys. */
async function stored(db: Queryable, appId: string): Promise<string[]> {
  const { rows } = await db.query<{ k: string }>(
    "SELECT user_id || ' ' || resource || ':' || resource_id || '#' || relation AS k FROM relationships WHERE app_id = $1 ORDER BY 1",
    [appId],
  );
  return rows.map((r) => r.k);
}
const keyOf = (g: Grant) => `${g.userId} ${g.resource}:${g.resourceId}#${g.relation}`;

/** The same grants in a fresh application: ann and bob on documents and folders, with every relation. */
const SEED: Grant[] = [
  grant("ann", "document", "d1", "owner"),
  grant("ann", "document", "d1", "viewer"),
  grant("ann", "document", "d2", "contractor"),
  grant("ann", "folder", "f1", "viewer"),
  grant("bob", "document", "d1", "editor"),
  grant("bob", "document", "d2", "viewer"),
  grant("bob", "folder", "f1", "owner"),
];

describe.each(oneEngine(import.meta.url))("delete by filter and offboarding on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let grpc: GrpcCaller;
  let counter = 0;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    grpc = grpcCaller(service.url);
  });
  afterAll(async () => {
    grpc?.close();
    await service?.close();
    await database?.dispose();
  });

  /** A fresh application holding SEED, and a bystander application with the same grants. */
  async function seeded() {
    const appId = `clean-${++counter}`;
    const key = await createApp(service, appId, CATALOG);
    expectStatus(await authz(service, key).bulk(SEED), 200);
    const bystander = await createApp(service, `${appId}-by`, CATALOG);
    expectStatus(await authz(service, bystander).bulk(SEED), 200);
    return { appId, key };
  }

  describe("delete grants by filter", () => {
    it.each<[string, Record<string, string>, (g: Grant) => boolean]>([
      ["userId alone (offboarding)", { userId: "ann" }, (g) => g.userId === "ann"],
      ["userId and relation", { userId: "ann", relation: "viewer" }, (g) => g.userId === "ann" && g.relation === "viewer"],
      ["resource and resourceId (the instance is gone)", { resource: "document", resourceId: "d1" }, (g) => g.resource === "document" && g.resourceId === "d1"],
      ["resource, resourceId and relation", { resource: "document", resourceId: "d1", relation: "viewer" }, (g) => g.resource === "document" && g.resourceId === "d1" && g.relation === "viewer"],
      ["userId and resource", { userId: "bob", resource: "document" }, (g) => g.userId === "bob" && g.resource === "document"],
      ["userId, resource and relation", { userId: "ann", resource: "document", relation: "contractor" }, (g) => g.userId === "ann" && g.relation === "contractor"],
      ["a filter matching nothing", { userId: "zed" }, () => false],
    ])("%s: every matching grant goes, the count is the rows removed, nothing else changes", async (_, filter, matches) => {
      const { appId, key } = await seeded();
      const res = await service.call("POST", DELETE, { key, body: filter });
      expectStatus(res, 200);
      const expected = SEED.filter((g) => !matches(g)).map(keyOf).sort();
      expect(res.body).toEqual({ deleted: SEED.length - expected.length });
      expect(await stored(database.db, appId)).toEqual(expected);
      expect(await stored(database.db, `${appId}-by`)).toEqual(SEED.map(keyOf).sort());
    });

    it.each<[string, Record<string, string>]>([
      ["nothing", {}],
      ["relation alone", { relation: "viewer" }],
      ["resource alone", { resource: "document" }],
      ["resourceId alone", { resourceId: "d1" }],
      ["resource and relation", { resource: "document", relation: "viewer" }],
      ["userId and resourceId", { userId: "ann", resourceId: "d1" }],
      ["every field", { userId: "ann", resource: "document", resourceId: "d1", relation: "viewer" }],
      ["empty strings only", { userId: "", resource: "" }],
    ])("%s → 400 naming the accepted filters, nothing deleted", async (_, filter) => {
      const { appId, key } = await seeded();
      expectError(await service.call("POST", DELETE, { key, body: filter }), 400, "invalid_argument", "userId (or allUsers: true) alone", "resource and resourceId", "userId (or allUsers: true) and resource");
      expect(await stored(database.db, appId)).toHaveLength(SEED.length);
    });

    it.each<[string, string, Record<string, unknown>]>([
      ["a resource not in the catalog", "resource", { resource: "invoice", resourceId: "i1" }],
      ["a relation not of the resource", "relation", { resource: "folder", resourceId: "f1", relation: "contractor" }],
      ["a malformed userId", "userId", { userId: "a\u0000b" }],
      ["a malformed relation", "relation", { userId: "ann", relation: "Not-A-Relation" }],
      ["an unknown field", "tenantId", { userId: "ann", tenantId: "t" }],
      ["a number for userId", "userId", { userId: 7 }],
    ])("%s → 400 naming %s, nothing deleted", async (_, field, body) => {
      const { appId, key } = await seeded();
      expectError(await service.call("POST", DELETE, { key, body }), 400, "invalid_argument", field);
      expect(await stored(database.db, appId)).toHaveLength(SEED.length);
    });

    it("expired grants not yet swept go too, and are counted", async () => {
      const { appId, key } = await seeded();
      await database.db.query("UPDATE relationships SET expires_at = now() - interval '1 minute' WHERE app_id = $1 AND user_id = 'ann' AND resource = 'folder'", [appId]);
      expect((await service.call("POST", DELETE, { key, body: { userId: "ann" } })).body).toEqual({ deleted: 4 });
    });

    it("over gRPC: the same call, the same refusals", async () => {
      const { appId, key } = await seeded();
      expect(await grpc.call("RelationshipService", "DeleteRelationships", { userId: "bob", resource: "folder" }, key)).toEqual({ deleted: 1 });
      await expectGrpcError(grpc.call("RelationshipService", "DeleteRelationships", { resourceId: "d1" }, key), GRPC.INVALID_ARGUMENT, "userId (or allUsers: true) alone");
      expect(await stored(database.db, appId)).toHaveLength(SEED.length - 1);
    });

    it("an application key acts on its own application only; the operator key is refused", async () => {
      const { appId } = await seeded();
      expectError(await service.call("POST", DELETE, { body: { userId: "ann" } }), 403, "permission_denied");
      expect(await stored(database.db, appId)).toHaveLength(SEED.length);
    });

    it("the check follows at once", async () => {
      const { key } = await seeded();
      const x = authz(service, key);
      expect(await x.allowed(question("ann", "document", "d1", "update"))).toBe(true);
      expectStatus(await service.call("POST", DELETE, { key, body: { resource: "document", resourceId: "d1" } }), 200);
      expect(await x.allowed(question("ann", "document", "d1", "update"))).toBe(false);
      expect(await x.allowed(question("ann", "document", "d2", "read"))).toBe(true);
    });
  });

  describe("offboarding: DELETE /applications/{appId}/users/{userId}/roles", () => {
    it("removes every role of the user in one call, one audit event naming the roles; the check follows", async () => {
      const { appId, key } = await seeded();
      const ops = admin(service, appId);
      const read = await ops.createPolicy("Read", ["document:read"]);
      const roles = [await ops.createRole("Readers", [read]), await ops.createRole("Acme readers", [read], "acme"), await ops.createRole("Idle", [])];
      for (const role of roles) await ops.assign(role, "cat");
      await ops.assign(roles[0]!, "dan");
      const x = authz(service, key);
      expect(await x.allowed(question("cat", "document", "any", "read"))).toBe(true);

      const res = await service.call("DELETE", `/api/v1/applications/${appId}/users/cat/roles`);
      expectStatus(res, 200);
      expect(res.body).toEqual({ deleted: 3, roleIds: roles });
      expect(await x.allowed(question("cat", "document", "any", "read"))).toBe(false);
      expect(await x.allowed(question("cat", "document", "any", "read", "acme"))).toBe(false);
      expect(await x.allowed(question("dan", "document", "any", "read"))).toBe(true);
      expect((await service.call("GET", `/api/v1/applications/${appId}/users/cat/roles`)).body.roles).toEqual([]);

      const events = (await service.call("GET", `/api/v1/applications/${appId}/audit-log?type=user.roles_removed`)).body.events;
      expect(events).toHaveLength(1);
      expect(events[0]).toMatchObject({ type: "user.roles_removed", targetType: "user", targetId: "cat", actorKeyId: "operator" });
      expect(events[0].data).toEqual({
        userId: "cat",
        roles: [
          { roleId: roles[0], name: "Readers" },
          { roleId: roles[1], name: "Acme readers", tenantId: "acme" },
          { roleId: roles[2], name: "Idle" },
        ],
      });
      // Nothing left: 200 {deleted: 0}, and no second event.
      expect((await service.call("DELETE", `/api/v1/applications/${appId}/users/cat/roles`)).body).toEqual({ deleted: 0, roleIds: [] });
      expect((await service.call("GET", `/api/v1/applications/${appId}/audit-log?type=user.roles_removed`)).body.events).toHaveLength(1);
    });

    it("over gRPC; a bad userId is a 400 naming it; another application's key is refused; an unknown application is a 404", async () => {
      const { appId, key } = await seeded();
      const ops = admin(service, appId);
      const role = await ops.createRole("R", []);
      await ops.assign(role, "eve");
      expect(await grpc.call("RoleService", "DeleteUserRoles", { appId, userId: "eve" }, ADMIN_KEY)).toEqual({ deleted: 1, roleIds: [role] });
      expectError(await service.call("DELETE", `/api/v1/applications/${appId}/users/${encodeURIComponent("a\u0001b")}/roles`), 400, "invalid_argument", "userId");
      const other = await createApp(service, `${appId}-other`, []);
      expectError(await service.call("DELETE", `/api/v1/applications/${appId}/users/eve/roles`, { key: other }), 403, "permission_denied");
      expectError(await service.call("DELETE", "/api/v1/applications/no-such-app/users/eve/roles"), 404, "not_found");
      void key;
    });
  });
});

describe.runIf(engines.includes("postgres"))("delete by filter racing with writes on postgres", () => {
  let database: TestDatabase;
  let service: TestService;

  beforeAll(async () => {
    database = await createTestDatabase("postgres");
    service = await startTestService(database.db, { pgPoolMax: 20, maxRunningCalls: 10 });
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  it("no grant acknowledged before the delete began survives it; deleted + survivors = every grant written", async () => {
    const key = await createApp(service, "race", CATALOG);
    const x = authz(service, key);
    for (let round = 0; round < 5; round++) {
      const acknowledged: string[] = [];
      let n = 0;
      let stop = false;
      // Four writers: single writes and bulk writes of new grants for the user, as fast as they go.
      const writers = Array.from({ length: 4 }, async (_, w) => {
        while (!stop) {
          const batch = Array.from({ length: w % 2 === 0 ? 1 : 25 }, () => grant("leaver", "document", `r${round}-${n++}`, "viewer"));
          const res = batch.length === 1 ? await x.write(batch[0]!) : await x.bulk(batch);
          expect([200, 201]).toContain(res.status);
          acknowledged.push(...batch.map(keyOf));
        }
      });
      // The delete goes once writes are being acknowledged (a cold start's first ones take longer
      // than the pause alone), while the writers are still at it.
      while (acknowledged.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
      await new Promise((resolve) => setTimeout(resolve, 50 + round * 20));
      const before = new Set(acknowledged); // acknowledged before the delete was sent
      const res = await service.call("POST", DELETE, { key, body: { userId: "leaver" } });
      expectStatus(res, 200);
      stop = true;
      await Promise.all(writers);
      const survivors = await stored(database.db, "race");
      for (const k of survivors) expect(before.has(k), `${k} was acknowledged before the delete and survived`).toBe(false);
      expect(before.size).toBeGreaterThan(0);
      expect(res.body.deleted + survivors.length).toBe(new Set(acknowledged).size);
      await database.db.query("DELETE FROM relationships WHERE app_id = 'race'");
    }
  });
});
