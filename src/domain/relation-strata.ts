/**
 * The dependencies between a catalog's relations (API.md, "Relations within an instance,
 * intersection and exclusion"): which (resource, relation) pairs each one's holders are
 * decided from, and whether through an `unless` (negatively). Two uses:
 * the catalog refuses a cycle that passes through an `unless` (a relation
 * that would depend on its own negation), and the decision
 * (relation-decision.ts) settles the pairs stratum by stratum, each
 * `unless` reading a stratum already final, so that what is held is the
 * least set the rules give.
 */
import { parseSubjectType } from "./subjects.js";

/** A rule's target: a relation of this instance (`through` "") or of the instances linked by `through`. */
export interface RelationRef {
  through: string;
  relation: string;
}

/** What one relation's holders depend on. */
export interface RelationShape {
  /** "user", "user:*", "<resource>#<relation>" (a subject set) or "<resource>" (a link). */
  subjects: readonly string[];
  inherits: readonly RelationRef[];
  requires: readonly RelationRef[];
  unless: readonly RelationRef[];
}

/** resource → relation → its shape. */
export type CatalogShape = ReadonlyMap<string, ReadonlyMap<string, RelationShape>>;

/** Where a dependency comes from: the rule list and the entry's index in it (for a subject, the subjects list). */
export interface DependencySource {
  resource: string;
  relation: string;
  list: "subjects" | "inherits" | "requires" | "unless";
  index: number;
}

interface Dependency {
  to: string;
  negative: boolean;
  source: DependencySource;
}

/** A pair's key: "resource#relation". */
export const pairKey = (resource: string, relation: string) => `${resource}#${relation}`;

/** The resources a link relation links to (its subjects, each a bare resource); [] for any other relation. */
function linkTargets(shape: RelationShape | undefined): string[] {
  const parsed = (shape?.subjects ?? []).map(parseSubjectType);
  return parsed.length > 0 && parsed.every((s) => s?.kind === "link") ? parsed.map((s) => (s as { resource: string }).resource) : [];
}

/** The pairs a rule's target names: this resource's relation, or the relation on each type `through` links to. */
function refTargets(catalog: CatalogShape, resource: string, ref: RelationRef): string[] {
  if (ref.through === "") return [pairKey(resource, ref.relation)];
  return linkTargets(catalog.get(resource)?.get(ref.through)).map((target) => pairKey(target, ref.relation));
}

function dependencies(catalog: CatalogShape): Map<string, Dependency[]> {
  const out = new Map<string, Dependency[]>();
  for (const [resource, relations] of catalog) {
    for (const [relation, shape] of relations) {
      const deps: Dependency[] = [];
      const source = (list: DependencySource["list"], index: number): DependencySource => ({ resource, relation, list, index });
      shape.subjects.forEach((subject, index) => {
        const hash = subject.indexOf("#");
        if (hash > 0) deps.push({ to: subject, negative: false, source: source("subjects", index) });
      });
      for (const list of ["inherits", "requires", "unless"] as const) {
        shape[list].forEach((ref, index) => {
          for (const to of refTargets(catalog, resource, ref)) deps.push({ to, negative: list === "unless", source: source(list, index) });
        });
      }
      out.set(pairKey(resource, relation), deps);
    }
  }
  return out;
}

/** A cycle of relations through an `unless`: the entry that closes it, and the pairs in order. */
export interface NegativeCycle {
  source: DependencySource;
  cycle: string[];
}

export interface Strata {
  /** Each pair's stratum: 0 for a pair that depends on no `unless`; above every pair it reads through one. */
  stratum: ReadonlyMap<string, number>;
  /** The cycles that pass through an `unless`, one per `unless` entry inside a cycle; empty for a valid catalog. */
  negativeCycles: NegativeCycle[];
}

/**
 * The strata of a catalog's pairs: the strongly connected components of
 * the dependency graph (Tarjan's algorithm), each given the longest count
 * of `unless` edges below it. An `unless` edge inside a component is a
 * cycle through a negation.
 */
export function strataOf(catalog: CatalogShape): Strata {
  const deps = dependencies(catalog);
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const onStack = new Set<string>();
  const stack: string[] = [];
  const component = new Map<string, number>();
  const components: string[][] = [];
  let counter = 0;
  // Iterative Tarjan: a catalog of 1,000 resources must not overflow the call stack.
  for (const start of deps.keys()) {
    if (index.has(start)) continue;
    const work: { node: string; next: number }[] = [{ node: start, next: 0 }];
    index.set(start, counter);
    low.set(start, counter++);
    stack.push(start);
    onStack.add(start);
    while (work.length > 0) {
      const frame = work[work.length - 1]!;
      const edges = deps.get(frame.node) ?? [];
      if (frame.next < edges.length) {
        const to = edges[frame.next++]!.to;
        if (!deps.has(to)) continue;
        if (!index.has(to)) {
          index.set(to, counter);
          low.set(to, counter++);
          stack.push(to);
          onStack.add(to);
          work.push({ node: to, next: 0 });
        } else if (onStack.has(to)) low.set(frame.node, Math.min(low.get(frame.node)!, index.get(to)!));
        continue;
      }
      work.pop();
      const parent = work[work.length - 1];
      if (parent !== undefined) low.set(parent.node, Math.min(low.get(parent.node)!, low.get(frame.node)!));
      if (low.get(frame.node) === index.get(frame.node)) {
        const members: string[] = [];
        let member: string;
        do {
          member = stack.pop()!;
          onStack.delete(member);
          component.set(member, components.length);
          members.push(member);
        } while (member !== frame.node);
        components.push(members);
      }
    }
  }
  // Tarjan closes a component after every component it reaches: in that
  // order each component's dependencies already have their stratum.
  const componentStratum: number[] = [];
  const negativeCycles: NegativeCycle[] = [];
  components.forEach((members, c) => {
    let stratum = 0;
    for (const member of members) {
      for (const dep of deps.get(member) ?? []) {
        const to = component.get(dep.to);
        if (to === undefined) continue;
        if (to === c) {
          if (dep.negative) negativeCycles.push({ source: dep.source, cycle: cycleThrough(deps, member, dep.to, (n) => component.get(n) === c) });
          continue;
        }
        stratum = Math.max(stratum, componentStratum[to]! + (dep.negative ? 1 : 0));
      }
    }
    componentStratum[c] = stratum;
  });
  const stratum = new Map([...component].map(([pair, c]) => [pair, componentStratum[c]!]));
  return { stratum, negativeCycles };
}

/** A shortest path back from `to` to `from` within one component, as the cycle from → to → … → from. */
function cycleThrough(deps: Map<string, Dependency[]>, from: string, to: string, inComponent: (pair: string) => boolean): string[] {
  const previous = new Map<string, string>([[to, ""]]);
  const queue = [to];
  for (let i = 0; i < queue.length && !previous.has(from); i++) {
    const at = queue[i]!;
    for (const dep of deps.get(at) ?? []) {
      if (previous.has(dep.to) || !inComponent(dep.to)) continue;
      previous.set(dep.to, at);
      queue.push(dep.to);
    }
  }
  const back: string[] = [];
  for (let at: string | undefined = from; at !== undefined && at !== ""; at = previous.get(at)) back.push(at);
  return [from, ...back.reverse()];
}
