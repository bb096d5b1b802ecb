/**
 * Catalog rules, pure: validation of a submitted catalog, the effective
 * relations of each resource, and what a replacement would drop.
 */
import { Violations } from "./errors.js";
import { check, descriptionProblem, LIMITS, tokenProblem } from "./formats.js";
import type { CatalogEntry, EffectiveRelation, Inherit } from "../store/catalog-store.js";
import { parseSubjectType, USER_SUBJECTS } from "./subjects.js";
import { strataOf, type CatalogShape } from "./relation-strata.js";

export type { CatalogEntry, EffectiveRelation, Inherit };

export interface RelationInput {
  name: string;
  actions: string[];
  /** A built-in as a GET returned it: accepted on the way back in and ignored. */
  builtIn: boolean;
  /** What a grant may name as holder; empty or absent: users only. */
  subjects?: string[] | undefined;
  inherits?: Inherit[] | undefined;
  /** Intersection: each entry must hold too. */
  requires?: Inherit[] | undefined;
  /** Exclusion: no entry may hold. */
  unless?: Inherit[] | undefined;
}

export interface CatalogEntryInput {
  resource: string;
  description: string;
  actions: string[];
  relations: RelationInput[];
}

/**
 * The built-in relations and the actions each implies where the resource has
 * them. `all` stands for every action the resource has now.
 */
export const BUILT_IN_RELATIONS: ReadonlyMap<string, readonly string[] | "all"> = new Map<string, readonly string[] | "all">([
  ["owner", "all"],
  ["editor", ["create", "read", "update"]],
  ["viewer", ["read", "list"]],
  ["commenter", ["read", "comment"]],
]);

/** Checks a submitted catalog against every rule; throws one 400 naming each bad field. */
export function validateCatalog(entries: CatalogEntryInput[], root = "resources"): void {
  const v = new Violations();
  catalogViolations(v, entries, root);
  v.throwIfAny();
}

/** validateCatalog's findings, added to `v`, each field under `root` ("resources[2].actions[0]"; a model document's "catalog[2]..."). */
export function catalogViolations(v: Violations, entries: CatalogEntryInput[], root: string): void {
  if (entries.length > LIMITS.catalogResources) {
    v.add(root, `at most ${LIMITS.catalogResources} resources are allowed, got ${entries.length}`);
  }
  const seenResources = new Map<string, number>();
  entries.forEach((entry, i) => {
    const at = `${root}[${i}]`;
    if (check(v, `${at}.resource`, tokenProblem(entry.resource))) {
      const first = seenResources.get(entry.resource);
      if (first !== undefined) v.add(`${at}.resource`, `"${entry.resource}" is already defined by ${root}[${first}]`);
      else seenResources.set(entry.resource, i);
    }
    check(v, `${at}.description`, descriptionProblem(entry.description));
    if (entry.actions.length > LIMITS.actionsPerResource) {
      v.add(`${at}.actions`, `at most ${LIMITS.actionsPerResource} actions are allowed, got ${entry.actions.length}`);
    }
    const actions = new Set<string>();
    entry.actions.forEach((action, j) => {
      if (!check(v, `${at}.actions[${j}]`, tokenProblem(action))) return;
      if (actions.has(action)) v.add(`${at}.actions[${j}]`, `"${action}" is listed twice`);
      actions.add(action);
    });
    const custom = entry.relations.filter((r) => !r.builtIn);
    if (custom.length > LIMITS.relationsPerResource) {
      v.add(`${at}.relations`, `at most ${LIMITS.relationsPerResource} custom relations are allowed, got ${custom.length}`);
    }
    const relationNames = new Set<string>();
    entry.relations.forEach((relation, k) => {
      const rat = `${at}.relations[${k}]`;
      if (!check(v, `${rat}.name`, tokenProblem(relation.name))) return;
      if (relation.builtIn) {
        if (!BUILT_IN_RELATIONS.has(relation.name)) {
          v.add(`${rat}.builtIn`, `"${relation.name}" is not a built-in relation (owner, editor, viewer, commenter)`);
        }
        return; // derived: its actions are not the caller's to set
      }
      if (relationNames.has(relation.name)) v.add(`${rat}.name`, `relation "${relation.name}" is defined twice`);
      relationNames.add(relation.name);
      const implied = new Set<string>();
      relation.actions.forEach((action, j) => {
        if (!actions.has(action)) {
          v.add(`${rat}.actions[${j}]`, `"${action}" is not an action of resource "${entry.resource}"`);
        } else if (implied.has(action)) {
          v.add(`${rat}.actions[${j}]`, `"${action}" is listed twice`);
        }
        implied.add(action);
      });
    });
  });
  // Subjects and inherits name other resources' relations: checked once
  // every resource's relations are known.
  if (v.empty) validateGraph(v, entries, root);
  if (v.empty) sameInstanceCycles(v, entries, root);
  if (v.empty) negationCycles(v, entries, root);
}

/** Every relation name of each resource once effective: the built-ins and the custom ones. */
function relationNamesOf(entries: CatalogEntryInput[]): Map<string, Set<string>> {
  return new Map(entries.map((e) => [e.resource, new Set([...BUILT_IN_RELATIONS.keys(), ...e.relations.filter((r) => !r.builtIn).map((r) => r.name)])]));
}

const subjectsOf = (r: RelationInput): string[] => (r.subjects === undefined || r.subjects.length === 0 ? [...USER_SUBJECTS] : r.subjects);

/** The types a link relation links to; undefined when the relation is not a link. */
function linkTargets(r: RelationInput): string[] | undefined {
  const subjects = subjectsOf(r).map(parseSubjectType);
  return subjects.length > 0 && subjects.every((s) => s !== undefined && s.kind === "link") ? subjects.map((s) => s!.resource) : undefined;
}

/**
 * The rules of API.md's "Groups and hierarchy": each subject names a
 * resource of the catalog (and one of its relations, for a set); a link
 * relation names resources only and implies no actions; each inherits goes
 * through a link relation of the same resource to a relation that every
 * linked resource has and that is no link itself.
 */
function validateGraph(v: Violations, entries: CatalogEntryInput[], root: string): void {
  const names = relationNamesOf(entries);
  const byResource = new Map(entries.map((e) => [e.resource, new Map(e.relations.filter((r) => !r.builtIn).map((r) => [r.name, r]))]));
  const isLink = (resource: string, relation: string) => {
    const r = byResource.get(resource)?.get(relation);
    return r !== undefined && linkTargets(r) !== undefined;
  };
  entries.forEach((entry, i) => {
    entry.relations.forEach((relation, k) => {
      if (relation.builtIn) return;
      const rat = `${root}[${i}].relations[${k}]`;
      const subjects = relation.subjects ?? [];
      if (subjects.length > LIMITS.subjectsPerRelation) {
        v.add(`${rat}.subjects`, `at most ${LIMITS.subjectsPerRelation} subjects are allowed, got ${subjects.length}`);
      }
      const seen = new Set<string>();
      let links = 0;
      subjects.forEach((subject, j) => {
        const at = `${rat}.subjects[${j}]`;
        const parsed = parseSubjectType(subject);
        if (parsed === undefined) {
          v.add(
            at,
            subject.endsWith(":*")
              ? `${JSON.stringify(subject)} is not a subject: "user:*" (every user) is the only one with "*"; a relation held by every instance of a resource is no subject`
              : `${JSON.stringify(subject)} is not a subject: "user", "user:*" (every user), "<resource>#<relation>" (a subject set) or "<resource>" (a link)`,
          );
          return;
        }
        if (seen.has(subject)) v.add(at, `"${subject}" is listed twice`);
        seen.add(subject);
        // "user" and "user:*" name user ids, whatever resources the catalog has.
        if (parsed.kind === "user" || parsed.kind === "all-users") return;
        const relations = names.get(parsed.resource);
        if (relations === undefined) v.add(at, `"${parsed.resource}" is not a resource of the catalog`);
        else if (parsed.kind === "set" && !relations.has(parsed.relation)) {
          v.add(at, `"${parsed.relation}" is not a relation of resource "${parsed.resource}"`);
        } else if (parsed.kind === "set" && isLink(parsed.resource, parsed.relation)) {
          v.add(at, `"${subject}" is a link relation: its holders are instances, not users, so it is no subject set`);
        }
        if (parsed.kind === "link") links++;
      });
      if (links > 0 && links < subjects.length) {
        v.add(`${rat}.subjects`, 'a link relation names resources only: it may not also name users ("user", "user:*") or subject sets');
      }
      const link = links > 0 && links === subjects.length;
      if (link && relation.actions.length > 0) v.add(`${rat}.actions`, "a link relation implies no actions");
      if (link && (relation.inherits ?? []).length > 0) v.add(`${rat}.inherits`, "a link relation inherits nothing: its holders are instances");
      for (const list of ["requires", "unless"] as const) {
        if (link && (relation[list] ?? []).length > 0) v.add(`${rat}.${list}`, `a link relation has no ${list}: its holders are instances`);
      }
      const rules = relation.inherits ?? [];
      if (rules.length > LIMITS.inheritsPerRelation) {
        v.add(`${rat}.inherits`, `at most ${LIMITS.inheritsPerRelation} inherits are allowed, got ${rules.length}`);
      }
      for (const list of ["requires", "unless"] as const) operatorEntries(v, relation[list] ?? [], `${rat}.${list}`, entry.resource, names, byResource, isLink);
      const seenRules = new Set<string>();
      rules.forEach((rule, j) => {
        const at = `${rat}.inherits[${j}]`;
        // No `through`: the relation is asked on this same instance.
        const sameInstance = rule.through === "";
        const throughOk = sameInstance || check(v, `${at}.through`, tokenProblem(rule.through));
        const relationOk = check(v, `${at}.relation`, tokenProblem(rule.relation));
        if (!throughOk || !relationOk) return;
        const key = `${rule.through}#${rule.relation}`;
        if (seenRules.has(key)) {
          v.add(at, sameInstance ? `{relation: "${rule.relation}"} is listed twice` : `{through: "${rule.through}", relation: "${rule.relation}"} is listed twice`);
        }
        seenRules.add(key);
        if (sameInstance) {
          if (names.get(entry.resource)?.has(rule.relation) !== true) {
            v.add(`${at}.relation`, `"${rule.relation}" is not a relation of resource "${entry.resource}"`);
          } else if (rule.relation === relation.name) {
            v.add(`${at}.relation`, `"${rule.relation}" is this relation: a relation cannot inherit itself`);
          } else if (isLink(entry.resource, rule.relation)) {
            v.add(`${at}.relation`, `"${entry.resource}#${rule.relation}" is a link relation: it holds instances, not users`);
          }
          return;
        }
        throughLink(v, at, entry.resource, rule, names, byResource, isLink);
      });
    });
  });
}

/**
 * A relation's `requires` or `unless` entries (API.md, "Relations within an instance,
 * intersection and exclusion"): each names a relation of this resource that is no link, or
 * goes through a link relation of this resource to a relation every linked
 * resource has and that is no link; none is listed twice. A relation may
 * name itself here: within the instance it either closes a cycle through
 * an `unless` (refused by negationCycles) or requires what it is, which
 * holds nothing, as any cycle of `requires` (the least answer).
 */
function operatorEntries(
  v: Violations,
  entries: Inherit[],
  at: string,
  resource: string,
  names: Map<string, Set<string>>,
  byResource: Map<string, Map<string, RelationInput>>,
  isLink: (resource: string, relation: string) => boolean,
): void {
  if (entries.length > LIMITS.inheritsPerRelation) v.add(at, `at most ${LIMITS.inheritsPerRelation} entries are allowed, got ${entries.length}`);
  const seen = new Set<string>();
  entries.forEach((entry, j) => {
    const eat = `${at}[${j}]`;
    const throughOk = entry.through === "" || check(v, `${eat}.through`, tokenProblem(entry.through));
    if (!check(v, `${eat}.relation`, tokenProblem(entry.relation)) || !throughOk) return;
    const key = `${entry.through}#${entry.relation}`;
    if (seen.has(key)) v.add(eat, entry.through === "" ? `{relation: "${entry.relation}"} is listed twice` : `{through: "${entry.through}", relation: "${entry.relation}"} is listed twice`);
    seen.add(key);
    if (entry.through === "") {
      if (names.get(resource)?.has(entry.relation) !== true) v.add(`${eat}.relation`, `"${entry.relation}" is not a relation of resource "${resource}"`);
      else if (isLink(resource, entry.relation)) v.add(`${eat}.relation`, `"${resource}#${entry.relation}" is a link relation: it holds instances, not users`);
      return;
    }
    throughLink(v, eat, resource, entry, names, byResource, isLink);
  });
}

/**
 * A rule through a link (`inherits`, `requires` or `unless` at `at`): its
 * `through` is a link relation of the resource, and every resource the link
 * reaches has its `relation`, which is no link there.
 */
function throughLink(
  v: Violations,
  at: string,
  resource: string,
  rule: Inherit,
  names: Map<string, Set<string>>,
  byResource: Map<string, Map<string, RelationInput>>,
  isLink: (resource: string, relation: string) => boolean,
): void {
  const through = byResource.get(resource)?.get(rule.through);
  const targets = through === undefined ? undefined : linkTargets(through);
  if (targets === undefined) {
    v.add(
      `${at}.through`,
      through === undefined && !BUILT_IN_RELATIONS.has(rule.through)
        ? `"${rule.through}" is not a relation of resource "${resource}"`
        : `"${rule.through}" is not a link relation of resource "${resource}" (a link relation's subjects name resources only)`,
    );
    return;
  }
  for (const target of targets) {
    if (names.get(target)?.has(rule.relation) !== true) {
      v.add(`${at}.relation`, `"${rule.relation}" is not a relation of resource "${target}", which "${rule.through}" links to`);
    } else if (isLink(target, rule.relation)) {
      v.add(`${at}.relation`, `"${target}#${rule.relation}" is a link relation: it holds instances, not users`);
    }
  }
}

/** The catalog's relations as the strata read them (relation-strata.ts), built-ins included. */
export function catalogShape(entries: readonly CatalogEntry[]): CatalogShape {
  return new Map(entries.map((e) => [e.resource, new Map(e.relations.map((r) => [r.name, r]))]));
}

/**
 * A cycle of relations that passes through an `unless` would make a
 * relation depend on its own negation (viewer unless blocked, blocked
 * granted to `document#viewer`): refused, naming the `unless` entry and
 * the cycle.
 */
function negationCycles(v: Violations, entries: CatalogEntryInput[], root: string): void {
  const { negativeCycles } = strataOf(catalogShape(effectiveCatalog(entries)));
  const named = new Set<string>();
  for (const { source, cycle } of negativeCycles) {
    const i = entries.findIndex((e) => e.resource === source.resource);
    const k = entries[i]!.relations.findIndex((r) => !r.builtIn && r.name === source.relation);
    const at = `${root}[${i}].relations[${k}].unless[${source.index}].relation`;
    if (named.has(at)) continue; // an entry through a link to several types closes a cycle through each
    named.add(at);
    v.add(
      at,
      `"${source.resource}#${source.relation}" would depend on its own negation: ${cycle.join(" → ")}`,
    );
  }
}

/**
 * A relation that depends on itself through same-instance inherits alone
 * (viewer inherits editor, editor inherits viewer) would hold nothing but
 * what its own grants give, whatever the rules say: refused, naming the
 * rule that closes the cycle. Through a link the same names are other
 * instances, so a cycle there (a folder's viewer inherits its parent's) is
 * the hierarchy itself, allowed.
 */
function sameInstanceCycles(v: Violations, entries: CatalogEntryInput[], root: string): void {
  entries.forEach((entry, i) => {
    const rules = new Map<string, { relation: string; at: string }[]>();
    entry.relations.forEach((relation, k) => {
      if (relation.builtIn) return;
      rules.set(
        relation.name,
        (relation.inherits ?? []).flatMap((rule, j) => (rule.through === "" ? [{ relation: rule.relation, at: `${root}[${i}].relations[${k}].inherits[${j}].relation` }] : [])),
      );
    });
    // Depth-first, each relation once: an edge back to a relation on the current path closes a cycle.
    const state = new Map<string, "open" | "done">();
    const visit = (name: string, path: string[]): void => {
      state.set(name, "open");
      for (const rule of rules.get(name) ?? []) {
        const seen = state.get(rule.relation);
        if (seen === "open") {
          const cycle = [...path.slice(path.indexOf(rule.relation)), name, rule.relation].join(" → ");
          v.add(rule.at, `"${entry.resource}" relations depend on themselves within an instance: ${cycle}`);
        } else if (seen === undefined) visit(rule.relation, [...path, name]);
      }
      state.set(name, "done");
    };
    for (const name of rules.keys()) if (!state.has(name)) visit(name, []);
  });
}

/**
 * The stored form of a valid catalog: every resource with its effective
 * relations. Built-ins come first in their fixed order, limited to the
 * resource's actions (in the resource's order); a custom relation with a
 * built-in name takes that built-in's place; other custom relations follow in
 * the order given.
 */
export function effectiveCatalog(entries: CatalogEntryInput[]): CatalogEntry[] {
  return entries.map((entry) => {
    const custom = new Map(entry.relations.filter((r) => !r.builtIn).map((r) => [r.name, r]));
    const relations: EffectiveRelation[] = [];
    for (const [name, implied] of BUILT_IN_RELATIONS) {
      const redefined = custom.get(name);
      if (redefined !== undefined) {
        relations.push(effectiveCustom(redefined));
        custom.delete(name);
      } else {
        const actions = implied === "all" ? [...entry.actions] : entry.actions.filter((a) => implied.includes(a));
        relations.push({ name, actions, builtIn: true, subjects: [...USER_SUBJECTS], inherits: [], requires: [], unless: [] });
      }
    }
    for (const relation of custom.values()) relations.push(effectiveCustom(relation));
    return { resource: entry.resource, description: entry.description, actions: [...entry.actions], relations };
  });
}

const effectiveCustom = (r: RelationInput): EffectiveRelation => ({
  name: r.name,
  actions: [...r.actions],
  builtIn: false,
  subjects: subjectsOf(r),
  inherits: (r.inherits ?? []).map(({ through, relation }) => ({ through, relation })),
  requires: (r.requires ?? []).map(({ through, relation }) => ({ through, relation })),
  unless: (r.unless ?? []).map(({ through, relation }) => ({ through, relation })),
});

export interface CatalogChange {
  resourcesAdded: string[];
  resourcesRemoved: string[];
  permissionsAdded: string[];
  permissionsRemoved: string[];
  /** Relations that no longer exist on resources that remain, as "resource#relation". */
  relationsRemoved: { resource: string; relation: string }[];
  relationsAdded: { resource: string; relation: string }[];
  /** Subject types a relation that remains no longer allows ("user", "team#member", "folder"). */
  subjectsRemoved: { resource: string; relation: string; subject: string }[];
}

/** What replacing `before` with `after` adds and removes. */
export function diffCatalog(before: CatalogEntry[], after: CatalogEntry[]): CatalogChange {
  const index = (catalog: CatalogEntry[]) => new Map(catalog.map((e) => [e.resource, e]));
  const b = index(before);
  const a = index(after);
  const permissions = (catalog: CatalogEntry[]) => catalog.flatMap((e) => e.actions.map((x) => `${e.resource}:${x}`));
  const pb = new Set(permissions(before));
  const pa = new Set(permissions(after));
  const relationPairs = (from: Map<string, CatalogEntry>, to: Map<string, CatalogEntry>) =>
    [...from.values()].flatMap((entry) => {
      const other = to.get(entry.resource);
      if (other === undefined) return [];
      const names = new Set(other.relations.map((r) => r.name));
      return entry.relations.filter((r) => !names.has(r.name)).map((r) => ({ resource: entry.resource, relation: r.name }));
    });
  return {
    resourcesAdded: [...a.keys()].filter((r) => !b.has(r)),
    resourcesRemoved: [...b.keys()].filter((r) => !a.has(r)),
    permissionsAdded: [...pa].filter((p) => !pb.has(p)),
    permissionsRemoved: [...pb].filter((p) => !pa.has(p)),
    relationsRemoved: relationPairs(b, a),
    relationsAdded: relationPairs(a, b),
    subjectsRemoved: [...b.values()].flatMap((entry) => {
      const other = a.get(entry.resource);
      if (other === undefined) return [];
      return entry.relations.flatMap((r) => {
        const kept = other.relations.find((x) => x.name === r.name);
        if (kept === undefined) return [];
        return r.subjects.filter((s) => !kept.subjects.includes(s)).map((subject) => ({ resource: entry.resource, relation: r.name, subject }));
      });
    }),
  };
}
