/**
 * Differential test of the decision with `requires` and `unless` (API.md,
 * "Relations within an instance, intersection and exclusion"; src/domain/relation-decision.ts): random catalogs
 * built from a pool of rules (exclusions within the instance and through
 * links, intersections through links and within, teams whose membership
 * has its own exclusion, relations that require each other in a cycle) and
 * random worlds (nested teams with cycles, folder forests with cycles,
 * grants whose condition holds, fails or cannot be decided), each node
 * asked for each user and compared with the independent model of
 * test/support/relation-model.ts, which shares no code with the service
 * but the types of the rows; and chains of 20 teams, where the bound
 * decides.
 *
 * Then mutants of the service's source, each one line changed, which this
 * differential must fail: an `unless` ignored inside a subject set, and a
 * `requires` through a link asked on the wrong instance.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import * as service from "../src/domain/relation-decision.js";
import type { CatalogShape, RelationShape } from "../src/domain/relation-strata.js";
import { CHAIN_CASES, chainWorld, HOPS, IDS, isLink, model, nodeKey, randomWorld, T, U, USERS, type Catalog, type World } from "./support/relation-model.js";

function toShape(catalog: Catalog): CatalogShape {
  return new Map(Object.entries(catalog).map(([resource, relations]) => [resource, new Map(Object.entries(relations).map(([name, rel]): [string, RelationShape] => [name, rel]))]));
}

// ------------------------------------------------------------ the service, on the world's rows

type DecisionModule = typeof service;

function decisionOf(mod: DecisionModule, world: World, user: string) {
  const graph: service.DecisionGraph = {
    held: (n) => (world.held.get(nodeKey(n.resource, n.id, n.relation)) ?? []).filter((g) => g.user === user || g.user === "").map((g) => ({ truth: g.truth, hops: 0 })),
    sets: (n) => world.sets.get(nodeKey(n.resource, n.id, n.relation)) ?? [],
    links: (resource, id, link) => world.links.get(nodeKey(resource, id, link)) ?? [],
  };
  return new mod.Decision(new mod.DecisionRules(toShape(world.catalog)), graph);
}

/** Every (user, node) where the service and the model differ, in one world. */
function differences(mod: DecisionModule, world: World): string[] {
  const out: string[] = [];
  for (const user of USERS) {
    const truth = model(world, user);
    const decision = decisionOf(mod, world, user);
    for (const [resource, relations] of Object.entries(world.catalog)) {
      for (const [relation, rel] of Object.entries(relations)) {
        if (isLink(rel)) continue;
        for (const id of world.ids) {
          const want = truth(resource, id, relation);
          const got = decision.truth({ resource, id, relation });
          if (got !== want) out.push(`${user} ${resource}:${id}#${relation}: service ${got}, model ${want}`);
        }
      }
    }
  }
  return out;
}

const worlds = Array.from({ length: 400 }, (_, seed) => randomWorld(seed + 1)).filter((w): w is World => w !== undefined);

describe("the decision with requires and unless, against an independent model", () => {
  it("draws enough worlds with each kind of rule to mean something", () => {
    expect(worlds.length).toBeGreaterThan(200);
    const count = (list: "requires" | "unless") => worlds.filter((w) => Object.values(w.catalog).some((rels) => Object.values(rels).some((r) => r[list].length > 0))).length;
    expect(count("requires")).toBeGreaterThan(100);
    expect(count("unless")).toBeGreaterThan(100);
  });

  it("answers every node of every world as the model does, for every user", () => {
    let allowed = 0;
    let unknown = 0;
    for (const world of worlds) {
      expect(differences(service, world)).toEqual([]);
      for (const user of USERS) {
        const d = decisionOf(service, world, user);
        for (const id of IDS) {
          const t = d.truth({ resource: "document", id, relation: "viewer" });
          if (t === T) allowed++;
          if (t === U) unknown++;
        }
      }
    }
    // The worlds allow and leave undecided often enough that a wrong rule shows.
    expect(allowed).toBeGreaterThan(500);
    expect(unknown).toBeGreaterThan(100);
  });

  it("explains a held relation by a path of rows that hold, within the bound, and a denied one by its entry", () => {
    for (const world of worlds.slice(0, 100)) {
      for (const user of USERS) {
        const d = decisionOf(service, world, user);
        for (const id of IDS) {
          const node = { resource: "document", id, relation: "viewer" };
          const why = d.why(node);
          if (d.truth(node) === T) {
            let hops = 0;
            let at: service.Reason = why;
            while (at.kind === "step") {
              const next: service.Reason = at.next;
              if (at.via === "set") expect((world.sets.get(nodeKey(at.node.resource, at.node.id, at.node.relation)) ?? []).some((g) => g.truth === T && g.id === next.node.id && g.relation === next.node.relation)).toBe(true);
              if (at.via !== "within") hops++;
              at = next;
            }
            expect(at.kind).toBe("grant");
            expect(hops).toBeLessThanOrEqual(HOPS);
            expect((world.held.get(nodeKey(at.node.resource, at.node.id, at.node.relation)) ?? []).some((g) => (g.user === user || g.user === "") && g.truth === T)).toBe(true);
          } else if (why.kind === "blocked") {
            const rel = world.catalog.document!.viewer!;
            expect(why.index).toBeLessThan(rel[why.list].length);
            expect(why.truth).not.toBe(T);
          }
        }
      }
    }
  });
});

describe("the bound of 16 hops, fresh for each requires and unless entry", () => {
  it.each(CHAIN_CASES)("$why", ({ viewerTeam, blockedTeam, orgTeam, held }) => {
    const world = chainWorld(viewerTeam, blockedTeam, orgTeam);
    expect(decisionOf(service, world, "ann").truth({ resource: "document", id: "1", relation: "viewer" })).toBe(held);
    expect(model(world, "ann")("document", "1", "viewer")).toBe(held);
    expect(differences(service, world)).toEqual([]);
  });
});

// ------------------------------------------------------------ mutants

const SOURCE = resolve(import.meta.dirname, "../src/domain/relation-decision.ts");
const DOMAIN = resolve(import.meta.dirname, "../src/domain");
const mutantDir = mkdtempSync(join(tmpdir(), "portcullis-mutants-"));
afterAll(() => rmSync(mutantDir, { recursive: true, force: true }));

/** The service's module with one piece of text replaced, loaded from a file of its own. */
async function mutant(name: string, from: string, to: string): Promise<DecisionModule> {
  const text = readFileSync(SOURCE, "utf8");
  expect(text.split(from).length - 1, `the text "${from}" occurs once`).toBe(1);
  const file = join(mutantDir, `${name}.ts`);
  // Its imports of its neighbours, made absolute: the mutant lives elsewhere.
  const imports = text.replace(from, to).replace(/"\.\/([a-z-]+)\.js"/g, (_, name: string) => JSON.stringify(pathToFileURL(join(DOMAIN, `${name}.ts`)).href));
  writeFileSync(file, imports);
  return (await import(pathToFileURL(file).href)) as DecisionModule;
}

describe("mutants the differential must kill", () => {
  it.each([
    {
      name: "unless-ignored-in-sets",
      what: "a subject set counts its members before their own requires and unless",
      from: "through(g.truth, c.t, c.u, 1);",
      to: "through(g.truth, c.bt, c.bu, 1);",
    },
    {
      name: "requires-wrong-instance",
      what: "a requires through a link is asked on the asking instance's id, not the linked one's",
      from: "this.full({ resource: l.resource, id: l.id, relation: ref.relation })",
      to: "this.full({ resource: l.resource, id: node.id, relation: ref.relation })",
    },
  ])("$name: $what", async ({ name, from, to }) => {
    const mod = await mutant(name, from, to);
    const killed = worlds.filter((w) => differences(mod, w).length > 0).length;
    expect(killed).toBeGreaterThan(0);
  });
});
