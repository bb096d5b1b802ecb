/**
 * The models group (issue 27, "models as files"; docs/performance.md,
 * "Models as files"): an application of its own, `bench-models`, whose
 * whole model is one document, planned and applied through the public REST
 * API while checks run against it, and `portcullis model test` of a file of
 * 200 assertions from a cold start.
 *
 * The data set: a catalog of 20 resources, 200 policies and 50 roles (the
 * model, applied with PUT .../model), 10,000 users each holding one or two
 * roles (role assignments through the roles route), and 1,000,000 grants
 * (bulk writes of 5,000, as the bench loads every grant). Two models, A and
 * B, differ as a real review would: ten policies' permissions changed, four
 * roles' policy lists changed, a policy added (and attached) and one
 * removed. Applying them in turn makes every apply a real change, with
 * users gaining and losing permissions both ways.
 *
 * The measurement is here too; what it needs of the harness (the API, the
 * load generator, the progress line) comes in as a ModelsHarness, since
 * bench/run.ts runs its main when imported.
 */
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { random } from "./random.js";
import { RESOURCES as BENCH_RESOURCES } from "./dataset.js";
import { chunks } from "./hierarchy.js";
import type { LoadResult } from "./load.js";

export const MODELS_APP_ID = "bench-models";
export const MODEL_USERS = 10_000;
/** The issue's size; `--model-grants N` shrinks it while developing. */
export const MODEL_GRANTS = 1_000_000;
const POLICIES = 200;
const ROLES = 50;

// The bench catalog's ten, and ten more.
const RESOURCES: { resource: string; actions: string[] }[] = [
  ...BENCH_RESOURCES,
  { resource: "ticket", actions: ["create", "read", "update", "close", "assign", "comment"] },
  { resource: "release", actions: ["create", "read", "approve", "deploy"] },
  { resource: "repository", actions: ["read", "write", "admin", "fork"] },
  { resource: "pipeline", actions: ["read", "run", "cancel", "update"] },
  { resource: "secret", actions: ["read", "write", "rotate"] },
  { resource: "calendar", actions: ["read", "update", "share"] },
  { resource: "contract", actions: ["create", "read", "update", "sign", "approve"] },
  { resource: "customer", actions: ["create", "read", "update", "delete", "export"] },
  { resource: "payment", actions: ["read", "refund", "approve"] },
  { resource: "space", actions: ["create", "read", "update", "delete", "invite"] },
];
const RELATIONS = ["owner", "editor", "viewer", "commenter"] as const;
/** The built-in relations' actions where the resource has them (src/domain/catalog-rules.ts); owner: all. */
const IMPLIED: Record<(typeof RELATIONS)[number], readonly string[] | "all"> = {
  owner: "all",
  editor: ["create", "read", "update"],
  viewer: ["read", "list"],
  commenter: ["read", "comment"],
};

const PERMISSIONS = RESOURCES.flatMap((r) => r.actions.map((a) => `${r.resource}:${a}`));

// ---------------------------------------------------------------- the two models

export interface ModelPolicy {
  name: string;
  description: string;
  permissions: string[];
}

export interface ModelRole {
  name: string;
  description: string;
  policies: string[];
}

/** The body of PUT and plan: the document without its version. */
export interface ModelDocument {
  catalog: { resource: string; description: string; actions: string[] }[];
  policies: ModelPolicy[];
  roles: ModelRole[];
}

const pad = (n: number, width: number) => String(n).padStart(width, "0");
const policyName = (i: number) => `policy-${pad(i, 3)}`;
const roleName = (i: number) => `role-${pad(i, 2)}`;

/** Model A: 200 policies of 2 to 6 permissions, 50 roles of 4 to 8 policies. */
export function modelA(): ModelDocument {
  const r = random(27_01);
  const policies = Array.from({ length: POLICIES }, (_, i) => ({
    name: policyName(i),
    description: `policy ${i} (benchmark)`,
    permissions: r.sample(PERMISSIONS, 2 + r.int(5)),
  }));
  const roles = Array.from({ length: ROLES }, (_, i) => ({
    name: roleName(i),
    description: `role ${i} (benchmark)`,
    policies: r.sample([...Array(POLICIES).keys()], 4 + r.int(5)).map(policyName),
  }));
  return {
    catalog: RESOURCES.map((x) => ({ resource: x.resource, description: `${x.resource} (benchmark)`, actions: x.actions })),
    policies,
    roles,
  };
}

/** What B changes from A (the plan A → B is checked against it). */
export const MODEL_CHANGE = {
  policiesChanged: 10,
  rolesChanged: 4,
  policyAdded: "policy-new-release-managers",
};

/**
 * Model B: A with a review's worth of change. The policies changed and the
 * one removed are chosen among those A attaches to roles, so that each
 * change reaches users (a change to an unattached policy moves no one).
 * Same catalog: a resource dropped would strand the grants (apply refuses).
 */
export function modelB(): ModelDocument {
  const a = modelA();
  const r = random(27_02);
  const attached = new Map<string, number>();
  for (const role of a.roles) for (const p of role.policies) attached.set(p, (attached.get(p) ?? 0) + 1);
  const byName = [...attached.keys()].sort();
  // The policy removed: the first (by name) that A attaches to two roles or more.
  const removed = byName.find((p) => attached.get(p)! >= 2)!;
  const changed = new Set(r.sample(byName.filter((p) => p !== removed), MODEL_CHANGE.policiesChanged));
  const policies = a.policies
    .filter((p) => p.name !== removed)
    .map((p) => {
      if (!changed.has(p.name)) return p;
      // One permission taken away, two others given: users lose and gain.
      const kept = p.permissions.slice(1);
      const added = r.sample(PERMISSIONS.filter((x) => !p.permissions.includes(x)), 2);
      return { ...p, permissions: [...kept, ...added] };
    });
  policies.push({ name: MODEL_CHANGE.policyAdded, description: "release managers (added in B)", permissions: ["release:approve", "release:deploy", "pipeline:run"] });
  const rolesChanged = new Set(r.sample([...Array(ROLES).keys()], MODEL_CHANGE.rolesChanged).map(roleName));
  const roles = a.roles.map((role) => {
    let names = role.policies.filter((p) => p !== removed);
    if (rolesChanged.has(role.name)) {
      // The role's first policy dropped, another attached, and the new policy.
      names = [...names.slice(1), ...r.sample(policies.map((p) => p.name).filter((p) => !names.includes(p) && p !== MODEL_CHANGE.policyAdded), 1), MODEL_CHANGE.policyAdded];
    }
    return { ...role, policies: names };
  });
  return { catalog: a.catalog, policies, roles };
}

/** What each role holds in a model: the union of its policies' permissions. */
export function roleHoldings(model: ModelDocument): Map<string, Set<string>> {
  const policies = new Map(model.policies.map((p) => [p.name, p.permissions]));
  return new Map(model.roles.map((role) => [role.name, new Set(role.policies.flatMap((p) => policies.get(p) ?? []))]));
}

// ---------------------------------------------------------------- users, roles, grants

export const modelUser = (i: number) => `user-${pad(i, 5)}`;

/** The roles of user i: role i mod 50 for everyone, and a second one for every fourth user (12,500 assignments). */
export function rolesOfUser(i: number): string[] {
  const first = i % ROLES;
  const second = (i * 7 + 3) % ROLES;
  return i % 4 === 0 && second !== first ? [roleName(first), roleName(second)] : [roleName(first)];
}

export interface ModelGrant {
  userId: string;
  resource: string;
  resourceId: string;
  relation: string;
}

/** The i-th grant: deterministic, so the check bodies know which exist. About three users per instance. */
export function modelGrant(i: number): ModelGrant {
  const r = random(27_000_003 + i);
  const res = RESOURCES[i % RESOURCES.length]!;
  return {
    userId: modelUser(r.int(MODEL_USERS)),
    resource: res.resource,
    resourceId: `${res.resource}-${Math.floor(i / (RESOURCES.length * 3))}`,
    relation: RELATIONS[r.int(RELATIONS.length)]!,
  };
}

/** The first `count` grants in batches of 5,000 (the bulk endpoint's limit). */
export function grantBatches(count: number): Generator<ModelGrant[]> {
  return chunks(
    (function* () {
      for (let i = 0; i < count; i++) yield modelGrant(i);
    })(),
    5000,
  );
}

const actionsOf = (resource: string) => RESOURCES.find((r) => r.resource === resource)!.actions;
const impliedBy = (relation: string, resource: string) => {
  const implied = IMPLIED[relation as (typeof RELATIONS)[number]];
  return implied === "all" ? actionsOf(resource) : actionsOf(resource).filter((a) => implied.includes(a));
};

export interface CheckBody {
  userId: string;
  resource: string;
  resourceId: string;
  action: string;
}

/**
 * The checks driven while models are planned and applied: 40% allowed by a
 * grant, 30% by a role of model A, 30% denied in A (role-based answers flip
 * with each apply: that is the point, every check after an apply reads the
 * new model).
 */
export function modelChecks(grants: number, count: number): CheckBody[] {
  const r = random(27_07);
  const held = roleHoldings(modelA());
  const holds = (u: number, permission: string) => rolesOfUser(u).some((role) => held.get(role)!.has(permission));
  const out: CheckBody[] = [];
  while (out.length < count) {
    const kind = out.length % 10;
    if (kind < 4) {
      const g = modelGrant(r.int(grants));
      // Every resource has read, which every built-in relation implies: never an empty pick.
      out.push({ userId: g.userId, resource: g.resource, resourceId: g.resourceId, action: r.pick(impliedBy(g.relation, g.resource)) });
      continue;
    }
    const u = r.int(MODEL_USERS);
    const permission = r.pick(PERMISSIONS);
    if (holds(u, permission) !== kind < 7) continue;
    const [resource, action] = permission.split(":") as [string, string];
    out.push({ userId: modelUser(u), resource, resourceId: `ungranted-${r.int(1_000_000)}`, action });
  }
  return out;
}

/**
 * A permission some user holds in A and not in B, and one held in B and not
 * in A: checked before and after an apply, to see that the apply took
 * (a figure of applies that changed nothing would measure nothing).
 */
export function flippingChecks(): { lostInB: CheckBody; gainedInB: CheckBody } {
  const a = roleHoldings(modelA());
  const b = roleHoldings(modelB());
  const holdsIn = (held: Map<string, Set<string>>, u: number, p: string) => rolesOfUser(u).some((role) => held.get(role)?.has(p) === true);
  let lostInB: CheckBody | undefined;
  let gainedInB: CheckBody | undefined;
  for (let u = 0; u < MODEL_USERS && (lostInB === undefined || gainedInB === undefined); u++) {
    for (const p of PERMISSIONS) {
      const [resource, action] = p.split(":") as [string, string];
      const body = { userId: modelUser(u), resource, resourceId: "flip-1", action };
      if (lostInB === undefined && holdsIn(a, u, p) && !holdsIn(b, u, p)) lostInB = body;
      if (gainedInB === undefined && !holdsIn(a, u, p) && holdsIn(b, u, p)) gainedInB = body;
    }
  }
  if (lostInB === undefined || gainedInB === undefined) throw new Error("models: A and B differ for no user");
  return { lostInB, gainedInB };
}

// ---------------------------------------------------------------- the model test file

export const TEST_ASSERTIONS = 200;

/**
 * A test file for `portcullis model test` (docs/models.md, "Testing a
 * model"): model A whole, a small world of 40 users, 300 grants and their
 * role assignments, and 200 assertions (check, lookup and who can in turn),
 * each expected as an independent reading of the rules decides: a role's
 * policies' permissions on every instance, a grant's relation's actions on
 * its instance. About half are asked where a grant is, so both answers come.
 */
export function modelTestFile(): { model: ModelDocument; grants: ModelGrant[]; assignments: { role: string; userId: string }[]; assertions: Record<string, unknown>[] } {
  const r = random(27_27);
  const model = modelA();
  const held = roleHoldings(model);
  const users = Array.from({ length: 40 }, (_, i) => modelUser(i));
  const seen = new Set<string>();
  const grants: ModelGrant[] = [];
  while (grants.length < 300) {
    const res = r.pick(RESOURCES);
    const g = { userId: r.pick(users), resource: res.resource, resourceId: `${res.resource}-${r.int(8)}`, relation: r.pick(RELATIONS) };
    const id = `${g.userId} ${g.resource} ${g.resourceId}`;
    if (seen.has(id)) continue; // one relation per user and instance: the expectations stay easy to read
    seen.add(id);
    grants.push(g);
  }
  const assignments = users.flatMap((userId, i) => rolesOfUser(i).map((role) => ({ role, userId })));
  const allowed = (userId: string, resource: string, resourceId: string, action: string) =>
    assignments.some((a) => a.userId === userId && held.get(a.role)!.has(`${resource}:${action}`)) ||
    grants.some((g) => g.userId === userId && g.resource === resource && g.resourceId === resourceId && impliedBy(g.relation, resource).includes(action));
  const kinds = ["check", "lookup", "whoCan"] as const;
  const assertions = Array.from({ length: TEST_ASSERTIONS }, (_, i) => {
    const body =
      i % 2 === 0
        ? (() => {
            const g = r.pick(grants);
            return { userId: g.userId, resource: g.resource, resourceId: g.resourceId, action: r.pick(actionsOf(g.resource)) };
          })()
        : (() => {
            const res = r.pick(RESOURCES);
            return { userId: r.pick(users), resource: res.resource, resourceId: `${res.resource}-${r.int(8)}`, action: r.pick(res.actions) };
          })();
    const expect = allowed(body.userId, body.resource, body.resourceId, body.action) ? "allowed" : "denied";
    return { name: `assertion ${i}`, [kinds[i % 3]!]: body, expect };
  });
  return { model, grants, assignments, assertions };
}

// ---------------------------------------------------------------- measuring

/** A load run's result with the service's CPU per request (bench/run.ts's Measured). */
export type Measured = LoadResult & { serverCpuUs: number | undefined };

export interface EventLoopDelay {
  p99Ms: number;
  maxMs: number;
}

/** What the group needs of the harness in bench/run.ts. */
export interface ModelsHarness {
  url: string;
  adminKey: string;
  api: (method: string, path: string, body: unknown, key: string) => Promise<any>;
  /** The load generator (bench/load.ts) on REST checks, `connections` in flight for `seconds`. */
  load: (bodies: unknown[], key: string, seconds: number, connections: number) => Promise<Measured>;
  progress: (text: string) => void;
  say: (text: string) => void;
  /** CPU µs used so far by the service's process and by the Postgres server (undefined where not measurable: PGlite, another machine). */
  cpu: () => { service: number | undefined; postgres: number | undefined };
  /**
   * The service's event-loop delay since the last call, p99 and longest, in
   * ms (its /metrics: prom-client resets the histogram at each read);
   * undefined when metrics are off. A check that arrives while the loop runs
   * a plan's or an apply's JavaScript waits for it.
   */
  eventLoopDelay: () => Promise<EventLoopDelay | undefined>;
  /** The repository (bin/portcullis.mjs is under it) and a temporary folder. */
  root: string;
  tmp: string;
  seconds: number;
  grants: number;
  connections: number;
  /** Plan and apply cycles while the checks run (each: two plans, then an apply), at least. */
  cycles: number;
  testRuns: number;
}

export interface PlanSummary {
  policies: { created: number; changed: number; removed: number };
  roles: { changed: number };
  /** Permissions in the impact, and the most users gaining or losing one. */
  permissions: number;
  gaining: number;
  losing: number;
}

export interface ModelFigures {
  grants: number;
  assignments: number;
  users: number;
  /** Seconds: the first apply (empty → A), the role assignments, the grants. */
  firstApplySeconds: number;
  assignSeconds: number;
  grantSeconds: number;
  /**
   * Plans and applies one at a time with no checks running (two cycles):
   * their times, and the CPU each took, in ms, of the service and of
   * Postgres (the whole server), mean per call.
   */
  quiet: {
    plans: number[];
    applies: number[];
    planCpu: { service: number | undefined; postgres: number | undefined };
    applyCpu: { service: number | undefined; postgres: number | undefined };
  };
  /** The service's event-loop delay while the checks ran alone, and while plans and applies ran beside them. */
  eventLoopAlone: EventLoopDelay | undefined;
  eventLoopDuring: EventLoopDelay | undefined;
  /** Of the measured plans (made while the checks ran), in ms, in order. */
  plans: number[];
  /** Plans of a catalog edit that reaches grants (withCatalogEdit), one a cycle while the checks ran: ms, and what the impact said of document:list. */
  catalogPlans: { ms: number; losing: number; atLeast: boolean }[];
  /** Of the measured applies, in ms, in order, and which way each went. */
  applies: { ms: number; to: "A" | "B" }[];
  planAtoB: PlanSummary;
  planBtoA: PlanSummary;
  /** REST checks of the application, alone and while the plans and applies ran. */
  checksAlone: Measured;
  checksDuring: Measured;
  /** How long the plans and applies went on, and how long the checks ran. */
  opsSeconds: number;
  checksSeconds: number;
  /** Checks in flight, and the length of the run of checks alone. */
  connections: number;
  seconds: number;
  /** Each `model test` run's wall time (ms), its exit code and its last line. */
  testRuns: { ms: number; code: number | null; summary: string }[];
  testAssertions: number;
  testExpectedAllowed: number;
}

/** The median of a list of times (the mean of the middle two for an even count). */
export const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

interface PlanAnswer {
  version: string;
  policies: { created?: string[]; changed?: string[]; removed?: string[] };
  roles: { created?: string[]; changed?: string[]; removed?: string[] };
  impact?: { permission: string; gaining?: number; losing?: number; atLeast?: boolean }[];
}

/**
 * The model `doc` with a catalog edit that changes what grants imply: the
 * document's viewer redefined to imply read only (the built-in implies
 * read and list), so every holder of a document's viewer loses
 * document:list there, through grants alone (docs/models.md, "Plan").
 */
const withCatalogEdit = (doc: ModelDocument) => ({
  ...doc,
  catalog: doc.catalog.map((e) => (e.resource === "document" ? { ...e, relations: [{ name: "viewer", actions: ["read"] }] } : e)),
});

function summary(plan: PlanAnswer): PlanSummary {
  const impact = plan.impact ?? [];
  return {
    policies: { created: plan.policies.created?.length ?? 0, changed: plan.policies.changed?.length ?? 0, removed: plan.policies.removed?.length ?? 0 },
    roles: { changed: plan.roles.changed?.length ?? 0 },
    permissions: impact.length,
    gaining: Math.max(0, ...impact.map((p) => p.gaining ?? 0)),
    losing: Math.max(0, ...impact.map((p) => p.losing ?? 0)),
  };
}

/**
 * - Model A applied to a new application, its users assigned their roles,
 *   its grants loaded (each timed);
 * - one plan and apply each way unmeasured (the statements' plans and the
 *   service's JIT warm), each answer verified: the plan names the changes B
 *   makes and users both gaining and losing, and a check flips with each
 *   apply;
 * - the REST check of the application alone, then again while plans and
 *   applies run back to back (each cycle: the next model planned twice,
 *   then applied with the plan's version as expectedVersion, A → B, B → A),
 *   the check run's length set from the warm cycle's so that the cycles
 *   cover it, and the cycles going on until the checks end;
 * - `portcullis model test` of a generated file of 200 assertions, as its
 *   own process (bin/portcullis.mjs, as npx runs it), a few times: every
 *   run must exit 0 (all hold).
 */
export async function measureModels(h: ModelsHarness): Promise<ModelFigures> {
  const base = `/api/v1/applications/${MODELS_APP_ID}`;
  const a = modelA();
  const b = modelB();
  const docs = { A: a, B: b } as const;

  await h.api("POST", "/api/v1/applications", { appId: MODELS_APP_ID }, h.adminKey);
  const { key } = (await h.api("POST", `${base}/api-keys`, { name: "bench" }, h.adminKey)) as { key: string };
  let t = performance.now();
  await h.api("PUT", `${base}/model`, a, key);
  const firstApplySeconds = (performance.now() - t) / 1000;

  const { roles } = (await h.api("GET", `${base}/roles?pageSize=1000`, undefined, key)) as { roles: { roleId: string; name: string }[] };
  const roleIds = new Map(roles.map((r) => [r.name, r.roleId]));
  const assignments = Array.from({ length: MODEL_USERS }, (_, u) => rolesOfUser(u).map((role) => ({ userId: modelUser(u), roleId: roleIds.get(role)! }))).flat();
  t = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < assignments.length) {
        const { userId, roleId } = assignments[next++]!;
        await h.api("POST", `${base}/roles/${roleId}/assignments`, { userId }, key);
        if (next % 500 === 0) h.progress(`loading: the models' role assignments ${next}/${assignments.length}`);
      }
    }),
  );
  const assignSeconds = (performance.now() - t) / 1000;
  h.say(`models: model A applied in ${firstApplySeconds.toFixed(1)} s, ${assignments.length.toLocaleString("en-US")} role assignments in ${assignSeconds.toFixed(1)} s`);

  t = performance.now();
  let loaded = 0;
  for (const writes of grantBatches(h.grants)) {
    await h.api("POST", "/api/v1/authorization/relationships/bulk", { writes }, key);
    loaded += writes.length;
    h.progress(`loading: the models' grants ${loaded.toLocaleString("en-US")}/${h.grants.toLocaleString("en-US")} (${((performance.now() - t) / 1000).toFixed(0)} s)`);
  }
  const grantSeconds = (performance.now() - t) / 1000;
  h.say(`models: ${h.grants.toLocaleString("en-US")} grants loaded in ${grantSeconds.toFixed(1)} s`);

  // One cycle each way, unmeasured but verified.
  let at: "A" | "B" = "A";
  const plan = async (to: "A" | "B") => {
    const t0 = performance.now();
    const answer = (await h.api("POST", `${base}/model/plan`, docs[to], key)) as PlanAnswer;
    return { ms: performance.now() - t0, answer };
  };
  const apply = async (to: "A" | "B", version: string) => {
    const t0 = performance.now();
    await h.api("PUT", `${base}/model`, { ...docs[to], expectedVersion: version }, key);
    const ms = performance.now() - t0;
    at = to;
    return ms;
  };
  const flip = flippingChecks();
  const allowed = async (body: CheckBody) => ((await h.api("POST", "/api/v1/authorization/check", body, key)) as { allowed?: boolean }).allowed === true;
  const expectFlip = async (model: "A" | "B") => {
    const lost = await allowed(flip.lostInB);
    const gained = await allowed(flip.gainedInB);
    if (lost !== (model === "A") || gained !== (model === "B")) throw new Error(`models: after applying ${model}, the checks that flip answered ${lost} / ${gained}`);
  };
  await expectFlip("A");
  const warmAtoB = await plan("B");
  const planAtoB = summary(warmAtoB.answer);
  const expected = MODEL_CHANGE;
  if (planAtoB.policies.created !== 1 || planAtoB.policies.removed !== 1 || planAtoB.policies.changed < expected.policiesChanged || planAtoB.roles.changed < expected.rolesChanged) {
    throw new Error(`models: the plan A → B does not name the change B makes: ${JSON.stringify(planAtoB)}`);
  }
  if (planAtoB.gaining === 0 || planAtoB.losing === 0) throw new Error(`models: the plan A → B moves no user both ways: ${JSON.stringify(planAtoB)}`);
  const warmApplyB = await apply("B", warmAtoB.answer.version);
  await expectFlip("B");
  const warmBtoA = await plan("A");
  const planBtoA = summary(warmBtoA.answer);
  const warmApplyA = await apply("A", warmBtoA.answer.version);
  await expectFlip("A");
  h.say(`models: warm cycle: plan ${warmAtoB.ms.toFixed(0)} / ${warmBtoA.ms.toFixed(0)} ms, apply ${warmApplyB.toFixed(0)} / ${warmApplyA.toFixed(0)} ms`);

  // Two cycles with nothing else running: each call's time and the CPU it
  // took, of the service (its event loop: what checks would wait behind) and
  // of Postgres. /proc counts in 10 ms ticks, so the CPU is a mean over calls.
  const quiet = { plans: [] as number[], applies: [] as number[] };
  const spent = { plan: { service: 0, postgres: 0 }, apply: { service: 0, postgres: 0 } };
  const measurable = h.cpu();
  const charge = (to: { service: number; postgres: number }, before: ReturnType<ModelsHarness["cpu"]>) => {
    const after = h.cpu();
    to.service += (after.service ?? 0) - (before.service ?? 0);
    to.postgres += (after.postgres ?? 0) - (before.postgres ?? 0);
  };
  for (let cycle = 0; cycle < 2; cycle++) {
    const to = at === "A" ? "B" : "A";
    let version = "";
    for (let k = 0; k < 2; k++) {
      const before = h.cpu();
      const p = await plan(to);
      charge(spent.plan, before);
      quiet.plans.push(p.ms);
      version = p.answer.version;
    }
    const before = h.cpu();
    quiet.applies.push(await apply(to, version));
    charge(spent.apply, before);
    h.progress(`running: models: plans and applies alone (${cycle + 1}/2)`);
  }
  const perCall = (total: number, calls: number, known: number | undefined) => (known === undefined ? undefined : total / calls / 1000);
  const quietFigures = {
    ...quiet,
    planCpu: { service: perCall(spent.plan.service, quiet.plans.length, measurable.service), postgres: perCall(spent.plan.postgres, quiet.plans.length, measurable.postgres) },
    applyCpu: { service: perCall(spent.apply.service, quiet.applies.length, measurable.service), postgres: perCall(spent.apply.postgres, quiet.applies.length, measurable.postgres) },
  };
  // Two plans and an apply, as the cycles below make them.
  const cycleMs = median(quiet.plans) * 2 + median(quiet.applies);

  const bodies = modelChecks(h.grants, 1000);
  h.progress(`running: models: REST check alone (warm-up)`);
  await h.load(bodies, key, Math.min(3, h.seconds), h.connections);

  h.progress(`running: models: REST check alone (${h.seconds} s, ${h.connections} in flight)`);
  await h.eventLoopDelay();
  const checksAlone = await h.load(bodies, key, h.seconds, h.connections);
  const eventLoopAlone = await h.eventLoopDelay();

  // The checks run at least as long as the cycles should take (estimated from the
  // warm one, with a margin for the load's share of the machine), and the cycles
  // go on until the checks end, so no check of the run is without a plan or apply beside it.
  const checksSeconds = Math.max(h.seconds, Math.ceil((h.cycles * cycleMs * 1.5) / 1000));
  h.progress(`running: models: REST check while plans and applies run (${checksSeconds} s, ${h.connections} in flight)`);
  let checksDone = false;
  const during = h.load(bodies, key, checksSeconds, h.connections).finally(() => {
    checksDone = true;
  });
  // Give the load generator's process its start before the first plan.
  await new Promise((resolve) => setTimeout(resolve, 300));
  const plans: number[] = [];
  const applies: { ms: number; to: "A" | "B" }[] = [];
  const tOps = performance.now();
  const catalogPlans: ModelFigures["catalogPlans"] = [];
  for (let cycle = 0; cycle < h.cycles || !checksDone; cycle++) {
    const to = at === "A" ? "B" : "A";
    const t0 = performance.now();
    const edited = (await h.api("POST", `${base}/model/plan`, withCatalogEdit(docs[at]), key)) as PlanAnswer;
    const list = edited.impact?.find((i) => i.permission === "document:list");
    catalogPlans.push({ ms: performance.now() - t0, losing: list?.losing ?? 0, atLeast: list?.atLeast === true });
    plans.push((await plan(to)).ms);
    const second = await plan(to);
    plans.push(second.ms);
    applies.push({ ms: await apply(to, second.answer.version), to });
    h.progress(`running: models: plans and applies while checks run (${applies.length} applies)`);
  }
  const opsSeconds = (performance.now() - tOps) / 1000;
  const checksDuring = await during;
  const eventLoopDuring = await h.eventLoopDelay();
  await expectFlip(at);

  // model test: a file of 200 assertions, each run its own process from a cold start.
  const testFile = modelTestFile();
  const file = join(h.tmp, "models.test.json");
  writeFileSync(file, JSON.stringify(testFile));
  const testRuns: ModelFigures["testRuns"] = [];
  for (let k = 0; k < h.testRuns; k++) {
    h.progress(`running: models: portcullis model test, ${TEST_ASSERTIONS} assertions (${k + 1}/${h.testRuns})`);
    testRuns.push(await modelTest(join(h.root, "bin", "portcullis.mjs"), file, h.root));
  }

  return {
    grants: h.grants,
    assignments: assignments.length,
    users: MODEL_USERS,
    firstApplySeconds,
    assignSeconds,
    grantSeconds,
    plans,
    catalogPlans,
    applies,
    planAtoB,
    planBtoA,
    quiet: quietFigures,
    eventLoopAlone,
    eventLoopDuring,
    checksAlone,
    checksDuring,
    opsSeconds,
    checksSeconds,
    connections: h.connections,
    seconds: h.seconds,
    testRuns,
    testAssertions: TEST_ASSERTIONS,
    testExpectedAllowed: testFile.assertions.filter((x) => x.expect === "allowed").length,
  };
}

/** `node bin/portcullis.mjs model test FILE` as a user runs it: wall time from spawn to exit. */
async function modelTest(bin: string, file: string, cwd: string): Promise<{ ms: number; code: number | null; summary: string }> {
  const t = performance.now();
  const child = spawn(process.execPath, [bin, "model", "test", file], { cwd, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.on("data", (c: Buffer) => (out += c.toString()));
  child.stderr.on("data", (c: Buffer) => (out += c.toString()));
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  const ms = performance.now() - t;
  const lines = out.trim().split("\n");
  return { ms, code, summary: code === 0 ? lines[lines.length - 1]! : out.slice(-1500) };
}

/** The group's report: the figures, then the issue's targets, each met or not. */
export function modelLines(m: ModelFigures, engine: string): string[] {
  const ms = (x: number) => x.toFixed(0);
  const p = (x: number) => x.toFixed(2);
  const met = (ok: boolean) => (ok ? "met" : "**not met**");
  const cpuMs = (x: number | undefined) => (x === undefined ? "n/a" : `${x.toFixed(1)} ms`);
  const delay = (d: EventLoopDelay | undefined) => (d === undefined ? "n/a" : `${d.p99Ms.toFixed(1)} / ${d.maxMs.toFixed(1)} ms`);
  const plansSorted = [...m.plans].sort((x, y) => x - y);
  const planP50 = median(m.plans);
  const planMax = plansSorted[plansSorted.length - 1]!;
  const applyMs = m.applies.map((x) => x.ms);
  const applyMax = Math.max(...applyMs);
  const testMax = Math.max(...m.testRuns.map((r) => r.ms));
  const testsHeld = m.testRuns.every((r) => r.code === 0);
  const change = (s: PlanSummary) =>
    `policies ${s.policies.created} created, ${s.policies.changed} changed, ${s.policies.removed} removed; ${s.roles.changed} roles changed; ${s.permissions} permissions moved, up to ${s.gaining.toLocaleString("en-US")} users gaining and ${s.losing.toLocaleString("en-US")} losing one`;
  const checks = (name: string, r: Measured) =>
    `| REST check of the application, ${name} | ${Math.round(r.rps).toLocaleString("en-US")} req/s${r.errors > 0 ? ` (${r.errors} failed)` : ""} | ${p(r.p50)} | ${p(r.p99)} |`;
  return [
    "",
    `| models as files (${engine}): ${m.grants.toLocaleString("en-US")} grants, ${m.users.toLocaleString("en-US")} users, 20 resources, 200 policies, 50 roles | figure | p50 ms | p99 ms |`,
    "|---|---:|---:|---:|",
    `| loading: model A applied to an empty application | ${m.firstApplySeconds.toFixed(1)} s | | |`,
    `| loading: ${m.assignments.toLocaleString("en-US")} role assignments, 32 calls in flight | ${m.assignSeconds.toFixed(1)} s | | |`,
    `| loading: ${m.grants.toLocaleString("en-US")} grants, bulk writes of 5,000 one at a time | ${m.grantSeconds.toFixed(1)} s (${Math.round(m.grants / m.grantSeconds).toLocaleString("en-US")} grants/s) | | |`,
    `| plan A → B: ${change(m.planAtoB)} | | | |`,
    `| plan B → A: ${change(m.planBtoA)} | | | |`,
    `| plans while the checks ran (${m.plans.length}): ${m.plans.map(ms).join(", ")} ms | max ${ms(planMax)} ms | ${ms(planP50)} | |`,
    `| plans of a catalog edit reaching grants while the checks ran (${m.catalogPlans.length}; document.viewer implies read only: document:list lost by at least ${Math.min(...m.catalogPlans.map((c) => c.losing))} users, atLeast ${m.catalogPlans.every((c) => c.atLeast)}): ${m.catalogPlans.map((c) => ms(c.ms)).join(", ")} ms | max ${ms(Math.max(...m.catalogPlans.map((c) => c.ms)))} ms | ${ms(median(m.catalogPlans.map((c) => c.ms)))} | |`,
    `| applies while the checks ran (${m.applies.length}, alternated): ${m.applies.map((x) => `→${x.to} ${ms(x.ms)}`).join(", ")} ms | max ${ms(applyMax)} ms | ${ms(median(applyMs))} | |`,
    `| plans alone, one at a time (${m.quiet.plans.length}): ${m.quiet.plans.map(ms).join(", ")} ms; CPU per plan: service ${cpuMs(m.quiet.planCpu.service)}, Postgres ${cpuMs(m.quiet.planCpu.postgres)} | max ${ms(Math.max(...m.quiet.plans))} ms | ${ms(median(m.quiet.plans))} | |`,
    `| applies alone, one at a time (${m.quiet.applies.length}): ${m.quiet.applies.map(ms).join(", ")} ms; CPU per apply: service ${cpuMs(m.quiet.applyCpu.service)}, Postgres ${cpuMs(m.quiet.applyCpu.postgres)} | max ${ms(Math.max(...m.quiet.applies))} ms | ${ms(median(m.quiet.applies))} | |`,
    checks(`alone, ${m.connections} in flight (${m.seconds} s; the service's event-loop delay p99 / max ${delay(m.eventLoopAlone)})`, m.checksAlone),
    checks(`${m.connections} in flight, while plans and applies ran back to back (${m.checksSeconds} s of checks, ${m.opsSeconds.toFixed(1)} s of plans and applies; event-loop delay p99 / max ${delay(m.eventLoopDuring)})`, m.checksDuring),
    `| portcullis model test, ${m.testAssertions} assertions (${m.testExpectedAllowed} expected allowed), cold start, ${m.testRuns.length} runs: ${m.testRuns.map((r) => `${ms(r.ms)} ms (exit ${r.code})`).join(", ")} | max ${ms(testMax)} ms | ${ms(median(m.testRuns.map((r) => r.ms)))} | |`,
    "",
    "| models as files: the targets | figure | target | |",
    "|---|---:|---|---|",
    `| plan, p50 of ${m.plans.length} (while checks ran) | ${ms(planP50)} ms | < 500 ms | ${met(planP50 < 500)} |`,
    `| plan of a catalog edit reaching grants, p50 of ${m.catalogPlans.length} (while checks ran) | ${ms(median(m.catalogPlans.map((c) => c.ms)))} ms | < 500 ms | ${met(median(m.catalogPlans.map((c) => c.ms)) < 500)} |`,
    `| apply, each of ${m.applies.length} (max; median ${ms(median(applyMs))} ms) | ${ms(applyMax)} ms | < 1 s | ${met(applyMax < 1000)} |`,
    `| checks' p99 while plans and applies ran (alone: ${p(m.checksAlone.p99)} ms) | ${p(m.checksDuring.p99)} ms | < 20 ms | ${met(m.checksDuring.p99 < 20 && m.checksDuring.errors === 0)} |`,
    `| portcullis model test, ${m.testAssertions} assertions, cold start (max of ${m.testRuns.length}) | ${ms(testMax)} ms | < 5 s | ${met(testMax < 5000)} |`,
    `| every model test run: all ${m.testAssertions} assertions hold (exit 0) | ${testsHeld ? "yes" : "NO"} | exit 0 | ${met(testsHeld)} |`,
    ...m.testRuns.filter((r) => r.code !== 0).map((r) => `| (a failed run's output) ${r.summary.replace(/\n/g, " ").replace(/\|/g, "/")} | | | |`),
  ];
}
