/**
 * A question's JSON as CEL values (domain/condition-values.ts): views
 * converted as a condition reads them. Every condition here evaluates to
 * what it evaluates to with the JSON converted whole beforehand, as the
 * library's own maps and lists of it (a deep copy into Maps and arrays);
 * explain's "values it read" are recorded with their paths and values, deep
 * ones too; and the JSON itself is neither copied nor changed.
 */
import { describe, expect, it } from "vitest";
import { celMap, type CelInput } from "@bufbuild/cel";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { compileCondition, ConditionBindings, type ConditionFacts, type ConditionRead } from "../src/domain/conditions.js";
import type { JsonObject, JsonValue } from "../src/lib/json.js";

const NOW = new Date("2026-11-26T12:00:00.000Z");

const CONTEXT: JsonObject = JSON.parse(
  JSON.stringify({
    a: { b: [{ c: "x" }, { c: "y", d: [1, 2, { e: null }] }] },
    l: [1, 2, 3],
    ss: ["p", "q"],
    m: { one: 1, two: 2 },
    z: null,
    t: true,
    n: 2.5,
    s: "text",
    empty: {},
  }),
) as JsonObject;
// Keys a JavaScript object has by its prototype, present and absent.
const HOSTILE = JSON.parse('{"__proto__": {"x": 1}, "constructor": "c"}') as JsonObject;

function facts(context: JsonObject): ConditionFacts {
  return {
    subject: { id: "alice", properties: { email: "a@x", tags: ["t1"] } },
    resource: { type: "doc", id: "d1", properties: { owner: { email: "a@x" } } },
    action: { name: "read", properties: {} },
    context,
    now: NOW,
  };
}

/** The facts converted whole, as the library's own maps of Maps and arrays (what the views must answer like). */
function eager(f: ConditionFacts): Record<string, CelInput> {
  const value = (v: JsonValue): CelInput =>
    Array.isArray(v) ? v.map(value) : v !== null && typeof v === "object" ? new Map(Object.entries(v).map(([k, x]) => [k, value(x)])) : v;
  return {
    subject: celMap(new Map([["id", f.subject.id], ["properties", value(f.subject.properties)]])),
    resource: celMap(new Map([["type", f.resource.type], ["id", f.resource.id], ["properties", value(f.resource.properties)]])),
    action: celMap(new Map([["name", f.action.name], ["properties", value(f.action.properties)]])),
    context: celMap(value(f.context) as Map<string, CelInput>),
    now: timestampFromDate(f.now),
  };
}

const CONDITIONS = [
  "context.a.b[1].c == 'y'",
  "context.a.b[1].d[2].e == null",
  "has(context.a.b)",
  "has(context.z)",
  "has(context.missing)",
  "context.missing == 1",
  "context.l == [1.0, 2.0, 3.0]",
  "context.l == [1.0, 2.0]",
  "context.m == {'one': 1.0, 'two': 2.0}",
  "context.m == {'one': 1.0}",
  "context.m == context.m && context.a == context.a",
  "'one' in context.m",
  "'three' in context.m",
  "2.0 in context.l",
  "context.l.exists(x, x == 2.0)",
  "context.l.all(x, x > 0.0)",
  "context.m.all(k, context.m[k] > 0.0)",
  "context.m.exists(k, k == 'two')",
  "size(context.m) == 2 && size(context.l) == 3 && size(context.empty) == 0",
  "context.l[3] == 1.0",
  "context.l[1] == 2.0",
  "context.m[1] == 1.0",
  "type(context.m) == map && type(context.l) == list && type(context.n) == double",
  "context.l + [4.0] == [1.0, 2.0, 3.0, 4.0]",
  "context.ss.join(',') == 'p,q'",
  "context.t && context.n > 2.0 && context.s.startsWith('te')",
  "subject.properties.email == resource.properties.owner.email",
  "'t1' in subject.properties.tags",
  "has(subject.properties.nothing)",
  "action.name == 'read' && resource.type == 'doc' && subject.id == 'alice'",
  "now > timestamp('2026-01-01T00:00:00Z')",
];

describe("a question's JSON as CEL values", () => {
  it.each(CONDITIONS)("%s evaluates as with the JSON converted whole", (source) => {
    const condition = compileCondition(source, "condition");
    const viewed = condition.evaluate(new ConditionBindings(facts(CONTEXT)));
    const whole = condition.evaluate({ values: eager(facts(CONTEXT)) } as unknown as ConditionBindings);
    expect(viewed).toEqual(whole);
  });

  it.each([
    ["has(context.constructor)", true],
    ["context.constructor == 'c'", true],
    ["context['__proto__'].x == 1.0", true],
    ["has(context.toString)", false],
    ["size(context) == 2", true],
  ])("keys a JavaScript object has by its prototype: %s → %s", (source, expected) => {
    expect(compileCondition(source, "c").evaluate(new ConditionBindings(facts(HOSTILE))).holds).toBe(expected);
  });

  it("finds no key an object has only by its prototype", () => {
    expect(compileCondition("has(context.constructor) || has(context.__proto__)", "c").evaluate(new ConditionBindings(facts(CONTEXT))).holds).toBe(false);
  });

  it("records every value a condition reads, deep ones with their paths, in order", () => {
    const reads: ConditionRead[] = [];
    const source = "context.a.b[1].d[2].e == null && has(context.missing) == false && resource.properties.owner.email == 'a@x'";
    expect(compileCondition(source, "c").evaluate(new ConditionBindings(facts(CONTEXT), reads))).toEqual({ holds: true });
    expect(reads).toEqual([
      { path: "context.a", found: true, value: CONTEXT.a },
      { path: "context.a.b", found: true, value: (CONTEXT.a as JsonObject).b },
      { path: "context.a.b[1].d", found: true, value: [1, 2, { e: null }] },
      { path: "context.a.b[1].d[2].e", found: true, value: null },
      { path: "context.missing", found: false },
      { path: "resource.properties", found: true, value: { owner: { email: "a@x" } } },
      { path: "resource.properties.owner", found: true, value: { email: "a@x" } },
      { path: "resource.properties.owner.email", found: true, value: "a@x" },
    ]);
  });

  it("neither copies nor changes the question's JSON", () => {
    const before = JSON.stringify(CONTEXT);
    const condition = compileCondition("context.l + [9.0] == [1.0, 2.0, 3.0, 9.0] && context.a.b[0].c == 'x'", "c");
    expect(condition.evaluate(new ConditionBindings(facts(CONTEXT)))).toEqual({ holds: true });
    expect(JSON.stringify(CONTEXT)).toBe(before);
    // A list of 32,768 elements no condition reads costs nothing to prepare.
    const big = { l: Array.from({ length: 32_768 }, (_, i) => i) };
    const started = performance.now();
    for (let i = 0; i < 1_000; i++) new ConditionBindings(facts(big));
    expect(performance.now() - started).toBeLessThan(200);
  });
});
