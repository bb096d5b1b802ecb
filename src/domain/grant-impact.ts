/**
 * The impact of a model change that comes through grants (docs/models.md,
 * "Plan"): a catalog edit changes what grants imply (a relation's actions,
 * its inherits, and through subject sets and links every relation fed by
 * one that changed), so a user may gain or lose resource:action on an
 * instance without any role moving.
 *
 * Exact within a bound. From the two catalogs, the pairs (resource,
 * relation) whose holders or actions differ; the instances with a grant of
 * one of them, and the users holding one of them there under either model
 * (grant-impact-store: one walk over both models' rules); then the check's
 * own statement (check-store, graph-store's graphCheckSql) asked for each
 * candidate (user, instance) under the model before, and under the model
 * after: the new catalog written inside a savepoint that is rolled back.
 * Beyond BOUND instances or candidates, the permissions the change touches
 * are said to be lower bounds (atLeast), never "no change".
 */
import type { Queryable } from "../store/db.js";
import { catalogStore, type CatalogEntry } from "../store/catalog-store.js";
import { CheckStatements, type CheckInput, type CheckRow } from "../store/check-store.js";
import { grantImpactStore, type Candidate, type InheritRule, type RelationPair } from "../store/grant-impact-store.js";
import { AccessModel } from "./access-model.js";

/** Candidate (user, instance) pairs, and instances reached, examined at most: beyond it counts are lower bounds. */
export const GRANT_IMPACT_BOUND = 2_000;

/** Questions per check statement. */
const BATCH = 500;

/** A user's access to one instance that changes: `gained` true when they may after and might not before. */
export interface GrantChange {
  userId: string;
  resource: string;
  resourceId: string;
  action: string;
  gained: boolean;
  /** The user's roles by assignments with no condition, and by those with one. */
  roles: string[];
  conditionalRoles: string[];
}

export interface GrantImpact {
  changes: GrantChange[];
  /** "resource:action" the change touches where the counts are lower bounds (a bound hit, or an allUsers grant reached). */
  atLeast: Set<string>;
}

interface Rules {
  actions: Map<string, Set<string>>;
  inherits: Map<string, string>;
  rules: InheritRule[];
  /** "T#R" → the subjects entries of R */
  subjects: Map<string, string[]>;
}

const rulesOf = (catalog: readonly CatalogEntry[]): Rules => {
  const out: Rules = { actions: new Map(), inherits: new Map(), rules: [], subjects: new Map() };
  for (const e of catalog) {
    for (const r of e.relations) {
      const key = `${e.resource}#${r.name}`;
      out.actions.set(key, new Set(r.actions));
      out.inherits.set(key, JSON.stringify(r.inherits.map((i) => [i.through, i.relation])));
      out.subjects.set(key, r.subjects);
      for (const i of r.inherits) out.rules.push({ r: e.resource, l: r.name, t: i.through, i: i.relation });
    }
  }
  return out;
};

/** What the change touches: per resource, the relations to walk from and the actions whose holders may change. */
export interface Touched {
  targets: RelationPair[];
  /** The targets, and the links they inherit through: an instance with a grant of one of them is reached. */
  seeds: RelationPair[];
  rules: InheritRule[];
  /** "resource:action" */
  permissions: Set<string>;
  /** resource → actions touched */
  actions: Map<string, Set<string>>;
}

/**
 * The relations whose holders may differ ("dirty": their inherits differ,
 * or they are fed by a dirty one through a subject set or a link, in either
 * model), and the relations whose actions differ; a permission is touched
 * by a relation whose actions differ on it, or by a dirty one implying it.
 */
export function touchedBy(before: readonly CatalogEntry[], after: readonly CatalogEntry[]): Touched {
  const b = rulesOf(before);
  const a = rulesOf(after);
  const keys = new Set([...b.actions.keys(), ...a.actions.keys()]);
  const split = (key: string) => key.split("#") as [string, string];
  const dirty = new Set([...keys].filter((k) => (b.inherits.get(k) ?? "[]") !== (a.inherits.get(k) ?? "[]")));
  const subjectsOf = (k: string) => [...(b.subjects.get(k) ?? []), ...(a.subjects.get(k) ?? [])];
  for (let grew = dirty.size > 0; grew; ) {
    grew = false;
    for (const k of keys) {
      if (dirty.has(k)) continue;
      const [resource, relation] = split(k);
      const fedBySet = subjectsOf(k).some((s) => dirty.has(s));
      const fedByLink = [...b.rules, ...a.rules].some(
        (rule) =>
          rule.r === resource &&
          rule.l === relation &&
          subjectsOf(`${resource}#${rule.t}`).some((linked) => !linked.includes("#") && !linked.includes(":") && dirty.has(`${linked}#${rule.i}`)),
      );
      if (fedBySet || fedByLink) {
        dirty.add(k);
        grew = true;
      }
    }
  }
  const targets: RelationPair[] = [];
  const actions = new Map<string, Set<string>>();
  for (const k of [...keys].sort()) {
    const [resource, relation] = split(k);
    const ab = b.actions.get(k) ?? new Set<string>();
    const aa = a.actions.get(k) ?? new Set<string>();
    const touched = [...new Set([...ab, ...aa])].filter((x) => dirty.has(k) || ab.has(x) !== aa.has(x));
    if (touched.length === 0) continue;
    targets.push({ r: resource, l: relation });
    let set = actions.get(resource);
    if (set === undefined) actions.set(resource, (set = new Set()));
    for (const x of touched) set.add(x);
  }
  const rules = [...b.rules, ...a.rules.filter((x) => !b.rules.some((y) => y.r === x.r && y.l === x.l && y.t === x.t && y.i === x.i))];
  const seeds = [...targets];
  for (const t of targets) {
    for (const rule of rules) if (rule.r === t.r && rule.l === t.l && !seeds.some((s) => s.r === t.r && s.l === rule.t)) seeds.push({ r: t.r, l: rule.t });
  }
  const permissions = new Set([...actions].flatMap(([resource, set]) => [...set].map((x) => `${resource}:${x}`)));
  return { targets, seeds, rules, permissions, actions };
}

/** A catalog as the access model reads it; `subjects` adds each relation's subjects of another catalog (groups stay exact over both). */
const modelOf = (catalog: readonly CatalogEntry[], subjects: ReadonlyMap<string, string[]>) =>
  AccessModel.from({
    version: "0",
    resources: catalog.map((e) => [e.resource, e.actions]),
    relations: catalog.flatMap((e) =>
      e.relations.map((r): [string, string, string[], string[]] => [e.resource, r.name, r.actions, [...new Set([...r.subjects, ...(subjects.get(`${e.resource}#${r.name}`) ?? [])])]]),
    ),
    inherits: catalog.flatMap((e) => e.relations.flatMap((r) => r.inherits.map((i): [string, string, string, string] => [e.resource, r.name, i.through, i.relation]))),
    permissions: [],
  });

/** The relations each candidate holds on its instance with no condition, by the check's statement, under the catalog the database holds now. */
async function held(q: Queryable, appId: string, model: AccessModel, candidates: readonly Candidate[]): Promise<CheckRow[]> {
  // Inline: on Citus the function's refusal would abort the plan's transaction.
  const statements = new CheckStatements(false);
  const out: CheckRow[] = [];
  for (let at = 0; at < candidates.length; at += BATCH) {
    const inputs: CheckInput[] = candidates.slice(at, at + BATCH).map((c) => ({ appId, keyHash: "", userId: c.userId, resource: c.resource, resourceId: c.resourceId, action: null }));
    out.push(...(await statements.check(q, inputs, { graph: () => model.groups() })).rows);
  }
  return out;
}

/**
 * Every (user, instance, action) whose access through grants differs
 * between the catalogs, among the candidates; `q` is the plan's (or the
 * apply's) transaction, before the apply writes anything.
 */
export async function grantImpact(q: Queryable, appId: string, before: CatalogEntry[], after: CatalogEntry[]): Promise<GrantImpact> {
  const touched = touchedBy(before, after);
  const atLeast = new Set<string>();
  if (touched.targets.length === 0) return { changes: [], atLeast };
  const seeds = await grantImpactStore.seeds(q, appId, touched.seeds, GRANT_IMPACT_BOUND + 1);
  const rows = await grantImpactStore.candidates(q, appId, seeds.slice(0, GRANT_IMPACT_BOUND), touched.targets, touched.rules, 4 * GRANT_IMPACT_BOUND + 1);
  const unique = new Map(rows.map((c) => [`${c.userId}\n${c.resource}\n${c.resourceId}`, c]));
  const candidates = [...unique.values()].slice(0, GRANT_IMPACT_BOUND);
  if (seeds.length > GRANT_IMPACT_BOUND || rows.length > 4 * GRANT_IMPACT_BOUND || unique.size > GRANT_IMPACT_BOUND) {
    for (const p of touched.permissions) atLeast.add(p);
  }
  const subjectsBefore = new Map(before.flatMap((e) => e.relations.map((r) => [`${e.resource}#${r.name}`, r.subjects] as const)));
  const subjectsAfter = new Map(after.flatMap((e) => e.relations.map((r) => [`${e.resource}#${r.name}`, r.subjects] as const)));
  const old = await held(q, appId, modelOf(before, subjectsAfter), candidates);
  // The model after, as the check reads it: the new catalog, only inside the savepoint.
  await q.query("SAVEPOINT grant_impact");
  await catalogStore.replace(q, appId, after);
  const now = await held(q, appId, modelOf(after, subjectsBefore), candidates);
  await q.query("ROLLBACK TO SAVEPOINT grant_impact");

  const actionsBefore = rulesOf(before).actions;
  const actionsAfter = rulesOf(after).actions;
  const implies = (actions: Map<string, Set<string>>, resource: string, relations: readonly string[], action: string) =>
    relations.some((r) => actions.get(`${resource}#${r}`)?.has(action) === true);
  const changes: GrantChange[] = [];
  candidates.forEach((c, n) => {
    for (const action of touched.actions.get(c.resource) ?? []) {
      const was = implies(actionsBefore, c.resource, old[n]!.relations, action);
      const is = implies(actionsAfter, c.resource, now[n]!.relations, action);
      if (was === is) continue;
      // An allUsers grant's change is every user's: more than anyone can count.
      if (c.userId === "") {
        atLeast.add(`${c.resource}:${action}`);
        continue;
      }
      const roles = old[n]!.roles;
      changes.push({ ...c, action, gained: is, roles, conditionalRoles: old[n]!.conditionalRoles.map((r) => r.roleId) });
    }
  });
  return { changes, atLeast };
}

/** One instance on which a user gains or loses a permission through grants. */
export interface ImpactPair {
  userId: string;
  resourceId: string;
}

/** Who gains and who loses one permission, through roles and through grants: a plan's impact entry. */
export interface PermissionImpact {
  permission: string;
  gaining: number;
  losing: number;
  gainingSample: string[];
  losingSample: string[];
  /** The first (user, instance) pairs changing through grants, in user then instance order. */
  gainingPairs: ImpactPair[];
  losingPairs: ImpactPair[];
  /** The change reaches more than the plan examines (or an allUsers grant): the counts are lower bounds. */
  atLeast: boolean;
  /** Held only where this condition holds: counted apart from the permission held outright. */
  condition?: string;
}

const byCodePoint = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));
const byPair = (x: ImpactPair, y: ImpactPair) => byCodePoint(x.userId, y.userId) || byCodePoint(x.resourceId, y.resourceId);

/**
 * The roles' impact (per scope, as before) and the grants' (per instance)
 * as one entry per permission. A change through grants on an instance
 * shows in some check exactly when the user's application-wide roles did
 * not hold the permission outright on the side it moves from (before, for
 * a gain; after, for a loss): those hold in every scope, on every instance.
 * A user counted by the roles already (`roleChange`) is not counted twice.
 */
export function mergeImpact(
  roleImpact: readonly Omit<PermissionImpact, "gainingPairs" | "losingPairs" | "atLeast">[],
  grants: GrantImpact,
  sampleSize: number,
  appWide: (roleIds: readonly string[], side: "before" | "after") => ReadonlySet<string>,
  roleChange: (roleIds: readonly string[], permission: string, gained: boolean) => boolean,
): PermissionImpact[] {
  const out = new Map<string, PermissionImpact>();
  for (const i of roleImpact) out.set(i.condition === undefined ? i.permission : `${i.permission}\n${i.condition}`, { ...i, gainingPairs: [], losingPairs: [], atLeast: false });
  const entry = (permission: string) => {
    let e = out.get(permission);
    if (e === undefined) {
      out.set(permission, (e = { permission, gaining: 0, losing: 0, gainingSample: [], losingSample: [], gainingPairs: [], losingPairs: [], atLeast: false }));
    }
    return e;
  };
  const users = new Map<string, Set<string>>();
  for (const c of grants.changes) {
    const permission = `${c.resource}:${c.action}`;
    if (appWide(c.roles, c.gained ? "before" : "after").has(permission)) continue;
    const e = entry(permission);
    (c.gained ? e.gainingPairs : e.losingPairs).push({ userId: c.userId, resourceId: c.resourceId });
    const key = `${c.gained ? "+" : "-"}${permission}`;
    let seen = users.get(key);
    if (seen === undefined) users.set(key, (seen = new Set()));
    if (seen.has(c.userId) || roleChange([...c.roles, ...c.conditionalRoles], permission, c.gained)) continue;
    seen.add(c.userId);
    if (c.gained) {
      e.gaining++;
      e.gainingSample.push(c.userId);
    } else {
      e.losing++;
      e.losingSample.push(c.userId);
    }
  }
  for (const p of grants.atLeast) entry(p).atLeast = true;
  const first = <T>(list: T[], order: (a: T, b: T) => number) => [...new Set(list)].sort(order).slice(0, sampleSize);
  return [...out.keys()].sort(byCodePoint).map((key) => {
    const e = out.get(key)!;
    return {
      ...e,
      gainingSample: first(e.gainingSample, byCodePoint),
      losingSample: first(e.losingSample, byCodePoint),
      gainingPairs: e.gainingPairs.sort(byPair).slice(0, sampleSize),
      losingPairs: e.losingPairs.sort(byPair).slice(0, sampleSize),
    };
  });
}
