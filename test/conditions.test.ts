/**
 * Conditions (domain/conditions.ts): what is refused when written (each a
 * 400 naming the field and, where there is one, the position), what each
 * kind of value does with and without the facts a condition needs, and the
 * bound on an evaluation's cost.
 */
import { describe, expect, it } from "vitest";
import { DomainError } from "../src/domain/errors.js";
import {
  CONDITION_LIMITS,
  ConditionBindings,
  ConditionCache,
  compileCondition,
  type ConditionFacts,
} from "../src/domain/conditions.js";

const NOW = new Date("2026-11-26T12:00:00.000Z");

/** Facts with nothing in them but ids, and `over` laid over them. */
function facts(over: Partial<ConditionFacts> = {}): ConditionFacts {
  return {
    subject: { id: "alice", properties: {} },
    resource: { type: "todo", id: "t1", properties: {} },
    action: { name: "update", properties: {} },
    context: {},
    now: NOW,
    ...over,
  };
}

const holds = (source: string, f: ConditionFacts) => compileCondition(source, "condition").evaluate(new ConditionBindings(f));

/** The 400 compileCondition throws for `source`. */
function refusal(source: string, field = "writes[3].condition"): DomainError {
  try {
    compileCondition(source, field);
  } catch (error) {
    expect(error).toBeInstanceOf(DomainError);
    return error as DomainError;
  }
  throw new Error(`accepted: ${source}`);
}

describe("a condition refused when written", () => {
  it.each([
    { name: "a syntax error, with its position", source: "subject.id ==", fragments: ["writes[3].condition", "not valid CEL", "at 1:"] },
    { name: "a syntax error on the second line", source: "true &&\n  resource.id $ 1", fragments: ["at 2:15", "found $"] },
    { name: "a name it may not read, with its position", source: "subject.id == owner", fragments: ['unknown name "owner"', "at 1:15"] },
    { name: "a name inside a comprehension", source: "context.tags.exists(t, t == tag)", fragments: ['unknown name "tag"'] },
    { name: "a comprehension's variable outside it", source: "context.tags.exists(t, true) && t == 1", fragments: ['unknown name "t"'] },
    { name: "an unknown function", source: "isOwner(subject.id)", fragments: ['unknown function "isOwner"'] },
    { name: "an unknown method", source: "subject.id.isOwner()", fragments: ['unknown function "isOwner"'] },
    { name: "a message built", source: "google.protobuf.Duration{seconds: 1} == duration('1s')", fragments: ["messages cannot be built"] },
    { name: "empty", source: "  ", fragments: ["is empty"] },
    { name: "over 1,000 characters", source: `subject.id == '${"a".repeat(1_000)}'`, fragments: ["at most 1000"] },
    {
      name: "a comprehension inside another over the question's lists",
      source: "context.a.exists(x, context.b.exists(y, x == y))",
      fragments: ["could cost up to", "at most 1,000,000"],
    },
    { name: "a membership test over a list inside a comprehension", source: "context.a.exists(x, x in context.b)", fragments: ["could cost up to"] },
  ])("$name", ({ source, fragments }) => {
    const error = refusal(source);
    expect(error.code).toBe("invalid_argument");
    for (const fragment of fragments) expect(error.message).toContain(fragment);
    expect(error.details[0]).toMatchObject({ field: "writes[3].condition" });
  });
});

describe("a condition that does not type-check, refused when written with its position", () => {
  it.each([
    // Four that can never hold: each would be denied at every question.
    { source: "subject.id > 5", at: "1:12", fragment: "found no matching overload for '_>_' applied to '(string, int)'" },
    { source: 'subject.id + 1 == "x1"', at: "1:12", fragment: "found no matching overload for '_+_' applied to '(string, int)'" },
    { source: "subject.id", at: "1:8", fragment: "evaluates to a string, never a bool" },
    { source: "now.getHours(1, 2) > 9", at: "1:4", fragment: "found no matching overload for 'getHours' applied to 'timestamp.(int, int)': it takes duration.(), timestamp.(), timestamp.(string)" },
    // Arity and types of the strings' functions.
    { source: 'subject.id.startsWith("a", 1)', at: "1:11", fragment: "'startsWith' applied to 'string.(string, int)': it takes string.(string)" },
    { source: "action.name.endsWith(1)", at: "1:12", fragment: "'endsWith' applied to 'string.(int)'" },
    { source: 'resource.type.lowerAscii(1) == "x"', at: "1:14", fragment: "'lowerAscii' applied to 'string.(int)': it takes string.()" },
    { source: "resource.id.matches(1)", at: "1:12", fragment: "'matches' applied to 'string.(int)'" },
    { source: 'matches(subject.id, "a")', at: "1:1", fragment: "'matches' applied to '(string, string)': it takes string.(string)" },
    { source: 'subject.id.size() > "a"', at: "1:18", fragment: "'_>_' applied to '(int, string)'" },
    { source: "now > 5", at: "1:4", fragment: "'_>_' applied to '(timestamp, int)'" },
    // Equality of values that are never equal, logic on what is not a bool.
    { source: "subject.id == 5", at: "1:12", fragment: "'_==_' applied to '(string, int)': values of different types are never equal" },
    { source: 'true &&\n  1 + 2 == "3"', at: "2:8", fragment: "'_==_' applied to '(int, string)'" },
    { source: "[1].exists(x, x + 1)", at: "1:4", fragment: "'_||_' applied to '(bool, int)'" },
    { source: '"a" ? true : false', at: "1:1", fragment: "the condition before ? must be a bool" },
    // Fields the declared variables do not have, and fields of what has none.
    { source: "subject.foo == 1", at: "1:8", fragment: 'subject has no field "foo": it has id, properties' },
    { source: "has(subject.nope)", at: "1:1", fragment: 'subject has no field "nope"' },
    { source: 'subject["x"] == "a"', at: "1:9", fragment: 'subject has no field "x"' },
    { source: "now.foo == 1", at: "1:4", fragment: 'a timestamp has no fields (".foo")' },
    { source: 'subject.id[0] == "a"', at: "1:11", fragment: "'_[_]' applied to '(string, int)'" },
    // Results that cannot be a bool.
    { source: "subject.properties", at: "1:8", fragment: "evaluates to a map(string, dyn), never a bool" },
    { source: "timestamp(1)", at: "1:1", fragment: "evaluates to a timestamp, never a bool" },
    { source: 'context.x == 1 ? "a" : "b"', at: "1:1", fragment: "evaluates to a string, never a bool" },
  ])("$source", ({ source, at, fragment }) => {
    const error = refusal(source);
    expect(error.code).toBe("invalid_argument");
    expect(error.message).toMatch(new RegExp(`^writes\\[3\\]\\.condition: at ${at}: `));
    expect(error.message).toContain(fragment);
    expect(error.details[0]).toMatchObject({ field: "writes[3].condition" });
  });

  it.each([
    // What the question carries is dyn: checked when evaluated, never refused for its type.
    "context.x > 5",
    "resource.properties.level >= 2",
    "context.n + 1 > 2 && context.list.size() > 0",
    "context.a.b.c == context.d[1]",
    "context.tags.exists(t, t)",
    "context.x",
    "subject.id.contains(context.x)",
    // The declared types, used as they are.
    "now.getHours() > 9",
    'now.getHours("Europe/Paris") < 9',
    "now.getDayOfWeek() in [1, 2]",
    'now - duration("1h") < now',
    'now - timestamp(context.t) < duration("1h")',
    'subject.id.startsWith("a")',
    'subject.id.charAt(0) == "a"',
    'subject["id"] == "a"',
    '"x" in subject.properties',
    "size(subject.id) > 2 && subject.properties.size() > 0",
    "[1, 2].map(x, x * 2).size() == 2",
    "[1, 2].filter(x, x > 1).size() == 1",
    "[1, 2].exists_one(x, x > 1)",
    '{"a": 1}.exists(k, k == "a")',
    "1 == 1.0 && 1u < 2",
    "context.x == null",
    "int(context.level) + 1 > 2",
    'string(now) != ""',
  ])("accepts %s", (source) => {
    expect(compileCondition(source, "condition").source).toBe(source);
  });
});

describe("a condition accepted", () => {
  it.each([
    "subject.id == resource.properties.ownerID",
    "context.tags.exists(t, t == 'urgent')",
    "[1, 2, 3].all(x, [4, 5].exists(y, x < y))",
    "has(subject.properties.department) && subject.properties.department == 'support'",
    "now < timestamp('2030-01-01T00:00:00Z') && type(context.n) == double",
    "resource.id.startsWith('pub-') || action.name in ['read', 'list']",
  ])("%s", (source) => {
    const condition = compileCondition(source, "condition");
    expect(condition.source).toBe(source);
    expect(condition.cost).toBeLessThanOrEqual(CONDITION_LIMITS.cost);
  });

  it("a comprehension over literal lists costs by their lengths, one over the question's by the longest list it can hold", () => {
    const literal = compileCondition("[1, 2, 3].exists(x, x == 2)", "c").cost;
    const open = compileCondition("context.l.exists(x, x == 2)", "c").cost;
    expect(literal).toBeLessThan(1_000);
    expect(open).toBeGreaterThan(CONDITION_LIMITS.listElements);
    expect(open).toBeLessThanOrEqual(CONDITION_LIMITS.cost);
  });
});

/**
 * Each kind of value: a condition that needs a fact holds with it, and is
 * false (never an error that allows) without it, with the wrong type, or
 * with another value.
 */
describe.each([
  {
    kind: "strings",
    source: "subject.id == resource.properties.ownerID",
    with: facts({ resource: { type: "todo", id: "t1", properties: { ownerID: "alice" } } }),
    other: facts({ resource: { type: "todo", id: "t1", properties: { ownerID: "bob" } } }),
    wrongType: facts({ resource: { type: "todo", id: "t1", properties: { ownerID: 7 } } }),
  },
  {
    kind: "numbers (JSON numbers against int literals)",
    source: "subject.properties.level >= 3",
    with: facts({ subject: { id: "alice", properties: { level: 3 } } }),
    other: facts({ subject: { id: "alice", properties: { level: 2.5 } } }),
    wrongType: facts({ subject: { id: "alice", properties: { level: "3" } } }),
  },
  {
    kind: "booleans",
    source: "context.mfa",
    with: facts({ context: { mfa: true } }),
    other: facts({ context: { mfa: false } }),
    wrongType: facts({ context: { mfa: "true" } }),
  },
  {
    kind: "timestamps (now against a context value)",
    source: "now < timestamp(context.ticketClosesAt)",
    with: facts({ context: { ticketClosesAt: "2026-11-26T13:00:00Z" } }),
    other: facts({ context: { ticketClosesAt: "2026-11-26T11:00:00Z" } }),
    wrongType: facts({ context: { ticketClosesAt: "tomorrow" } }),
  },
  {
    kind: "lists",
    source: "'support' in subject.properties.teams",
    with: facts({ subject: { id: "alice", properties: { teams: ["sales", "support"] } } }),
    other: facts({ subject: { id: "alice", properties: { teams: ["sales"] } } }),
    wrongType: facts({ subject: { id: "alice", properties: { teams: 12 } } }),
  },
  {
    kind: "maps (nested objects)",
    source: "context.request.headers['x-office'] == 'berlin'",
    with: facts({ context: { request: { headers: { "x-office": "berlin" } } } }),
    other: facts({ context: { request: { headers: { "x-office": "paris" } } } }),
    wrongType: facts({ context: { request: ["berlin"] } }),
  },
  {
    kind: "null",
    source: "context.manager == null",
    with: facts({ context: { manager: null } }),
    other: facts({ context: { manager: "bob" } }),
    wrongType: undefined,
  },
])("$kind", (row) => {
  it("holds with the fact it needs", () => {
    expect(holds(row.source, row.with)).toEqual({ holds: true });
  });
  it("is false with another value", () => {
    expect(holds(row.source, row.other)).toMatchObject({ holds: false, reason: "false" });
  });
  it("is false, as an error, without the fact", () => {
    expect(holds(row.source, facts())).toMatchObject({ holds: false, reason: "error" });
  });
  it.skipIf(row.wrongType === undefined)("does not hold with a value of the wrong type", () => {
    expect(holds(row.source, row.wrongType!)).toMatchObject({ holds: false });
  });
});

describe("what counts as holding", () => {
  it.each([
    { source: "true", expected: { holds: true } },
    { source: "false", expected: { holds: false, reason: "false" } },
    // A value read from the question is dyn: it passes the type check, and is not a bool at run time.
    { source: "context.n", expected: { holds: false, reason: "not a bool" } },
    { source: "context.s", expected: { holds: false, reason: "not a bool" } },
    { source: "1 / 0 == 1", expected: { holds: false, reason: "error" } },
    { source: "context.missing || true", expected: { holds: true } }, // CEL's logic absorbs the error
    { source: "context.missing && true", expected: { holds: false, reason: "error" } },
    { source: "has(context.missing)", expected: { holds: false, reason: "false" } },
  ])("$source", ({ source, expected }) => {
    expect(holds(source, facts({ context: { n: 1, s: "true" } }))).toMatchObject(expected);
  });

  it("a stored condition that is not a bool (written before the type check) still loads, and does not hold", () => {
    const cache = new ConditionCache();
    expect(cache.get("1").evaluate(new ConditionBindings(facts()))).toMatchObject({ holds: false, reason: "not a bool" });
    expect(cache.get("subject.id > 5 || true").evaluate(new ConditionBindings(facts()))).toEqual({ holds: true });
  });

  it("every variable is there: subject, resource, action, context, now", () => {
    const f = facts({ action: { name: "update", properties: { via: "api" } }, context: { ip: "10.1.2.3" } });
    expect(
      holds(
        "subject.id == 'alice' && resource.type == 'todo' && resource.id == 't1' && action.name == 'update' && action.properties.via == 'api' && context.ip.startsWith('10.') && now == timestamp('2026-11-26T12:00:00Z')",
        f,
      ),
    ).toEqual({ holds: true });
  });

  it("a comprehension at the cost limit's scale ends within its budget: an error, quickly", () => {
    const condition = compileCondition("context.l.exists(x, x == 'absent')", "c");
    const bindings = new ConditionBindings(facts({ context: { l: Array.from({ length: CONDITION_LIMITS.listElements }, (_, i) => String(i)) } }));
    expect(condition.evaluate(bindings)).toMatchObject({ holds: false, reason: "error", message: expect.stringContaining("exceeded its cost budget") });
    const fits = new ConditionBindings(facts({ context: { l: Array.from({ length: 4_000 }, (_, i) => String(i)) } }));
    expect(condition.evaluate(fits)).toMatchObject({ holds: false, reason: "false" });
  });
});

describe("which conditions read the subject's stored properties", () => {
  it.each([
    ["subject.id == 'a'", false],
    ["resource.properties.ownerID == subject.id", false],
    ["subject.properties.email == 'a'", true],
    ["has(subject.properties.team)", true],
    ["subject['properties'].size() > 0", true],
    ["subject == {}", true],
    ["context.users.exists(u, u == subject.id)", false],
    ["context.users.exists(u, u == subject.properties.email)", true],
  ] as const)("%s → %s", (source, reads) => {
    expect(compileCondition(source, "c").readsSubjectProperties).toBe(reads);
  });
});

describe("ConditionCache", () => {
  it("compiles a source once, and keeps the most recently used within its bound", () => {
    const cache = new ConditionCache(2);
    const a = cache.get("context.a");
    expect(cache.get("context.a")).toBe(a);
    cache.get("context.b");
    cache.get("context.a"); // a is now the most recently used
    cache.get("context.c"); // evicts b
    expect(cache.get("context.a")).toBe(a);
  });

  it("a stored source that no longer compiles never holds", () => {
    const cache = new ConditionCache();
    expect(cache.get("subject.id ==").evaluate(new ConditionBindings(facts()))).toMatchObject({ holds: false, reason: "error" });
  });
});

/** Attacks on the budget: each ends within its budget as an error naming the budget, quickly. */
describe("what one evaluation may cost", () => {
  const list = Array.from({ length: 30_000 }, (_, i) => i % 7);
  const attacks: [string, string, ConditionFacts["context"]][] = [
    ["a replace by the context's own string", "context.s.replace('a', context.s) == 'x'", { s: "a".repeat(2_500) }],
    ["exists comparing whole lists", "context.l.exists(x, context.l == context.l)", { l: list }],
    ["a join of a long separator", "context.ss.join(context.s) == ''", { ss: Array<string>(3_000).fill("a"), s: "b".repeat(3_000) }],
    ["a dynamic pattern as long as the input", "context.s.matches(context.p)", { s: "a".repeat(30_000) + "!", p: "(a|b|c|d)*".repeat(60) + "$" }],
    ["membership over a long list, many times", "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12].all(i, !(99 in context.l))", { l: list }],
    ["format of a long list, nested", "'%s%s%s'.format([context.l, context.l, context.l]) == ''", { l: list.map(() => list.slice(0, 20)) }],
    ["a comprehension body with no function", "context.l.all(x, [x, x, x, x, x, x] != [])", { l: list }],
    ["concatenation doubling a string", "(context.s + context.s + context.s + context.s + context.s + context.s + context.s + context.s).size() > 0", { s: "a".repeat(60_000) }],
  ];
  for (const [name, source, context] of attacks) {
    it(`${name}: an error with the budget's message, within the budget`, () => {
      const condition = compileCondition(source, "condition");
      const bindings = new ConditionBindings(facts({ context }));
      const started = performance.now();
      const outcome = condition.evaluate(bindings);
      const ms = performance.now() - started;
      expect(outcome).toMatchObject({ holds: false, reason: "error", message: expect.stringMatching(/exceeded its cost budget of 1,000,000|would build a value of/) });
      expect(ms).toBeLessThan(2_000); // a generous bound: the bench measures the speed
    });
  }

  it("a 60,000-character path through replace evaluates, linearly", () => {
    const condition = compileCondition("context.path.replace('.', '/') == 'docs/2024'", "condition");
    expect(condition.evaluate(new ConditionBindings(facts({ context: { path: "docs.2024" } })))).toEqual({ holds: true });
    const [outcome, spent] = condition.evaluateWithin(new ConditionBindings(facts({ context: { path: "a.".repeat(30_000) } })), CONDITION_LIMITS.budget);
    expect(outcome).toMatchObject({ holds: false, reason: "false" });
    expect(spent).toBeGreaterThan(60_000); // charged by the size it touches, not as one step
  });

  it("replace keeps the library's semantics: a count, none when negative, an empty substring", () => {
    const cases: [string, string][] = [
      ["'a.b.c'.replace('.', '/')", "a/b/c"],
      ["'a.b.c'.replace('.', '/', 1)", "a/b.c"],
      ["'a.b.c'.replace('.', '/', -1)", "a.b.c"],
      ["'aaaa'.replace('aa', 'b')", "bb"],
      ["'abc'.replace('', 'x')", "xxxabc"],
      ["'abc'.replace('', 'x', 1)", "xabc"],
      ["'abc'.replace('b', '')", "ac"],
    ];
    for (const [expr, expected] of cases) expect(holds(`${expr} == '${expected}'`, facts()), expr).toEqual({ holds: true });
  });

  it("charges by size: a replace over a longer string costs more (a replace costing one step fails here)", () => {
    const condition = compileCondition("context.s.replace('a', 'b') != ''", "condition");
    const cost = (n: number) => condition.evaluateWithin(new ConditionBindings(facts({ context: { s: "a".repeat(n) } })), CONDITION_LIMITS.budget)[1];
    expect(cost(10_000) - cost(10)).toBeGreaterThan(2 * 9_990);
    for (const source of ["context.s.matches('^a+$')", "context.s + context.s != ''", "context.l == context.m", "1 in context.l", "context.ss.join('-') != ''", "context.s.split('a').size() > 0", "context.s.lowerAscii() != ''"]) {
      const compiled = compileCondition(source, "condition");
      const at = (n: number) =>
        compiled.evaluateWithin(
          new ConditionBindings(facts({ context: { s: "a".repeat(n), l: Array<number>(n).fill(1), m: Array<number>(n).fill(1), ss: Array<string>(n).fill("ab") } })),
          CONDITION_LIMITS.budget,
        )[1];
      expect(at(5_000), source).toBeGreaterThan(at(5) + 4_000);
    }
  });

  it("matches runs in linear time on a pattern that backtracks catastrophically elsewhere", () => {
    const condition = compileCondition("context.s.matches('^(a+)+$')", "condition");
    const started = performance.now();
    expect(condition.evaluate(new ConditionBindings(facts({ context: { s: "a".repeat(10_000) + "b" } })))).toMatchObject({ holds: false, reason: "false" });
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(holds("'aaa'.matches('^(a+)+$')", facts())).toEqual({ holds: true });
  });

  it("an || does not absorb a stop: the budget's error stands", () => {
    expect(holds("context.s.replace('a', context.s) == 'x' || true", facts({ context: { s: "a".repeat(2_500) } }))).toMatchObject({ holds: false, reason: "error" });
  });

  const deep: [string, string][] = [
    ["parentheses", "(".repeat(480) + "1" + ")".repeat(480) + " == 1"],
    ["negations", "!".repeat(480) + "true"],
    ["minus signs", "-".repeat(480) + "1 == 1"],
    ["lists", "[".repeat(400) + "1" + "]".repeat(400) + " == []"],
    ["maps", "{1: ".repeat(150) + "1" + "}".repeat(150) + " == {}"],
  ];
  for (const [name, source] of deep) {
    it(`nesting ${name} 480 deep is a 400 with its position, not a stack overflow`, () => {
      const error = refusal(source);
      expect(error.message).toMatch(/^writes\[3\]\.condition: at 1:(65|257): nests more than 64 levels deep/);
    });
  }

  it("depth does not count strings, and a long member chain or sum is taken", () => {
    expect(holds(`'${"(".repeat(300)}' != '' && r"\\${"[".repeat(100)}" != '' && """${"{".repeat(100)}""" != ''`, facts())).toEqual({ holds: true });
    expect(() => compileCondition("context" + ".a".repeat(400) + " == 1", "condition")).not.toThrow();
    expect(() => compileCondition("1" + " + 1".repeat(200) + " == 201", "condition")).not.toThrow();
  });

  it("a part that reads nothing of the question and cannot fit is refused when written, with its position", () => {
    const a = "a".repeat(100);
    const error = refusal(`'${a}'.replace('a','${a}').replace('a','${a}') == ''`);
    expect(error.message).toMatch(/^writes\[3\]\.condition: at 1:\d+: cannot be evaluated within its budget whatever the question carries/);
    expect(refusal("[1,2,3,4,5,6,7,8].all(x, [1,2,3,4,5,6,7,8].all(y, [1,2,3,4,5,6,7,8].all(z, '" + a + "'.replace('a', '" + a + "') != '')))").message).toMatch(
      /cannot be evaluated within its budget/,
    );
    expect(holds(`'${a}'.replace('a', 'b') != '' && context.x == 1`, facts({ context: { x: 1 } }))).toEqual({ holds: true });
  });

  it("a literal pattern that does not compile is refused when written, with its position", () => {
    expect(refusal("context.s.matches('(')").message).toMatch(/^writes\[3\]\.condition: at 1:\d+: the pattern does not compile/);
  });

  it("map, filter and list concatenation keep their meaning with the appending lists", () => {
    expect(holds("[1, 2, 3, 4, 5, 6].filter(x, x > 3).size() == 3 && context.l + [3] == [1, 2, 3]", facts({ context: { l: [1, 2] } }))).toEqual({ holds: true });
    // One list appended to twice: the second append copies, the first keeps its elements.
    expect(holds("[[1, 2].map(x, x)].all(a, a + [3] == [1, 2, 3] && a + [4] == [1, 2, 4] && a == [1, 2])", facts())).toEqual({ holds: true });
    expect(holds("[1, 2].map(x, x) + [3] == [1, 2, 3] && ([1, 2].map(x, x) + [3]).size() == ([1, 2].map(x, x) + [4, 5]).size() - 1", facts())).toEqual({ holds: true });
    expect(holds("[1, 2, 3].map(x, x * 2) == [2, 4, 6] && ([1] + [2]) + [3] == [1, 2, 3]", facts())).toEqual({ holds: true });
  });
});
