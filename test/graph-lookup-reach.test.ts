/**
 * Lookup through `requires` and `unless` where the check's walk decides the
 * rules (AccessModel.quickRules): the page's statement says which relations
 * reach each id (domain/lookup-reach.ts), an id reached through a relation
 * with no entries is listed as read, and any other is checked walking from
 * the relations that reach it. Two relations imply `read` here, so an id
 * may be reached by the plain one, the ruled one or both. Differential, on
 * every engine: random worlds of test/support/relation-model.ts with no
 * condition (so what the page says is exact), each `read` lookup read page
 * by page and compared with the independent model; a table of cases that
 * names what reaches what; and the check's statement asked with roots.
 */
import { describe, expect, it } from "vitest";
import { engines } from "./support/engines.js";
import { useService } from "./support/use-service.js";
import { createApp } from "./helpers/authz.js";
import { IDS, model, randomWorld, T, USERS, type Truth, type World } from "./support/relation-model.js";
import { action, catalogOf, grantsOf } from "./support/relation-api.js";
import { AccessModel } from "../src/domain/access-model.js";
import { random } from "../bench/random.js";
import { CheckStatements, type CheckInput } from "../src/store/check-store.js";
import { modelStore } from "../src/store/model-store.js";
import { hashKey } from "../src/lib/ids.js";

/** The relations of `document` that also imply `read`: a plain one and one with entries, in most worlds. */
const READERS = ["editor", "viewer"];
const WORLDS = 6;
/** Fewer on Citus, where each call costs more. */
const CITUS_WORLDS = 2;

/** The world's catalog as the API takes it, with `read` implied by READERS on documents. */
function readCatalog(world: World) {
  return catalogOf(world).map((entry) =>
    entry.resource !== "document"
      ? entry
      : {
          ...entry,
          actions: [...entry.actions, "read"],
          relations: entry.relations.map((r) => (READERS.includes(r.name) ? { ...r, actions: [...r.actions, "read"] } : r)),
        },
  );
}

/** The model the service would build from the catalog: enough to tell whether the walk decides `read`'s rules. */
function accessModel(world: World): AccessModel {
  const catalog = readCatalog(world);
  return AccessModel.from({
    version: "1",
    resources: catalog.map((e) => [e.resource, e.actions]),
    relations: catalog.flatMap((e) => e.relations.map((r): [string, string, string[], string[]] => [e.resource, r.name, r.actions, r.subjects])),
    inherits: catalog.flatMap((e) => e.relations.flatMap((r) => r.inherits.map((i): [string, string, string, string] => [e.resource, r.name, i.through, i.relation]))),
    operators: catalog.flatMap((e) =>
      e.relations.flatMap((r) => [
        ...r.requires.map((x): [string, string, "requires", string, string] => [e.resource, r.name, "requires", x.through, x.relation]),
        ...r.unless.map((x): [string, string, "unless", string, string] => [e.resource, r.name, "unless", x.through, x.relation]),
      ]),
    ),
    permissions: [],
  });
}

/** Every row true: no condition anywhere, so the page says how each id is reached. */
function unconditional(world: World): World {
  const on = <V extends { truth: Truth }>(m: Map<string, V[]>) => new Map([...m].map(([k, vs]) => [k, vs.map((v) => ({ ...v, truth: T }))]));
  return { ...world, held: on(world.held), sets: on(world.sets), links: on(world.links) };
}

/** Worlds whose `read` is decided by the walk, implied by a relation with entries and one without. */
const worlds: World[] = [];
for (let seed = 5000; worlds.length < WORLDS && seed < 6000; seed++) {
  const w = randomWorld(seed);
  if (w === undefined) continue;
  const rules = accessModel(w).quickRules("document", "read");
  const ruled = (r: { requires: string[]; unless: string[] }) => r.requires.length + r.unless.length > 0;
  if (rules !== undefined && rules.some((r) => !ruled(r)) && rules.some(ruled)) worlds.push(unconditional(w));
}

describe.each(engines)("lookup by the relations that reach each id on %s", (engine) => {
  const used = useService(engine);

  it("the worlds have both kinds of relation", () => {
    expect(worlds).toHaveLength(WORLDS);
  });

  it.each(worlds.slice(0, engine === "citus" ? CITUS_WORLDS : WORLDS).map((world, n) => ({ world, n })))("world $n: every read lookup, page by page, is the model's", async ({ world, n }) => {
    const key = await createApp(used.service, `reach-${n}`, readCatalog(world));
    const write = await used.service.call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes: grantsOf(world) } });
    expect(write.status, JSON.stringify(write.body)).toBeLessThan(300);
    const r = random(n);
    await Promise.all(
      USERS.map(async (userId) => {
        const truth = model(world, userId);
        const expected = IDS.filter((id) => READERS.some((relation) => truth("document", id, relation) === T)).sort();
        const ids: string[] = [];
        let pageToken = "";
        do {
          const page = await used.service.call("POST", "/api/v1/authorization/lookup", { key, body: { userId, resource: "document", action: "read", pageSize: 1 + r.int(3), pageToken } });
          expect(page.status, JSON.stringify(page.body)).toBe(200);
          ids.push(...(page.body.resourceIds as string[]));
          pageToken = page.body.nextPageToken as string;
        } while (pageToken !== "");
        expect(ids, `lookup ${userId} document read`).toEqual(expected);
        // Each relation's own action agrees too.
        for (const relation of READERS) {
          const own = await used.service.call("POST", "/api/v1/authorization/lookup", { key, body: { userId, resource: "document", action: action(relation) } });
          expect(own.body.resourceIds, `lookup ${userId} document ${relation}`).toEqual(IDS.filter((id) => truth("document", id, relation) === T).sort());
        }
      }),
    );
  });

  // owner (no entries) and viewer unless blocked both imply read.
  const CATALOG = [
    { resource: "team", description: "", actions: ["read"], relations: [{ name: "member", actions: ["read"], subjects: ["user", "team#member"] }] },
    {
      resource: "document",
      description: "",
      actions: ["read"],
      relations: [
        { name: "blocked", actions: [], subjects: ["user", "team#member"] },
        { name: "owner", actions: ["read"], subjects: ["user", "team#member"] },
        { name: "viewer", actions: ["read"], subjects: ["user", "team#member"], unless: [{ relation: "blocked" }] },
      ],
    },
  ];
  const grant = (resourceId: string, relation: string, to: string) =>
    to.startsWith("team:")
      ? { subject: { resource: "team", resourceId: to.slice(5), relation: "member" }, resource: "document", resourceId, relation }
      : { userId: to, resource: "document", resourceId, relation };
  const CASES: { why: string; grants: [string, string, string][]; listed: string[] }[] = [
    { why: "owner and blocked: listed as read", grants: [["d1", "owner", "ann"], ["d1", "blocked", "ann"]], listed: ["d1"] },
    { why: "viewer and blocked: its check drops it", grants: [["d1", "viewer", "ann"], ["d1", "blocked", "ann"]], listed: [] },
    { why: "viewer, blocked through a team", grants: [["d1", "viewer", "ann"], ["d1", "blocked", "team:rogue"]], listed: [] },
    { why: "viewer through a team, not blocked", grants: [["d1", "viewer", "team:eng"], ["d1", "blocked", "bob"]], listed: ["d1"] },
    { why: "both reach it, blocked", grants: [["d1", "viewer", "ann"], ["d1", "owner", "team:eng"], ["d1", "blocked", "ann"]], listed: ["d1"] },
    {
      why: "ids that name an object's own keys",
      grants: [["__proto__", "viewer", "ann"], ["constructor", "owner", "ann"], ["toString", "viewer", "team:eng"], ["valueOf", "viewer", "ann"], ["valueOf", "blocked", "ann"]],
      listed: ["__proto__", "constructor", "toString"],
    },
    {
      why: "a run of each kind",
      grants: [["d1", "viewer", "ann"], ["d2", "owner", "ann"], ["d2", "blocked", "ann"], ["d3", "viewer", "team:eng"], ["d3", "blocked", "team:rogue"], ["d4", "viewer", "ann"]],
      listed: ["d1", "d2", "d4"],
    },
  ];
  it.each(CASES.map((c, n) => ({ ...c, n })))("$why", async ({ grants, listed, n }) => {
    const key = await createApp(used.service, `reach-case-${n}`, CATALOG);
    const writes = [
      { userId: "ann", resource: "team", resourceId: "eng", relation: "member" },
      { userId: "ann", resource: "team", resourceId: "rogue", relation: "member" },
      ...grants.map(([id, relation, to]) => grant(id, relation, to)),
    ];
    const write = await used.service.call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes } });
    expect(write.status, JSON.stringify(write.body)).toBeLessThan(300);
    for (const pageSize of [1, 2, 100]) {
      const ids: string[] = [];
      let pageToken = "";
      do {
        const page = await used.service.call("POST", "/api/v1/authorization/lookup", { key, body: { userId: "ann", resource: "document", action: "read", pageSize, pageToken } });
        ids.push(...(page.body.resourceIds as string[]));
        pageToken = page.body.nextPageToken as string;
      } while (pageToken !== "");
      expect(ids, `pages of ${pageSize}`).toEqual(listed);
    }
  });

  it("the check's statement walks from the roots it is given, and the action's entries", async () => {
    const appId = "reach-roots";
    const key = await createApp(used.service, appId, CATALOG);
    const writes = [grant("d1", "owner", "ann"), grant("d1", "viewer", "ann"), grant("d1", "blocked", "team:rogue"), { userId: "ann", resource: "team", resourceId: "rogue", relation: "member" }];
    expect((await used.service.call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes } })).status).toBeLessThan(300);
    const groups = AccessModel.from((await modelStore.load(used.database.db, appId))!).groups();
    const ask = (roots?: string[]): CheckInput => ({ appId, keyHash: hashKey(key), userId: "ann", resource: "document", resourceId: "d1", action: "read", roots });
    const relations = async (roots?: string[]) => [...(await new CheckStatements().check(used.database.db, [ask(roots)], { graph: () => groups })).rows[0]!.relations].sort();
    expect(await relations()).toEqual(["blocked", "owner", "viewer"]);
    expect(await relations(["viewer"])).toEqual(["blocked", "viewer"]);
    expect(await relations(["owner"])).toEqual(["blocked", "owner"]);
    expect(await relations([])).toEqual(["blocked"]);
  });
});
