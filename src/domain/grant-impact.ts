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
 * (grant-impact-store: one walk over both models' rules): the candidates.
 * Then one walk per instance over both models' rules at once, each row
 * carrying the models it is walked in, gives each candidate's relations
 * there under the model before and under the model after, as the check of
 * each model would find them (the same outward walk and hop bound), in one
 * statement whatever the number of candidates; the catalog the database
 * holds is not touched. Beyond BOUND instances or candidates, the
 * permissions the change touches are said to be lower bounds (atLeast),
 * never "no change".
 */
import type { Queryable } from "../store/db.js";
import type { CatalogEntry } from "../store/catalog-store.js";
import { grantImpactStore, type InheritRule, type ModelRule, type Models, type RelationPair, type RootPair } from "../store/grant-impact-store.js";
import { DecisionStatements, type ExtraRule } from "../store/decision-store.js";
import { catalogShape } from "./catalog-rules.js";
import { conditionsOf, graphOf } from "./operator-answers.js";
import { Decision, DecisionRules, FALSE, TRUE } from "./relation-decision.js";

/** Candidate (user, instance) pairs, and instances reached, examined at most: beyond it counts are lower bounds. */
export const GRANT_IMPACT_BOUND = 2_000;

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
  /** "T#R" → its inherits, requires and unless, as one text: a relation whose text differs has holders that may. */
  inherits: Map<string, string>;
  rules: InheritRule[];
  /** The `requires` and `unless` entries, as rules: a relation is fed by what they name as by what it inherits. */
  operators: InheritRule[];
  /** "T#R" → the subjects entries of R */
  subjects: Map<string, string[]>;
}

const rulesOf = (catalog: readonly CatalogEntry[]): Rules => {
  const out: Rules = { actions: new Map(), inherits: new Map(), rules: [], operators: [], subjects: new Map() };
  for (const e of catalog) {
    for (const r of e.relations) {
      const key = `${e.resource}#${r.name}`;
      out.actions.set(key, new Set(r.actions));
      out.inherits.set(key, JSON.stringify([r.inherits, r.requires, r.unless].map((rules) => rules.map((i) => [i.through, i.relation]))));
      out.subjects.set(key, r.subjects);
      for (const i of r.inherits) out.rules.push({ r: e.resource, l: r.name, t: i.through, i: i.relation });
      for (const i of [...r.requires, ...r.unless]) out.operators.push({ r: e.resource, l: r.name, t: i.through, i: i.relation });
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
  const none = JSON.stringify([[], [], []]);
  const dirty = new Set([...keys].filter((k) => (b.inherits.get(k) ?? none) !== (a.inherits.get(k) ?? none)));
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
      const fedByInstance = [...b.rules, ...a.rules].some((rule) => rule.r === resource && rule.l === relation && rule.t === "" && dirty.has(`${resource}#${rule.i}`));
      // A requires or unless entry naming a relation whose holders may change, on this instance or a linked one.
      const fedByEntry = [...b.operators, ...a.operators].some(
        (rule) =>
          rule.r === resource &&
          rule.l === relation &&
          (rule.t === ""
            ? dirty.has(`${resource}#${rule.i}`)
            : subjectsOf(`${resource}#${rule.t}`).some((linked) => !linked.includes("#") && !linked.includes(":") && dirty.has(`${linked}#${rule.i}`))),
      );
      if (fedBySet || fedByLink || fedByInstance || fedByEntry) {
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
  const seed = (r: string, l: string) => {
    if (!seeds.some((s) => s.r === r && s.l === l)) seeds.push({ r, l });
  };
  for (const t of targets) {
    // The relations t holds within the instance (rules with no link), each with the links its own rules go through.
    const within = [t.l];
    for (let k = 0; k < within.length; k++) {
      seed(t.r, within[k]!);
      for (const rule of rules) {
        if (rule.r !== t.r || rule.l !== within[k]) continue;
        if (rule.t !== "") seed(t.r, rule.t);
        else if (!within.includes(rule.i)) within.push(rule.i);
      }
    }
  }
  const permissions = new Set([...actions].flatMap(([resource, set]) => [...set].map((x) => `${resource}:${x}`)));
  return { targets, seeds, rules, permissions, actions };
}

/**
 * The relations to walk from on each resource the change touches: those
 * that imply one of its touched actions, each in the models where it does
 * (bit 1 before, bit 2 after); and every inheritance rule with the models
 * it is part of.
 */
function walkOf(before: Rules, after: Rules, touched: Touched): { roots: RootPair[]; rules: ModelRule[] } {
  const roots = new Map<string, RootPair>();
  const add = (side: Rules, bit: Models) => {
    for (const [key, implied] of side.actions) {
      const [r, l] = key.split("#") as [string, string];
      const wanted = touched.actions.get(r);
      if (wanted === undefined || ![...implied].some((x) => wanted.has(x))) continue;
      const root = roots.get(key);
      if (root === undefined) roots.set(key, { r, l, m: bit });
      else root.m |= bit;
    }
  };
  add(before, 1);
  add(after, 2);
  const rules = new Map<string, ModelRule>();
  for (const [side, bit] of [[before, 1], [after, 2]] as const) {
    for (const x of side.rules) {
      const key = JSON.stringify([x.r, x.l, x.t, x.i]);
      const rule = rules.get(key);
      if (rule === undefined) rules.set(key, { ...x, m: bit });
      else rule.m |= bit;
    }
  }
  return { roots: [...roots.values()], rules: [...rules.values()] };
}

/** Roles as the statement reads them apart: plain ones, and those held only under a condition. */
function rolesApart(encoded: readonly string[]): { roles: string[]; conditionalRoles: string[] } {
  const roles = encoded.filter((x) => !x.includes("\n"));
  const conditional = encoded.filter((x) => x.includes("\n")).map((x) => x.slice(0, x.indexOf("\n")));
  return { roles, conditionalRoles: [...new Set(conditional.filter((x) => !roles.includes(x)))] };
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
  const rulesBefore = rulesOf(before);
  const rulesAfter = rulesOf(after);
  const walk = walkOf(rulesBefore, rulesAfter, touched);
  const { held: walked, roles } = await grantImpactStore.held(q, appId, candidates, walk.roots, walk.rules);
  // With requires or unless on either side, the walks' relations are a superset: each candidate's decided under each catalog.
  const held = hasOperators(before) || hasOperators(after) ? await decidedBoth(q, appId, candidates, walked, before, after, atLeast, touched) : walked;

  const implies = (actions: Map<string, Set<string>>, resource: string, relations: ReadonlyMap<string, Models>, bit: Models, action: string) =>
    [...relations].some(([r, m]) => (m & bit) !== 0 && actions.get(`${resource}#${r}`)?.has(action) === true);
  const changes: GrantChange[] = [];
  candidates.forEach((c, n) => {
    for (const action of touched.actions.get(c.resource) ?? []) {
      const was = implies(rulesBefore.actions, c.resource, held[n]!, 1, action);
      const is = implies(rulesAfter.actions, c.resource, held[n]!, 2, action);
      if (was === is) continue;
      // An allUsers grant's change is every user's: more than anyone can count.
      if (c.userId === "") {
        atLeast.add(`${c.resource}:${action}`);
        continue;
      }
      changes.push({ ...c, action, gained: is, ...rolesApart(roles.get(c.userId) ?? []) });
    }
  });
  return { changes, atLeast };
}

const hasOperators = (catalog: readonly CatalogEntry[]) => catalog.some((e) => e.relations.some((r) => r.requires.length + r.unless.length > 0));

/**
 * Where either catalog has `requires` or `unless` (docs/exclusion.md): each
 * candidate's relations decided under the catalog before and after, as the
 * check decides them, over the rows its instance can reach (one statement,
 * inline: it runs in the plan's transaction), the walk following the rules
 * of both catalogs, so one read serves both decisions; a condition counts
 * as not holding ("by a check with no condition holding"). The walks'
 * relations (either side) are the roots: no other can be held. A candidate
 * whose walk was cut makes its resource's touched permissions lower bounds.
 */
async function decidedBoth(
  q: Queryable,
  appId: string,
  candidates: readonly { userId: string; resource: string; resourceId: string }[],
  walked: readonly ReadonlyMap<string, Models>[],
  before: readonly CatalogEntry[],
  after: readonly CatalogEntry[],
  atLeast: Set<string>,
  touched: Touched,
): Promise<Map<string, Models>[]> {
  const rulesBefore = new DecisionRules(catalogShape(before));
  const rulesAfter = new DecisionRules(catalogShape(after));
  const extra: ExtraRule[] = after.flatMap((e) =>
    e.relations.flatMap((r) => [
      ...r.inherits.map((i) => ({ resource: e.resource, relation: r.name, through: i.through, target: i.relation, fresh: false })),
      ...[...r.requires, ...r.unless].map((i) => ({ resource: e.resource, relation: r.name, through: i.through, target: i.relation, fresh: true })),
    ]),
  );
  const { rows } = await new DecisionStatements(false, extra).rows(
    q,
    candidates.map((c, n) => ({ appId, userId: c.userId, resource: c.resource, resourceId: c.resourceId, roots: [...walked[n]!.keys()] })),
  );
  return candidates.map((c, n) => {
    const read = rows[n]!;
    const out = new Map<string, Models>();
    if (read.truncated) {
      for (const action of touched.actions.get(c.resource) ?? []) atLeast.add(`${c.resource}:${action}`);
      return out;
    }
    const graph = graphOf(read, new Map(conditionsOf(read).map((source) => [source, FALSE])));
    const sides = [
      [new Decision(rulesBefore, graph), 1],
      [new Decision(rulesAfter, graph), 2],
    ] as const;
    for (const relation of walked[n]!.keys()) {
      let m = 0;
      for (const [decision, bit] of sides) if (decision.truth({ resource: c.resource, id: c.resourceId, relation }) === TRUE) m |= bit;
      if (m !== 0) out.set(relation, m as Models);
    }
    return out;
  });
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
