/**
 * Differential test of requires and unless through the REST API, on every
 * engine (and on Citus in the Citus leg): random worlds of
 * test/support/relation-model.ts (catalogs from a pool of rules, teams in
 * teams, orgs, folder forests with cycles, grants to users, every user,
 * subject sets and links, each whose condition holds, fails or cannot be
 * decided with the question's facts) written as a catalog and grants, then
 * every relation of every instance asked for every user by the batch
 * check (and a sixth of them by explain), every lookup and who can read
 * page by page, each compared with the independent model. Each relation implies one action of its own
 * (`do_<relation>`), so a check asks exactly one relation.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";
import { createApp } from "./helpers/authz.js";
import { CHAIN_CASES, chainWorld, F, IDS, isLink, model, modelStrata, POOL, randomWorld, T, USERS, type Catalog, type Truth, type World } from "./support/relation-model.js";
import { action, catalogOf, CONTEXT, grantsOf } from "./support/relation-api.js";
import { random } from "../bench/random.js";

/** Worlds per engine: each asks every question of its own (a few hundred calls); fewer on Citus, where each call costs more. */
const WORLDS = 6;
const CITUS_WORLDS = 2;
/** Worlds with something to decide: at least one requires or unless in the catalog. */
const worlds: World[] = [];
for (let seed = 1000; worlds.length < WORLDS; seed++) {
  const w = randomWorld(seed);
  if (w !== undefined && Object.values(w.catalog).some((rels) => Object.values(rels).some((r) => r.requires.length + r.unless.length > 0))) worlds.push(w);
}

describe.each(engines)("requires and unless against the model through the API on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    service = await startTestService(database.db);
  }, 60_000);
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  it.each(CHAIN_CASES)("the bound, fresh for each entry: $why", async ({ viewerTeam, blockedTeam, orgTeam, held }) => {
    const world = chainWorld(viewerTeam, blockedTeam, orgTeam);
    expect(model(world, "ann")("document", "1", "viewer")).toBe(held);
    const appId = `ops-chain-${viewerTeam}-${blockedTeam ?? "none"}-${orgTeam}`;
    const key = await createApp(service, appId, catalogOf(world));
    const write = await service.call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes: grantsOf(world) } });
    expect(write.status, JSON.stringify(write.body)).toBeLessThan(300);
    const check = await service.call("POST", "/api/v1/authorization/check", { key, body: { userId: "ann", resource: "document", resourceId: "1", action: action("viewer") } });
    expect(check.body).toEqual({ allowed: held === T });
  });

  it.each(worlds.slice(0, engine === "citus" ? CITUS_WORLDS : WORLDS).map((world, n) => ({ world, n })))("world $n: every check, lookup and who can", async ({ world, n }) => {
    const appId = `ops-${n}`;
    const key = await createApp(service, appId, catalogOf(world));
    const post = async (path: string, body: unknown) => {
      const res = await service.call("POST", path, { key, body });
      expect(res.status, `${path} ${JSON.stringify(res.body)}`).toBeLessThan(300);
      return res.body;
    };
    await post("/api/v1/authorization/relationships/bulk", { writes: grantsOf(world) });
    const truths = new Map(USERS.map((u) => [u, model(world, u)]));
    const asked = Object.entries(world.catalog).flatMap(([resource, relations]) =>
      Object.entries(relations)
        .filter(([, rel]) => !isLink(rel))
        .map(([relation]) => ({ resource, relation })),
    );

    // The batch check: every relation of every instance, for every user.
    const checks = USERS.flatMap((userId) => asked.flatMap(({ resource, relation }) => IDS.map((resourceId) => ({ userId, resource, resourceId, relation }))));
    const answers = (await post("/api/v1/authorization/check/batch", {
      checks: checks.map(({ relation, ...c }) => ({ ...c, action: action(relation), context: CONTEXT })),
    })).results as { allowed: boolean }[];
    const wrong = checks.filter((c, i) => answers[i]!.allowed !== (truths.get(c.userId)!(c.resource, c.resourceId, c.relation) === T));
    expect(wrong.map((c) => `${c.userId} ${c.resource}:${c.resourceId}#${c.relation}`)).toEqual([]);
    expect(answers.some((a) => a.allowed)).toBe(true);

    // The questions below are asked all at once, as a busy application asks (the service coalesces
    // those in flight into shared statements, far cheaper than one a call, most of all on Citus);
    // each listing's pages in order.

    // Explain, on every sixth question: allowed exactly where the model holds; a relation held has a reason, one denied none.
    await Promise.all(
      checks
        .filter((_, i) => i % 6 === 0)
        .map(async (c) => {
          const explained = await post("/api/v1/authorization/check/explain", { userId: c.userId, resource: c.resource, resourceId: c.resourceId, action: action(c.relation), context: CONTEXT });
          const holds = truths.get(c.userId)!(c.resource, c.resourceId, c.relation) === T;
          expect(explained.allowed, `explain ${c.userId} ${c.resource}:${c.resourceId}#${c.relation}`).toBe(holds);
          expect((explained.reasons as { relation: string }[]).some((r) => r.relation === c.relation)).toBe(holds);
        }),
    );

    /** Every id of a listing, two a page. */
    const listed = async (path: string, body: Record<string, unknown>, field: string) => {
      const ids: string[] = [];
      let pageToken = "";
      do {
        const page = await post(path, { ...body, pageSize: 2, pageToken, context: CONTEXT });
        ids.push(...(page[field] as string[]));
        pageToken = page.nextPageToken as string;
      } while (pageToken !== "");
      return ids;
    };

    // Lookup: exactly the instances the model holds true.
    await Promise.all(
      USERS.flatMap((userId) =>
        asked.map(async ({ resource, relation }) => {
          const ids = await listed("/api/v1/authorization/lookup", { userId, resource, action: action(relation) }, "resourceIds");
          expect(ids, `lookup ${userId} ${resource}#${relation}`).toEqual(IDS.filter((id) => truths.get(userId)!(resource, id, relation) === T).sort());
        }),
      ),
    );

    // Who can: exactly the users the model holds true (an allUsers grant's users are listed by their own grants only).
    const everyone = [...world.held.values()].some((grants) => grants.some((g) => g.user === ""));
    await Promise.all(
      asked.flatMap(({ resource, relation }) =>
        IDS.map(async (resourceId) => {
          const users = await listed("/api/v1/authorization/subjects", { resource, resourceId, action: action(relation) }, "userIds");
          const holding = USERS.filter((u) => truths.get(u)!(resource, resourceId, relation) === T);
          if (everyone) expect(holding, `who can ${resource}:${resourceId}#${relation}`).toEqual(expect.arrayContaining(users));
          else expect(users, `who can ${resource}:${resourceId}#${relation}`).toEqual(holding);
        }),
      ),
    );
  });

  // A plan's impact, against the model before and after: each catalog change toggles one rule of the pool.
  it.each(worlds.slice(0, engine === "citus" ? 1 : 2).map((world, n) => ({ world, n })))("world $n: a plan's impact is the model's before and after", async ({ world, n }) => {
    const appId = `ops-plan-${n}`;
    const key = await createApp(service, appId, catalogOf(world));
    const write = await service.call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes: grantsOf(world) } });
    expect(write.status, JSON.stringify(write.body)).toBeLessThan(300);
    // A plan counts "by a check with no condition holding": every conditional row as false.
    const plain = (w: World): World => {
      const off = <V extends { truth: Truth }>(m: Map<string, V[]>) => new Map([...m].map(([k, vs]) => [k, vs.map((v) => ({ ...v, truth: v.truth === T ? T : F }))]));
      return { ...w, held: off(w.held), sets: off(w.sets), links: off(w.links) };
    };
    const r = random(7_000 + n);
    let planned = 0;
    for (let tries = 0; planned < 3 && tries < 20; tries++) {
      const rule = r.pick(POOL);
      const catalog = JSON.parse(JSON.stringify(world.catalog)) as Catalog;
      const list = catalog[rule.resource]![rule.relation]![rule.list];
      const at = list.findIndex((x) => x.through === rule.ref.through && x.relation === rule.ref.relation);
      if (at >= 0) list.splice(at, 1);
      else list.push(rule.ref);
      if (modelStrata(catalog) === undefined) continue;
      planned++;
      const after: World = { ...world, catalog };
      const res = await service.call("POST", `/api/v1/applications/${appId}/model/plan`, { key, body: { catalog: catalogOf(after) } });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      const impact = new Map(((res.body.impact ?? []) as { permission: string; gainingPairs: { userId: string; resourceId: string }[]; losingPairs: { userId: string; resourceId: string }[]; atLeast: boolean }[]).map((i) => [i.permission, i]));
      const was = new Map(USERS.map((u) => [u, model(plain(world), u)]));
      const is = new Map(USERS.map((u) => [u, model(plain(after), u)]));
      for (const [resource, relations] of Object.entries(world.catalog)) {
        for (const [relation, rel] of Object.entries(relations)) {
          if (isLink(rel)) continue;
          const permission = `${resource}:${action(relation)}`;
          const got = impact.get(permission);
          if (got?.atLeast === true) continue; // an allUsers grant's change: counted as a lower bound
          const moved = (gained: boolean) =>
            USERS.flatMap((u) => IDS.filter((id) => (is.get(u)!(resource, id, relation) === T) === gained && (was.get(u)!(resource, id, relation) === T) !== gained).map((id) => `${u}@${id}`));
          const pairs = (list: { userId: string; resourceId: string }[] | undefined) => (list ?? []).map((p) => `${p.userId}@${p.resourceId}`);
          expect(pairs(got?.gainingPairs), `${JSON.stringify(rule)} gaining ${permission}`).toEqual(moved(true));
          expect(pairs(got?.losingPairs), `${JSON.stringify(rule)} losing ${permission}`).toEqual(moved(false));
        }
      }
    }
    expect(planned).toBeGreaterThan(0);
  });
});
