/**
 * The type check of a condition when it is written (docs/conditions.md,
 * "What is type-checked"). @bufbuild/cel 0.6.1 ships a
 * checker that is neither exported nor complete (it types constants and
 * names, and throws on every other kind of node), so the walk is ours; the
 * overloads it resolves calls against are the library's own declarations,
 * the very table the evaluator dispatches on (LIBRARY_ENV.funcs: each
 * function's name, target, argument and result types). So a call the check
 * takes is one the evaluator has an overload for, and one it refuses is one
 * the evaluator would answer with "found no matching overload" at every
 * question. Nothing here evaluates.
 *
 * The declared variables: `subject` {id: string, properties}, `resource`
 * {type: string, id: string, properties}, `action` {name: string,
 * properties}, `context` and each `properties` a map of string to dyn, `now`
 * a timestamp. A dyn value (anything read from the question's JSON) takes
 * any overload, and is checked when the condition is evaluated.
 */
import type { CelType, parse } from "@bufbuild/cel";
import { LIBRARY_ENV } from "./condition-functions.js";

type Expr = NonNullable<ReturnType<typeof parse>["expr"]>;

/** A type as the check sees it: CEL's, plus records for the declared variables' fixed shapes. */
export type CheckType =
  | { kind: "dyn" }
  | { kind: "scalar"; name: string }
  | { kind: "list"; element: CheckType }
  | { kind: "map"; key: CheckType; value: CheckType }
  | { kind: "object"; name: string }
  | { kind: "record"; name: string; fields: Readonly<Record<string, CheckType>> };

const DYN: CheckType = { kind: "dyn" };
const scalar = (name: string): CheckType => ({ kind: "scalar", name });
const BOOL = scalar("bool");
const INT = scalar("int");
const STRING = scalar("string");
const TYPE = scalar("type");
const NULL = scalar("null_type");
const PROPERTIES: CheckType = { kind: "map", key: STRING, value: DYN };
const TIMESTAMP_NAME = "google.protobuf.Timestamp";

/** The names a condition reads, with their types (conditions.ts binds them: ConditionBindings). */
export const VARIABLE_TYPES: Readonly<Record<string, CheckType>> = {
  subject: { kind: "record", name: "subject", fields: { id: STRING, properties: PROPERTIES } },
  resource: { kind: "record", name: "resource", fields: { type: STRING, id: STRING, properties: PROPERTIES } },
  action: { kind: "record", name: "action", fields: { name: STRING, properties: PROPERTIES } },
  context: PROPERTIES,
  now: { kind: "object", name: TIMESTAMP_NAME },
};

const TYPE_NAMES = new Set(["bool", "bytes", "double", "duration", "int", "list", "map", "null_type", "string", "timestamp", "type", "uint", "dyn"]);

function fromCel(t: CelType): CheckType {
  switch (t.kind) {
    case "scalar":
      return t.name === "dyn" ? DYN : scalar(t.name);
    case "list":
      return { kind: "list", element: fromCel(t.element) };
    case "map":
      return { kind: "map", key: fromCel(t.key), value: fromCel(t.value) };
    case "object":
      return { kind: "object", name: t.name };
  }
}

interface Overload {
  target: CheckType | undefined;
  args: CheckType[];
  result: CheckType;
}

/** The library's overloads by name, as check types. */
const OVERLOADS = new Map<string, Overload[]>();
for (const f of LIBRARY_ENV.funcs) {
  const list = OVERLOADS.get(f.name) ?? [];
  list.push({ target: f.target === undefined ? undefined : fromCel(f.target), args: f.arguments.map(fromCel), result: fromCel(f.result) });
  OVERLOADS.set(f.name, list);
}

/** A type as CEL writes it (timestamp and duration by their CEL names). */
export function typeName(t: CheckType): string {
  switch (t.kind) {
    case "dyn":
      return "dyn";
    case "scalar":
      return t.name;
    case "list":
      return `list(${typeName(t.element)})`;
    case "map":
      return `map(${typeName(t.key)}, ${typeName(t.value)})`;
    case "object":
      return t.name === TIMESTAMP_NAME ? "timestamp" : t.name === "google.protobuf.Duration" ? "duration" : t.name;
    case "record":
      return `${t.name} {${Object.keys(t.fields).join(", ")}}`;
  }
}

/** A record is a map of strings at run time (condition-values.ts's views). */
const asRuntime = (t: CheckType): CheckType => (t.kind === "record" ? { kind: "map", key: STRING, value: DYN } : t);

/** Whether a value of type `t` matches a parameter of type `p`, as the evaluator's dispatch decides. */
function assignable(t: CheckType, p: CheckType): boolean {
  const v = asRuntime(t);
  if (p.kind === "dyn" || v.kind === "dyn") return true;
  switch (p.kind) {
    case "scalar":
      return v.kind === "scalar" && v.name === p.name;
    case "object":
      return v.kind === "object" && v.name === p.name;
    case "list":
      return v.kind === "list" && assignable(v.element, p.element);
    case "map":
      return v.kind === "map" && assignable(v.key, p.key) && assignable(v.value, p.value);
    case "record":
      return false;
  }
}

const same = (a: CheckType, b: CheckType) => typeName(a) === typeName(b);
const NUMERIC = new Set(["int", "uint", "double"]);

/**
 * Whether `==` between the two can ever be true: either side dyn or null,
 * both numbers (CEL compares int, uint and double by value), or the same
 * kind (lists and maps element by element).
 */
function comparable(a: CheckType, b: CheckType): boolean {
  const l = asRuntime(a);
  const r = asRuntime(b);
  if (l.kind === "dyn" || r.kind === "dyn") return true;
  if ((l.kind === "scalar" && l.name === "null_type") || (r.kind === "scalar" && r.name === "null_type")) return true;
  if (l.kind === "scalar" && r.kind === "scalar") return l.name === r.name || (NUMERIC.has(l.name) && NUMERIC.has(r.name));
  if (l.kind === "list" && r.kind === "list") return comparable(l.element, r.element);
  if (l.kind === "map" && r.kind === "map") return comparable(l.key, r.key) && comparable(l.value, r.value);
  if (l.kind === "object" && r.kind === "object") return l.name === r.name;
  return false;
}

/** The common type of several (a list's elements, a conditional's branches): theirs when they agree, else dyn. */
function join(types: CheckType[]): CheckType {
  if (types.length === 0) return DYN;
  return types.every((t) => same(t, types[0]!)) ? types[0]! : DYN;
}

/** A type error at a node: the node's id, to give its position, and what is wrong. */
export class TypeProblem {
  constructor(
    readonly id: bigint,
    readonly message: string,
  ) {}
}

/**
 * The type of the whole condition, or the first type error in it. The
 * names and functions are already known to exist (checkReferences in
 * conditions.ts runs first), so what is left is whether each call has an
 * overload for its operands' types, each field selection a field, and
 * each operator of logic bools.
 */
export function typeOf(expr: Expr): CheckType {
  return new Checker().check(expr, new Map());
}

/** The first type error of a condition, including a result that cannot be a bool; undefined when there is none. */
export function typeProblem(expr: Expr): TypeProblem | undefined {
  let type: CheckType;
  try {
    type = typeOf(expr);
  } catch (error) {
    if (error instanceof TypeProblem) return error;
    throw error;
  }
  if (type.kind === "dyn" || (type.kind === "scalar" && type.name === "bool")) return undefined;
  return new TypeProblem(expr.id, `evaluates to ${article(typeName(type))}, never a bool: a condition holds only when it is true`);
}

const article = (name: string) => (/^[aeiou]/.test(name) ? `an ${name}` : `a ${name}`);

const signature = (target: CheckType | undefined, args: CheckType[]) => `${target === undefined ? "" : `${typeName(target)}.`}(${args.map(typeName).join(", ")})`;

class Checker {
  check(e: Expr, scope: ReadonlyMap<string, CheckType>): CheckType {
    const kind = e.exprKind;
    switch (kind.case) {
      case "constExpr":
        return constant(kind.value.constantKind.case);
      case "identExpr": {
        const name = kind.value.name;
        return scope.get(name) ?? VARIABLE_TYPES[name] ?? (TYPE_NAMES.has(name) ? TYPE : DYN);
      }
      case "selectExpr": {
        const operand = this.check(kind.value.operand!, scope);
        const field = this.field(e.id, operand, kind.value.field);
        return kind.value.testOnly ? BOOL : field;
      }
      case "callExpr":
        return this.call(e, kind.value.function, kind.value.target, kind.value.args, scope);
      case "listExpr":
        return { kind: "list", element: join(kind.value.elements.map((x) => this.check(x, scope))) };
      case "structExpr": {
        const keys: CheckType[] = [];
        const values: CheckType[] = [];
        for (const entry of kind.value.entries) {
          if (entry.keyKind.case === "mapKey") keys.push(this.check(entry.keyKind.value, scope));
          values.push(this.check(entry.value!, scope));
        }
        return { kind: "map", key: join(keys), value: join(values) };
      }
      case "comprehensionExpr": {
        const c = kind.value;
        const range = asRuntime(this.check(c.iterRange!, scope));
        const inner = new Map(scope);
        if (range.kind === "list") {
          // With two variables, the first is the index.
          if (c.iterVar2 !== "") inner.set(c.iterVar, INT).set(c.iterVar2, range.element);
          else inner.set(c.iterVar, range.element);
        } else if (range.kind === "map") {
          inner.set(c.iterVar, range.key);
          if (c.iterVar2 !== "") inner.set(c.iterVar2, range.value);
        } else if (range.kind === "dyn") {
          inner.set(c.iterVar, DYN);
          if (c.iterVar2 !== "") inner.set(c.iterVar2, DYN);
        } else {
          throw new TypeProblem(c.iterRange!.id, `cannot iterate over ${article(typeName(range))}: only a list or a map`);
        }
        const accu = this.check(c.accuInit!, scope);
        inner.set(c.accuVar, accu);
        this.check(c.loopCondition!, inner);
        const step = this.check(c.loopStep!, inner);
        // The accumulator takes the step's type where they differ (an empty list's elements, say).
        const accuType = same(step, accu) ? accu : join([accu, step]);
        const after = new Map(scope).set(c.accuVar, accuType);
        return this.check(c.result!, after);
      }
      default:
        return DYN;
    }
  }

  /** The type of `operand.field`. */
  private field(id: bigint, operand: CheckType, field: string): CheckType {
    switch (operand.kind) {
      case "dyn":
        return DYN;
      case "map":
        return operand.value;
      case "record": {
        const type = operand.fields[field];
        if (type === undefined) throw new TypeProblem(id, `${operand.name} has no field "${field}": it has ${Object.keys(operand.fields).join(", ")}`);
        return type;
      }
      default:
        throw new TypeProblem(id, `${article(typeName(operand))} has no fields (".${field}")`);
    }
  }

  private call(e: Expr, name: string, target: Expr | undefined, argExprs: Expr[], scope: ReadonlyMap<string, CheckType>): CheckType {
    const self = target === undefined ? undefined : this.check(target, scope);
    const args = argExprs.map((a) => this.check(a, scope));
    const noOverload = (hint = "") => new TypeProblem(e.id, `found no matching overload for '${name}' applied to '${signature(self, args)}'${hint}`);
    const bool = (t: CheckType) => t.kind === "dyn" || same(t, BOOL);
    switch (name) {
      case "_&&_":
      case "_||_":
        if (!args.every(bool)) throw noOverload(": both sides must be bools");
        return BOOL;
      case "@not_strictly_false":
        return BOOL;
      case "_?_:_":
        if (!bool(args[0]!)) throw noOverload(": the condition before ? must be a bool");
        return join([args[1]!, args[2]!]);
      case "_[_]":
        return this.index(noOverload, args[0]!, args[1]!, argExprs[1]!);
      case "_==_":
      case "_!=_":
        if (!comparable(args[0]!, args[1]!)) throw noOverload(": values of different types are never equal");
        return BOOL;
    }
    const overloads = OVERLOADS.get(name) ?? [];
    const matching = overloads.filter(
      (o) => (o.target === undefined) === (self === undefined) && (self === undefined || assignable(self, o.target!)) && o.args.length === args.length && args.every((a, i) => assignable(a, o.args[i]!)),
    );
    if (matching.length === 0) {
      const forms = overloads.map((o) => signature(o.target, o.args));
      throw noOverload(forms.length === 0 ? "" : `: it takes ${[...new Set(forms)].join(", ")}`);
    }
    return join(matching.map((o) => o.result));
  }

  /** The type of `operand[index]`. */
  private index(noOverload: (hint?: string) => TypeProblem, operand: CheckType, index: CheckType, indexExpr: Expr): CheckType {
    const isIndex = index.kind === "dyn" || (index.kind === "scalar" && NUMERIC.has(index.name));
    switch (operand.kind) {
      case "dyn":
        return DYN;
      case "list":
        if (!isIndex) throw noOverload(": a list's index is a number");
        return operand.element;
      case "map":
        return operand.value;
      case "record": {
        const k = indexExpr.exprKind;
        if (k.case === "constExpr" && k.value.constantKind.case === "stringValue") return this.field(indexExpr.id, operand, k.value.constantKind.value);
        if (index.kind !== "dyn" && !same(index, STRING)) throw noOverload(": its keys are strings");
        return DYN;
      }
      default:
        throw noOverload();
    }
  }
}

function constant(kind: string | undefined): CheckType {
  switch (kind) {
    case "boolValue":
      return BOOL;
    case "int64Value":
      return INT;
    case "uint64Value":
      return scalar("uint");
    case "doubleValue":
      return scalar("double");
    case "stringValue":
      return STRING;
    case "bytesValue":
      return scalar("bytes");
    case "nullValue":
      return NULL;
    default:
      return DYN;
  }
}
