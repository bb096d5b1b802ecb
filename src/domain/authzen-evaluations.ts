/**
 * AuthZEN's Access Evaluation and Access Evaluations APIs (docs/authzen.md)
 * on the check: one statement for a request, however many items it has.
 */
import { decide, unlessUnknown, verifyKey } from "./authzen-answers.js";
import { evaluationOf, questionOf, withDefaults, type RequestParts } from "./authzen-requests.js";
import type { Caller, Checker, CheckQuestion } from "./check.js";
import { invalidArgument, Violations } from "./errors.js";
import { LIMITS, show } from "./formats.js";

export const EVALUATIONS_SEMANTICS = ["execute_all", "deny_on_first_deny", "permit_on_first_permit"] as const;
export type EvaluationsSemantic = (typeof EVALUATIONS_SEMANTICS)[number];

export interface EvaluationsInput extends RequestParts {
  evaluations: RequestParts[];
  /** "" for the default, execute_all. */
  semantic: string;
}

/** An item's answer; `error` when it could not be evaluated (it is then a deny, as the standard says). */
export interface ItemDecision {
  decision: boolean;
  error?: { status: number; message: string };
}

/** The answer of Access Evaluations: one decision when the request had no items, else one per item (maybe cut short). */
export type EvaluationsAnswer = { decision: boolean } | { evaluations: ItemDecision[] };

export class AccessEvaluations {
  constructor(private readonly checker: Checker) {}

  /**
   * Access Evaluation: a request missing a required part is a 400 naming
   * it. The question is the check's, asked as the check asks it (one
   * coalesced question, whose statement verifies the key before the
   * catalog can refuse a name); one that names what no application can
   * hold is a deny once the key is verified.
   */
  async evaluation(caller: Caller, request: RequestParts): Promise<boolean> {
    const v = new Violations();
    const evaluation = evaluationOf(request, v);
    v.throwIfAny();
    const question = questionOf(evaluation!);
    if (question === undefined) {
      await verifyKey(this.checker, caller);
      return false;
    }
    return unlessUnknown(this.checker.check(caller, question), false);
  }

  /**
   * Access Evaluations. Without items, the top level is one Access
   * Evaluation. With items, an item missing a required part (its own and
   * the top level's) is a deny carrying the error, the others are answered
   * together, and the semantic cuts the answers after the first deny or
   * permit (all are asked in the one statement: cutting short saves no
   * round trip, and the PEP sees the answers the standard gives).
   */
  async evaluations(caller: Caller, request: EvaluationsInput): Promise<EvaluationsAnswer> {
    const semantic = semanticOf(request.semantic);
    if (request.evaluations.length === 0) return { decision: await this.evaluation(caller, request) };
    if (request.evaluations.length > LIMITS.batchChecks) {
      throw invalidArgument(`evaluations: at most ${LIMITS.batchChecks} per call, got ${request.evaluations.length}`, [
        { field: "evaluations", reason: `${request.evaluations.length} evaluations exceed ${LIMITS.batchChecks}` },
      ]);
    }
    const items: ItemDecision[] = [];
    const asked: { item: number; question: CheckQuestion }[] = [];
    request.evaluations.forEach((parts, i) => {
      const v = new Violations();
      const evaluation = evaluationOf(withDefaults(request, parts), v, `evaluations[${i}].`);
      if (evaluation === undefined) {
        items.push({ decision: false, error: { status: 400, message: v.list.map((x) => `${x.field}: ${x.reason}`).join("; ") } });
        return;
      }
      const question = questionOf(evaluation);
      if (question !== undefined) asked.push({ item: i, question });
      items.push({ decision: false });
    });
    const answers = await decide(this.checker, caller, asked.map((a) => a.question));
    asked.forEach(({ item }, j) => (items[item]!.decision = answers[j]!));
    return { evaluations: cut(items, semantic) };
  }
}

function semanticOf(value: string): EvaluationsSemantic {
  if (value === "") return "execute_all";
  if ((EVALUATIONS_SEMANTICS as readonly string[]).includes(value)) return value as EvaluationsSemantic;
  const reason = `must be one of ${EVALUATIONS_SEMANTICS.join(", ")}, got ${show(value)}`;
  throw invalidArgument(`options.evaluations_semantic: ${reason}`, [{ field: "options.evaluations_semantic", reason }]);
}

/** The answers up to and including the first that decides the whole (a deny for deny_on_first_deny, a permit for permit_on_first_permit). */
function cut(items: ItemDecision[], semantic: EvaluationsSemantic): ItemDecision[] {
  if (semantic === "execute_all") return items;
  const decisive = semantic === "permit_on_first_permit";
  const at = items.findIndex((item) => item.decision === decisive);
  return at < 0 ? items : items.slice(0, at + 1);
}
