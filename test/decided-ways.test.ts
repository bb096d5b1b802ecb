/**
 * Lookup's and who can's conditional answers with facts (decided-ways.ts):
 * a way that holds allows outright, a way decided against by the facts is
 * dropped, and one that erred on a value the facts lack stays undecided.
 */
import { describe, expect, it } from "vitest";
import { ConditionBindings, ConditionCache, type ConditionFacts } from "../src/domain/conditions.js";
import { settleWays } from "../src/domain/decided-ways.js";

const cache = new ConditionCache();

function facts(context: ConditionFacts["context"]): ConditionFacts {
  return {
    subject: { id: "ann", properties: {} },
    resource: { type: "todo", id: "t1", properties: {} },
    action: { name: "read", properties: {} },
    context,
    now: new Date("2026-11-29T08:00:00Z"),
  };
}

const settle = (ways: string[][], context: ConditionFacts["context"]) =>
  settleWays(
    "app",
    ways.map((w) => w.map((s) => cache.get(s))),
    ways.map((w) => w.join(" && ")),
    (reads) => new ConditionBindings(facts(context), reads),
  );

interface Case {
  name: string;
  ways: string[][];
  context: ConditionFacts["context"];
  expected: Awaited<ReturnType<typeof settleWays>>;
}

describe("settleWays", () => {
  it.each<Case>([
    { name: "a way that holds", ways: [["context.ok == true"]], context: { ok: true }, expected: { outright: true } },
    { name: "false: decided against", ways: [["context.ok == true"]], context: { ok: false }, expected: { outright: false, conditions: [] } },
    { name: "a missing value: undecided", ways: [["context.ok == true"]], context: {}, expected: { outright: false, conditions: ["context.ok == true"] } },
    { name: "has() of a missing key: false, decided", ways: [["has(context.ticket)"]], context: {}, expected: { outright: false, conditions: [] } },
    { name: "an error on values all there: decided against", ways: [["context.n / 0 == 1"]], context: { n: 1 }, expected: { outright: false, conditions: [] } },
    { name: "not a bool: decided against", ways: [["context.s"]], context: { s: "yes" }, expected: { outright: false, conditions: [] } },
    {
      name: "two ways: one against, one undecided; only the undecided is kept",
      ways: [["context.ok == true"], ["resource.properties.level >= 2"]],
      context: { ok: false },
      expected: { outright: false, conditions: ["resource.properties.level >= 2"] },
    },
    { name: "a way of two: one against decides it", ways: [["context.missing == 1", "context.ok == true"]], context: { ok: false }, expected: { outright: false, conditions: [] } },
    { name: "a way of two: both hold", ways: [["context.ok == true", "subject.id == 'ann'"]], context: { ok: true }, expected: { outright: true } },
  ])("$name", async ({ ways, context, expected }) => {
    expect(await settle(ways, context)).toEqual(expected);
  });
});
