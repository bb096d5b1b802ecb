/**
 * role_permissions is derived data (what each role holds through its
 * policies), kept in step by the transactions that change policies and roles.
 * Under concurrent changes from two replicas it must still equal what it is
 * derived from, and the check must answer from it correctly.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Db } from "../src/store/db.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { createAppWithKey, startTestService, type TestService } from "./support/service.js";

const DERIVED = `
  SELECT DISTINCT rp.role_id, pp.resource, pp.action, r.tenant_id
  FROM role_policies rp
  JOIN policy_permissions pp ON pp.app_id = rp.app_id AND pp.policy_id = rp.policy_id
  JOIN roles r ON r.app_id = rp.app_id AND r.role_id = rp.role_id
  WHERE rp.app_id = $1 ORDER BY 1, 2, 3`;
const STORED = `SELECT role_id, resource, action, tenant_id FROM role_permissions WHERE app_id = $1 ORDER BY 1, 2, 3`;

async function expectInStep(db: Db, appId: string): Promise<void> {
  const [derived, stored] = await Promise.all([db.query(DERIVED, [appId]), db.query(STORED, [appId])]);
  expect(stored.rows).toEqual(derived.rows);
}

const ACTIONS = ["a", "b", "c", "d", "e", "f"];

describe.each(engines)("role_permissions under concurrent changes on %s", (engine) => {
  let database: TestDatabase;
  let services: TestService[];
  const appId = "derived";
  let key: string;
  const policyIds: string[] = [];
  const roleIds: string[] = [];

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    const first = await startTestService(database.db);
    services = engine === "postgres" ? [first, await startTestService(await database.openAnother())] : [first];
    key = await createAppWithKey(first, appId);
    const base = `/api/v1/applications/${appId}`;
    await first.call("PUT", `${base}/resources`, { body: { resources: [{ resource: "doc", description: "", actions: ACTIONS }] } });
    for (let i = 0; i < 4; i++) {
      policyIds.push((await first.call("POST", `${base}/policies`, { body: { name: `p${i}`, permissions: [`doc:${ACTIONS[i]}`] } })).body.policyId);
    }
    for (let i = 0; i < 3; i++) {
      roleIds.push((await first.call("POST", `${base}/roles`, { body: { name: `r${i}`, policyIds: policyIds.slice(i, i + 2) } })).body.roleId);
      await first.call("POST", `${base}/roles/${roleIds[i]}/assignments`, { body: { userId: `u${i}` } });
    }
  });
  afterAll(async () => {
    for (const s of services ?? []) await s.close();
    await database?.dispose();
  });

  it("stays equal to what it is derived from while policies and roles change at once on every replica", async () => {
    const base = `/api/v1/applications/${appId}`;
    for (let round = 0; round < 8; round++) {
      const changes = [
        ...policyIds.map((id, i) => ({ path: `${base}/policies/${id}`, body: { permissions: ACTIONS.filter((_, k) => (k + round + i) % 3 === 0).map((a) => `doc:${a}`) } })),
        ...roleIds.map((id, i) => ({ path: `${base}/roles/${id}`, body: { policyIds: policyIds.filter((_, k) => (k + round + i) % 2 === 0) } })),
      ];
      const answers = await Promise.all(changes.map((c, i) => services[i % services.length]!.call("PATCH", c.path, { body: c.body })));
      expect(answers.map((a) => a.status)).toEqual(changes.map(() => 200));
      await expectInStep(database.db, appId);
    }
    // And the check reads it: each user may do exactly what their role's policies hold.
    for (const [i, roleId] of roleIds.entries()) {
      const role = (await services[0]!.call("GET", `${base}/roles/${roleId}`)).body;
      const held = new Set<string>();
      for (const policyId of role.policyIds as string[]) {
        for (const p of (await services[0]!.call("GET", `${base}/policies/${policyId}`)).body.permissions as string[]) held.add(p);
      }
      for (const action of ACTIONS) {
        const answer = await services[services.length - 1]!.call("POST", "/api/v1/authorization/check", {
          key,
          body: { userId: `u${i}`, resource: "doc", resourceId: "x", action },
        });
        expect(answer.body, `u${i} doc:${action}`).toEqual({ allowed: held.has(`doc:${action}`) });
      }
    }
  });

  it("follows a forced policy delete and a role delete", async () => {
    const base = `/api/v1/applications/${appId}`;
    await services[0]!.call("PATCH", `${base}/roles/${roleIds[0]}`, { body: { policyIds } });
    expect((await services[0]!.call("DELETE", `${base}/policies/${policyIds[0]}?force=true`)).status).toBe(200);
    await expectInStep(database.db, appId);
    expect((await services[0]!.call("DELETE", `${base}/roles/${roleIds[1]}`)).status).toBe(200);
    await expectInStep(database.db, appId);
    const { rows } = await database.db.query("SELECT count(*)::int AS n FROM role_permissions WHERE app_id = $1 AND role_id = $2", [appId, roleIds[1]]);
    expect(rows).toEqual([{ n: 0 }]);
  });
});
