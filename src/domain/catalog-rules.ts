/**
 * Catalog rules, pure: validation of a submitted catalog, the effective
 * relations of each resource, and what a replacement would drop.
 */
import { Violations } from "./errors.js";
import { check, descriptionProblem, LIMITS, tokenProblem } from "./formats.js";
import type { CatalogEntry, EffectiveRelation } from "../store/catalog-store.js";

export type { CatalogEntry, EffectiveRelation };

export interface RelationInput {
  name: string;
  actions: string[];
  /** A built-in as a GET returned it: accepted on the way back in and ignored. */
  builtIn: boolean;
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
export function validateCatalog(entries: CatalogEntryInput[]): void {
  const v = new Violations();
  if (entries.length > LIMITS.catalogResources) {
    v.add("resources", `at most ${LIMITS.catalogResources} resources are allowed, got ${entries.length}`);
  }
  const seenResources = new Map<string, number>();
  entries.forEach((entry, i) => {
    const at = `resources[${i}]`;
    if (check(v, `${at}.resource`, tokenProblem(entry.resource))) {
      const first = seenResources.get(entry.resource);
      if (first !== undefined) v.add(`${at}.resource`, `"${entry.resource}" is already defined by resources[${first}]`);
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
  v.throwIfAny();
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
    const custom = new Map(entry.relations.filter((r) => !r.builtIn).map((r) => [r.name, r.actions]));
    const relations: EffectiveRelation[] = [];
    for (const [name, implied] of BUILT_IN_RELATIONS) {
      const redefined = custom.get(name);
      if (redefined !== undefined) {
        relations.push({ name, actions: [...redefined], builtIn: false });
        custom.delete(name);
      } else {
        const actions = implied === "all" ? [...entry.actions] : entry.actions.filter((a) => implied.includes(a));
        relations.push({ name, actions, builtIn: true });
      }
    }
    for (const [name, actions] of custom) relations.push({ name, actions: [...actions], builtIn: false });
    return { resource: entry.resource, description: entry.description, actions: [...entry.actions], relations };
  });
}

export interface CatalogChange {
  resourcesAdded: string[];
  resourcesRemoved: string[];
  permissionsAdded: string[];
  permissionsRemoved: string[];
  /** Relations that no longer exist on resources that remain, as "resource#relation". */
  relationsRemoved: { resource: string; relation: string }[];
  relationsAdded: { resource: string; relation: string }[];
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
  };
}
