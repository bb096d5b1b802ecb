/**
 * Which statements go bound and how many a connection holds
 * (src/store/bound-statements.ts), without a database: the Citus leg's
 * test/citus-router.test.ts runs them on the coordinator and reads the
 * plans Postgres keeps.
 */
import { describe, expect, it } from "vitest";
import { bindable, StatementBinding } from "../src/store/bound-statements.js";

const { page, other } = bindable({ page: "SELECT * FROM t WHERE app_id = $1 AND k = $2", other: "SELECT $1::text, $2::int" });
const unregistered = "SELECT * FROM u WHERE app_id = $1";

describe("bound statements", () => {
  it.each([
    { name: "a registered statement: $1 in the text, the rest renumbered", sql: page, params: ["app-a", 7], text: "SELECT * FROM t WHERE app_id =  'app-a'  AND k = $1", values: [7] },
    { name: "an id with a quote is written as a literal", sql: page, params: ["o'brien", 7], text: "SELECT * FROM t WHERE app_id =  'o''brien'  AND k = $1", values: [7] },
    { name: "not registered", sql: unregistered, params: ["app-a"], text: undefined },
    { name: "no parameters", sql: page, params: [], text: undefined },
    { name: "$1 not a string", sql: page, params: [1, 7], text: undefined },
    { name: "$1 no literal carries (a NUL)", sql: page, params: ["a\0b", 7], text: undefined },
  ])("$name", ({ sql, params, text, values }) => {
    const sent = new StatementBinding(4).bound({}, sql, params);
    expect(sent?.text).toBe(text);
    if (text !== undefined) {
      expect(sent?.values).toEqual(values);
      expect(sent?.name).toMatch(/^pcb_[0-9a-f]{16}_[0-9a-f]{16}$/);
    }
  });

  it("one name per statement and application; each connection binds at most its capacity, then sends the rest unbound", () => {
    const binding = new StatementBinding(2);
    const [one, two] = [{}, {}];
    const a = binding.bound(one, page, ["app-a", 1])!;
    expect(binding.bound(one, page, ["app-a", 2])!.name).toBe(a.name);
    const b = binding.bound(one, page, ["app-b", 1])!;
    expect(b.name).not.toBe(a.name);
    expect(new StatementBinding(2).bound(one, other, ["app-a", 1])!.name).not.toBe(a.name);
    expect(binding.count(one)).toBe(2);
    // Full: a third statement goes unbound, another statement of the same application too; those it holds still go bound.
    expect(binding.bound(one, page, ["app-c", 1])).toBeUndefined();
    expect(binding.bound(one, other, ["app-a", 1])).toBeUndefined();
    expect(binding.bound(one, page, ["app-b", 3])!.name).toBe(b.name);
    expect(binding.count(one)).toBe(2);
    // Another connection has its own room.
    expect(binding.bound(two, page, ["app-c", 1])).toBeDefined();
    expect(binding.count(two)).toBe(1);
  });

  it("a value no literal carries takes no room", () => {
    const binding = new StatementBinding(1);
    const connection = {};
    expect(binding.bound(connection, page, ["a\0b", 1])).toBeUndefined();
    expect(binding.count(connection)).toBe(0);
    expect(binding.bound(connection, page, ["app-a", 1])).toBeDefined();
  });
});
