/**
 * The functions a condition calls, metered (docs/conditions.md, "What one
 * may cost"): the library's own overloads (its standard library and strings
 * extension), each call charging the evaluation's meter by the size of what
 * it touches before it runs, and a few bodies of ours where the library's
 * is dearer than its output (replace, a list's concatenation) or compiles a
 * regular expression on every call (matches). The library stays the parser,
 * the planner and the evaluator: only its function resolver is wrapped.
 */
import { celEnv, celError, celList, isCelList, type CelEnv, type CelFunc, type CelList, type CelResult, type CelValue } from "@bufbuild/cel";
import { strings } from "@bufbuild/cel/ext";
import { RE2JS } from "@bufbuild/re2";
import { COST_UNITS, deepSize, meter, shallowSize } from "./condition-meter.js";

/** The library's environment: its functions, which the metered one wraps. */
export const LIBRARY_ENV = celEnv({ funcs: strings });

/**
 * The call the comprehensions' ranges go through (compileCondition wraps
 * each range in it): it charges the range's length times its body's cost
 * before the library iterates it. A name the parser cannot read, so no
 * condition can call it.
 */
export const RANGE_FUNCTION = "@portcullis.range";

type Call = (target: CelValue | undefined, args: CelValue[]) => number;

/** Operands that cannot be compared or copied without touching them all. */
const deep = (v: CelValue, cap: number) => deepSize(v, cap);

const sizes = (target: CelValue | undefined, args: readonly CelValue[]) => {
  let sum = target === undefined ? 0 : shallowSize(target);
  for (const a of args) sum += shallowSize(a);
  return sum;
};

/** What a call costs before it runs, by function name; the others cost the length of their operands. */
const COSTS: Record<string, Call> = {
  // Equality stops at the first difference: it touches the smaller side at most.
  "_==_": (_, [l, r]) => minDeep(l!, r!),
  "_!=_": (_, [l, r]) => minDeep(l!, r!),
  // A list's membership compares the value with each element; a map's is a lookup.
  "@in": (_, [v, range]) => (isCelList(range) ? deep(range, meter().remaining) : shallowSize(v)),
  // Its arguments' strings, lists and maps, formatted whole: three times an element's walk (measured).
  format: (target, [args]) => shallowSize(target) + 3 * deep(args!, meter().remaining),
  [RANGE_FUNCTION]: (_, [range, perElement]) => shallowSize(range) * Number(perElement as bigint),
};

function minDeep(l: CelValue, r: CelValue): number {
  const left = deep(l, meter().remaining);
  return Math.min(left, deep(r, left));
}

/** Bodies of ours, tried before the library's overloads of the same name. */
const BODIES: Record<string, (target: CelValue | undefined, args: CelValue[]) => CelValue | undefined> = {
  replace: (target, args) => (typeof target === "string" && typeof args[0] === "string" && typeof args[1] === "string" ? replace(target, args[0], args[1], args[2]) : undefined),
  join: (target, args) => (isCelList(target) && (args.length === 0 || typeof args[0] === "string") ? join(target, (args[0] as string | undefined) ?? "") : undefined),
  matches: (target, args) => (typeof target === "string" && typeof args[0] === "string" && args.length === 1 ? matches(target, args[0]) : undefined),
  "_+_": (target, args) => {
    const [l, r] = args;
    if (typeof l === "string" && typeof r === "string") {
      meter().produce(l.length + r.length);
      return l + r;
    }
    return isCelList(l) && isCelList(r) ? concat(l, r) : undefined;
  },
  split: (target, args) => (typeof target === "string" && typeof args[0] === "string" && args.length === 1 ? split(target, args[0]) : undefined),
  lowerAscii: (target) => (typeof target === "string" ? target.replace(/[A-Z]+/g, (m) => m.toLowerCase()) : undefined),
  upperAscii: (target) => (typeof target === "string" ? target.replace(/[a-z]+/g, (m) => m.toUpperCase()) : undefined),
  size: (target, args) => {
    const s = target ?? args[0];
    return typeof s === "string" ? BigInt(codePoints(s)) : undefined;
  },
  [RANGE_FUNCTION]: (_, [range]) => range,
};

/** A string's length in code points, as CEL counts it, without the library's array of them. */
function codePoints(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        n -= 1;
        i += 1;
      }
    }
  }
  return n;
}

/** `s.split(sep)`: its pieces counted, and charged as elements, before they are made. */
function split(s: string, sep: string): CelValue {
  let pieces = sep === "" ? s.length : 1;
  if (sep !== "") for (let i = s.indexOf(sep); i !== -1; i = s.indexOf(sep, i + sep.length)) pieces += 1;
  const m = meter();
  m.produce(pieces);
  m.charge(pieces * COST_UNITS.element);
  return celList(s.split(sep));
}

/**
 * `s.replace(old, new[, n])` in one pass, with the library's semantics:
 * at most n replacements (the string's length when n is absent, none when
 * it is negative), left to right, not overlapping; an empty `old` puts
 * `new` before the string n times. The library's body rebuilds the whole
 * string at each replacement: quadratic in the string's length.
 */
function replace(s: string, old: string, repl: string, n: CelValue | undefined): string {
  const max = n === undefined ? s.length : Number(n as bigint);
  const m = meter();
  m.charge(s.length + old.length + repl.length);
  if (max <= 0) return s;
  if (old === "") {
    m.produce(s.length + repl.length * max);
    m.charge(repl.length * max);
    return repl.repeat(max) + s;
  }
  const at: number[] = [];
  for (let i = s.indexOf(old); i !== -1 && at.length < max; i = s.indexOf(old, i + old.length)) at.push(i);
  const size = s.length + at.length * (repl.length - old.length);
  m.produce(size);
  m.charge(size + at.length * 16); // a piece of the result per occurrence (measured)
  if (at.length < max) return s.split(old).join(repl); // every occurrence: the engine's own pass
  const parts: string[] = [];
  let from = 0;
  for (const i of at) {
    parts.push(s.slice(from, i), repl);
    from = i + old.length;
  }
  parts.push(s.slice(from));
  return parts.join("");
}

/** `list.join([sep])`: its size counted, and charged, before it is built. */
function join(list: CelList, sep: string): string | undefined {
  const m = meter();
  m.charge(list.size);
  let size = Math.max(0, list.size - 1) * sep.length;
  for (const item of list) {
    if (typeof item !== "string") return undefined; // the library's body gives the error
    size += item.length;
  }
  m.produce(size);
  m.charge(size);
  const items: string[] = [];
  for (const item of list) items.push(item as string);
  return items.join(sep);
}

/** Compiled patterns, least recently used first. */
const PATTERNS = new Map<string, RE2JS>();
const MAX_PATTERNS = 1_000;

/** A pattern compiled by RE2 (linear in its input: no backtracking), cached. */
export function compilePattern(pattern: string): RE2JS {
  let re = PATTERNS.get(pattern);
  if (re !== undefined) {
    PATTERNS.delete(pattern);
  } else {
    re = RE2JS.compile(pattern);
    if (PATTERNS.size >= MAX_PATTERNS) PATTERNS.delete(PATTERNS.keys().next().value!);
  }
  PATTERNS.set(pattern, re);
  return re;
}

/**
 * RE2 runs in time proportional to the input's length times the pattern's
 * (its simulation keeps a thread per state of the pattern): charged so,
 * COST_UNITS.match a character of each, measured on its dearest patterns.
 */
function matches(s: string, pattern: string): boolean {
  meter().charge((s.length + 1) * (pattern.length + 1) * COST_UNITS.match);
  return compilePattern(pattern).test(s);
}

const LIST = Symbol.for("@bufbuild/cel/list");

/**
 * A list built by `+`: a prefix of a shared array. Appending to the list
 * whose end is the array's end pushes onto the array (the macros' `map` and
 * `filter` append one element per step), so building a list of n elements
 * costs n, where the library's nested concatenations cost n² to read.
 */
class AppendList implements Iterable<CelValue> {
  readonly [LIST] = {};

  constructor(
    private readonly items: CelValue[],
    readonly size: number,
  ) {}

  get(index: number): CelValue | undefined {
    return index >= 0 && index < this.size ? this.items[index] : undefined;
  }

  *values(): IterableIterator<CelValue> {
    for (let i = 0; i < this.size; i++) yield this.items[i]!;
  }

  [Symbol.iterator](): IterableIterator<CelValue> {
    return this.values();
  }

  /** This list and `more`: in place when this list ends where its array does, else a copy. */
  append(more: CelList): AppendList {
    const m = meter();
    m.produce(this.size + more.size);
    const shared = this.items.length === this.size;
    m.charge(shared ? more.size : this.size + more.size);
    const items = shared ? this.items : this.items.slice(0, this.size);
    for (const v of more) items.push(v);
    return new AppendList(items, items.length);
  }
}

function concat(l: CelList, r: CelList): CelValue {
  if (l instanceof AppendList) return l.append(r) as unknown as CelList;
  const m = meter();
  m.produce(l.size + r.size);
  m.charge(l.size + r.size);
  return new AppendList([...l, ...r], l.size + r.size) as unknown as CelList;
}

/** One name's overloads, called through the meter. */
class MeteredGroup {
  constructor(
    readonly name: string,
    private readonly library: { call(id: number, target: CelValue | undefined, args: CelValue[]): CelResult | undefined } | undefined,
  ) {}

  call(id: number, target: CelValue | undefined, args: CelValue[]): CelResult | undefined {
    const m = meter();
    m.charge(COST_UNITS.call + (COSTS[this.name] ?? sizes)(target, args));
    const body = BODIES[this.name];
    if (body !== undefined) {
      try {
        const result = body(target, args);
        if (result !== undefined) return result;
      } catch (error) {
        // The meter's own errors end the evaluation; any other (a pattern that does not compile) is the call's error, as the library gives it.
        if (m.stopped !== undefined) throw error;
        return celError(error instanceof Error ? error.message : String(error), id);
      }
    }
    return this.library?.call(id, target, args);
  }

  *[Symbol.iterator](): IterableIterator<CelFunc> {
    yield* (this.library as unknown as Iterable<CelFunc> | undefined) ?? [];
  }
}

interface Resolver {
  find(name: string): MeteredGroup | undefined;
}

/** The environment conditions are planned in: the library's, its functions found through the meter. */
export function meteredEnv(): CelEnv {
  const library = LIBRARY_ENV.funcs as unknown as { find(name: string): MeteredGroup["library"] };
  const groups = new Map<string, MeteredGroup>();
  const resolver: Resolver = {
    find(name) {
      let group = groups.get(name);
      if (group === undefined) {
        const found = library.find(name);
        if (found === undefined && name !== RANGE_FUNCTION) return undefined;
        groups.set(name, (group = new MeteredGroup(name, found)));
      }
      return group;
    },
  };
  return { namespace: LIBRARY_ENV.namespace, registry: LIBRARY_ENV.registry, funcs: resolver, variables: LIBRARY_ENV.variables } as unknown as CelEnv;
}
