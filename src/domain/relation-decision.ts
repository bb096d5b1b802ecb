/**
 * Who holds a relation when relations may require others and be cancelled
 * by others (API.md, "Relations within an instance, intersection and exclusion"), decided over the part of the
 * graph a question can reach: the grants, subject sets and links a store
 * read in one statement (DecisionGraph), and the catalog's rules.
 *
 * A user holds R on X within b hops when
 *   - base: a grant of R on X to the user (or every user) holds; or a
 *     grant of R on X to a subject set Y#r holds and the user holds r on Y
 *     within b-1; or R inherits r' within the instance and the user holds
 *     r' on X within b; or R inherits r' through L, a link X --L--> Y holds
 *     and the user holds r' on Y within b-1;
 *   - and every `requires` entry holds: r'' on X, or on some Y linked by
 *     its `through`, each within a fresh 16;
 *   - and no `unless` entry does, asked the same way.
 * Truth has three values: a grant whose condition cannot be decided (an
 * error, a missing fact) is unknown, and so is anything that depends on it
 * without being settled otherwise (Kleene's logic). Only a true answer
 * allows: an unknown `unless` denies, as an unknown grant does.
 *
 * Only the budget needed matters: held within b means b is at least the
 * fewest hops of a path whose nodes all pass their own `requires` and
 * `unless`, which do not depend on b (each is asked with a fresh 16). So a
 * node carries two numbers, the fewest hops to be true and to be at least
 * unknown (Infinity: never), settled like shortest paths. `requires` may
 * form cycles (through links, or other relations of the instance): the
 * least answer is wanted, so every node starts from "never" and only
 * improves. An `unless` reads a lower stratum (relation-strata.ts), final
 * before its readers are settled, so a negation never reads a value that
 * could still change.
 */
import { LIMITS } from "./formats.js";
import { pairKey, strataOf, type CatalogShape, type RelationRef, type RelationShape } from "./relation-strata.js";

export const FALSE = 0;
export const UNKNOWN = 1;
export const TRUE = 2;
export type Truth = typeof FALSE | typeof UNKNOWN | typeof TRUE;

/** Hops from an instance asked, and from each `requires` and `unless` entry's instance: the walks' bound. */
const DECISION_HOPS = LIMITS.hops;

export interface Node {
  resource: string;
  id: string;
  relation: string;
}

/** A grant of the node to the user or every user (`hops` 0), or a group the user was met in `hops` hops below it. */
export interface Held {
  truth: Truth;
  hops: number;
}

/** A grant of the node to a subject set (the node the set names). */
export interface SetGrant extends Node {
  truth: Truth;
}

/** A link from an instance to another. */
export interface Linked {
  resource: string;
  id: string;
  truth: Truth;
}

/** The rows a question can reach, as a store read them; every node the decision visits must be complete. */
export interface DecisionGraph {
  held(node: Node): readonly Held[];
  sets(node: Node): readonly SetGrant[];
  links(resource: string, id: string, link: string): readonly Linked[];
}

/** The catalog as the decision reads it: each relation's rules, and the strata of the pairs. */
export class DecisionRules {
  private readonly strata: ReadonlyMap<string, number>;

  constructor(private readonly catalog: CatalogShape) {
    this.strata = strataOf(catalog).stratum;
  }

  shape(resource: string, relation: string): RelationShape | undefined {
    return this.catalog.get(resource)?.get(relation);
  }

  stratum(resource: string, relation: string): number {
    return this.strata.get(pairKey(resource, relation)) ?? 0;
  }

}

/** Why a relation is or is not held on a node. */
export type Reason =
  /** Held by the user's (or every user's) own grant, or a group met from the user's side. */
  | { kind: "grant"; node: Node; hops: number }
  /** Held through a subject set or a link, or a rule within the instance: the next step, then its own reason. */
  | { kind: "step"; node: Node; via: "set" | "link" | "within"; next: Reason }
  /** Not held: an entry of `requires` does not hold, or one of `unless` does (or may). */
  | { kind: "blocked"; node: Node; list: "requires" | "unless"; index: number; truth: Truth }
  /** Not held: no grant, set, link or rule gives it within the bound. */
  | { kind: "none"; node: Node };

const key = (n: Node) => `${n.resource}\0${n.id}\0${n.relation}`;
const min3 = (a: Truth, b: Truth): Truth => (a < b ? a : b);
const not3 = (a: Truth): Truth => (2 - a) as Truth;

interface State {
  node: Node;
  stratum: number;
  /** Fewest hops to be true; to be at least unknown (Infinity: never). */
  t: number;
  u: number;
  /** The same by the base rules alone, before `requires` and `unless`. */
  bt: number;
  bu: number;
}

/**
 * The decision over one graph: the three-valued truth of any node, each
 * asked with the full bound, and why. Nodes are discovered from those
 * asked and settled on first use, with everything they depend on.
 */
export class Decision {
  private readonly states = new Map<string, State>();

  constructor(
    private readonly rules: DecisionRules,
    private readonly graph: DecisionGraph,
  ) {}

  /** The truth of the node with the full bound of hops. */
  truth(node: Node): Truth {
    const s = this.settled(node);
    return s.t <= DECISION_HOPS ? TRUE : s.u <= DECISION_HOPS ? UNKNOWN : FALSE;
  }

  /** Why the node is or is not held, with the full bound: the path of a true one, the entry that blocked a false one. */
  why(node: Node): Reason {
    this.settled(node);
    return this.reason(node, DECISION_HOPS);
  }

  private settled(node: Node): State {
    const k = key(node);
    const known = this.states.get(k);
    if (known !== undefined) return known;
    const fresh = this.discover(node);
    // Lower strata first; within a stratum, rounds until nothing improves.
    const byStratum = [...fresh].sort((a, b) => a.stratum - b.stratum);
    let i = 0;
    while (i < byStratum.length) {
      let j = i;
      while (j < byStratum.length && byStratum[j]!.stratum === byStratum[i]!.stratum) j++;
      const layer = byStratum.slice(i, j);
      for (let changed = true; changed; ) {
        changed = false;
        for (const s of layer) changed = this.improve(s) || changed;
      }
      i = j;
    }
    return this.states.get(k)!;
  }

  /** Every node the node depends on that is not yet known, as fresh states ("never"). */
  private discover(start: Node): State[] {
    const fresh: State[] = [];
    const visit = (node: Node) => {
      const k = key(node);
      if (this.states.has(k)) return;
      const s: State = { node, stratum: this.rules.stratum(node.resource, node.relation), t: Infinity, u: Infinity, bt: Infinity, bu: Infinity };
      this.states.set(k, s);
      fresh.push(s);
    };
    visit(start);
    for (let i = 0; i < fresh.length; i++) for (const dep of this.dependencies(fresh[i]!.node)) visit(dep);
    return fresh;
  }

  private *dependencies(node: Node): Generator<Node> {
    for (const g of this.graph.sets(node)) yield { resource: g.resource, id: g.id, relation: g.relation };
    const shape = this.rules.shape(node.resource, node.relation);
    if (shape === undefined) return;
    for (const ref of [...shape.inherits, ...shape.requires, ...shape.unless]) {
      for (const target of this.refNodes(node, ref)) yield target.node;
    }
  }

  /** The nodes a rule names from a node: this instance's relation, or the relation on each linked instance (with the link's truth). */
  private refNodes(node: Node, ref: RelationRef): { node: Node; link: Truth | undefined }[] {
    if (ref.through === "") return [{ node: { resource: node.resource, id: node.id, relation: ref.relation }, link: undefined }];
    return this.graph
      .links(node.resource, node.id, ref.through)
      .map((l) => ({ node: { resource: l.resource, id: l.id, relation: ref.relation }, link: l.truth }));
  }

  /** A settled node's value with the full bound, for `requires` and `unless` (read only once known). */
  private full(node: Node): Truth {
    const s = this.states.get(key(node))!;
    return s.t <= DECISION_HOPS ? TRUE : s.u <= DECISION_HOPS ? UNKNOWN : FALSE;
  }

  /**
   * A `requires` or `unless` entry of a settled node: the truth that the
   * user holds its relation on this instance, or on one linked by its
   * `through` (the link holding too), and the first instance, by id, where
   * it is true.
   */
  entry(node: Node, ref: RelationRef): { truth: Truth; where?: { resource: string; id: string } } {
    this.settled(node);
    return this.anyOf(node, ref);
  }

  private anyOf(node: Node, ref: RelationRef): { truth: Truth; where?: { resource: string; id: string } } {
    if (ref.through === "") {
      const truth = this.full({ resource: node.resource, id: node.id, relation: ref.relation });
      return truth === TRUE ? { truth, where: { resource: node.resource, id: node.id } } : { truth };
    }
    let best: Truth = FALSE;
    let where: { resource: string; id: string } | undefined;
    for (const l of this.graph.links(node.resource, node.id, ref.through)) {
      const t = min3(l.truth, this.full({ resource: l.resource, id: l.id, relation: ref.relation }));
      if (t === TRUE && (where === undefined || l.id < where.id)) where = { resource: l.resource, id: l.id };
      if (t > best) best = t;
    }
    return where === undefined ? { truth: best } : { truth: best, where };
  }

  /** The node's `requires` and `unless`, each with a fresh bound: the truth that they let it be held. */
  private guard(node: Node): { truth: Truth; list?: "requires" | "unless"; index?: number } {
    const shape = this.rules.shape(node.resource, node.relation);
    let truth: Truth = TRUE;
    let blame: { list: "requires" | "unless"; index: number } | undefined;
    const meet = (t: Truth, list: "requires" | "unless", index: number) => {
      if (t < truth) {
        truth = t;
        blame = { list, index };
      }
    };
    shape?.requires.forEach((ref, index) => meet(this.anyOf(node, ref).truth, "requires", index));
    shape?.unless.forEach((ref, index) => meet(not3(this.anyOf(node, ref).truth), "unless", index));
    return { truth, ...blame };
  }

  /** The fewest hops (to be true, to be at least unknown) the base rules give the node from current values. */
  private base(node: Node): { t: number; u: number } {
    let t = Infinity;
    let u = Infinity;
    const offer = (truth: Truth, hops: number) => {
      if (truth === TRUE && hops < t) t = hops;
      if (truth !== FALSE && hops < u) u = hops;
    };
    // Through a row (a set's grant, a link; none within the instance) to a child's hops.
    // The way is as true as the row and the child both are.
    const through = (truth: Truth | undefined, childT: number, childU: number, cost: number) => {
      if (truth !== FALSE) offer(UNKNOWN, childU + cost);
      if (truth === undefined || truth === TRUE) offer(TRUE, childT + cost);
    };
    for (const h of this.graph.held(node)) offer(h.truth, h.hops);
    for (const g of this.graph.sets(node)) {
      const c = this.states.get(key(g))!;
      through(g.truth, c.t, c.u, 1);
    }
    const shape = this.rules.shape(node.resource, node.relation);
    for (const ref of shape?.inherits ?? []) {
      for (const target of this.refNodes(node, ref)) {
        const c = this.states.get(key(target.node))!;
        through(target.link, c.t, c.u, target.link === undefined ? 0 : 1);
      }
    }
    return { t, u };
  }

  /** One round for a state: true when it improved. */
  private improve(s: State): boolean {
    const g = this.guard(s.node).truth;
    const b = this.base(s.node);
    const bt = b.t <= DECISION_HOPS ? b.t : Infinity;
    const bu = b.u <= DECISION_HOPS ? b.u : Infinity;
    const t = g === TRUE ? bt : Infinity;
    const u = g !== FALSE ? bu : Infinity;
    if (t >= s.t && u >= s.u && bt >= s.bt && bu >= s.bu) return false;
    s.t = Math.min(s.t, t);
    s.u = Math.min(s.u, u);
    s.bt = Math.min(s.bt, bt);
    s.bu = Math.min(s.bu, bu);
    return true;
  }

  /** Why, within `budget` hops: the cheapest true way, or the guard or absence that denies. */
  private reason(node: Node, budget: number): Reason {
    const s = this.states.get(key(node))!;
    const guard = this.guard(node);
    if (guard.truth !== TRUE && guard.list !== undefined && s.bu <= budget) return { kind: "blocked", node, list: guard.list, index: guard.index!, truth: guard.truth };
    if (s.t > budget) return { kind: "none", node };
    for (const h of this.graph.held(node)) if (h.truth === TRUE && h.hops <= budget && h.hops === s.t) return { kind: "grant", node, hops: h.hops };
    for (const g of this.graph.sets(node)) {
      const c = this.states.get(key(g))!;
      if (g.truth === TRUE && c.t + 1 === s.t) return { kind: "step", node, via: "set", next: this.reason(g, budget - 1) };
    }
    const shape = this.rules.shape(node.resource, node.relation);
    for (const ref of shape?.inherits ?? []) {
      for (const target of this.refNodes(node, ref)) {
        const cost = target.link === undefined ? 0 : 1;
        const c = this.states.get(key(target.node))!;
        if ((target.link === undefined || target.link === TRUE) && c.t + cost === s.t) {
          return { kind: "step", node, via: cost === 0 ? "within" : "link", next: this.reason(target.node, budget - cost) };
        }
      }
    }
    return { kind: "none", node };
  }
}
