/**
 * Races on the real Postgres, with requests in parallel over two service
 * instances (two pools, as two replicas) on the same database. Each race runs
 * for several rounds. After every round: each answer either succeeded or
 * failed cleanly (2xx, or 400/404/409 in the contract's error shape, never a
 * 500), the outcome is one that some serial order of the requests would have
 * produced, no role is left attached to a deleted policy, and the audit log
 * holds exactly one event per successful change.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { startTestService, type RestAnswer, type TestService } from "./support/service.js";
import { appApi, CATALOG, expectError, newApp, ok, sorted, type AppApi, type AuditEvent, type Json } from "./helpers/authz-api.js";

const ROUNDS = 10;

/** The answer is one of `allowed`; a refusal has the contract's error shape and the code its status implies. */
function expectClean(res: RestAnswer, allowed: number[], label: string): void {
  expect(allowed, `${label}: ${res.status} ${JSON.stringify(res.body)}`).toContain(res.status);
  const codes: Record<number, string[]> = { 400: ["invalid_argument"], 404: ["not_found"], 409: ["already_exists", "failed_precondition"] };
  if (res.status >= 300) {
    expectError(res, res.status, res.body.code);
    expect(codes[res.status], label).toContain(res.body.code);
  }
}

describe.runIf(engines.includes("postgres"))("policy races on postgres (two replicas)", () => {
  let database: TestDatabase;
  let a: TestService;
  let b: TestService;
  /** The same application through replica A and through replica B. */
  let viaA: AppApi;
  let viaB: AppApi;
  const appId = "races";

  /** role_policies rows whose policy does not exist (must always be none). */
  async function orphanAttachments(): Promise<number> {
    const { rows } = await database.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM role_policies rp
       WHERE NOT EXISTS (SELECT 1 FROM policies p WHERE p.app_id = rp.app_id AND p.policy_id = rp.policy_id)`,
      [],
    );
    return rows[0]!.n;
  }

  /** The events written since `before` (a previous full read), newest first. */
  async function newEvents(api: AppApi, before: AuditEvent[]): Promise<AuditEvent[]> {
    const all = await api.events();
    expect(all.slice(all.length - before.length)).toEqual(before);
    return all.slice(0, all.length - before.length);
  }

  beforeAll(async () => {
    database = await createTestDatabase("postgres");
    a = await startTestService(database.db);
    b = await startTestService(await database.openAnother());
    viaA = await newApp(a.call, appId);
    viaB = appApi(b.call, appId);
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await database?.dispose();
  });

  it("a forced delete racing with a PATCH of the policy, a role attaching it and a role created with it", async () => {
    const outcomes = { patched: 0, attached: 0, created: 0 };
    for (let round = 0; round < ROUNDS; round++) {
      const [one, two] = round % 2 === 0 ? [viaA, viaB] : [viaB, viaA];
      const p = await one.policy({ name: `P${round}`, permissions: ["document:read"] });
      const q = await one.policy({ name: `Q${round}`, permissions: ["invoice:read"] });
      const r1 = await one.role({ name: `R1-${round}`, policyIds: [p.policyId, q.policyId] });
      const r2 = await one.role({ name: `R2-${round}`, policyIds: [q.policyId] });
      const before = await viaA.events();

      const [del, patch, attach, create] = await Promise.all([
        one.deletePolicy(p.policyId, "?force=true"),
        two.patchPolicy(p.policyId, { permissions: ["document:read", "document:update"] }),
        two.patchRole(r2.roleId, { policyIds: [q.policyId, p.policyId] }),
        one.createRole({ name: `R3-${round}`, policyIds: [p.policyId] }),
      ]);
      const label = `round ${round}`;
      expectClean(del, [200], `${label} delete`);
      expectClean(patch, [200, 404], `${label} patch policy`);
      expectClean(attach, [200, 400], `${label} attach`);
      expectClean(create, [201, 400], `${label} create role`);
      if (patch.status === 404) expect(patch.body.message).toContain(p.policyId);
      if (patch.status === 200) expect(patch.body.permissions).toEqual(["document:read", "document:update"]);
      if (attach.status === 400) expect(attach.body.message).toContain(p.policyId);
      if (create.status === 400) expect(create.body.message).toContain(p.policyId);
      outcomes.patched += patch.status === 200 ? 1 : 0;
      outcomes.attached += attach.status === 200 ? 1 : 0;
      outcomes.created += create.status === 201 ? 1 : 0;

      // The delete detached exactly the roles that held the policy when it ran:
      // R1, plus R2 and R3 when their attach committed first.
      const expectedDetached = [r1.roleId, ...(attach.status === 200 ? [r2.roleId] : []), ...(create.status === 201 ? [create.body.roleId] : [])];
      expect(del.body.policyId).toBe(p.policyId);
      expect(del.body.deleted).toBe(true);
      expect(sorted(del.body.detachedRoleIds), label).toEqual(sorted(expectedDetached));

      // No attachment to the deleted policy is left, on either replica.
      expect(await orphanAttachments()).toBe(0);
      expectError(await viaA.getPolicy(p.policyId), 404, "not_found");
      expectError(await viaB.getPolicy(p.policyId), 404, "not_found");
      expect(ok(await viaB.getRole(r1.roleId)).policyIds).toEqual([q.policyId]);
      expect(ok(await viaA.getRole(r2.roleId)).policyIds).toEqual([q.policyId]);
      if (create.status === 201) expect(ok(await viaA.getRole(create.body.roleId)).policyIds).toEqual([]);
      expect(ok(await viaA.getPolicy(q.policyId)).roleCount).toBe(2);
      for (const role of ok(await viaB.listRoles("?pageSize=1000")).roles as Json[]) expect(role.policyIds).not.toContain(p.policyId);

      // Exactly one event per success, none lost, none extra.
      const events = await newEvents(viaA, before);
      const deleted = events.filter((e) => e.type === "policy.deleted");
      expect(deleted, label).toHaveLength(1);
      expect(deleted[0]).toMatchObject({ targetId: p.policyId, actorKeyId: "operator" });
      expect(deleted[0]!.data.force).toBe(true);
      expect(sorted(deleted[0]!.data.detachedRoleIds)).toEqual(sorted(del.body.detachedRoleIds));
      const updated = events.filter((e) => e.type === "policy.updated");
      expect(updated, label).toHaveLength(patch.status === 200 ? 1 : 0);
      const roleUpdates = events.filter((e) => e.type === "role.updated");
      expect(roleUpdates, label).toHaveLength(attach.status === 200 ? 1 : 0);
      if (attach.status === 200) expect(roleUpdates[0]!.data).toEqual({ policiesAttached: [p.policyId], policiesDetached: [] });
      const roleCreates = events.filter((e) => e.type === "role.created");
      expect(roleCreates, label).toHaveLength(create.status === 201 ? 1 : 0);
      expect(events, label).toHaveLength(1 + updated.length + roleUpdates.length + roleCreates.length);
      // A change that succeeded committed before the delete: its event is older.
      const deleteIndex = events.indexOf(deleted[0]!);
      for (const e of [...updated, ...roleUpdates, ...roleCreates]) expect(events.indexOf(e)).toBeGreaterThan(deleteIndex);
    }
    // Reported for whoever reads the run; every combination is a valid outcome.
    console.info(`forced delete race: ${JSON.stringify(outcomes)} of ${ROUNDS} rounds`);
  });

  it("a delete without force racing with a role attaching the policy: exactly one of them wins", async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const [one, two] = round % 2 === 0 ? [viaA, viaB] : [viaB, viaA];
      const p = await one.policy({ name: `Plain${round}` });
      const role = await one.role({ name: `Plain role ${round}` });
      const before = await viaA.events();

      const [del, attach] = await Promise.all([one.deletePolicy(p.policyId), two.patchRole(role.roleId, { policyIds: [p.policyId] })]);
      expectClean(del, [200, 409], `round ${round} delete`);
      expectClean(attach, [200, 400], `round ${round} attach`);
      // Either the delete ran first (the attach finds no policy) or the attach
      // did (the delete finds the policy attached): never both, never neither.
      expect([del.status, attach.status], `round ${round}`).toSatisfy(
        ([d, t]: number[]) => (d === 200 && t === 400) || (d === 409 && t === 200),
      );
      if (del.status === 409) {
        expect(del.body.code).toBe("failed_precondition");
        expect(del.body.details).toEqual([{ roleId: role.roleId }]);
        expect(ok(await viaB.getPolicy(p.policyId)).roleCount).toBe(1);
        expect(ok(await viaA.getRole(role.roleId)).policyIds).toEqual([p.policyId]);
      } else {
        expectError(await viaB.getPolicy(p.policyId), 404, "not_found");
        expect(ok(await viaA.getRole(role.roleId)).policyIds).toEqual([]);
      }
      expect(await orphanAttachments()).toBe(0);
      const events = await newEvents(viaA, before);
      expect(events.map((e) => e.type)).toEqual([del.status === 200 ? "policy.deleted" : "role.updated"]);
    }
  });

  it("two creates of the same policy name at once: one 201, one 409; one policy and one event", async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const name = `Same name ${round}`;
      const before = await viaA.events();
      const answers = await Promise.all([
        viaA.createPolicy({ name, permissions: ["document:read"] }),
        viaB.createPolicy({ name, permissions: ["invoice:read"] }),
      ]);
      for (const res of answers) expectClean(res, [201, 409], `round ${round}`);
      expect(sorted(answers.map((r) => String(r.status)))).toEqual(["201", "409"]);
      const loser = answers.find((r) => r.status === 409)!;
      expect(loser.body.code).toBe("already_exists");
      expect(loser.body.message).toContain(`"${name}"`);
      const winner = answers.find((r) => r.status === 201)!;

      const named = (ok(await viaB.listPolicies("?pageSize=1000")).policies as Json[]).filter((x) => x.name === name);
      expect(named).toEqual([winner.body]);
      const events = await newEvents(viaA, before);
      expect(events.map((e) => [e.type, e.targetId])).toEqual([["policy.created", winner.body.policyId]]);
    }
  });

  it("two creates of the same role name in the same scope at once: one 201, one 409", async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const name = `Same role ${round}`;
      const tenant = round % 2 === 0 ? {} : { tenantId: "t1" };
      const before = await viaA.events();
      const answers = await Promise.all([viaA.createRole({ name, ...tenant }), viaB.createRole({ name, ...tenant })]);
      for (const res of answers) expectClean(res, [201, 409], `round ${round}`);
      expect(sorted(answers.map((r) => String(r.status)))).toEqual(["201", "409"]);
      expect(answers.find((r) => r.status === 409)!.body.code).toBe("already_exists");
      const events = await newEvents(viaA, before);
      expect(events.map((e) => e.type)).toEqual(["role.created"]);
    }
  });

  it("two forced deletes of the same policy at once: one 200, one 404; one event", async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const p = await viaA.policy({ name: `Twice deleted ${round}` });
      const role = await viaA.role({ name: `Holder ${round}`, policyIds: [p.policyId] });
      const before = await viaA.events();
      const answers = await Promise.all([viaA.deletePolicy(p.policyId, "?force=true"), viaB.deletePolicy(p.policyId, "?force=true")]);
      for (const res of answers) expectClean(res, [200, 404], `round ${round}`);
      expect(sorted(answers.map((r) => String(r.status)))).toEqual(["200", "404"]);
      expect(answers.find((r) => r.status === 200)!.body.detachedRoleIds).toEqual([role.roleId]);
      const events = await newEvents(viaA, before);
      expect(events.map((e) => e.type)).toEqual(["policy.deleted"]);
      expect(await orphanAttachments()).toBe(0);
    }
  });

  it("a catalog dropping a permission racing with a PATCH adding it to a policy: exactly one of them wins", async () => {
    const dropUpdate = { resources: [{ ...CATALOG.resources[0]!, actions: ["create", "read", "delete", "list"] }, CATALOG.resources[1]!] };
    for (let round = 0; round < ROUNDS; round++) {
      const one = await newApp(a.call, `catalog-race-${round}`);
      const two = appApi(b.call, one.appId);
      const p = await one.policy({ name: "Docs", permissions: ["document:read"] });
      const before = await one.events();

      const [put, patch] = await Promise.all([one.putCatalog(dropUpdate), two.patchPolicy(p.policyId, { permissions: ["document:read", "document:update"] })]);
      expectClean(put, [200, 409], `round ${round} catalog`);
      expectClean(patch, [200, 400], `round ${round} patch`);
      expect([put.status, patch.status], `round ${round}`).toSatisfy(([c, t]: number[]) => (c === 200 && t === 400) || (c === 409 && t === 200));
      const policy = ok(await two.getPolicy(p.policyId));
      const catalog = ok(await one.getCatalog());
      const documentActions = catalog.resources[0].actions as string[];
      if (put.status === 200) {
        expect(documentActions).not.toContain("update");
        expect(policy.permissions).toEqual(["document:read"]);
        expect(patch.body.message).toContain('"document:update"');
      } else {
        expect(put.body.message).toContain("document:update");
        expect(documentActions).toContain("update");
        expect(policy.permissions).toEqual(["document:read", "document:update"]);
      }
      // Whatever happened, no policy holds a permission the catalog lacks.
      for (const permission of policy.permissions as string[]) expect(documentActions).toContain(permission.split(":")[1]);
      const events = await newEvents(one, before);
      expect(events.map((e) => e.type)).toEqual([put.status === 200 ? "catalog.replaced" : "policy.updated"]);
    }
  });

  it("parallel assignments of one user: one 201, the rest 200 with the same stored assignment; one event", async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const role = await viaA.role({ name: `Assigned ${round}` });
      const before = await viaA.events();
      const answers = await Promise.all(
        Array.from({ length: 6 }, (_, i) => (i % 2 ? viaA : viaB).assign(role.roleId, { userId: "alice" })),
      );
      for (const res of answers) expectClean(res, [200, 201], `round ${round}`);
      expect(answers.filter((r) => r.status === 201)).toHaveLength(1);
      const stored = answers.find((r) => r.status === 201)!.body;
      for (const res of answers) expect(res.body).toEqual(stored);
      const events = await newEvents(viaA, before);
      expect(events.map((e) => [e.type, e.data.userId])).toEqual([["role.assigned", "alice"]]);
    }
  });

  it("a role deletion racing with an assignment: the assignment is either refused (404) or removed with the role", async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const role = await viaA.role({ name: `Short-lived ${round}` });
      ok(await viaA.assign(role.roleId, { userId: "first" }), 201);
      const before = await viaA.events();
      const [del, assign] = await Promise.all([viaA.deleteRole(role.roleId), viaB.assign(role.roleId, { userId: "second" })]);
      expectClean(del, [200], `round ${round} delete`);
      expectClean(assign, [201, 404], `round ${round} assign`);
      expect(ok(await viaB.userRoles("second")).roles as Json[]).toEqual([]);
      const events = await newEvents(viaA, before);
      const deleted = events.find((e) => e.type === "role.deleted")!;
      expect(deleted.data.assignmentsRemoved, `round ${round}`).toBe(assign.status === 201 ? 2 : 1);
      expect(events.map((e) => e.type)).toEqual(assign.status === 201 ? ["role.deleted", "role.assigned"] : ["role.deleted"]);
      const { rows } = await database.db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM role_assignments WHERE app_id = $1 AND role_id = $2",
        [appId, role.roleId],
      );
      expect(rows[0]!.n).toBe(0);
    }
  });
});
