/**
 * Conditions (API.md, "Conditions and AuthZEN"): a CEL expression on a
 * grant, a role assignment or a policy that must evaluate to true for it to
 * count. The language is @bufbuild/cel's (parser, planner, evaluator, the
 * strings extension); what is ours is what CEL leaves to its host:
 *
 * - which names a condition may read (subject, resource, action, context,
 *   now, and CEL's type names), and whether its calls have overloads for
 *   their operands' types and its result can be a bool (condition-types.ts),
 *   checked on the syntax tree when it is written, since the library's type
 *   checker is neither exported nor complete;
 * - a bound on what one evaluation may cost: a static bound on the tree when
 *   it is written (`estimateCost`), and a meter every function charges by
 *   the size of what it touches while it runs, stopped at
 *   CONDITION_LIMITS.budget (condition-meter.ts, condition-functions.ts);
 * - how a question's JSON becomes CEL values (condition-values.ts: views
 *   converted as they are read), and what counts as holding: exactly `true`; false, an error (a missing key, a type mismatch) or any
 *   other value denies.
 *
 * A condition is compiled once when written (a bad one is a 400 naming the
 * field and the position) and again, from its stored source, the first time
 * a process evaluates it (ConditionCache).
 */
import { celError, isCelError, parse, plan, type CelInput, type CelResult } from "@bufbuild/cel";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { JsonObject } from "../lib/json.js";
import { jsonMap, type ConditionRead } from "./condition-values.js";
import { invalidArgument, type Violations } from "./errors.js";
import { check } from "./formats.js";
import { tooDeepAt } from "./condition-depth.js";
import { LIBRARY_ENV, meteredEnv } from "./condition-functions.js";
import { Meter, metered } from "./condition-meter.js";
import { literalPatternProblem, meterRanges, overBudgetConstant } from "./condition-plan.js";
import { typeProblem } from "./condition-types.js";

export const CONDITION_LIMITS = {
  /** Characters of a condition's source. */
  sourceChars: 1_000,
  /** The bound of estimateCost a condition may reach (about 0.1 s of evaluation on one slow core at the worst). */
  cost: 1_000_000,
  /**
   * The most elements a list a question carries can have: its context and
   * properties are 64 KiB at most in all, and a list's element takes two
   * bytes at least ("1,").
   */
  listElements: 32_768,
  /**
   * The units one evaluation may spend (condition-meter.ts: about a
   * character or an element touched each); past it the evaluation stops and
   * counts as an error. About 5 ms of one core at the dearest kind of unit.
   */
  budget: 1_000_000,
  /** The most characters (a string) or elements (a list) a value an evaluation builds may have. */
  valueSize: 1_000_000,
  /** How deeply a source may nest brackets and prefix operators (condition-depth.ts). */
  depth: 64,
  /**
   * The units all the conditions one question evaluates may spend in all
   * (a batch asks at most LIMITS.batchChecks questions); past it the rest
   * count as errors.
   */
  questionBudget: 8_000_000,
  /** The milliseconds of conditions' evaluations the event loop runs before it takes other work again (fair-cpu.ts). */
  sliceMs: 4,
} as const;

/** The names a condition reads (API.md): everything else is a 400 when it is written. */
export const CONDITION_VARIABLES = ["subject", "resource", "action", "context", "now"] as const;

/** CEL's type names, which a condition may compare with type(x). */
const TYPE_NAMES = new Set(["bool", "bytes", "double", "duration", "int", "list", "map", "null_type", "string", "timestamp", "type", "uint", "dyn"]);

/**
 * Calls the planner handles itself rather than as functions of the
 * environment (logic, the conditional, indexing, the macros' helpers).
 */
const SPECIAL_CALLS = new Set(["_&&_", "_||_", "_?_:_", "_[_]", "@not_strictly_false", "!_", "@in"]);

/**
 * Calls whose work grows with the size of their operands (a scan of a string
 * or a list, a copy): each counts as LINEAR_COST steps, about what the
 * interpreter spends on a hundred steps for a pass over 64 KiB. Equality is
 * not among them: it compares strings natively, and a condition comparing
 * whole lists or maps of a question is rare enough to count as one step.
 */
const LINEAR_CALLS = new Set([
  "@in",
  "_+_",
  "contains",
  "endsWith",
  "startsWith",
  "matches",
  "indexOf",
  "lastIndexOf",
  "replace",
  "split",
  "join",
  "substring",
  "lowerAscii",
  "upperAscii",
  "trim",
  "format",
  "string",
]);
const LINEAR_COST = 100;

const ENV = meteredEnv();
const FUNCTIONS = new Set([...LIBRARY_ENV.funcs].map((f) => f.name));

/** The values a condition sees (API.md): built once per question, and only when a condition is to be evaluated. */
export interface ConditionFacts {
  subject: { id: string; properties: JsonObject };
  resource: { type: string; id: string; properties: JsonObject };
  action: { name: string; properties: JsonObject };
  context: JsonObject;
  /** The database's clock, as the question's statement read it. */
  now: Date;
}

/** Whether a condition held, and when not, why (for explain). */
export type ConditionOutcome = { holds: true } | { holds: false; reason: "false" | "error" | "not a bool"; message: string };

type Program = (bindings: Record<string, CelInput>) => CelResult;

/** A condition compiled: its source, and the program that evaluates it. */
export class Condition {
  constructor(
    readonly source: string,
    private readonly program: Program,
    /** The bound estimateCost gave it. */
    readonly cost: number,
    /**
     * Whether it may read the subject's properties: then the user's stored
     * properties are read for it (one statement, only then).
     */
    readonly readsSubjectProperties = false,
    /** Whether it reads `now`: explain then shows the clock it was evaluated with. */
    readonly readsNow = false,
  ) {}

  /** Whether it holds with the question's facts, within CONDITION_LIMITS.budget. */
  evaluate(bindings: ConditionBindings): ConditionOutcome {
    return this.evaluateWithin(bindings, CONDITION_LIMITS.budget)[0];
  }

  /** Whether it holds, within `budget` units, and the units it spent. */
  evaluateWithin(bindings: ConditionBindings, budget: number): [ConditionOutcome, number] {
    const meter = new Meter(budget, CONDITION_LIMITS.valueSize);
    let result: CelResult;
    try {
      result = metered(meter, () => this.program(bindings.values));
    } catch (error) {
      // The evaluator returns its errors as values; a throw is still an error, never an allow.
      return [{ holds: false, reason: "error", message: error instanceof Error ? error.message : String(error) }, meter.spent];
    }
    return [outcomeOf(result, meter), meter.spent];
  }
}

function outcomeOf(result: CelResult, meter: Meter): ConditionOutcome {
  // Stopped by the meter: an error whatever the evaluation made of it (`||` absorbs an error).
  if (meter.stopped !== undefined) return { holds: false, reason: "error", message: meter.stopped.message };
  if (result === true) return { holds: true };
  if (result === false) return { holds: false, reason: "false", message: "evaluated to false" };
  if (isCelError(result)) return { holds: false, reason: "error", message: result.message };
  return { holds: false, reason: "not a bool", message: "evaluated to a value that is not a bool" };
}

export type { ConditionRead } from "./condition-values.js";

/**
 * A question's facts as CEL values, shared by every condition the question
 * evaluates: views over the question's JSON, converted only where a
 * condition reads (condition-values.ts). With `reads`, every key a
 * condition looks up is recorded there, in order (explain's "the values it
 * read").
 */
export class ConditionBindings {
  readonly values: Record<string, CelInput>;

  constructor(facts: ConditionFacts, reads?: ConditionRead[]) {
    this.values = {
      subject: jsonMap({ id: facts.subject.id, properties: facts.subject.properties }, reads, "subject"),
      resource: jsonMap({ type: facts.resource.type, id: facts.resource.id, properties: facts.resource.properties }, reads, "resource"),
      action: jsonMap({ name: facts.action.name, properties: facts.action.properties }, reads, "action"),
      context: jsonMap(facts.context, reads, "context"),
      now: timestampFromDate(facts.now),
    };
  }
}

/** Why `source` is not a condition Portcullis takes (undefined: it is one), for a caller that gathers violations. */
export function conditionProblem(source: string): string | undefined {
  try {
    compileCondition(source, "condition");
    return undefined;
  } catch (error) {
    return (error as { details?: { reason?: string }[] }).details?.[0]?.reason ?? String(error);
  }
}

/**
 * A written condition as it is stored: null for none (absent or ""), else
 * the source, checked, a bad one added to `v` at `field`.
 */
export function storedCondition(v: Violations, field: string, condition: string | undefined): string | null {
  if (condition === undefined || condition === "") return null;
  check(v, field, conditionProblem(condition));
  return condition;
}

/** A 400 for the condition at `field`. */
function badCondition(field: string, message: string) {
  return invalidArgument(`${field}: ${message}`, [{ field, reason: message }]);
}

/** Line and column (1-based) of a character offset in `source`. */
function lineColumn(source: string, offset: number): string {
  const before = source.slice(0, Math.max(0, offset));
  const line = before.split("\n").length;
  const column = offset - before.lastIndexOf("\n");
  return `${line}:${column}`;
}

/**
 * Compiles a condition as written by a caller: a 400 naming `field` and the
 * position for a syntax error, a name it may not read, an unknown function,
 * a type error (a call with no overload for its operands, a field the value
 * has not, a result that cannot be a bool), or a cost over the limit.
 */
export function compileCondition(source: string, field: string, options: CompileOptions = {}): Condition {
  try {
    return compile(source, field, options.typeCheck ?? true);
  } catch (error) {
    // The last line against nesting the depth scan lets through: never a stack overflow, always a 400.
    if (error instanceof RangeError) throw badCondition(field, `is nested too deeply to evaluate (at most ${CONDITION_LIMITS.depth} levels)`);
    throw error;
  }
}

/** How a condition is compiled: written ones are type-checked; stored ones (ConditionCache) are not, so those written before the check still evaluate as they did. */
export interface CompileOptions {
  typeCheck?: boolean;
}

function compile(source: string, field: string, typeCheck: boolean): Condition {
  if (source.trim() === "") throw badCondition(field, "is empty: leave it out for a grant that always counts");
  if (source.length > CONDITION_LIMITS.sourceChars) {
    throw badCondition(field, `is ${source.length} characters long; at most ${CONDITION_LIMITS.sourceChars}`);
  }
  const deepAt = tooDeepAt(source, CONDITION_LIMITS.depth);
  if (deepAt !== undefined) {
    throw badCondition(field, `at ${lineColumn(source, deepAt)}: nests more than ${CONDITION_LIMITS.depth} levels deep (brackets and prefix operators)`);
  }
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(source);
  } catch (error) {
    if (error instanceof RangeError) throw error;
    const where = (error as { location?: { start?: { line?: number; column?: number } } }).location?.start;
    const message = (error as { rawMessage?: string }).rawMessage ?? (error instanceof Error ? error.message : String(error));
    const at = where?.line !== undefined && where.column !== undefined ? `at ${where.line}:${where.column}: ` : "";
    throw badCondition(field, `is not valid CEL: ${at}${message}`);
  }
  const positions = parsed.sourceInfo?.positions ?? {};
  const at = (id: bigint) => {
    const offset = positions[id.toString() as unknown as number];
    return offset === undefined ? "" : `at ${lineColumn(source, offset)}: `;
  };
  checkReferences(parsed.expr, new Set(), (id, message) => {
    throw badCondition(field, `${at(id)}${message}`);
  });
  if (typeCheck && parsed.expr !== undefined) {
    const problem = typeProblem(parsed.expr);
    if (problem !== undefined) throw badCondition(field, `${at(problem.id)}${problem.message}`);
  }
  const cost = estimateCost(parsed.expr);
  if (cost > CONDITION_LIMITS.cost) {
    throw badCondition(
      field,
      `could cost up to ${formatCost(cost)} steps to evaluate; at most ${formatCost(CONDITION_LIMITS.cost)} (a comprehension over a list of the question's, such as exists or map, inside another, or over another list, is too dear)`,
    );
  }
  const readsSubjectProperties = readsSubject(parsed.expr, false);
  const pattern = literalPatternProblem(parsed.expr);
  if (pattern !== undefined) throw badCondition(field, `${at(pattern.id)}${pattern.message}`);
  meterRanges(parsed.expr);
  let program: Program;
  try {
    program = plan(ENV, parsed) as Program;
  } catch (error) {
    if (error instanceof RangeError) throw error;
    throw badCondition(field, `is not valid CEL: ${error instanceof Error ? error.message : String(error)}`);
  }
  const constant = overBudgetConstant(parsed.expr, (expr) => {
    const meter = new Meter(CONDITION_LIMITS.budget, CONDITION_LIMITS.valueSize);
    metered(meter, () => (plan(ENV, expr) as Program)({}));
    return meter.stopped;
  });
  if (constant !== undefined) {
    throw badCondition(field, `${at(constant.id)}cannot be evaluated within its budget whatever the question carries: it ${constant.message}`);
  }
  return new Condition(source, program, cost, readsSubjectProperties, readsName(parsed.expr, "now"));
}

/**
 * Whether an expression may read `subject` beyond its id: anything but
 * `subject.id` counts (subject.properties, subject itself, subject['...']),
 * so the answer errs towards reading the stored properties.
 */
function readsSubject(expr: Expr | undefined, underIdSelect: boolean): boolean {
  if (expr === undefined) return false;
  const kind = expr.exprKind;
  switch (kind.case) {
    case "identExpr":
      return kind.value.name === "subject" && !underIdSelect;
    case "selectExpr":
      return readsSubject(kind.value.operand, kind.value.field === "id" && !kind.value.testOnly);
    case "callExpr":
      return readsSubject(kind.value.target, false) || kind.value.args.some((a) => readsSubject(a, false));
    case "listExpr":
      return kind.value.elements.some((e) => readsSubject(e, false));
    case "structExpr":
      return kind.value.entries.some((e) => readsSubject(e.value, false) || (e.keyKind.case === "mapKey" && readsSubject(e.keyKind.value, false)));
    case "comprehensionExpr": {
      const c = kind.value;
      return [c.iterRange, c.accuInit, c.loopCondition, c.loopStep, c.result].some((e) => readsSubject(e, false));
    }
    default:
      return false;
  }
}

/** Whether an expression names `name` anywhere (a comprehension's variable of that name counts too: erring towards yes). */
function readsName(expr: Expr | undefined, name: string): boolean {
  if (expr === undefined) return false;
  const kind = expr.exprKind;
  switch (kind.case) {
    case "identExpr":
      return kind.value.name === name;
    case "selectExpr":
      return readsName(kind.value.operand, name);
    case "callExpr":
      return readsName(kind.value.target, name) || kind.value.args.some((a) => readsName(a, name));
    case "listExpr":
      return kind.value.elements.some((e) => readsName(e, name));
    case "structExpr":
      return kind.value.entries.some((e) => readsName(e.value, name) || (e.keyKind.case === "mapKey" && readsName(e.keyKind.value, name)));
    case "comprehensionExpr": {
      const c = kind.value;
      return [c.iterRange, c.accuInit, c.loopCondition, c.loopStep, c.result].some((e) => readsName(e, name));
    }
    default:
      return false;
  }
}

const formatCost = (n: number) => (n >= 1e15 ? n.toExponential(1) : Math.round(n).toLocaleString("en-US"));

type Expr = ReturnType<typeof parse>["expr"];

/**
 * Every identifier must be a variable of the condition, a comprehension's
 * own variable in scope, or a type name; every call a function of the
 * environment. `fail` throws.
 */
function checkReferences(expr: Expr | undefined, bound: ReadonlySet<string>, fail: (id: bigint, message: string) => never): void {
  if (expr === undefined) return;
  const kind = expr.exprKind;
  switch (kind.case) {
    case "identExpr": {
      const name = kind.value.name;
      if (bound.has(name) || (CONDITION_VARIABLES as readonly string[]).includes(name) || TYPE_NAMES.has(name)) return;
      fail(expr.id, `unknown name "${name}": a condition reads ${CONDITION_VARIABLES.join(", ")}`);
      return;
    }
    case "selectExpr":
      checkReferences(kind.value.operand, bound, fail);
      return;
    case "callExpr": {
      const name = kind.value.function;
      if (!FUNCTIONS.has(name) && !SPECIAL_CALLS.has(name)) fail(expr.id, `unknown function "${name}"`);
      checkReferences(kind.value.target, bound, fail);
      for (const arg of kind.value.args) checkReferences(arg, bound, fail);
      return;
    }
    case "listExpr":
      for (const e of kind.value.elements) checkReferences(e, bound, fail);
      return;
    case "structExpr":
      if (kind.value.messageName !== "") fail(expr.id, `messages cannot be built in a condition ("${kind.value.messageName}")`);
      for (const entry of kind.value.entries) {
        if (entry.keyKind.case === "mapKey") checkReferences(entry.keyKind.value, bound, fail);
        checkReferences(entry.value, bound, fail);
      }
      return;
    case "comprehensionExpr": {
      const c = kind.value;
      checkReferences(c.iterRange, bound, fail);
      checkReferences(c.accuInit, bound, fail);
      const inner = new Set(bound);
      for (const name of [c.iterVar, c.iterVar2, c.accuVar]) if (name !== "") inner.add(name);
      checkReferences(c.loopCondition, inner, fail);
      checkReferences(c.loopStep, inner, fail);
      // The result sees the accumulator, not the iteration variables.
      checkReferences(c.result, new Set([...bound, c.accuVar]), fail);
      return;
    }
    case "constExpr":
    case undefined:
      return;
  }
}

/**
 * An upper bound of the steps one evaluation takes, whatever the question
 * carries: one per node, LINEAR_COST per call whose work grows with its
 * operands, and for a comprehension (the macros all, exists, exists_one,
 * map, filter) its body once per element of its range: the range's own
 * length when it is a literal, else the longest list a question can hold.
 * So one comprehension over a question's list passes with a modest body,
 * and one inside another (or a membership test over another list inside
 * one) is refused when written.
 */
export function estimateCost(expr: Expr | undefined): number {
  if (expr === undefined) return 0;
  const kind = expr.exprKind;
  switch (kind.case) {
    case "selectExpr":
      return 1 + estimateCost(kind.value.operand);
    case "callExpr": {
      let cost = 1 + estimateCost(kind.value.target) + (LINEAR_CALLS.has(kind.value.function) ? LINEAR_COST : 0);
      for (const arg of kind.value.args) cost += estimateCost(arg);
      return cost;
    }
    case "listExpr":
      return 1 + kind.value.elements.reduce((sum, e) => sum + estimateCost(e), 0);
    case "structExpr":
      return (
        1 +
        kind.value.entries.reduce((sum, entry) => sum + estimateCost(entry.value) + (entry.keyKind.case === "mapKey" ? estimateCost(entry.keyKind.value) : 0), 0)
      );
    case "comprehensionExpr": {
      const c = kind.value;
      const range = c.iterRange?.exprKind;
      const n =
        range?.case === "listExpr" ? range.value.elements.length : range?.case === "structExpr" ? range.value.entries.length : CONDITION_LIMITS.listElements;
      return estimateCost(c.iterRange) + estimateCost(c.accuInit) + n * (1 + estimateCost(c.loopCondition) + estimateCost(c.loopStep)) + estimateCost(c.result);
    }
    default:
      return 1;
  }
}

/**
 * Compiled conditions by source, for the questions: stored conditions were
 * checked when written, so compiling one again only fails if this process
 * knows less CEL than the one that wrote it (an older version during an
 * upgrade); such a condition then never holds. They are not type-checked
 * again: one the checker would refuse evaluates as written (an ill-typed
 * part is an error when evaluated, which `||` may absorb). Bounded: the
 * least recently used go first.
 */
export class ConditionCache {
  private readonly compiled = new Map<string, Condition>();

  constructor(private readonly max = 10_000) {}

  get(source: string): Condition {
    const hit = this.compiled.get(source);
    if (hit !== undefined) {
      // Most recently used last, so the first key is the one to evict.
      this.compiled.delete(source);
      this.compiled.set(source, hit);
      return hit;
    }
    let condition: Condition;
    try {
      condition = compileCondition(source, "condition", { typeCheck: false });
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      condition = new Condition(source, () => celError(`the stored condition no longer compiles: ${message}`), 0);
    }
    this.compiled.set(source, condition);
    if (this.compiled.size > this.max) this.compiled.delete(this.compiled.keys().next().value!);
    return condition;
  }
}
