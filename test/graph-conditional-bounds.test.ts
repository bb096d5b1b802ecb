/**
 * The conditional paths' bounds (docs/limits.md), on every engine: a
 * ladder of teams, two on each rung, each team of a rung a member of both
 * teams of the rung above by a grant with a condition of its own, so the
 * paths from the document down to the user's team double at each rung,
 * every one with its own set of conditions. The statement's answers are
 * compared with the ladder's count of paths, worked out here: every one
 * below CONDITIONAL_PATH_LIMITS.paths, exactly that many (the fewest
 * conditions first) above it, and none where the walk would keep more than
 * CONDITIONAL_PATH_LIMITS.walkRows nodes before the user's team, which the
 * check then denies rather than allow through a cut walk.
 */
import { describe, expect, it } from "vitest";
import { CONDITIONAL_PATH_LIMITS, conditionalPathsStore } from "../src/store/conditional-paths-store.js";
import { createApp } from "./helpers/authz.js";
import { engines } from "./support/engines.js";
import { GRAPH_CATALOG, set, user, type AnyGrant } from "./support/graph.js";
import { useService } from "./support/use-service.js";

/** The condition of the grant from team `from` to team `to`: holds where the context sets its key. */
const conditionOf = (from: string, to: string) => `context.${from}_${to} == true`;

/**
 * A ladder of `rungs` rungs above the user's rung: document d's viewers are
 * the members of r0a and r0b; each team of rung i+1 is a member of both
 * teams of rung i, each grant with its own condition; user u is a member
 * of both teams of the last rung, with none. Paths from d to u: 2^(rungs+1),
 * each through `rungs` conditions, each set of them its own.
 */
function ladder(rungs: number) {
  const team = (i: number, side: string) => `r${i}${side}`;
  const grants: (AnyGrant & { condition?: string })[] = [set(`team:${team(0, "a")}#member`, "document", "d", "viewer"), set(`team:${team(0, "b")}#member`, "document", "d", "viewer")];
  const keys: string[] = [];
  for (let i = 0; i < rungs; i++) {
    for (const to of ["a", "b"]) {
      for (const from of ["a", "b"]) {
        grants.push({ ...set(`team:${team(i + 1, from)}#member`, "team", team(i, to), "member"), condition: conditionOf(team(i + 1, from), team(i, to)) });
        keys.push(`${team(i + 1, from)}_${team(i, to)}`);
      }
    }
  }
  grants.push(user("u", "team", team(rungs, "a"), "member"), user("u", "team", team(rungs, "b"), "member"));
  return { grants, context: Object.fromEntries(keys.map((k) => [k, true])) };
}

describe.each(engines)("the conditional paths' bounds on %s", (engine) => {
  const used = useService(engine);

  const cases = [
    // 2^5 = 32 sets of conditions: all of them.
    { rungs: 4, paths: 32, allowed: true },
    // 2^8 = 256 sets: the 64 the bound keeps.
    { rungs: 7, paths: CONDITIONAL_PATH_LIMITS.paths, allowed: true },
    // Rung i holds 2 × 2^i nodes (each team with each set reaching it): past the walk's bound before rung 13.
    { rungs: 13, paths: 0, allowed: false },
  ];
  it.each(cases)("a ladder of $rungs rungs: $paths paths, allowed $allowed", { timeout: 60_000 }, async ({ rungs, paths, allowed }) => {
    // Every rung's nodes up to the user's, within the bound or not, by the ladder's count.
    const nodes = Array.from({ length: rungs + 1 }, (_, i) => 2 * 2 ** i).reduce((a, b) => a + b, 0);
    expect(nodes > CONDITIONAL_PATH_LIMITS.walkRows).toBe(!allowed);
    const appId = `ladder-${rungs}`;
    const key = await createApp(used.service, appId, GRAPH_CATALOG);
    const { grants, context } = ladder(rungs);
    await used.ok("POST", "/api/v1/authorization/relationships/bulk", { writes: grants }, key);

    const { rows } = await conditionalPathsStore.paths(used.database.db, [{ appId, userId: "u", resource: "document", resourceId: "d", action: "read" }]);
    const found = rows[0]!;
    expect(found).toHaveLength(paths);
    for (const path of found) {
      expect(path.relation).toBe("viewer");
      expect(path.conditions).toHaveLength(rungs);
      expect(path.conditions).toEqual([...new Set(path.conditions)].sort());
    }
    // Distinct sets, each a way down the ladder: one condition per rung.
    expect(new Set(found.map((p) => p.conditions.join("|"))).size).toBe(paths);
    for (const path of found) {
      const rungsCrossed = path.conditions.map((c) => Number(/context\.r(\d+)/.exec(c)![1]));
      expect(rungsCrossed.sort((a, b) => a - b)).toEqual(Array.from({ length: rungs }, (_, i) => i + 1));
    }

    const check = await used.ok("POST", "/api/v1/authorization/check", { userId: "u", resource: "document", resourceId: "d", action: "read", context }, key);
    expect(check.allowed).toBe(allowed);
    // With no condition holding, no path does.
    const none = await used.ok("POST", "/api/v1/authorization/check", { userId: "u", resource: "document", resourceId: "d", action: "read" }, key);
    expect(none.allowed).toBe(false);
  });
});
