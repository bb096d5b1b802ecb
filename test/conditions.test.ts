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
    { source: "1", expected: { holds: false, reason: "not a bool" } },
    { source: "'true'", expected: { holds: false, reason: "not a bool" } },
    { source: "1 / 0 == 1", expected: { holds: false, reason: "error" } },
    { source: "context.missing || true", expected: { holds: true } }, // CEL's logic absorbs the error
    { source: "context.missing && true", expected: { holds: false, reason: "error" } },
    { source: "has(context.missing)", expected: { holds: false, reason: "false" } },
  ])("$source", ({ source, expected }) => {
    expect(holds(source, facts())).toMatchObject(expected);
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

  it("a comprehension at the cost limit's scale evaluates in well under a second", () => {
    const condition = compileCondition("context.l.exists(x, x == 'absent')", "c");
    const bindings = new ConditionBindings(facts({ context: { l: Array.from({ length: CONDITION_LIMITS.listElements }, (_, i) => String(i)) } }));
    expect(condition.evaluate(bindings)).toMatchObject({ holds: false, reason: "false" });
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
