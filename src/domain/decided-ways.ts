/**
 * Lookup's and who can's conditional answers decided by the question's
 * facts (docs/conditions.md, "Lookup and who can with facts"). A candidate comes with the ways conditions could allow it (each
 * way conditions that must all hold); with facts, each is evaluated as the
 * check evaluates it:
 *
 * - a way whose every condition holds: the candidate is allowed, a plain
 *   answer;
 * - a way with a condition the facts decide against (false, not a bool, or
 *   an error with every value it read there): that way cannot allow;
 * - otherwise the way is undecided: a condition erred having read a value
 *   the facts lack (`context.ticket` when the context has no ticket), and
 *   would be decided by a question that carries it.
 *
 * The candidate is plain when a way holds, left out when every way is
 * decided against, and otherwise listed apart with the undecided ways
 * only. Each evaluation goes through the fair scheduler and the question's
 * budget, as the check's.
 */
import { CONDITION_LIMITS, ConditionBindings, type Condition, type ConditionOutcome, type ConditionRead } from "./conditions.js";
import { PROCESS_CPU } from "./fair-cpu.js";

/** How a way came out: it holds, it cannot hold with these facts, or it needs a fact they lack. */
export type WayOutcome = "holds" | "decided against" | "undecided";

/** What a candidate comes to: allowed outright, or the ways left undecided (none: it is not allowed). */
export type Settled = { outright: true } | { outright: false; conditions: string[] };

/**
 * The candidate's answer with the facts: `ways` are the conditions of each
 * way, `expressions` each way as one expression (as lookup lists it), and
 * `bindings` the facts for one evaluation, recording what it reads in
 * `reads`.
 */
export async function settleWays(
  appId: string,
  ways: readonly (readonly Condition[])[],
  expressions: readonly string[],
  bindings: (reads: ConditionRead[]) => ConditionBindings,
): Promise<Settled> {
  const outcomes = new Map<Condition, WayOutcome>();
  const budget = { left: CONDITION_LIMITS.questionBudget };
  const undecided: string[] = [];
  for (const [i, way] of ways.entries()) {
    const outcome = await wayOutcome(appId, way, outcomes, budget, bindings);
    if (outcome === "holds") return { outright: true };
    if (outcome === "undecided") undecided.push(expressions[i]!);
  }
  return { outright: false, conditions: [...new Set(undecided)] };
}

/** A way's outcome: decided against at its first condition decided against; undecided when one is and none is against. */
async function wayOutcome(
  appId: string,
  way: readonly Condition[],
  outcomes: Map<Condition, WayOutcome>,
  budget: { left: number },
  bindings: (reads: ConditionRead[]) => ConditionBindings,
): Promise<WayOutcome> {
  let result: WayOutcome = "holds";
  for (const c of way) {
    let outcome = outcomes.get(c);
    if (outcome === undefined) {
      if (budget.left <= 0) {
        // Past the question's budget nothing more is evaluated: not decided by these facts.
        outcome = "undecided";
      } else {
        const reads: ConditionRead[] = [];
        const [evaluated, spent] = await PROCESS_CPU.run(appId, () => c.evaluateWithin(bindings(reads), Math.min(budget.left, CONDITION_LIMITS.budget)));
        budget.left -= spent;
        outcome = outcomeOf(evaluated, reads);
      }
      outcomes.set(c, outcome);
    }
    if (outcome === "decided against") return outcome;
    if (outcome === "undecided") result = "undecided";
  }
  return result;
}

/** One condition's evaluation as a decision: an error is undecided only when it read a value the facts lack. */
export function outcomeOf(evaluated: ConditionOutcome, reads: readonly ConditionRead[]): WayOutcome {
  if (evaluated.holds) return "holds";
  if (evaluated.reason === "error" && reads.some((r) => !r.found)) return "undecided";
  return "decided against";
}
