import { Coalescer } from "../lib/coalescer.js";
import { NO_TELEMETRY, type Telemetry } from "../lib/telemetry.js";
import { ALL_USERS_ID } from "../store/all-users.js";
import type { Db } from "../store/db.js";
import { explainStore, type ExplainInput, type ExplainRow } from "../store/explain-store.js";
import type { ReadReplicas } from "../store/read-replicas.js";
import type { Caller, CheckQuestion } from "./check.js";
import { Checker } from "./check.js";
import { validateQuestion } from "./check-questions.js";
import { checkContextualGrants, hasContextual } from "./contextual-grants.js";
import { contextualSteps, withContextualRows } from "./contextual-explain.js";
import type { AccessModel } from "./access-model.js";
import { unavailable, Violations } from "./errors.js";
import { Decision, FALSE, TRUE, UNKNOWN, type DecisionGraph, type DecisionRules, type Held, type Linked, type Node, type SetGrant, type Truth } from "./relation-decision.js";
import { grouped } from "./operator-answers.js";
import type { ConditionOutcome } from "./conditions.js";
import { exactReads, requireAnswerable } from "./exact-read.js";
import { LIMITS } from "./formats.js";
import type { Subject } from "./subjects.js";
import type { PathGrantRow, WalkEdgeRow } from "../store/explain-store.js";
import { ConditionCache, type ConditionRead } from "./conditions.js";
import { bindingsOf, NO_FACTS, withStoredProperties } from "./question-facts.js";

/** A grant as explain shows it: the holder is the user `userId`, or `subject` (userId ""), or every user (allUsers, userId ""). */
export interface ExplainedGrant {
  userId: string;
  /** An allUsers grant: every user holds it. */
  allUsers?: boolean;
  resource: string;
  resourceId: string;
  relation: string;
  subject?: Subject;
  /** When it was stored; null for a contextual grant, which never is. */
  createdAt: Date | null;
  expiresAt: Date | null;
  condition: string | null;
  /** One of the question's contextual grants: counted for it alone, never stored. */
  contextual?: true;
}

/** A condition explain evaluated, with what it came to and the values it read. */
export interface EvaluatedCondition {
  /** The grant's relation ("" for an assignment's condition). */
  relation: string;
  /** The assignment's role (an assignment's condition), or the role whose policy carries it. */
  roleId?: string;
  /** The policy that carries it (a policy's condition). */
  policyId?: string;
  condition: string;
  holds: boolean;
  outcome: "true" | "false" | "error" | "not a bool";
  message: string;
  reads: ConditionRead[];
  /** The clock it was evaluated with, when it reads `now` (the statement's, as the check's). */
  now?: Date;
}

export type ExplainReason =
  | {
      kind: "relation";
      relation: string;
      /** The grant on the instance: the last of `path`. */
      grant: ExplainedGrant;
      /** From the user's own grant to `grant`, a path with the fewest hops. */
      path: ExplainedGrant[];
      /** Each `requires` entry of the relation, which held (docs/exclusion.md). */
      requires?: ExplainedRuleEntry[];
    }
  | {
      kind: "role";
      roleId: string;
      roleName: string;
      tenantId: string | undefined;
      policyId: string;
      policyName: string;
      permission: string;
    };

/** A `requires` or `unless` entry as it decided a relation: whether it holds, and where, by which path. */
export interface ExplainedRuleEntry {
  rule: "requires" | "unless";
  index: number;
  through: string;
  relation: string;
  holds: "true" | "false" | "unknown";
  /** Where it holds ("" where it does not). */
  resource: string;
  resourceId: string;
  path: ExplainedGrant[];
}

export interface Explanation {
  allowed: boolean;
  reasons: ExplainReason[];
  /** Relations implying the action that a `requires` or `unless` entry took away. */
  blocked: { relation: string; entry: ExplainedRuleEntry }[];
  /**
   * Every condition evaluated: of grants on paths (the instance's and those on the way) to a
   * relation implying the action that no path without conditions gives, of assignments and of
   * policies of roles that hold it.
   */
  conditions: EvaluatedCondition[];
  considered: {
    relations: { relation: string; actions: string[] }[];
    roles: { roleId: string; roleName: string; tenantId: string | undefined }[];
  };
}

/**
 * Why the check answers as it does, for people: every grant whose relation
 * implies the action, then every (role, policy) that holds the permission,
 * roles by name; and what the user holds that could count. Read in one
 * statement from the tables the check's own data derives from, so on the
 * same state `allowed` (some reason exists) equals the check's answer; the
 * differential tests hold the two together. Questions asked together share
 * one statement per application (see Coalescer). A question's contextual
 * grants count as the check counts them (contextual-explain.ts): it is
 * decided over the rows, as where the catalog has `requires` or `unless`,
 * and each of them on a path is marked `contextual`.
 */
export class Explainer {
  private readonly coalesced: Coalescer<ExplainInput, ExplainRow>;

  constructor(
    private readonly db: Db,
    replicas?: ReadReplicas,
    telemetry: Telemetry = NO_TELEMETRY,
    private readonly checker: Checker = new Checker(db, replicas, telemetry),
  ) {
    this.coalesced = exactReads(db, replicas, explainStore.explain, { maxBatch: 100, reads: "explain", telemetry });
  }

  async explain(caller: Caller, q: CheckQuestion): Promise<Explanation> {
    const v = new Violations();
    validateQuestion(v, q, (field) => field);
    v.throwIfAny();
    // With requires and unless, what is held is decided over the walk's rows, by the rules of the version the statement read:
    // that model, or the statement asked again with the newer one.
    let row: ExplainRow;
    let model: AccessModel | undefined;
    for (let reads = 1; ; reads++) {
      row = await this.coalesced.call({ appId: caller.appId, keyHash: caller.keyHash, ...q, contextual: contextualSteps(q.contextualGrants) });
      requireAnswerable(row, q);
      model = row.version === null ? undefined : await this.checker.modelAt(caller.appId, row.version);
      if (model !== undefined && model.version === row.version) break;
      if (reads >= 3) throw unavailable("the access model kept changing under explain; try again");
    }
    // The contextual grants, checked as the check checks them: as writes, against the model read, by the statement's clock.
    checkContextualGrants(v, q.contextualGrants, model, row.nowMs, (field) => field);
    v.throwIfAny();
    const contextual = hasContextual(q);
    if (contextual) row = withContextualRows(row, q.userId, q.contextualGrants);
    // The user's stored properties, when a condition it may evaluate may read them.
    const sources = [
      ...row.grants.map((g) => g[9]),
      ...row.edges.map((e) => e[1]?.[9] ?? null),
      ...row.roles.flatMap((r) => [r.condition, ...r.policies.map((p) => p.condition)]),
    ].filter((c): c is string => c !== null);
    const facts = sources.some((c) => this.conditions.get(c).readsSubjectProperties)
      ? await withStoredProperties(this.db, caller.appId, q.userId, q.facts ?? NO_FACTS)
      : (q.facts ?? NO_FACTS);
    // With contextual grants, as the check: decided over the rows, whatever the catalog's rules.
    return explanation({ ...q, facts }, row, this.conditions, model.operators || contextual ? model.decisionRules : undefined);
  }

  private readonly conditions = new ConditionCache();
}

const grantOf = ([resource, resourceId, relation, userId, sResource, sId, sRelation, created, expires, condition, contextual]: PathGrantRow): ExplainedGrant => ({
  userId,
  // A row of relationships under the reserved id (store/all-users.ts).
  ...(sResource === null && userId === ALL_USERS_ID ? { allUsers: true } : {}),
  resource,
  resourceId,
  relation,
  ...(sResource === null ? {} : { subject: { resource: sResource, resourceId: sId!, relation: sRelation! } }),
  createdAt: created === null ? null : new Date(Number(created)),
  expiresAt: expires === null ? null : new Date(Number(expires)),
  condition: condition ?? null,
  ...(contextual === true ? { contextual } : {}),
});

export const nodeKey = (resource: string, resourceId: string, relation: string) => JSON.stringify([resource, resourceId, relation]);

/**
 * For each relation of the instance, a path with the fewest hops from the
 * user's own grant to the grant on the instance, found breadth first over
 * the walk's edges (each edge: the node left, its grant, the node reached;
 * a step within the instance has no grant and costs no hop, so it joins the
 * frontier it leaves); undefined for a relation the user does not hold.
 * Only grants `usable` counts are followed or start a path (asked lazily,
 * in breadth-first order: a condition is evaluated only when the search
 * reaches its grant). The path lists grants only.
 */
export function shortestPaths(
  q: CheckQuestion,
  relations: string[],
  edges: WalkEdgeRow[],
  grants: PathGrantRow[],
  usable: (g: PathGrantRow) => boolean,
  /** Whether a node may be on a path (with requires and unless: only a node the user holds). */
  nodeOk: (node: string) => boolean = () => true,
  /** The node a relation's path starts from: the instance's, unless said otherwise. */
  startOf: (relation: string) => string = (relation) => nodeKey(q.resource, q.resourceId, relation),
): Map<string, PathGrantRow[]> {
  const out = new Map<string, [string, PathGrantRow | null][]>();
  for (const [from, grant, to] of edges) {
    const key = nodeKey(...from);
    const list = out.get(key);
    const step: [string, PathGrantRow | null] = [nodeKey(...to), grant];
    if (list === undefined) out.set(key, [step]);
    else list.push(step);
  }
  // The user's grants on each node, those with no condition first; then,
  // where the user holds a node both by their own grant and by an allUsers
  // one, the path starts from theirs.
  const rank = (g: PathGrantRow) => (g[9] === null ? 0 : 2) + (g[3] === ALL_USERS_ID ? 1 : 0);
  const own = new Map<string, PathGrantRow[]>();
  for (const g of [...grants].sort((a, b) => rank(a) - rank(b))) {
    const key = nodeKey(g[0], g[1], g[2]);
    const list = own.get(key);
    if (list === undefined) own.set(key, [g]);
    else list.push(g);
  }
  const heldBy = (node: string) => (nodeOk(node) ? own.get(node)?.find(usable) : undefined);
  const paths = new Map<string, PathGrantRow[]>();
  for (const relation of relations) {
    const start = startOf(relation);
    // Each node's way back: the node before it and the grant between (null: a step within the instance).
    const back = new Map<string, [string, PathGrantRow | null] | null>([[start, null]]);
    /** `nodes` and every node they reach by steps within an instance, each once. */
    const closed = (nodes: string[]): string[] => {
      const all = [...nodes];
      for (let i = 0; i < all.length; i++) {
        for (const [to, grant] of out.get(all[i]!) ?? []) {
          if (grant !== null || back.has(to) || !nodeOk(to)) continue;
          back.set(to, [all[i]!, null]);
          all.push(to);
        }
      }
      return all;
    };
    let frontier = closed([start]);
    let found: [string, PathGrantRow] | undefined;
    // The same bound as the check's walk from this relation: edges the walk
    // took from another relation may reach further.
    for (let hops = 0; frontier.length > 0; hops++) {
      for (const node of frontier) {
        const grant = heldBy(node);
        if (grant !== undefined) {
          found = [node, grant];
          break;
        }
      }
      if (found !== undefined || hops === LIMITS.hops) break;
      const next: string[] = [];
      for (const node of frontier) {
        for (const [to, grant] of out.get(node) ?? []) {
          if (grant === null || back.has(to) || !usable(grant) || !nodeOk(to)) continue;
          back.set(to, [node, grant]);
          next.push(to);
        }
      }
      frontier = closed(next);
    }
    if (found === undefined) continue;
    const path: PathGrantRow[] = [found[1]];
    for (let step = back.get(found[0]); step !== null && step !== undefined; step = back.get(step[0])) {
      if (step[1] !== null) path.push(step[1]);
    }
    paths.set(relation, path);
  }
  return paths;
}

/**
 * The answer as the check gives it: grants with no condition count along
 * any path; where they give no relation implying the action, paths through
 * grants with a condition (on the instance, or on the way: a membership, a
 * subject set, a link, a grant on a node) count where every condition on
 * them holds with the question's facts (`resource` is the instance asked
 * about). Each condition is evaluated once, when the search first reaches
 * a grant carrying it, and listed with its outcome and the values it read.
 */
function explanation(q: CheckQuestion, row: ExplainRow, cache: ConditionCache, rules: DecisionRules | undefined): Explanation {
  const reasons: ExplainReason[] = [];
  const conditions: EvaluatedCondition[] = [];
  const blocked: Explanation["blocked"] = [];
  // The relations' own steps: those into `requires` and `unless` entries are read by the decision only.
  const edges = row.edges.filter((e) => e[3] === "");
  const outcomes = new Map<string, ConditionOutcome>();
  const outcomeOf = (g: PathGrantRow): ConditionOutcome => {
    if (g[9] === null) return { holds: true };
    const key = `${g[2]}\n${g[9]}`;
    let outcome = outcomes.get(key);
    if (outcome !== undefined) return outcome;
    const reads: ConditionRead[] = [];
    const condition = cache.get(g[9]);
    outcome = condition.evaluate(bindingsOf(q, q.action, q.facts ?? NO_FACTS, row.nowMs, reads));
    conditions.push({
      relation: g[2],
      condition: g[9],
      holds: outcome.holds,
      outcome: outcome.holds ? "true" : outcome.reason,
      message: outcome.holds ? "" : outcome.message,
      reads,
      ...(condition.readsNow ? { now: new Date(row.nowMs) } : {}),
    });
    outcomes.set(key, outcome);
    return outcome;
  };
  const holds = (g: PathGrantRow): boolean => outcomeOf(g).holds;
  let paths: Map<string, PathGrantRow[]>;
  let requires = new Map<string, ExplainedRuleEntry[]>();
  if (rules === undefined) {
    const relations = row.relations.map((r) => r.relation);
    paths = shortestPaths(q, relations, edges, row.grants, (g) => g[9] === null);
    const open = row.relations.filter((r) => !paths.has(r.relation) && r.actions.includes(q.action)).map((r) => r.relation);
    if (open.length > 0 && (row.grants.some((g) => g[9] !== null) || edges.some((e) => e[1] !== null && e[1][9] !== null))) {
      for (const [relation, path] of shortestPaths(q, open, edges, row.grants, holds)) paths.set(relation, path);
    }
  } else {
    const truthOf = (g: PathGrantRow): Truth => {
      const outcome = outcomeOf(g);
      return outcome.holds ? TRUE : outcome.reason === "false" ? FALSE : UNKNOWN;
    };
    ({ paths, requires } = decided(q, row, edges, rules, truthOf, blocked));
  }
  const held = row.relations.filter((r) => paths.has(r.relation)).sort((a, b) => (a.relation < b.relation ? -1 : a.relation > b.relation ? 1 : 0));
  for (const r of held) {
    if (!r.actions.includes(q.action)) continue;
    const path = paths.get(r.relation)!.map(grantOf);
    const entries = requires.get(r.relation);
    reasons.push({ kind: "relation", relation: r.relation, grant: path[path.length - 1]!, path, ...(entries === undefined ? {} : { requires: entries }) });
  }
  const evaluate = (source: string, where: { roleId: string; policyId?: string }) => {
    const reads: ConditionRead[] = [];
    const condition = cache.get(source);
    const outcome = condition.evaluate(bindingsOf(q, q.action, q.facts ?? NO_FACTS, row.nowMs, reads));
    conditions.push({
      relation: "",
      ...where,
      condition: source,
      holds: outcome.holds,
      outcome: outcome.holds ? "true" : outcome.reason,
      message: outcome.holds ? "" : outcome.message,
      reads,
      ...(condition.readsNow ? { now: new Date(row.nowMs) } : {}),
    });
    return outcome.holds;
  };
  // An assignment with a condition counts where it holds, evaluated when its
  // role holds the permission; then each of its policies with a condition
  // counts where that holds too.
  const counted = row.roles.filter((role) => role.policies.length > 0 && (role.condition === null || evaluate(role.condition, { roleId: role.roleId })));
  for (const role of counted) {
    for (const policy of role.policies) {
      if (policy.condition !== null && !evaluate(policy.condition, { roleId: role.roleId, policyId: policy.policyId })) continue;
      reasons.push({
        kind: "role",
        roleId: role.roleId,
        roleName: role.name,
        tenantId: role.tenantId ?? undefined,
        policyId: policy.policyId,
        policyName: policy.name,
        permission: `${q.resource}:${q.action}`,
      });
    }
  }
  return {
    allowed: reasons.length > 0,
    reasons,
    blocked,
    conditions,
    considered: {
      relations: held.map((r) => ({ relation: r.relation, actions: r.actions })),
      roles: row.roles.map((r) => ({ roleId: r.roleId, roleName: r.name, tenantId: r.tenantId ?? undefined })),
    },
  };
}

const TRUTH_WORD = { [TRUE]: "true", [FALSE]: "false", [UNKNOWN]: "unknown" } as const;
const keyOf = (n: Node) => nodeKey(n.resource, n.id, n.relation);
const nodeOf = (key: string): Node => {
  const [resource, id, relation] = JSON.parse(key) as [string, string, string];
  return { resource, id, relation };
};

/**
 * Where the catalog has `requires` and `unless` (docs/exclusion.md): the
 * relations held, decided over the walk's rows (each condition's truth with
 * the question's facts) as the check decides them; for each, a path with
 * the fewest hops through nodes the user holds, and the `requires` entries
 * that held, each with where and by which path; each relation implying the
 * action that an entry took away goes to `blocked` with that entry.
 */
function decided(
  q: CheckQuestion,
  row: ExplainRow,
  edges: WalkEdgeRow[],
  rules: DecisionRules,
  truthOf: (g: PathGrantRow) => Truth,
  blocked: Explanation["blocked"],
): { paths: Map<string, PathGrantRow[]>; requires: Map<string, ExplainedRuleEntry[]> } {
  const grants = grouped(row.grants.map((g): [string, PathGrantRow] => [nodeKey(g[0], g[1], g[2]), g]));
  const sets = grouped(edges.flatMap((e) => (e[1] !== null && e[1][6] !== null && e[1][6] !== "" ? [[nodeKey(...e[0]), e[1]] as [string, PathGrantRow]] : [])));
  // A link's grant is (instance, link relation → linked instance), whichever rule walked it.
  const linkRows = new Map<string, PathGrantRow>();
  for (const e of row.edges) if (e[1] !== null && e[1][6] === "") linkRows.set(JSON.stringify(e[1].slice(0, 6)), e[1]);
  const links = grouped([...linkRows.values()].map((g): [string, PathGrantRow] => [nodeKey(g[0], g[1], g[2]), g]));
  const graph: DecisionGraph = {
    held: (n) => (grants.get(keyOf(n)) ?? []).map((g): Held => ({ truth: truthOf(g), hops: 0 })),
    sets: (n) => (sets.get(keyOf(n)) ?? []).map((g): SetGrant => ({ resource: g[4]!, id: g[5]!, relation: g[6]!, truth: truthOf(g) })),
    links: (resource, id, link) => (links.get(nodeKey(resource, id, link)) ?? []).map((g): Linked => ({ resource: g[4]!, id: g[5]!, truth: truthOf(g) })),
  };
  const decision = new Decision(rules, graph);
  const holdsNode = (key: string) => decision.truth(nodeOf(key)) === TRUE;
  const usable = (g: PathGrantRow) => truthOf(g) === TRUE;
  const pathFrom = (start: string) => shortestPaths(q, [""], edges, row.grants, usable, holdsNode, () => start).get("") ?? [];
  const entryOf = (node: Node, rule: "requires" | "unless", index: number): ExplainedRuleEntry => {
    const ref = rules.shape(node.resource, node.relation)![rule][index]!;
    const { truth, where } = decision.entry(node, ref);
    return {
      rule,
      index,
      through: ref.through,
      relation: ref.relation,
      holds: TRUTH_WORD[truth],
      resource: where?.resource ?? "",
      resourceId: where?.id ?? "",
      path: where === undefined ? [] : pathFrom(nodeKey(where.resource, where.id, ref.relation)).map(grantOf),
    };
  };
  const paths = new Map<string, PathGrantRow[]>();
  const requires = new Map<string, ExplainedRuleEntry[]>();
  for (const r of row.relations) {
    const node = { resource: q.resource, id: q.resourceId, relation: r.relation };
    if (decision.truth(node) === TRUE) {
      const path = pathFrom(keyOf(node));
      if (path.length === 0) continue;
      paths.set(r.relation, path);
      const entries = (rules.shape(q.resource, r.relation)?.requires ?? []).map((_, j) => entryOf(node, "requires", j));
      if (entries.length > 0) requires.set(r.relation, entries);
      continue;
    }
    const why = decision.why(node);
    if (why.kind === "blocked" && r.actions.includes(q.action)) blocked.push({ relation: r.relation, entry: entryOf(node, why.list, why.index) });
  }
  return { paths, requires };
}
