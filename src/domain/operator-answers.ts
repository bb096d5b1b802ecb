/**
 * The check's answers where the catalog has `requires` or `unless` (API.md,
 * "Relations within an instance, intersection and exclusion"; docs/exclusion.md). The check's own statement walks
 * grants, subject sets, links and `inherits` as before: with these rules
 * in the catalog what it finds held is a superset of what is (a rule can
 * only take away), so a question it finds nothing for is denied as it
 * was. For the others, one more statement for the batch
 * (decision-store.ts) reads the rows each question can reach, the
 * `requires` and `unless` entries' own walks included, and the relations
 * held are decided over them (relation-decision.ts), each row's condition
 * evaluated with the question's facts.
 */
import type { Coalescer } from "../lib/coalescer.js";
import type { Telemetry } from "../lib/telemetry.js";
import type { Db } from "../store/db.js";
import type { ReadReplicas } from "../store/read-replicas.js";
import { DecisionStatements, type DecisionInput, type DecisionRows } from "../store/decision-store.js";
import { exactReads } from "./exact-read.js";
import { contextEdges, withContextual, type ContextualGrant } from "./contextual-grants.js";
import type { AccessModel, AccessModels } from "./access-model.js";
import { CONDITION_LIMITS, type Condition, type ConditionBindings } from "./conditions.js";
import { unavailable } from "./errors.js";
import { PROCESS_CPU } from "./fair-cpu.js";
import { LIMITS } from "./formats.js";
import { Decision, FALSE, TRUE, UNKNOWN, type DecisionGraph, type Held, type Linked, type SetGrant, type Truth } from "./relation-decision.js";

/** One question to decide: which of `actions` the user's relations on the instance allow. */
export interface OperatorItem<Q extends Instance = Instance> {
  model: AccessModel;
  question: Q;
  /** The relations of the instance to decide (candidateRoots): no other is held. */
  roots: readonly string[];
  actions: readonly string[];
  /** The question's contextual grants (contextual-grants.ts): counted as if stored. */
  contextual?: readonly ContextualGrant[] | undefined;
}

interface Instance {
  userId: string;
  resource: string;
  resourceId: string;
}

/** The truth of each condition (by source) for the question and action, with the statement's clock. */
export type Evaluate<Q extends Instance> = (question: Q, action: string, sources: readonly string[], nowMs: number) => Promise<ReadonlyMap<string, Truth>>;

/**
 * The relations implying one of `actions` the user could hold, with these
 * rules: those the check's statement found held (with no condition, or by a
 * conditional grant on the instance), or every one where a conditional row
 * could lie on a path. The walks follow no `requires` or `unless`, and
 * those can only take away: a relation they did not find is not held, and
 * none found is a denial with no second statement.
 */
export function candidateRoots(
  model: AccessModel,
  resource: string,
  actions: readonly string[],
  facts: { relations: readonly string[]; conditional: readonly { relation: string }[]; pathsPossible: boolean },
): string[] {
  const implying = [...new Set(actions.flatMap((a) => model.relationsImplying(resource, a)))];
  if (facts.pathsPossible) return implying;
  return implying.filter((r) => facts.relations.includes(r) || facts.conditional.some((c) => c.relation === r));
}

/** A question's facts with what its roles give alone: the relations are decided apart. */
export const rolesOnly = <F extends { relations: readonly string[]; conditional: readonly unknown[]; pathsPossible: boolean }>(facts: F): F => ({
  ...facts,
  relations: [],
  conditional: [],
  pathsPossible: false,
});

export class OperatorAnswers {
  private readonly reads: Coalescer<DecisionInput, DecisionRows>;

  constructor(
    db: Db,
    replicas: ReadReplicas | undefined,
    telemetry: Telemetry,
    private readonly models: AccessModels,
  ) {
    const statements = new DecisionStatements();
    this.reads = exactReads(db, replicas, (q, inputs, options) => statements.rows(q, inputs, options), { maxBatch: LIMITS.batchChecks, reads: "decisions", telemetry });
  }

  /** For each item, the actions among its `actions` that a relation the user holds on the instance implies. */
  async allowed<Q extends Instance>(appId: string, items: readonly OperatorItem<Q>[], evaluate: Evaluate<Q>): Promise<string[][]> {
    if (items.length === 0) return [];
    const rows = await this.reads.callAll(
      items.map(({ question: q, roots, contextual }) => ({ appId, userId: q.userId, resource: q.resource, resourceId: q.resourceId, roots, contextual: contextEdges(contextual) })),
    );
    return Promise.all(items.map((item, k) => this.allowedOne(appId, item, rows[k]!, evaluate)));
  }

  private async allowedOne<Q extends Instance>(appId: string, item: OperatorItem<Q>, first: DecisionRows, evaluate: Evaluate<Q>): Promise<string[]> {
    const { resource, resourceId, userId } = item.question;
    let rows = first;
    let model: AccessModel | undefined;
    // The rules the walk followed are those of the version it read: that model, or the rows read again with the newer one.
    for (let reads = 1; ; reads++) {
      // A walk cut at its bound could have missed an `unless`: nothing is taken as held.
      if (rows.truncated || rows.version === null) return [];
      model = item.model.version === rows.version ? item.model : (this.models.cached(appId, rows.version) ?? (await this.models.load(appId)));
      if (model?.version === rows.version) break;
      if (reads >= MAX_READS) throw unavailable("the access model kept changing under the check; try again");
      rows = await this.reads.call({ appId, userId, resource, resourceId, roots: item.roots, contextual: contextEdges(item.contextual) });
    }
    rows = withContextual(rows, userId, item.contextual);
    const sources = conditionsOf(rows);
    const out: string[] = [];
    let shared: Decision | undefined;
    for (const action of item.actions) {
      const relations = model.relationsImplying(resource, action);
      if (relations.length === 0) continue;
      // Conditions may read the action's name: a decision per action only where the rows carry some.
      const decision =
        sources.length === 0
          ? (shared ??= new Decision(model.decisionRules, graphOf(rows, new Map())))
          : new Decision(model.decisionRules, graphOf(rows, await evaluate(item.question, action, sources, rows.nowMs)));
      if (relations.some((relation) => decision.truth({ resource, id: resourceId, relation }) === TRUE)) out.push(action);
    }
    return out;
  }

}

/** Reads of a question's rows before it gives up on a model that keeps changing. */
const MAX_READS = 3;

/** The distinct conditions of the rows a decision reads. */
export function conditionsOf(rows: DecisionRows): string[] {
  const out = new Set<string>();
  for (const r of rows.held) if (r[3] !== null) out.add(r[3]);
  for (const r of rows.sets) if (r[6] !== null) out.add(r[6]);
  for (const r of rows.links) if (r[5] !== null) out.add(r[5]);
  return [...out];
}

const nodeKey = (resource: string, id: string, relation: string) => `${resource}\0${id}\0${relation}`;

/** Values by key, in the order given. */
export function grouped<V>(entries: Iterable<[string, V]>): Map<string, V[]> {
  const out = new Map<string, V[]>();
  for (const [k, v] of entries) {
    const list = out.get(k);
    if (list === undefined) out.set(k, [v]);
    else list.push(v);
  }
  return out;
}

/** The rows as the decision reads them, a row with a condition as true as that condition is (no condition: true). */
export function graphOf(rows: DecisionRows, truths: ReadonlyMap<string, Truth>): DecisionGraph {
  const truth = (condition: string | null): Truth => (condition === null ? TRUE : (truths.get(condition) ?? UNKNOWN));
  const held = grouped<Held>(rows.held.map(([r, i, l, c]) => [nodeKey(r, i, l), { truth: truth(c), hops: 0 }]));
  const sets = grouped<SetGrant>(rows.sets.map(([r, i, l, sr, si, sl, c]) => [nodeKey(r, i, l), { resource: sr, id: si, relation: sl, truth: truth(c) }]));
  const links = grouped<Linked>(rows.links.map(([r, i, l, tr, ti, c]) => [nodeKey(r, i, l), { resource: tr, id: ti, truth: truth(c) }]));
  return {
    held: (n) => held.get(nodeKey(n.resource, n.id, n.relation)) ?? [],
    sets: (n) => sets.get(nodeKey(n.resource, n.id, n.relation)) ?? [],
    links: (resource, id, link) => links.get(nodeKey(resource, id, link)) ?? [],
  };
}

/**
 * Each condition's truth with the question's bindings, each evaluated once,
 * in the application's turn, all within CONDITION_LIMITS.questionBudget:
 * true when it holds, false when it is false, unknown when it errs, is no
 * bool or is past the budget. Unknown denies where a grant needs it and
 * where an `unless` entry could hold by it.
 */
export async function conditionTruths(appId: string, conditions: readonly Condition[], bindings: ConditionBindings): Promise<Map<string, Truth>> {
  const out = new Map<string, Truth>();
  let left = CONDITION_LIMITS.questionBudget;
  for (const c of conditions) {
    if (out.has(c.source)) continue;
    if (left <= 0) {
      out.set(c.source, UNKNOWN);
      continue;
    }
    const [outcome, spent] = await PROCESS_CPU.run(appId, () => c.evaluateWithin(bindings, Math.min(left, CONDITION_LIMITS.budget)));
    left -= spent;
    out.set(c.source, outcome.holds ? TRUE : outcome.reason === "false" ? FALSE : UNKNOWN);
  }
  return out;
}
