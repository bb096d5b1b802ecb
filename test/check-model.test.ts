/**
 * The check compared with an independent model of the same rules, written
 * here from the contract alone, on random data: random catalogs (with
 * custom relations, some redefining built-ins), policies (some of a tenant),
 * roles, assignments and grants, then thousands of random checks.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { grpcCaller, type GrpcCaller } from "./support/grpc-client.js";
import { applyScenario, type Scenario, type ScenarioCheck } from "./support/scenario.js";
import { startTestService, type TestService } from "./support/service.js";
import { random as rng } from "../bench/random.js";

const ACTION_POOL = ["create", "read", "update", "delete", "list", "comment", "share", "approve"] as const;
const BUILT_IN = ["owner", "editor", "viewer", "commenter"] as const;
const USERS = ["u1", "u2", "u3", "u4", "u5", "u6"];
const INSTANCES = ["a", "b", "c"];
const TENANTS = ["t1", "t2"];

interface ModelResource {
  resource: string;
  actions: string[];
  custom: { name: string; actions: string[] }[];
}

/** The contract's relation rules, independently: what a relation implies on a resource. */
function implied(r: ModelResource, relation: string): string[] {
  const custom = r.custom.find((c) => c.name === relation);
  if (custom) return custom.actions;
  switch (relation) {
    case "owner":
      return r.actions;
    case "editor":
      return r.actions.filter((a) => ["create", "read", "update"].includes(a));
    case "viewer":
      return r.actions.filter((a) => ["read", "list"].includes(a));
    case "commenter":
      return r.actions.filter((a) => ["read", "comment"].includes(a));
    default:
      return [];
  }
}

function randomWorld(seed: number): { scenario: Scenario; checks: (ScenarioCheck & { allowed: boolean })[] } {
  const r = rng(seed);
  const resources: ModelResource[] = ["doc", "folder", "ticket"].map((resource) => {
    const actions = r.subset(ACTION_POOL, 0.6);
    if (actions.length === 0) actions.push("read");
    const names = [...r.subset(BUILT_IN, 0.25), ...r.subset(["reviewer", "auditor"], 0.5)];
    const custom = names.map((name) => ({ name, actions: r.subset(actions, 0.5) }));
    return { resource, actions, custom };
  });
  const permissions = resources.flatMap((x) => x.actions.map((a) => `${x.resource}:${a}`));
  const policies = Array.from({ length: 6 }, (_, i) => ({
    ref: `p${i}`,
    name: `policy ${i}`,
    permissions: r.subset(permissions, 0.2),
    ...(r.next() < 0.3 ? { tenantId: r.pick(TENANTS) } : {}),
  }));
  const roles = Array.from({ length: 5 }, (_, i) => {
    const tenantId = r.next() < 0.4 ? r.pick(TENANTS) : undefined;
    // The tenant rule: a tenant policy attaches only to a role of its tenant.
    const eligible = policies.filter((p) => p.tenantId === undefined || p.tenantId === tenantId);
    return { ref: `r${i}`, name: `role ${i}`, policies: r.subset(eligible, 0.4).map((p) => p.ref), ...(tenantId ? { tenantId } : {}) };
  });
  const assignments = USERS.flatMap((userId) => r.subset(roles, 0.25).map((role) => ({ role: role.ref, userId })));
  const grants: Scenario["grants"] = [];
  const seen = new Set<string>();
  for (let i = 0; i < 40; i++) {
    const res = r.pick(resources);
    const relation = r.pick([...BUILT_IN, ...res.custom.map((c) => c.name)]);
    const g = { userId: r.pick(USERS), resource: res.resource, resourceId: r.pick(INSTANCES), relation };
    const key = JSON.stringify(g);
    if (!seen.has(key)) grants.push(g);
    seen.add(key);
  }

  const allowed = (c: ScenarioCheck): boolean => {
    const res = resources.find((x) => x.resource === c.resource)!;
    const byGrant = grants.some(
      (g) => g.userId === c.userId && g.resource === c.resource && g.resourceId === c.resourceId && implied(res, g.relation).includes(c.action),
    );
    const byRole = assignments.some((a) => {
      if (a.userId !== c.userId) return false;
      const role = roles.find((x) => x.ref === a.role)!;
      if (role.tenantId !== undefined && role.tenantId !== c.tenantId) return false;
      return role.policies.some((ref) => policies.find((p) => p.ref === ref)!.permissions.includes(`${c.resource}:${c.action}`));
    });
    return byGrant || byRole;
  };

  const checks = Array.from({ length: 600 }, () => {
    const res = r.pick(resources);
    const tenant = r.pick([undefined, ...TENANTS]);
    const c: ScenarioCheck = {
      userId: r.pick(USERS),
      resource: res.resource,
      resourceId: r.pick(INSTANCES),
      action: r.pick(res.actions),
      ...(tenant ? { tenantId: tenant } : {}),
    };
    return { ...c, allowed: allowed(c) };
  });

  const scenario: Scenario = {
    name: `random world ${seed}`,
    catalog: {
      resources: resources.map((x) => ({ resource: x.resource, description: "", actions: x.actions, relations: x.custom })),
    },
    policies,
    roles,
    assignments,
    grants,
    checks,
    invalid: [],
  };
  return { scenario, checks };
}

const SEEDS = [1, 2, 3, 4, 5, 6, 7, 8];

describe.each(engines)("check against an independent model on %s", (engine) => {
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

  it.each(SEEDS)("random world, seed %i", async (seed) => {
    const { scenario, checks } = randomWorld(seed);
    const key = await applyScenario(service.call, `model-${seed}`, scenario);
    const batch = await service.call("POST", "/api/v1/authorization/check/batch", {
      key,
      body: { checks: checks.map(({ allowed: _, ...c }) => c) },
    });
    expect(batch.status).toBe(200);
    const got = batch.body.results.map((x: { allowed: boolean }) => x.allowed);
    const mismatches = checks.filter((c, i) => got[i] !== c.allowed).slice(0, 5);
    expect(mismatches, `seed ${seed}: first mismatches`).toEqual([]);
    // Some of them one by one over gRPC too: the single path must agree with the batch path.
    for (const c of checks.slice(0, 40)) {
      const { allowed, ...question } = c;
      const answer = await grpc.call("CheckService", "Check", question, key);
      expect(answer.allowed, JSON.stringify(c)).toBe(allowed);
    }
    // Both answers occur, or the comparison proves little.
    expect(new Set(got).size).toBe(2);
  });
});
