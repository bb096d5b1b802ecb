/**
 * What compileCondition does to a condition's syntax tree besides checking
 * its names (docs/conditions.md, "What one may cost"): each comprehension's
 * range goes through the meter, a literal pattern of `matches` must
 * compile, and a part that reads nothing of the question must fit the
 * budget when it is written, since it costs the same at every evaluation.
 */
import type { parse } from "@bufbuild/cel";
import { compilePattern, RANGE_FUNCTION } from "./condition-functions.js";
import { COST_UNITS } from "./condition-meter.js";

type Expr = NonNullable<ReturnType<typeof parse>["expr"]>;

/** Ids of the nodes added here: above any the parser gives a source of at most a few thousand characters. */
let nextId = 1n << 40n;

/** The nodes of an expression, each counted once (the interpreter's steps for one pass over it). */
export function nodeCount(expr: Expr | undefined): number {
  let count = 0;
  const stack: (Expr | undefined)[] = [expr];
  while (stack.length > 0) {
    const e = stack.pop();
    if (e === undefined) continue;
    count += 1;
    stack.push(...children(e));
  }
  return count;
}

function children(e: Expr): (Expr | undefined)[] {
  const kind = e.exprKind;
  switch (kind.case) {
    case "selectExpr":
      return [kind.value.operand];
    case "callExpr":
      return [kind.value.target, ...kind.value.args];
    case "listExpr":
      return kind.value.elements;
    case "structExpr":
      return kind.value.entries.flatMap((entry) => [entry.value, entry.keyKind.case === "mapKey" ? entry.keyKind.value : undefined]);
    case "comprehensionExpr": {
      const c = kind.value;
      return [c.iterRange, c.accuInit, c.loopCondition, c.loopStep, c.result];
    }
    default:
      return [];
  }
}

/**
 * Wraps each comprehension's range in RANGE_FUNCTION, which charges the
 * range's length times the body's nodes before the library iterates it:
 * the library's comprehensions have no hook of their own, and a body with
 * no function call would otherwise run unmetered.
 */
export function meterRanges(expr: Expr | undefined): void {
  const stack: (Expr | undefined)[] = [expr];
  while (stack.length > 0) {
    const e = stack.pop();
    if (e === undefined) continue;
    stack.push(...children(e));
    if (e.exprKind.case !== "comprehensionExpr") continue;
    const c = e.exprKind.value;
    const perElement = COST_UNITS.node * (1 + nodeCount(c.loopCondition) + nodeCount(c.loopStep));
    const constant = { id: nextId++, exprKind: { case: "constExpr", value: { constantKind: { case: "int64Value", value: BigInt(perElement) } } } };
    c.iterRange = { id: nextId++, exprKind: { case: "callExpr", value: { function: RANGE_FUNCTION, args: [c.iterRange, constant] } } } as unknown as Expr;
  }
}

/** A literal pattern of `matches` that RE2 does not compile: its node and why. */
export function literalPatternProblem(expr: Expr | undefined): { id: bigint; message: string } | undefined {
  const stack: (Expr | undefined)[] = [expr];
  while (stack.length > 0) {
    const e = stack.pop();
    if (e === undefined) continue;
    stack.push(...children(e));
    if (e.exprKind.case !== "callExpr" || e.exprKind.value.function !== "matches") continue;
    const args = e.exprKind.value.args;
    const pattern = args[args.length - 1]?.exprKind;
    if (pattern?.case !== "constExpr" || pattern.value.constantKind.case !== "stringValue") continue;
    try {
      compilePattern(pattern.value.constantKind.value);
    } catch (error) {
      return { id: e.id, message: `the pattern does not compile: ${error instanceof Error ? error.message : String(error)}` };
    }
  }
  return undefined;
}

/**
 * The first part of the expression that reads nothing of the question (no
 * name but a comprehension's own, bound within it) and, evaluated under
 * the meter by `evaluate`, stops it: the same at every evaluation, so the
 * condition could never fit its budget. Each such part largest first.
 */
export function overBudgetConstant(expr: Expr | undefined, evaluate: (expr: Expr) => Error | undefined): { id: bigint; message: string } | undefined {
  const stack: (Expr | undefined)[] = [expr];
  while (stack.length > 0) {
    const e = stack.pop();
    if (e === undefined) continue;
    if (e.exprKind.case === "constExpr" || e.exprKind.case === "identExpr") continue;
    if (!readsFree(e, new Set())) {
      stack.push(...children(e));
      continue;
    }
    let stopped: Error | undefined;
    try {
      stopped = evaluate(e);
    } catch {
      stopped = undefined; // a part the planner does not take alone is evaluated with the whole
    }
    if (stopped !== undefined) return { id: e.id, message: stopped.message };
  }
  return undefined;
}

/** Whether an expression reads no name but those a comprehension within it binds. */
function readsFree(e: Expr, bound: ReadonlySet<string>): boolean {
  const kind = e.exprKind;
  if (kind.case === "identExpr") return bound.has(kind.value.name);
  if (kind.case === "comprehensionExpr") {
    const c = kind.value;
    const inner = new Set([...bound, c.iterVar, c.iterVar2, c.accuVar].filter((n) => n !== ""));
    return [c.iterRange, c.accuInit].every((x) => x === undefined || readsFree(x, bound)) && [c.loopCondition, c.loopStep, c.result].every((x) => x === undefined || readsFree(x, inner));
  }
  return children(e).every((x) => x === undefined || readsFree(x, bound));
}
