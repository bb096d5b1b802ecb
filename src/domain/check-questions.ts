/**
 * The check's questions (a check, a permissions question) and how they are
 * checked: their form before anything is read, and against the model the
 * statement read after (an unknown resource or action, a contextual grant
 * the catalog refuses: a 400 naming the field).
 */
import type { AccessModel } from "./access-model.js";
import type { Violations } from "./errors.js";
import { check, identifierProblem, tokenProblem } from "./formats.js";
import { checkQuestionFacts, type QuestionFacts } from "./question-facts.js";
import { checkContextualForm, checkContextualGrants, hasContextual, type ContextualGrant } from "./contextual-grants.js";

/** May the user perform the action on the instance? */
export interface CheckQuestion {
  userId: string;
  resource: string;
  resourceId: string;
  action: string;
  tenantId: string | undefined;
  /** What conditions may read beyond the ids (none: empty objects). */
  facts?: QuestionFacts | undefined;
  /** Grants counted for this question alone, as if stored (contextual-grants.ts). */
  contextualGrants?: readonly ContextualGrant[] | undefined;
  /**
   * Set by lookup alone, never from a request: the relations implying the
   * action that the graph's walk starts from, with the action's entries
   * (CheckInput.roots, lookup-reach.ts). Absent: all of them.
   */
  roots?: readonly string[] | undefined;
}

/** Every action the user may perform on the instance. */
export type PermissionsQuestion = Omit<CheckQuestion, "action" | "roots">;

export function validateInstance(v: Violations, q: PermissionsQuestion, at: (field: string) => string): void {
  check(v, at("userId"), identifierProblem(q.userId));
  check(v, at("resource"), tokenProblem(q.resource));
  check(v, at("resourceId"), identifierProblem(q.resourceId));
  if (q.tenantId !== undefined) check(v, at("tenantId"), identifierProblem(q.tenantId));
  if (q.facts !== undefined) checkQuestionFacts(v, q.facts, at);
  checkContextualForm(v, q.contextualGrants, at);
}

export function validateQuestion(v: Violations, q: CheckQuestion, at: (field: string) => string): void {
  check(v, at("userId"), identifierProblem(q.userId));
  check(v, at("resource"), tokenProblem(q.resource));
  check(v, at("resourceId"), identifierProblem(q.resourceId));
  check(v, at("action"), tokenProblem(q.action));
  if (q.tenantId !== undefined) check(v, at("tenantId"), identifierProblem(q.tenantId));
  if (q.facts !== undefined) checkQuestionFacts(v, q.facts, at);
  checkContextualForm(v, q.contextualGrants, at);
}

/** The catalog half of the answer: an unknown resource or action, or a contextual grant the catalog refuses, is a 400. */
export function known(v: Violations, model: AccessModel, q: CheckQuestion, nowMs: number | undefined, at: (field: string) => string): void {
  if (knownInstance(v, model, q, nowMs, at) && !model.hasAction(q.resource, q.action)) {
    v.add(at("action"), `"${q.action}" is not an action of resource "${q.resource}"`);
  }
}

/** knownResource, and the question's contextual grants checked as writes against the model, by the statement's clock. */
export function knownInstance(v: Violations, model: AccessModel, q: PermissionsQuestion, nowMs: number | undefined, at: (field: string) => string): boolean {
  checkContextualGrants(v, q.contextualGrants, model, nowMs ?? Date.now(), at);
  return knownResource(v, model, q, at);
}

/**
 * Whether the relations held are decided over the rows the question
 * reaches (operator-answers.ts): where the catalog has `requires` or
 * `unless`, and for a question with contextual grants.
 */
export const byDecision = (model: AccessModel, q: PermissionsQuestion): boolean => model.operators || hasContextual(q);

/** A question's facts as candidateRoots reads them: with contextual grants, every relation could be held. */
export const openFacts = <F extends { pathsPossible: boolean }>(q: PermissionsQuestion, facts: F): F => (hasContextual(q) ? { ...facts, pathsPossible: true } : facts);

function knownResource(v: Violations, model: AccessModel, q: PermissionsQuestion, at: (field: string) => string): boolean {
  if (model.hasResource(q.resource)) return true;
  v.add(at("resource"), `"${q.resource}" is not a resource of the catalog`);
  return false;
}


/**
 * A check answered from the check's own facts where the catalog's rules
 * allow it (AccessModel.quickRules: every entry on the instance, nothing
 * below with rules of its own) and nothing conditional is in the way (no
 * conditional grant on the instance, no conditional row that could lie on
 * a path, no contextual grant): some relation implying the action held,
 * each of its `requires` held and none of its `unless`. The walk started
 * from every entry too (GraphGroups.walks, part of the facts' shape), so
 * an entry not among the relations found is not held. Undefined: the
 * decision's statement answers.
 */
export function quickAnswer(
  model: AccessModel,
  q: CheckQuestion,
  facts: { relations: readonly string[]; conditional: readonly unknown[]; pathsPossible: boolean },
): boolean | undefined {
  if (hasContextual(q) || facts.pathsPossible || facts.conditional.length > 0) return undefined;
  const rules = model.quickRules(q.resource, q.action);
  if (rules === undefined) return undefined;
  const held = new Set(facts.relations);
  return rules.some((r) => held.has(r.relation) && r.requires.every((e) => held.has(e)) && !r.unless.some((e) => held.has(e)));
}
