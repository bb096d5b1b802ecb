/**
 * The meter of one condition's evaluation (docs/conditions.md, "What one
 * may cost"): every function a condition calls charges it, before doing its
 * work, by the size of what it touches, and a charge past the budget throws
 * out of the evaluation. A unit is about one character or one element
 * touched (COST_UNITS weighs the dearer kinds of work).
 *
 * The evaluation is synchronous, so the meter of the evaluation under way
 * is a module variable: the functions find it there (`charge`).
 */
import { isCelList, isCelMap } from "@bufbuild/cel";

/** The weights of the work that costs more than a character a unit. */
export const COST_UNITS = {
  /** A function call, whatever its operands. */
  call: 1,
  /** One pass of a comprehension's body, per node of the body (the interpreter's own steps). */
  node: 16,
  /** An element of a list or an entry of a map a call walks (equality, `in`, format): the library reads each through a conversion. */
  element: 48,
  /** A character of a regular expression's input, per character of its pattern (RE2's simulation). */
  match: 8,
} as const;

/** Thrown by a charge past the budget; the evaluation ends with it. */
export class BudgetExceeded extends Error {
  constructor(readonly budget: number) {
    super(`exceeded its cost budget of ${budget.toLocaleString("en-US")} units (docs/conditions.md, "What one may cost")`);
  }
}

/** Thrown for a value larger than CONDITION_LIMITS.valueSize; the evaluation ends with it. */
export class ValueTooLarge extends Error {
  constructor(size: number, max: number) {
    super(`would build a value of ${size.toLocaleString("en-US")} characters or elements; at most ${max.toLocaleString("en-US")}`);
  }
}

/** What one evaluation spent, against its budget. */
export class Meter {
  spent = 0;
  /** Why the evaluation was stopped, when it was. */
  stopped: Error | undefined;

  constructor(
    readonly budget: number,
    readonly maxValueSize: number,
  ) {}

  get remaining(): number {
    return Math.max(0, this.budget - this.spent);
  }

  charge(units: number): void {
    this.spent += units;
    if (this.spent > this.budget) throw (this.stopped = new BudgetExceeded(this.budget));
  }

  /** Checks the size of a value about to be built. */
  produce(size: number): void {
    if (size > this.maxValueSize) throw (this.stopped = new ValueTooLarge(size, this.maxValueSize));
  }
}

let current: Meter | undefined;

/** Runs `fn` with `meter` as the meter its functions charge. */
export function metered<T>(meter: Meter, fn: () => T): T {
  const outer = current;
  current = meter;
  try {
    return fn();
  } finally {
    current = outer;
  }
}

/**
 * The meter under way. A function called outside an evaluation (never, in
 * the service) charges a meter with no room, so nothing runs unmetered.
 */
export function meter(): Meter {
  return current ?? UNMETERED;
}

const UNMETERED = new Meter(0, 0);

/** A value's own size: a string's or bytes' length, a list's or map's entries, else 1. */
export function shallowSize(value: unknown): number {
  if (typeof value === "string") return Math.max(1, value.length);
  if (value instanceof Uint8Array) return Math.max(1, value.length);
  if (isCelList(value) || isCelMap(value) || value instanceof Map) return Math.max(1, (value as { size: number }).size);
  if (Array.isArray(value)) return Math.max(1, value.length);
  return 1;
}

/**
 * A value's size all the way down, in units: its strings' characters, and
 * COST_UNITS.element for each element, key and scalar. Counted up to `cap`
 * and no further: counting a structure that shares parts (a list holding
 * the same list many times) costs at most `cap` steps. Above `cap` it
 * answers cap + 1.
 */
export function deepSize(value: unknown, cap: number): number {
  let size = 0;
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    if (size > cap) return cap + 1;
    const v = stack.pop();
    if (isCelList(v) || Array.isArray(v)) {
      size += COST_UNITS.element;
      for (const e of v as Iterable<unknown>) {
        size += COST_UNITS.element;
        if (size > cap) return cap + 1;
        stack.push(e);
      }
    } else if (isCelMap(v) || v instanceof Map) {
      size += COST_UNITS.element;
      for (const [k, e] of v as Iterable<[unknown, unknown]>) {
        size += 2 * COST_UNITS.element;
        if (size > cap) return cap + 1;
        stack.push(k, e);
      }
    } else if (typeof v === "string" || v instanceof Uint8Array) {
      size += v.length;
    }
  }
  return size > cap ? cap + 1 : size;
}
