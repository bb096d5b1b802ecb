/**
 * The check compared with an independent model of the same rules, written
 * here from the contract alone, on random data: random catalogs (with
 * custom relations, some redefining built-ins), policies (some of a tenant),
 * roles, assignments and grants, then thousands of random checks. For every
 * question asked, the other answers are compared with the model too:
 * explain (allowed, and every reason), permissions on the instance, and
 * lookup (allInstances and every instance, paged).
 *
 * Every world also holds expiring grants: some of its grants expire a day
 * from now (they count), and other grants, absent from the model, expired a
 * second ago and wait for a sweep that never comes (they count nowhere).
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

/** What the model says for one question, beyond allowed. */
interface Expected {
  allowed: boolean;
  /** Explain's reasons, as [relation] or [roleName, policyName], in the contract's order. */
  reasons: string[][];
  /** Explain's considered relations and roles (by name). */
  consideredRelations: { relation: string; actions: string[] }[];
  consideredRoles: string[];
}

interface World {
  scenario: Scenario;
  checks: (ScenarioCheck & { allowed: boolean })[];
  explain: (c: ScenarioCheck) => Expected;
  /** The actions allowed on the instance, in catalog order. */
  permissions: (c: Omit<ScenarioCheck, "action">) => string[];
  lookup: (q: { userId: string; resource: string; action: string; tenantId?: string }) => { allInstances: boolean; resourceIds: string[] };
  /** Grants of the model that carry an expiry a day ahead. */
  expiring: Scenario["grants"];
  /** Grants stored with an expiry already passed: not in the model. */
  expired: Scenario["grants"];
}

function randomWorld(seed: number): World {
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
  const expiring = grants.filter((_, i) => i % 3 === 0);
  const expired: Scenario["grants"] = [];
  for (let i = 0; i < 20; i++) {
    const res = r.pick(resources);
    const g = { userId: r.pick(USERS), resource: res.resource, resourceId: r.pick(INSTANCES), relation: r.pick([...BUILT_IN, ...res.custom.map((c) => c.name)]) };
    const key = JSON.stringify(g);
    if (!seen.has(key)) expired.push(g);
    seen.add(key);
  }

  const allowed = (c: ScenarioCheck): boolean => {
    const res = resources.find((x) => x.resource === c.resource)!;
    const byGrant = grants.some(
      (g) => g.userId === c.userId && g.resource === c.resource && g.resourceId === c.resourceId && implied(res, g.relation).includes(c.action),
    );
    return byGrant || byRole(c);
  };
  /** The user's roles that apply: application-wide, or of the question's tenant. */
  const rolesInScope = (c: { userId: string; tenantId?: string }) =>
    assignments
      .filter((a) => a.userId === c.userId)
      .map((a) => roles.find((x) => x.ref === a.role)!)
      .filter((role) => role.tenantId === undefined || role.tenantId === c.tenantId);
  const byRole = (c: { userId: string; resource: string; action: string; tenantId?: string }) =>
    rolesInScope(c).some((role) => role.policies.some((ref) => policies.find((p) => p.ref === ref)!.permissions.includes(`${c.resource}:${c.action}`)));
  const byName = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

  const explain = (c: ScenarioCheck): Expected => {
    const res = resources.find((x) => x.resource === c.resource)!;
    const held = grants.filter((g) => g.userId === c.userId && g.resource === c.resource && g.resourceId === c.resourceId);
    const relationReasons = held.filter((g) => implied(res, g.relation).includes(c.action)).map((g) => [g.relation]).sort((a, b) => byName(a[0]!, b[0]!));
    const inScope = rolesInScope(c).sort((a, b) => byName(a.name, b.name));
    const roleReasons = inScope.flatMap((role) =>
      role.policies
        .map((ref) => policies.find((p) => p.ref === ref)!)
        .filter((p) => p.permissions.includes(`${c.resource}:${c.action}`))
        .map((p) => p.name)
        .sort(byName)
        .map((policyName) => [role.name, policyName]),
    );
    return {
      allowed: allowed(c),
      reasons: [...relationReasons, ...roleReasons],
      consideredRelations: held.map((g) => ({ relation: g.relation, actions: implied(res, g.relation) })).sort((a, b) => byName(a.relation, b.relation)),
      consideredRoles: inScope.map((r) => r.name),
    };
  };
  const permissionsOf = (c: Omit<ScenarioCheck, "action">) =>
    resources.find((x) => x.resource === c.resource)!.actions.filter((action) => allowed({ ...c, action }));
  const lookup = (q: { userId: string; resource: string; action: string; tenantId?: string }) => {
    const res = resources.find((x) => x.resource === q.resource)!;
    const ids = grants
      .filter((g) => g.userId === q.userId && g.resource === q.resource && implied(res, g.relation).includes(q.action))
      .map((g) => g.resourceId);
    return { allInstances: byRole(q), resourceIds: [...new Set(ids)].sort(byName) };
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
  return { scenario, checks, explain, permissions: permissionsOf, lookup, expiring, expired };
}

/**
 * Gives the world's expiring grants an expiry a day ahead (a rewrite: each
 * is `written`), and stores its expired grants, expired a second ago. No call
 * writes an expiry in the past, so those are written a day ahead and moved
 * back in the table, as time would.
 */
async function applyExpiries(service: TestService, db: TestDatabase["db"], appId: string, key: string, world: World): Promise<void> {
  const tomorrow = new Date(Date.now() + 86_400_000).toISOString();
  const writes = [...world.expiring, ...world.expired].map((g) => ({ ...g, expiresAt: tomorrow }));
  const res = await service.call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes } });
  expect(res.body).toEqual({ written: writes.length, unchanged: 0, deleted: 0 });
  const moved = await db.query(
    `UPDATE relationships g SET expires_at = now() - interval '1 second'
     FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) AS t(u, r, i, rel)
     WHERE g.app_id = $1 AND g.user_id = t.u AND g.resource = t.r AND g.resource_id = t.i AND g.relation = t.rel
     RETURNING 1`,
    [appId, world.expired.map((g) => g.userId), world.expired.map((g) => g.resource), world.expired.map((g) => g.resourceId), world.expired.map((g) => g.relation)],
  );
  expect(moved.rows).toHaveLength(world.expired.length);
}

/** Runs `f` over `items`, `width` at a time. */
async function inParallel<T, R>(items: readonly T[], width: number, f: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = [];
  for (let i = 0; i < items.length; i += width) out.push(...(await Promise.all(items.slice(i, i + width).map(f))));
  return out;
}

const distinct = <T>(items: T[]): T[] => [...new Map(items.map((x) => [JSON.stringify(x), x])).values()];

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
    const world = randomWorld(seed);
    const { scenario, checks } = world;
    const key = await applyScenario(service.call, `model-${seed}`, scenario);
    await applyExpiries(service, database.db, `model-${seed}`, key, world);
    const batch = await service.call("POST", "/api/v1/authorization/check/batch", {
      key,
      body: { checks: checks.map(({ allowed: _, ...c }) => c) },
    });
    expect(batch.status).toBe(200);
    const got = batch.body.results.map((x: { allowed: boolean }) => x.allowed);
    const mismatches = checks.filter((c, i) => got[i] !== c.allowed).slice(0, 5);
    expect(mismatches, `seed ${seed}: first mismatches`).toEqual([]);
    // Some of them one by one over gRPC too, all at once: the single path must agree with the batch path.
    await Promise.all(
      checks.slice(0, 40).map(async (c) => {
        const { allowed, ...question } = c;
        const answer = await grpc.call("CheckService", "Check", question, key);
        expect(answer.allowed, JSON.stringify(c)).toBe(allowed);
      }),
    );
    // Both answers occur, or the comparison proves little.
    expect(new Set(got).size).toBe(2);
  });

  it.each(SEEDS)("explain, permissions and lookup agree with the model and the check, seed %i", async (seed) => {
    const world = randomWorld(seed);
    const key = await applyScenario(service.call, `questions-${seed}`, world.scenario);
    await applyExpiries(service, database.db, `questions-${seed}`, key, world);
    const questions = distinct(world.checks.map(({ allowed: _, ...c }) => c));

    // Explain: every question, its allowed and every reason.
    const explained = await inParallel(questions, 25, async (c) => {
      const answer = await service.call("POST", "/api/v1/authorization/check/explain", { key, body: c });
      expect(answer.status, JSON.stringify(answer.body)).toBe(200);
      return answer.body;
    });
    const wrongExplain = questions
      .map((c, i) => {
        const want = world.explain(c);
        const got = explained[i];
        const gotReasons = got.reasons.map((r: { kind: string; relation?: string; roleName?: string; policyName?: string }) =>
          r.kind === "relation" ? [r.relation] : [r.roleName, r.policyName],
        );
        const have = {
          allowed: got.allowed,
          reasons: gotReasons,
          consideredRelations: got.considered.relations,
          consideredRoles: got.considered.roles.map((r: { roleName: string }) => r.roleName),
        };
        return JSON.stringify(have) === JSON.stringify(want) ? undefined : { question: c, want, have };
      })
      .filter((x) => x !== undefined)
      .slice(0, 3);
    expect(wrongExplain, `seed ${seed}: explain differs from the model`).toEqual([]);

    // Permissions: every instance asked about, in batches, and some one by one.
    const instances = distinct(questions.map(({ action: _, ...c }) => c));
    const batch = await service.call("POST", "/api/v1/authorization/permissions/batch", { key, body: { requests: instances } });
    expect(batch.status, JSON.stringify(batch.body)).toBe(200);
    const wrongPermissions = instances
      .map((c, i) => ({ c, want: world.permissions(c), got: batch.body.results[i].actions }))
      .filter((x) => JSON.stringify(x.want) !== JSON.stringify(x.got))
      .slice(0, 3);
    expect(wrongPermissions, `seed ${seed}: permissions differ from the model`).toEqual([]);
    await Promise.all(
      instances.slice(0, 20).map(async (c) => {
        const single = await grpc.call("CheckService", "Permissions", c, key);
        expect(single.actions, JSON.stringify(c)).toEqual(world.permissions(c));
      }),
    );

    // Lookup: every (user, resource, action, tenant) asked about, paged two at a time.
    const lookups = distinct(questions.map(({ resourceId: _, ...q }) => q));
    const wrongLookups = (
      await inParallel(lookups, 25, async (q) => {
        const ids: string[] = [];
        let pageToken = "";
        let allInstances: boolean | undefined;
        for (let pages = 0; pages < 10; pages++) {
          const answer = await service.call("POST", "/api/v1/authorization/lookup", { key, body: { ...q, pageSize: 2, pageToken } });
          expect(answer.status, JSON.stringify(answer.body)).toBe(200);
          allInstances ??= answer.body.allInstances;
          expect(answer.body.allInstances).toBe(allInstances);
          ids.push(...answer.body.resourceIds);
          pageToken = answer.body.nextPageToken;
          if (pageToken === "") break;
        }
        const want = world.lookup(q);
        const got = { allInstances, resourceIds: ids };
        return JSON.stringify(got) === JSON.stringify(want) ? undefined : { q, want, got };
      })
    )
      .filter((x) => x !== undefined)
      .slice(0, 3);
    expect(wrongLookups, `seed ${seed}: lookup differs from the model`).toEqual([]);

    // And all of them against the check itself, on the same state.
    const checked = await service.call("POST", "/api/v1/authorization/check/batch", { key, body: { checks: questions } });
    questions.forEach((c, i) => {
      const allowed = checked.body.results[i].allowed;
      expect(explained[i].allowed, JSON.stringify(c)).toBe(allowed);
      const at = instances.findIndex((x) => JSON.stringify(x) === JSON.stringify((({ action: _, ...rest }) => rest)(c)));
      expect(batch.body.results[at].actions.includes(c.action), JSON.stringify(c)).toBe(allowed);
      const l = world.lookup(c);
      expect(l.allInstances || l.resourceIds.includes(c.resourceId), JSON.stringify(c)).toBe(allowed);
    });
    // Reasons of both kinds occur, or the comparison proves little.
    const kinds = new Set(explained.flatMap((e) => e.reasons.map((r: { kind: string }) => r.kind)));
    expect([...kinds].sort()).toEqual(["relation", "role"]);
  });
});
