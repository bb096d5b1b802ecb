/**
 * The models group's data set (docs/performance.md, "Models as files"): an
 * application of its own, `bench-models`, whose
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
 * The measurement is in groups/models.ts.
 */
import { random } from "./random.js";
import { RESOURCES as BENCH_RESOURCES } from "./dataset.js";
import { chunks } from "./hierarchy.js";

export const MODELS_APP_ID = "bench-models";
export const MODEL_USERS = 10_000;
/** The size; `--model-grants N` shrinks it while developing. */
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
