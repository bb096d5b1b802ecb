/**
 * A model plan's impact through grants (docs/models.md, "Plan"), through
 * the REST API on every engine.
 *
 * Three edits of the hierarchy catalog (a relation losing its inherits, a
 * relation gaining an action, a folder's viewer losing its inherits), each a table row:
 * the plan names who loses or gains what on which instance, and the apply
 * does exactly that.
 *
 * A differential test: random graph worlds (nested teams, a folder forest,
 * documents in folders, owners, allUsers grants, application-wide roles and
 * tenants' roles, assigned) and random model edits (a relation's actions,
 * inherits, subjects, a resource's actions, policies, roles, the tenants'
 * policies and roles); the plan's impact is compared with the answers of
 * every (user, scope, instance, action) before and after the apply, the
 * scopes no tenant and each tenant. The truth: a user gains resource:action
 * when some instance in some scope (one without any grant stands for the
 * roles' "in one scope") allows it after and not before; a pair (user,
 * instance) is listed when that happens and the user's grants give it (for
 * a loss: gave it), computed by an independent walk of the grants over each
 * catalog that shares no code with the service (and held equal to the
 * service's answers on both sides). Where a user holding nothing of their
 * own ("nobody") gains or loses the permission somewhere, allUsers grants
 * move it for every user, which no plan can count: its entry must be there
 * with atLeast, and every user it counts (and every pair it lists) must be
 * one the truth has.
 */
import { describe, expect, it } from "vitest";
import { engines } from "./support/engines.js";
import type { ImpactPair, PermissionImpact } from "../src/domain/grant-impact.js";
import { useService } from "./support/use-service.js";
import { createApp } from "./helpers/authz.js";
import { everyone, GRAPH_CATALOG, set, user, type AnyGrant, type EveryoneGrant } from "./support/graph.js";
import { renderPlan, type PlanAnswer } from "../src/cli/model.js";
import { random } from "../bench/random.js";

const HOPS = 16;

interface Relation {
  name: string;
  actions: string[];
  subjects?: string[];
  inherits?: { through: string; relation: string }[];
}
interface Entry {
  resource: string;
  description: string;
  actions: string[];
  relations: Relation[];
}
interface Doc {
  catalog: Entry[];
  policies: { name: string; description: string; permissions: string[]; tenantId?: string }[];
  roles: { name: string; description: string; policies: string[]; tenantId?: string }[];
}
type Grant = AnyGrant | EveryoneGrant;
type Pair = ImpactPair;
type Impact = PermissionImpact;

const clone = <T>(x: T): T => JSON.parse(JSON.stringify(x)) as T;
const byCodePoint = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));
const byPair = (x: Pair, y: Pair) => byCodePoint(x.userId, y.userId) || byCodePoint(x.resourceId, y.resourceId);

// ------------------------------------------------------------ the truth

/** The built-ins a catalog does not redefine, as API.md gives them: owner every action, the others theirs where the resource has them. */
const BUILT_INS: Record<string, string[] | "all"> = { owner: "all", editor: ["create", "read", "update"], viewer: ["read", "list"], commenter: ["read", "comment"] };

/** relation → actions, and relation → inherits, of each resource, built-ins included. */
function rulesOf(catalog: Entry[]) {
  const actions = new Map<string, string[]>();
  const inherits = new Map<string, { through: string; relation: string }[]>();
  for (const e of catalog) {
    for (const [name, implied] of Object.entries(BUILT_INS)) {
      actions.set(`${e.resource}#${name}`, implied === "all" ? e.actions : implied.filter((a) => e.actions.includes(a)));
    }
    for (const r of e.relations) {
      actions.set(`${e.resource}#${r.name}`, r.actions);
      inherits.set(`${e.resource}#${r.name}`, r.inherits ?? []);
    }
  }
  return { actions, inherits };
}

/** Whether the user holds the relation on the instance through their grants and allUsers': breadth first from the instance, at most 16 hops. */
function holdsRelation(catalog: ReturnType<typeof rulesOf>, grants: Grant[], userId: string, resource: string, id: string, relation: string): boolean {
  const seen = new Set([`${resource}:${id}#${relation}`]);
  let frontier: [string, string, string][] = [[resource, id, relation]];
  for (let depth = 0; frontier.length > 0 && depth <= HOPS; depth++) {
    const next: [string, string, string][] = [];
    const visit = (r: string, i: string, l: string) => {
      if (!seen.has(`${r}:${i}#${l}`)) {
        seen.add(`${r}:${i}#${l}`);
        next.push([r, i, l]);
      }
    };
    for (const [r, i, l] of frontier) {
      for (const g of grants) {
        if (g.resource !== r || g.resourceId !== i) continue;
        if ("allUsers" in g) {
          if (g.relation === l) return true;
          continue;
        }
        if (g.relation === l && g.userId === userId) return true;
        if (g.relation === l && g.subject?.relation !== undefined) visit(g.subject.resource, g.subject.resourceId, g.subject.relation);
        for (const rule of catalog.inherits.get(`${r}#${l}`) ?? []) {
          if (g.relation === rule.through && g.subject !== undefined && g.subject.relation === undefined) visit(g.subject.resource, g.subject.resourceId, rule.relation);
        }
      }
    }
    frontier = next;
  }
  return false;
}

/** Whether the user's grants give resource:action on the instance under the catalog. */
const grantsAllow = (catalog: ReturnType<typeof rulesOf>, grants: Grant[], u: string, resource: string, id: string, action: string) =>
  [...catalog.actions].some(([key, actions]) => key.startsWith(`${resource}#`) && actions.includes(action) && holdsRelation(catalog, grants, u, resource, id, key.slice(resource.length + 1)));

/** How a role is named: "name", or "tenant/name" for a tenant's. */
const roleName = (r: { name: string; tenantId?: string | undefined }) => (r.tenantId === undefined ? r.name : `${r.tenantId}/${r.name}`);

/** Whether the user's roles hold resource:action under the document in a check of the tenant (none: undefined): the application-wide roles and the tenant's. */
const rolesAllow = (doc: Doc, assigned: string[], permission: string, tenantId: string | undefined) =>
  doc.roles.some(
    (r) =>
      (r.tenantId === undefined || r.tenantId === tenantId) &&
      assigned.includes(roleName(r)) &&
      r.policies.some((p) => doc.policies.find((x) => x.name === p)!.permissions.includes(permission)),
  );

// ------------------------------------------------------------ worlds

const USERS = ["u0", "u1", "u2", "u3", "u4", "u5"];
const INSTANCES: Record<string, string[]> = { team: ["t0", "t1", "t2"], folder: ["f0", "f1", "f2", "f3"], document: ["d0", "d1", "d2", "d3", "d4"] };
/** An instance no grant names: what roles alone allow, "in one scope". */
const FRESH = "zz-none";
/** Checks without a tenant, and of each tenant. */
const SCOPES = [undefined, "acme", "globex"] as const;
/** A user with no grant and no role: what allUsers grants give every user. */
const NOBODY = "nobody";

/**
 * The hierarchy catalog with an approver on documents (the second edit
 * gives it an action) and owners; every user may be given a team's membership and a
 * folder's or a document's viewer at once (allUsers).
 */
const BASE: Entry[] = clone(GRAPH_CATALOG as Entry[]).map((e) => ({
  ...e,
  relations: [
    ...e.relations.map((r) => (r.name === "member" || r.name === "viewer" ? { ...r, subjects: [...r.subjects!, "user:*"] } : r)),
    ...(e.resource === "document" ? [{ name: "approver", actions: ["read"], subjects: ["user", "team#member"] }] : []),
  ],
}));

function makeWorld(seed: number) {
  const { next: r, pick } = random(seed);
  const grants: Grant[] = [];
  const key = new Set<string>();
  const add = (g: Grant) => {
    const k = JSON.stringify(g);
    if (!key.has(k)) grants.push(g), key.add(k);
  };
  for (const u of USERS) for (let n = 0; n < 2; n++) add(user(u, "team", pick(INSTANCES.team!), "member"));
  for (let n = 0; n < 2; n++) add(set(`team:${pick(INSTANCES.team!)}#member`, "team", pick(INSTANCES.team!), "member"));
  for (const f of INSTANCES.folder!.slice(1)) if (r() < 0.8) add(set(`folder:${pick(INSTANCES.folder!)}`, "folder", f, "parent"));
  for (const d of INSTANCES.document!) if (r() < 0.8) add(set(`folder:${pick(INSTANCES.folder!)}`, "document", d, "parent"));
  for (let n = 0; n < 14; n++) {
    const resource = pick(["folder", "document"] as const);
    const relation = pick(resource === "document" ? ["viewer", "editor", "approver"] : ["viewer", "editor"]);
    const id = pick(INSTANCES[resource]!);
    add(r() < 0.5 ? user(pick(USERS), resource, id, relation) : set(`team:${pick(INSTANCES.team!)}#member`, resource, id, relation));
  }
  add(user(pick(USERS), "document", pick(INSTANCES.document!), "owner"));
  // Every user's: a folder's viewer, a document's, a team's membership (in about half the worlds each).
  if (r() < 0.4) add(everyone("folder", pick(INSTANCES.folder!), "viewer"));
  if (r() < 0.4) add(everyone("document", pick(INSTANCES.document!), "viewer"));
  if (r() < 0.3) add(everyone("team", pick(INSTANCES.team!), "member"));
  const assignments = new Map(USERS.map((u) => [u, ROLE_NAMES.filter(() => r() < 0.3)]));
  return { grants, assignments, r, pick };
}

const PERMISSIONS = (catalog: Entry[]) => catalog.flatMap((e) => e.actions.map((a) => `${e.resource}:${a}`));

/** Model A: the base catalog, three policies (one acme's) and four roles, two application-wide, one of each tenant. */
const modelA = (): Doc => ({
  catalog: clone(BASE),
  policies: [
    { name: "p-read", description: "", permissions: ["document:read"] },
    { name: "p-update", description: "", permissions: ["folder:update"] },
    { name: "p-acme", description: "", permissions: ["document:update", "folder:list"], tenantId: "acme" },
  ],
  roles: [
    { name: "readers", description: "", policies: ["p-read"] },
    { name: "updaters", description: "", policies: ["p-update"] },
    { name: "readers", description: "", policies: ["p-acme", "p-read"], tenantId: "acme" },
    { name: "auditors", description: "", policies: ["p-update"], tenantId: "globex" },
  ],
});
const ROLE_NAMES = modelA().roles.map(roleName);

/** Model B: A with random edits of each kind the impact counts. */
function edit(a: Doc, r: () => number, pick: <T>(xs: readonly T[]) => T): Doc {
  const b = clone(a);
  const kinds = ["actions", "inherits", "subjects", "resource", "policies", "roles", "tenants"].filter(() => r() < 0.5);
  for (const kind of kinds.length === 0 ? ["inherits"] : kinds) {
    const entry = pick(b.catalog.filter((e) => e.resource !== "team"));
    const relation = pick(entry.relations.filter((x) => x.name !== "parent"));
    if (kind === "actions") relation.actions = entry.actions.filter(() => r() < 0.5);
    if (kind === "inherits") relation.inherits = pick([[], [{ through: "parent", relation: "viewer" }], [{ through: "parent", relation: "editor" }]]);
    if (kind === "subjects") relation.subjects = [...new Set([...(relation.subjects ?? ["user"]), "user:*"])];
    if (kind === "resource") entry.actions = r() < 0.5 ? [...entry.actions, "comment"] : entry.actions.filter((x) => x !== "update");
  }
  // Link relations imply nothing; actions a resource lost leave its relations.
  for (const e of b.catalog) for (const x of e.relations) x.actions = x.actions.filter((y) => e.actions.includes(y));
  const permissions = PERMISSIONS(b.catalog);
  if (kinds.includes("policies")) {
    b.policies.push({ name: "p-extra", description: "", permissions: permissions.filter(() => r() < 0.2) });
    b.policies[0]!.permissions = permissions.filter(() => r() < 0.15);
  }
  if (kinds.includes("roles")) {
    b.roles[1]!.policies = r() < 0.5 ? ["p-read"] : [];
    if (r() < 0.5) b.roles.shift();
  }
  if (kinds.includes("tenants")) {
    b.policies.find((p) => p.name === "p-acme")!.permissions = permissions.filter(() => r() < 0.2);
    b.roles.find((x) => roleName(x) === "acme/readers")!.policies = ["p-acme", "p-read", "p-update"].filter(() => r() < 0.5);
    if (r() < 0.3) b.roles = b.roles.filter((x) => roleName(x) !== "globex/auditors");
    else if (r() < 0.5) b.roles.find((x) => roleName(x) === "globex/auditors")!.policies = ["p-read"];
  }
  for (const p of b.policies) p.permissions = p.permissions.filter((x) => permissions.includes(x));
  b.roles = b.roles.map((x) => ({ ...x, policies: x.policies.filter((p) => b.policies.some((y) => y.name === p)) }));
  return b;
}

// ------------------------------------------------------------ the tests

describe.each(engines)("a plan's impact through grants on %s", (engine) => {
  const used = useService(engine);
  const { ok } = used;
  const model = (appId: string) => `/api/v1/applications/${appId}/model`;
  /** A world: the model applied, the grants written, the roles assigned by name; the application's key. */
  async function world(appId: string, doc: Doc, grants: Grant[], assignments = new Map<string, string[]>()) {
    const key = await createApp(used.service, appId, []);
    await ok("PUT", model(appId), doc);
    await ok("POST", "/api/v1/authorization/relationships/bulk", { writes: grants }, key);
    const roles = (await ok("GET", `/api/v1/applications/${appId}/roles?pageSize=100`, undefined)).roles as { roleId: string; name: string; tenantId?: string }[];
    for (const [u, names] of assignments) {
      for (const name of names) {
        const res = await used.service.call("POST", `/api/v1/applications/${appId}/roles/${roles.find((x) => roleName(x) === name)!.roleId}/assignments`, { body: { userId: u } });
        expect(res.status).toBe(201);
      }
    }
    return key;
  }

  const HIERARCHY: Doc = { catalog: clone(BASE), policies: [], roles: [] };
  const withRelation = (doc: Doc, resource: string, relation: string, change: (r: Relation) => void) => {
    const out = clone(doc);
    change(out.catalog.find((e) => e.resource === resource)!.relations.find((r) => r.name === relation)!);
    return out;
  };
  const alice = [user("alice", "team", "platform", "member"), set("team:platform#member", "folder", "runbooks", "viewer"), set("folder:runbooks", "document", "42", "parent")];
  const threeViewers = [
    user("ann", "folder", "f0", "viewer"),
    user("bob", "team", "ops", "member"),
    user("cat", "team", "ops", "member"),
    set("team:ops#member", "folder", "f0", "viewer"),
    set("folder:f0", "folder", "f1", "parent"),
    set("folder:f1", "document", "d1", "parent"),
    user("bob", "folder", "f1", "editor"),
  ];
  const none = { gaining: 0, gainingSample: [], gainingPairs: [], atLeast: false };
  const lost = (permission: string, pairs: [string, string][]) => ({
    permission,
    ...none,
    losing: new Set(pairs.map(([u]) => u)).size,
    losingSample: [...new Set(pairs.map(([u]) => u))],
    losingPairs: pairs.map(([userId, resourceId]) => ({ userId, resourceId })),
  });
  const CASES = [
    {
      name: "document.viewer inherits nothing: alice loses document:read on 42",
      grants: alice,
      to: withRelation(HIERARCHY, "document", "viewer", (r) => (r.inherits = [])),
      impact: [lost("document:read", [["alice", "42"]])],
      check: { userId: "alice", resource: "document", resourceId: "42", action: "read", before: true },
    },
    {
      name: "approver also gives update: bob gains document:update on 42",
      grants: [...alice, user("bob", "document", "42", "approver")],
      to: withRelation(HIERARCHY, "document", "approver", (r) => (r.actions = ["read", "update"])),
      impact: [{ permission: "document:update", gaining: 1, gainingSample: ["bob"], gainingPairs: [{ userId: "bob", resourceId: "42" }], losing: 0, losingSample: [], losingPairs: [], atLeast: false }],
      check: { userId: "bob", resource: "document", resourceId: "42", action: "update", before: false },
    },
    {
      name: "folder.viewer inherits nothing: f0's three viewers lose folder:list on f1, and folder:read and document:read on f1 and d1 but where bob edits",
      grants: threeViewers,
      to: withRelation(HIERARCHY, "folder", "viewer", (r) => (r.inherits = [])),
      impact: [
        lost("document:read", [["ann", "d1"], ["cat", "d1"]]),
        lost("folder:list", [["ann", "f1"], ["bob", "f1"], ["cat", "f1"]]),
        lost("folder:read", [["ann", "f1"], ["cat", "f1"]]),
      ],
      check: { userId: "ann", resource: "document", resourceId: "d1", action: "read", before: true },
    },
  ];

  it.each(CASES.map((c, n) => ({ ...c, n })))("$name", { timeout: 60_000 }, async ({ n, grants, to, impact, check }) => {
    const appId = `issue-${n}`;
    const key = await world(appId, HIERARCHY, grants);
    const { before, ...question } = check;
    expect((await ok("POST", "/api/v1/authorization/check", question, key)).allowed).toBe(before);
    const plan = (await ok("POST", `${model(appId)}/plan`, to)) as PlanAnswer & { impact: Impact[] };
    expect(plan.catalog).toEqual({ created: [], changed: [to === CASES[2]!.to ? "folder" : "document"], removed: [] });
    expect(plan.impact).toEqual(impact);
    const first = impact[0]!;
    const pair = first.gainingPairs[0] ?? first.losingPairs[0]!;
    const markdown = renderPlan(plan, "markdown", { add: String, remove: String, change: String } as never, "plan");
    expect(markdown).not.toContain("No user gains or loses a permission");
    expect(markdown).toContain(`${pair.userId} on ${pair.resourceId}`);
    const applied = await ok("PUT", model(appId), to);
    expect(applied.impact).toEqual(impact);
    expect((await ok("POST", "/api/v1/authorization/check", question, key)).allowed).toBe(!before);
  });

  const SEEDS = Array.from({ length: 20 }, (_, i) => 3901 + i);
  it.each(SEEDS)("world %i: the plan's impact is what checks of every (user, instance, action) see change", { timeout: 120_000 }, async (seed) => {
    const appId = `impact-${seed}`;
    const w = makeWorld(seed);
    const a = modelA();
    const key = await world(appId, a, w.grants, w.assignments);
    const b = edit(a, w.r, w.pick);
    // Every user in every scope, and nobody (no grant, no role: the same in every scope) in none.
    const questions = Object.entries(INSTANCES).flatMap(([resource, ids]) =>
      [...ids, FRESH].flatMap((resourceId) => [
        ...USERS.flatMap((userId) => SCOPES.map((tenantId) => ({ userId, resource, resourceId, ...(tenantId === undefined ? {} : { tenantId }) }))),
        { userId: NOBODY, resource, resourceId },
      ]),
    );
    const keyOf = (q: { userId: string; resource: string; resourceId: string; tenantId?: string }) => `${q.userId} ${q.tenantId ?? ""} ${q.resource} ${q.resourceId}`;
    const allowed = async () => {
      const res = (await ok("POST", "/api/v1/authorization/permissions/batch", { requests: questions }, key)).results as { actions: string[] }[];
      return new Map(questions.map((q, i) => [keyOf(q), new Set(res[i]!.actions)]));
    };
    const before = await allowed();
    const plan = (await ok("POST", `${model(appId)}/plan`, b)) as { impact: Impact[] };
    await ok("PUT", model(appId), b);
    const after = await allowed();

    // The truth: every (user, scope, instance, action) of either catalog, before and after.
    const [ra, rb] = [rulesOf(a.catalog), rulesOf(b.catalog)];
    const truth = new Map<string, { gaining: Set<string>; losing: Set<string>; gainingPairs: Map<string, Pair>; losingPairs: Map<string, Pair> }>();
    const entry = (permission: string) => {
      if (!truth.has(permission)) truth.set(permission, { gaining: new Set(), losing: new Set(), gainingPairs: new Map(), losingPairs: new Map() });
      return truth.get(permission)!;
    };
    /** The permissions nobody gains or loses somewhere: allUsers grants move them for every user. */
    const everyUsers = new Set<string>();
    for (const q of questions) {
      const assigned = w.assignments.get(q.userId) ?? [];
      const fresh = q.resourceId === FRESH;
      for (const action of new Set([...PERMISSIONS(a.catalog), ...PERMISSIONS(b.catalog)].filter((p) => p.startsWith(`${q.resource}:`)).map((p) => p.slice(q.resource.length + 1)))) {
        const permission = `${q.resource}:${action}`;
        const was = before.get(keyOf(q))!.has(action);
        const is = after.get(keyOf(q))!.has(action);
        // The independent walk agrees with the service on both sides.
        const grantsWere = !fresh && PERMISSIONS(a.catalog).includes(permission) && grantsAllow(ra, w.grants, q.userId, q.resource, q.resourceId, action);
        const grantsAre = !fresh && PERMISSIONS(b.catalog).includes(permission) && grantsAllow(rb, w.grants, q.userId, q.resource, q.resourceId, action);
        const at = `${q.userId} ${permission} on ${q.resourceId} in ${q.tenantId ?? "no tenant"}`;
        expect(was, `before: ${at}`).toBe(grantsWere || (PERMISSIONS(a.catalog).includes(permission) && rolesAllow(a, assigned, permission, q.tenantId)));
        expect(is, `after: ${at}`).toBe(grantsAre || (PERMISSIONS(b.catalog).includes(permission) && rolesAllow(b, assigned, permission, q.tenantId)));
        if (was === is) continue;
        if (q.userId === NOBODY) {
          everyUsers.add(permission);
          continue;
        }
        const e = entry(permission);
        (is ? e.gaining : e.losing).add(q.userId);
        const pair = { userId: q.userId, resourceId: q.resourceId };
        if (is && grantsAre) e.gainingPairs.set(`${pair.userId}\n${pair.resourceId}`, pair);
        if (was && grantsWere) e.losingPairs.set(`${pair.userId}\n${pair.resourceId}`, pair);
      }
    }
    const expected = [...truth]
      .filter(([permission]) => !everyUsers.has(permission))
      .map(([permission, e]): Impact => ({
        permission,
        gaining: e.gaining.size,
        losing: e.losing.size,
        gainingSample: [...e.gaining].sort(byCodePoint),
        losingSample: [...e.losing].sort(byCodePoint),
        gainingPairs: [...e.gainingPairs.values()].sort(byPair).slice(0, 20),
        losingPairs: [...e.losingPairs.values()].sort(byPair).slice(0, 20),
        atLeast: false,
      }))
      .sort((x, y) => byCodePoint(x.permission, y.permission));
    const described = JSON.stringify({ a: a.catalog, b: b.catalog, policies: [a.policies, b.policies], roles: [a.roles, b.roles], everyUsers: [...everyUsers] });
    expect(
      plan.impact.filter((i) => !everyUsers.has(i.permission)),
      described,
    ).toEqual(expected);
    // What allUsers grants move: listed, a lower bound, and nothing counted or paired that does not change.
    for (const permission of everyUsers) {
      const got = plan.impact.find((i) => i.permission === permission);
      expect(got, `${permission} moves for every user: ${described}`).toBeDefined();
      expect(got!.atLeast, permission).toBe(true);
      const e = truth.get(permission) ?? entry(permission);
      expect(got!.gaining, permission).toBe(got!.gainingSample.length);
      expect(got!.losing, permission).toBe(got!.losingSample.length);
      for (const u of got!.gainingSample) expect(e.gaining.has(u), `${u} counted as gaining ${permission}`).toBe(true);
      for (const u of got!.losingSample) expect(e.losing.has(u), `${u} counted as losing ${permission}`).toBe(true);
      for (const p of got!.gainingPairs) expect(e.gainingPairs.has(`${p.userId}\n${p.resourceId}`), `${p.userId} paired gaining ${permission} on ${p.resourceId}`).toBe(true);
      for (const p of got!.losingPairs) expect(e.losingPairs.has(`${p.userId}\n${p.resourceId}`), `${p.userId} paired losing ${permission} on ${p.resourceId}`).toBe(true);
    }
  });
});
