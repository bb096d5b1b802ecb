/**
 * A model plan's bound on the impact through grants (docs/models.md,
 * "Plan"; GRANT_IMPACT_BOUND, 2,000 instances and 2,000 candidate (user,
 * instance) pairs), through the REST API on every engine.
 *
 * - Within the bound the impact is exact: 1,100 documents, each viewed by
 *   two teams whose one member is the document's own user (2,200 grants of
 *   the relation the change touches on 1,100 instances: an instance counts
 *   once however many grants it has), every one of the 1,100 users counted.
 * - Beyond it the counts are lower bounds: 2,100 documents with a viewer
 *   each; the entry says `atLeast`, and every user and pair it lists is one
 *   that loses (user u-i views d-i alone).
 *
 * The edit: document.viewer implies nothing, so its holders lose
 * document:read.
 */
import { describe, expect, it } from "vitest";
import { engines } from "./support/engines.js";
import type { PermissionImpact } from "../src/domain/grant-impact.js";
import { useService } from "./support/use-service.js";
import { createApp } from "./helpers/authz.js";
import { GRAPH_CATALOG, set, user, type AnyGrant } from "./support/graph.js";

interface Relation {
  name: string;
  actions: string[];
}
interface Entry {
  resource: string;
  relations: Relation[];
}
type Impact = PermissionImpact;

const BASE = { catalog: GRAPH_CATALOG, policies: [], roles: [] };
const NO_READ = {
  ...BASE,
  catalog: (JSON.parse(JSON.stringify(GRAPH_CATALOG)) as Entry[]).map((e) =>
    e.resource !== "document" ? e : { ...e, relations: e.relations.map((r) => (r.name === "viewer" ? { ...r, actions: [] } : r)) },
  ),
};
const pad = (i: number) => String(i).padStart(4, "0");

describe.each(engines)("a plan's bound on the impact through grants on %s", (engine) => {
  const used = useService(engine);
  const { ok } = used;
  const plan = async (appId: string, grants: AnyGrant[]) => {
    const key = await createApp(used.service, appId, []);
    await ok("PUT", `/api/v1/applications/${appId}/model`, BASE);
    await ok("POST", "/api/v1/authorization/relationships/bulk", { writes: grants }, key);
    return ((await ok("POST", `/api/v1/applications/${appId}/model/plan`, NO_READ)) as { impact: Impact[] }).impact;
  };

  it("1,100 documents viewed by two teams each: every user counted, exactly", { timeout: 120_000 }, async () => {
    const ids = Array.from({ length: 1100 }, (_, i) => pad(i));
    const impact = await plan(
      "bound-exact",
      ids.flatMap((i) => [
        set(`team:a-${i}#member`, "document", `d-${i}`, "viewer"),
        set(`team:b-${i}#member`, "document", `d-${i}`, "viewer"),
        user(`u-${i}`, "team", `a-${i}`, "member"),
        user(`u-${i}`, "team", `b-${i}`, "member"),
      ]),
    );
    const first = ids.slice(0, 20);
    expect(impact).toEqual([
      {
        permission: "document:read",
        gaining: 0,
        losing: 1100,
        gainingSample: [],
        losingSample: first.map((i) => `u-${i}`),
        gainingPairs: [],
        losingPairs: first.map((i) => ({ userId: `u-${i}`, resourceId: `d-${i}` })),
        atLeast: false,
      },
    ]);
  });

  it("2,100 documents with a viewer each: lower bounds, and only users and pairs that lose", { timeout: 120_000 }, async () => {
    const ids = Array.from({ length: 2100 }, (_, i) => pad(i));
    const impact = await plan(
      "bound-over",
      ids.map((i) => user(`u-${i}`, "document", `d-${i}`, "viewer")),
    );
    expect(impact.map((i) => [i.permission, i.atLeast, i.gaining])).toEqual([["document:read", true, 0]]);
    const [read] = impact as [Impact];
    expect(read.losing).toBeGreaterThan(0);
    expect(read.losing).toBeLessThanOrEqual(2100);
    expect(read.losingSample).toHaveLength(20);
    expect(read.losingPairs).toHaveLength(20);
    for (const u of read.losingSample) expect(u).toMatch(/^u-[0-9]{4}$/);
    for (const p of read.losingPairs) expect(p.resourceId).toBe(`d-${p.userId.slice(2)}`);
  });
});
