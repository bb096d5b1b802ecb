/**
 * The impact preview of a policy edit (docs/decisions.md) on each engine,
 * against a brute-force computation: random models (policies application-wide
 * and of tenants, roles of each scope attaching several, users holding the
 * same permission through zero, one, two or more roles) and random edits; for
 * each, `added`, `removed`, `roles` and the exact `gaining`/`losing` counts
 * and samples equal what comparing every user's effective permissions in
 * every scope before and after gives. The preview changes nothing and logs
 * nothing; it refuses what the PATCH refuses.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { grpcCaller, type GrpcCaller } from "./support/grpc-client.js";
import { ADMIN_KEY, startTestService, type TestService } from "./support/service.js";
import { admin, createApp, expectError, expectGrpcError, expectStatus, GRPC } from "./helpers/authz.js";

const CATALOG = [
  { resource: "document", description: "", actions: ["read", "update", "delete", "share"] },
  { resource: "invoice", description: "", actions: ["read", "pay"] },
];
const PERMISSIONS = CATALOG.flatMap((e) => e.actions.map((a) => `${e.resource}:${a}`));
const TENANTS = ["t1", "t2"];

interface Model {
  policies: { policyId: string; permissions: string[]; tenantId: string | null }[];
  roles: { roleId: string; name: string; tenantId: string | null; policyIds: string[] }[];
  assignments: Map<string, string[]>; // userId → roleIds
}

/** mulberry32: a small seeded generator, so a failing seed can be run again. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const pick = <T>(rnd: () => number, list: readonly T[], chance: number) => list.filter(() => rnd() < chance);

/** A user's effective permissions in a scope (null: no tenant), with one policy's permissions replaced. */
function effective(model: Model, userId: string, scope: string | null, replaced?: { policyId: string; permissions: string[] }): Set<string> {
  const held = new Set<string>();
  for (const roleId of model.assignments.get(userId) ?? []) {
    const role = model.roles.find((r) => r.roleId === roleId)!;
    if (role.tenantId !== null && role.tenantId !== scope) continue;
    for (const policyId of role.policyIds) {
      const permissions = replaced?.policyId === policyId ? replaced.permissions : model.policies.find((p) => p.policyId === policyId)!.permissions;
      for (const p of permissions) held.add(p);
    }
  }
  return held;
}

/** Who gains and who loses, by comparing every user in every scope. */
function bruteForce(model: Model, policyId: string, permissions: string[]) {
  const gaining: string[] = [];
  const losing: string[] = [];
  for (const userId of [...model.assignments.keys()].sort()) {
    let gains = false;
    let loses = false;
    for (const scope of [null, ...TENANTS]) {
      const before = effective(model, userId, scope);
      const after = effective(model, userId, scope, { policyId, permissions });
      if ([...after].some((p) => !before.has(p))) gains = true;
      if ([...before].some((p) => !after.has(p))) loses = true;
    }
    if (gains) gaining.push(userId);
    if (loses) losing.push(userId);
  }
  const reached = [...model.assignments.values()].filter((roleIds) =>
    roleIds.some((roleId) => model.roles.find((r) => r.roleId === roleId)!.policyIds.includes(policyId)),
  ).length;
  return { gaining: gaining.length, losing: losing.length, gainingSample: gaining.slice(0, 20), losingSample: losing.slice(0, 20), reached };
}

describe.each(oneEngine(import.meta.url))("impact preview on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let grpc: GrpcCaller;

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

  const preview = (appId: string, policyId: string, body: unknown) =>
    service.call("POST", `/api/v1/applications/${appId}/policies/${policyId}/preview`, { body });

  /** The whole visible state of an application: policies, roles, audit log. */
  const snapshot = async (appId: string) => ({
    policies: (await service.call("GET", `/api/v1/applications/${appId}/policies?pageSize=1000`)).body,
    roles: (await service.call("GET", `/api/v1/applications/${appId}/roles?pageSize=1000`)).body,
    audit: (await service.call("GET", `/api/v1/applications/${appId}/audit-log?pageSize=1000`)).body,
  });

  async function build(appId: string, seed: number, users: number): Promise<Model> {
    await createApp(service, appId, CATALOG);
    const ops = admin(service, appId);
    const rnd = random(seed);
    const model: Model = { policies: [], roles: [], assignments: new Map() };
    for (let i = 0; i < 7; i++) {
      const tenantId = i < 4 ? null : TENANTS[i % 2]!;
      const permissions = pick(rnd, PERMISSIONS, 0.35);
      model.policies.push({ policyId: await ops.createPolicy(`P${i}`, permissions, tenantId ?? undefined), permissions, tenantId });
    }
    for (let i = 0; i < 9; i++) {
      const tenantId = i < 4 ? null : TENANTS[i % 2]!;
      const allowed = model.policies.filter((p) => p.tenantId === null || p.tenantId === tenantId);
      const policyIds = pick(rnd, allowed, 0.4).map((p) => p.policyId);
      const name = `R${i}`;
      model.roles.push({ roleId: await ops.createRole(name, policyIds, tenantId ?? undefined), name, tenantId, policyIds });
    }
    for (let u = 0; u < users; u++) {
      const userId = `u${String(u).padStart(3, "0")}`;
      const roles = pick(rnd, model.roles, 0.25).map((r) => r.roleId);
      for (const roleId of roles) await ops.assign(roleId, userId);
      if (roles.length > 0) model.assignments.set(userId, roles);
    }
    return model;
  }

  it.each([1, 2, 3, 4, 5, 6])("seed %i: every edit's counts, samples, roles and permission lists equal the brute force; nothing changes", async (seed) => {
    const appId = `impact-${seed}`;
    const model = await build(appId, seed, 60);
    const rnd = random(seed * 7919);
    const before = await snapshot(appId);
    for (const policy of model.policies) {
      for (let edit = 0; edit < 3; edit++) {
        const permissions = edit === 0 ? [] : pick(rnd, PERMISSIONS, 0.5);
        const res = await preview(appId, policy.policyId, { permissions });
        expectStatus(res, 200);
        const added = permissions.filter((p) => !policy.permissions.includes(p));
        const removed = policy.permissions.filter((p) => !permissions.includes(p));
        const attached = model.roles.filter((r) => r.policyIds.includes(policy.policyId));
        expect(res.body).toEqual({
          added,
          removed,
          roles: attached.map((r) => ({
            roleId: r.roleId,
            name: r.name,
            ...(r.tenantId === null ? {} : { tenantId: r.tenantId }),
            assignmentCount: [...model.assignments.values()].filter((roles) => roles.includes(r.roleId)).length,
          })),
          users: bruteForce(model, policy.policyId, permissions),
          conditionalAdded: [],
          conditionalRemoved: [],
        });
      }
    }
    expect(await snapshot(appId)).toEqual(before);
  });

  it("users holding document:delete through zero, one and two roles, application-wide and per tenant", async () => {
    const appId = "impact-designed";
    await createApp(service, appId, CATALOG);
    const ops = admin(service, appId);
    const target = await ops.createPolicy("Delete documents", ["document:delete", "document:read"]);
    const alsoDelete = await ops.createPolicy("Also delete", ["document:delete"]);
    const t1Delete = await ops.createPolicy("T1 delete", ["document:delete"], "t1");
    const editors = await ops.createRole("Editors", [target]); // app-wide, through the target only
    const backups = await ops.createRole("Backups", [alsoDelete]); // app-wide, another source
    const t1Editors = await ops.createRole("T1 editors", [target], "t1"); // the target in tenant t1
    const t1Keepers = await ops.createRole("T1 keepers", [t1Delete], "t1"); // another source, in t1 only
    const plan: [string, string[]][] = [
      ["a-zero", []], // no role: unaffected
      ["b-one", [editors]], // loses (only source)
      ["c-two", [editors, backups]], // keeps through Backups
      ["d-tenant-keep", [editors, t1Keepers]], // loses application-wide (T1 keepers counts in t1 only)
      ["e-tenant", [t1Editors]], // loses in t1
      ["f-tenant-two", [t1Editors, t1Keepers]], // keeps in t1
      ["g-tenant-wide", [t1Editors, backups]], // keeps: an application-wide source counts in t1
    ];
    for (const [userId, roles] of plan) for (const role of roles) await ops.assign(role, userId);
    const res = await preview(appId, target, { permissions: ["document:read", "document:share"] });
    expectStatus(res, 200);
    expect(res.body).toEqual({
      added: ["document:share"],
      removed: ["document:delete"],
      roles: [
        { roleId: editors, name: "Editors", assignmentCount: 3 },
        { roleId: t1Editors, name: "T1 editors", tenantId: "t1", assignmentCount: 3 },
      ],
      users: {
        gaining: 6,
        losing: 3,
        gainingSample: ["b-one", "c-two", "d-tenant-keep", "e-tenant", "f-tenant-two", "g-tenant-wide"],
        losingSample: ["b-one", "d-tenant-keep", "e-tenant"],
        reached: 6, // b to g; c, f and g keep document:delete through another role
      },
      conditionalAdded: [],
      conditionalRemoved: [],
    });
    // gRPC answers the same (but for proto-loader's "_tenantId" oneof name of the optional field).
    const answer = await grpc.call("PolicyService", "PreviewPolicyUpdate", { appId, policyId: target, permissions: ["document:read", "document:share"] }, ADMIN_KEY);
    expect({ ...answer, roles: answer.roles.map(({ _tenantId, ...role }: Record<string, unknown>) => role) }).toEqual(res.body);
  });

  it("a name or description alone changes no access: empty lists, the roles still listed; the sample holds 20 of many", async () => {
    const appId = "impact-many";
    await createApp(service, appId, CATALOG);
    const ops = admin(service, appId);
    const policy = await ops.createPolicy("Read", ["invoice:read"]);
    const role = await ops.createRole("Readers", [policy]);
    const users = Array.from({ length: 45 }, (_, i) => `user-${String(i).padStart(2, "0")}`);
    for (const userId of users.reverse()) await ops.assign(role, userId);
    const renamed = await preview(appId, policy, { name: "Readers of invoices", description: "x" });
    expect(renamed.body).toEqual({
      added: [],
      removed: [],
      roles: [{ roleId: role, name: "Readers", assignmentCount: 45 }],
      users: { gaining: 0, losing: 0, gainingSample: [], losingSample: [], reached: 45 },
      conditionalAdded: [],
      conditionalRemoved: [],
    });
    const cleared = await preview(appId, policy, { permissions: [] });
    expect(cleared.body.users).toEqual({ gaining: 0, losing: 45, gainingSample: [], losingSample: [...users].sort().slice(0, 20), reached: 45 });
  });

  it("refuses what the PATCH refuses, naming the field; changes nothing", async () => {
    const appId = "impact-refusals";
    const key = await createApp(service, appId, CATALOG);
    const ops = admin(service, appId);
    const policy = await ops.createPolicy("Read", ["invoice:read"]);
    const before = await snapshot(appId);
    expectError(await preview(appId, policy, { permissions: ["invoice:read", "invoice:refund"] }), 400, "invalid_argument", "permissions[1]", "invoice:refund");
    expectError(await preview(appId, policy, { permissions: ["nope"] }), 400, "invalid_argument", "permissions[0]");
    expectError(await preview(appId, policy, { name: "" }), 400, "invalid_argument", "name");
    expectError(await preview(appId, policy, { description: "d".repeat(2_001) }), 400, "invalid_argument", "description");
    expectError(await preview(appId, policy, { tenantId: "t1" }), 400, "invalid_argument", "tenantId");
    expectError(await preview(appId, "pol_nope", { permissions: [] }), 404, "not_found");
    expectError(await preview("no-such-app", policy, { permissions: [] }), 404, "not_found");
    const other = await createApp(service, `${appId}-other`, []);
    expectError(await service.call("POST", `/api/v1/applications/${appId}/policies/${policy}/preview`, { key: other, body: {} }), 403, "permission_denied");
    await expectGrpcError(grpc.call("PolicyService", "PreviewPolicyUpdate", { appId, policyId: policy, permissions: ["x:y"] }, ADMIN_KEY), GRPC.INVALID_ARGUMENT, "permissions[0]");
    expect(await snapshot(appId)).toEqual(before);
    void key;
  });
});
