/**
 * Contextual grants (API.md, "Contextual grants") on the check, the batch
 * check and permissions, through the real REST API and gRPC on every engine
 * (and on Citus in the Citus leg): a differential over random worlds of
 * test/support/relation-model.ts, each world's grants split into those
 * stored and those sent with every question, whose answers must be the
 * independent model's over all of them; and the contract's cases: each
 * kind of grant counted for its question alone, validated as a write
 * (a 400 naming the field, nothing read further), never stored and never
 * in the feed.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";
import { grpcCaller, type GrpcCaller } from "./support/grpc-client.js";
import { createApp, expectError } from "./helpers/authz.js";
import { IDS, isLink, model, randomWorld, T, USERS, type World } from "./support/relation-model.js";
import { action, catalogOf, CONTEXT, grantsOf } from "./support/relation-api.js";
import { random } from "../bench/random.js";

/** Worlds per engine, each asked with two splits of its grants; one on Citus, where each call costs more. */
const WORLDS = 3;
const CITUS_WORLDS = 1;

const worlds: World[] = [];
for (let seed = 2000; worlds.length < WORLDS; seed++) {
  const w = randomWorld(seed);
  if (w !== undefined) worlds.push(w);
}

/** A world's grants split at random: up to 100 sent with each question (the contract's bound), the rest stored. */
function split(world: World, seed: number) {
  const r = random(seed);
  const all = grantsOf(world);
  const contextual: typeof all = [];
  const stored: typeof all = [];
  for (const g of all) (contextual.length < 100 && r.next() < 0.35 ? contextual : stored).push(g);
  return { stored, contextual };
}

const catalog = [
  { resource: "team", description: "", actions: ["see"], relations: [{ name: "member", actions: ["see"], subjects: ["user", "team#member"] }] },
  { resource: "folder", description: "", actions: ["read"], relations: [{ name: "reader", actions: ["read"], subjects: ["user", "team#member", "user:*"] }] },
  {
    resource: "doc",
    description: "",
    actions: ["read", "edit"],
    relations: [
      { name: "parent", actions: [], subjects: ["folder"] },
      { name: "blocked", actions: [], subjects: ["user", "team#member"] },
      { name: "reader", actions: ["read"], subjects: ["user", "team#member", "user:*"], inherits: [{ through: "parent", relation: "reader" }], unless: [{ relation: "blocked" }] },
      { name: "writer", actions: ["read", "edit"], subjects: ["user"] },
    ],
  },
];

describe.each(engines)("contextual grants on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let grpc: GrpcCaller;
  let key: string;

  const post = async (path: string, body: unknown, withKey = key) => {
    const res = await service.call("POST", path, { key: withKey, body });
    expect(res.status, `${path} ${JSON.stringify(res.body)}`).toBeLessThan(300);
    return res.body;
  };
  const allowed = async (body: object) => (await post("/api/v1/authorization/check", body)).allowed as boolean;
  const ask = { userId: "ann", resource: "doc", resourceId: "d1", action: "read" };
  const member = (userId: string, team: string) => ({ userId, resource: "team", resourceId: team, relation: "member" });
  const inFolder = (doc: string, folder: string) => ({ resource: "doc", resourceId: doc, relation: "parent", subject: { resource: "folder", resourceId: folder } });
  const teamReads = (team: string, folder = "f1") => ({ resource: "folder", resourceId: folder, relation: "reader", subject: { resource: "team", resourceId: team, relation: "member" } });

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    service = await startTestService(database.db);
    grpc = grpcCaller(service.url);
    key = await createApp(service, "ctx", catalog);
    // Stored: team t1 reads folder f1; bob is in t1; t9 is blocked from d1; d3 is in f2, which no one reads.
    await post("/api/v1/authorization/relationships/bulk", {
      writes: [member("bob", "t1"), teamReads("t1"), inFolder("d3", "f2"), { resource: "doc", resourceId: "d1", relation: "blocked", subject: { resource: "team", resourceId: "t9", relation: "member" } }],
    });
  }, 60_000);
  afterAll(async () => {
    grpc?.close();
    await service?.close();
    await database?.dispose();
  });

  it.each(worlds.slice(0, engine === "citus" ? CITUS_WORLDS : WORLDS).map((world, n) => ({ world, n })))(
    "world $n: every check and permissions question with part of the grants sent as contextual is the model's over all of them",
    async ({ world, n }) => {
      const truths = new Map(USERS.map((u) => [u, model(world, u)]));
      const asked = Object.entries(world.catalog).flatMap(([resource, relations]) =>
        Object.entries(relations)
          .filter(([, rel]) => !isLink(rel))
          .map(([relation]) => ({ resource, relation })),
      );
      for (const s of [0, 1]) {
        const appKey = await createApp(service, `ctx-world-${n}-${s}`, catalogOf(world));
        const { stored, contextual } = split(world, 3_000 + 10 * n + s);
        expect(contextual.length).toBeGreaterThan(0);
        if (stored.length > 0) await post("/api/v1/authorization/relationships/bulk", { writes: stored }, appKey);
        const checks = USERS.flatMap((userId) => asked.flatMap(({ resource, relation }) => IDS.map((resourceId) => ({ userId, resource, resourceId, relation }))));
        const answers = (
          await post(
            "/api/v1/authorization/check/batch",
            { checks: checks.map(({ relation, ...c }) => ({ ...c, action: action(relation), context: CONTEXT, contextualGrants: contextual })) },
            appKey,
          )
        ).results as { allowed: boolean }[];
        const wrong = checks.filter((c, i) => answers[i]!.allowed !== (truths.get(c.userId)!(c.resource, c.resourceId, c.relation) === T));
        expect(wrong.map((c) => `${c.userId} ${c.resource}:${c.resourceId}#${c.relation}`)).toEqual([]);
        // Without them, the stored part alone: what the model says of it.
        const storedOnly = new Map(USERS.map((u) => [u, model(worldOf(world, stored), u)]));
        const plain = (
          await post("/api/v1/authorization/check/batch", { checks: checks.map(({ relation, ...c }) => ({ ...c, action: action(relation), context: CONTEXT })) }, appKey)
        ).results as { allowed: boolean }[];
        expect(checks.filter((c, i) => plain[i]!.allowed !== (storedOnly.get(c.userId)!(c.resource, c.resourceId, c.relation) === T)).length).toBe(0);
        expect(answers.filter((a, i) => a.allowed !== plain[i]!.allowed).length, "the contextual grants change some answer").toBeGreaterThan(0);
        // Permissions, batched: every instance of every resource for every user.
        const instances = USERS.flatMap((userId) => Object.keys(world.catalog).flatMap((resource) => IDS.map((resourceId) => ({ userId, resource, resourceId }))));
        const permitted = (
          await post("/api/v1/authorization/permissions/batch", { requests: instances.map((q) => ({ ...q, context: CONTEXT, contextualGrants: contextual })) }, appKey)
        ).results as { actions: string[] }[];
        instances.forEach((q, i) => {
          const expected = asked.filter((a) => a.resource === q.resource && truths.get(q.userId)!(q.resource, q.resourceId, a.relation) === T).map((a) => action(a.relation));
          expect(permitted[i]!.actions.sort(), `permissions ${q.userId} ${q.resource}:${q.resourceId}`).toEqual(expected.sort());
        });
      }
    },
    240_000,
  );

  it("a contextual membership, link or allUsers grant counts for its question alone", async () => {
    expect(await allowed(ask)).toBe(false);
    // ann in t1 (which reads f1), and d1 in f1: both needed.
    expect(await allowed({ ...ask, contextualGrants: [member("ann", "t1")] })).toBe(false);
    expect(await allowed({ ...ask, contextualGrants: [member("ann", "t1"), inFolder("d1", "f1")] })).toBe(true);
    // bob is a stored member of t1: the contextual link alone moves d1 into f1 for him.
    expect(await allowed({ ...ask, userId: "bob", contextualGrants: [inFolder("d1", "f1")] })).toBe(true);
    expect(await allowed({ ...ask, userId: "bob" })).toBe(false);
    // A contextual subject set: t1 reads f2 for this question, and bob's stored membership of t1 counts through it.
    expect(await allowed({ ...ask, userId: "bob", resourceId: "d3", contextualGrants: [teamReads("t1", "f2")] })).toBe(true);
    expect(await allowed({ ...ask, userId: "bob", resourceId: "d3" })).toBe(false);
    expect(await allowed({ ...ask, userId: "ann", resourceId: "d3", contextualGrants: [teamReads("t1", "f2")] })).toBe(false);
    // Every user, for this question.
    expect(await allowed({ ...ask, contextualGrants: [{ allUsers: true, resource: "doc", resourceId: "d1", relation: "reader" }] })).toBe(true);
    // The same grant for another instance does not count here.
    expect(await allowed({ ...ask, contextualGrants: [{ allUsers: true, resource: "doc", resourceId: "d2", relation: "reader" }] })).toBe(false);
    // A batch: each question its own grants.
    const batch = await post("/api/v1/authorization/check/batch", {
      checks: [
        { ...ask, contextualGrants: [member("ann", "t1"), inFolder("d1", "f1")] },
        ask,
        { ...ask, userId: "cy", contextualGrants: [{ userId: "cy", resource: "doc", resourceId: "d1", relation: "writer" }] },
      ],
    });
    expect(batch.results).toEqual([{ allowed: true }, { allowed: false }, { allowed: true }]);
    // Permissions: the actions its relations imply.
    expect((await post("/api/v1/authorization/permissions", { userId: "cy", resource: "doc", resourceId: "d1", contextualGrants: [{ userId: "cy", resource: "doc", resourceId: "d1", relation: "writer" }] })).actions).toEqual(["read", "edit"]);
    expect((await post("/api/v1/authorization/permissions", { userId: "cy", resource: "doc", resourceId: "d1" })).actions).toEqual([]);
    // Over gRPC too.
    const viaGrpc = await grpc.call("CheckService", "Check", { ...ask, contextualGrants: [member("ann", "t1"), inFolder("d1", "f1")] }, key);
    expect(viaGrpc.allowed).toBe(true);
  });

  it("a contextual grant follows the catalog's rules: an unless it meets takes away, a condition must hold", async () => {
    const reads = [member("ann", "t1"), inFolder("d1", "f1")];
    // ann in the blocked team t9, for this question: the unless takes the reader away.
    expect(await allowed({ ...ask, contextualGrants: [...reads, member("ann", "t9")] })).toBe(false);
    // A contextual block straight on d1.
    expect(await allowed({ ...ask, contextualGrants: [...reads, { userId: "ann", resource: "doc", resourceId: "d1", relation: "blocked" }] })).toBe(false);
    const when = { userId: "ann", resource: "doc", resourceId: "d1", relation: "writer", condition: "context.ok == true" };
    expect(await allowed({ ...ask, contextualGrants: [when], context: { ok: true } })).toBe(true);
    expect(await allowed({ ...ask, contextualGrants: [when], context: { ok: false } })).toBe(false);
    expect(await allowed({ ...ask, contextualGrants: [when] })).toBe(false);
    // An expiry ahead: it counts until then.
    const soon = { userId: "ann", resource: "doc", resourceId: "d1", relation: "writer", expiresAt: new Date(Date.now() + 3_600_000).toISOString() };
    expect(await allowed({ ...ask, contextualGrants: [soon] })).toBe(true);
  });

  it("refuses what a write refuses, naming the field, and what is not asked is not read", async () => {
    const refused = async (path: string, body: object, field: string) => {
      const res = await service.call("POST", path, { key, body });
      expectError(res, 400, "invalid_argument");
      expect(res.body.message as string, JSON.stringify(res.body)).toContain(field);
    };
    const check = "/api/v1/authorization/check";
    await refused(check, { ...ask, contextualGrants: [{ userId: "ann", resource: "doc", resourceId: "d1", relation: "nope" }] }, "contextualGrants[0].relation");
    await refused(check, { ...ask, contextualGrants: [member("ann", "t1"), { userId: "ann", resource: "nothing", resourceId: "d1", relation: "reader" }] }, "contextualGrants[1].resource");
    await refused(check, { ...ask, contextualGrants: [{ ...inFolder("d1", "f1"), subject: { resource: "team", resourceId: "t1" } }] }, "contextualGrants[0].subject");
    await refused(check, { ...ask, contextualGrants: [{ allUsers: true, resource: "doc", resourceId: "d1", relation: "writer" }] }, "contextualGrants[0].allUsers");
    await refused(check, { ...ask, contextualGrants: [{ resource: "doc", resourceId: "d1", relation: "writer" }] }, "contextualGrants[0].userId");
    await refused(check, { ...ask, contextualGrants: [{ userId: "ann\u0000", resource: "doc", resourceId: "d1", relation: "writer" }] }, "contextualGrants[0].userId");
    await refused(check, { ...ask, contextualGrants: [{ userId: "ann", resource: "doc", resourceId: "d1", relation: "writer", condition: "context.ok ==" }] }, "contextualGrants[0].condition");
    await refused(check, { ...ask, contextualGrants: [{ userId: "ann", resource: "doc", resourceId: "d1", relation: "writer", expiresAt: "2001-01-01T00:00:00Z" }] }, "contextualGrants[0].expiresAt");
    await refused(check, { ...ask, contextualGrants: Array.from({ length: 101 }, (_, i) => member(`u${i}`, "t1")) }, "contextualGrants");
    // A call takes what a bulk write takes: 5,000 in all.
    const hundred = Array.from({ length: 100 }, (_, i) => member(`u${i}`, "t1"));
    await refused("/api/v1/authorization/check/batch", { checks: Array.from({ length: 51 }, () => ({ ...ask, contextualGrants: hundred })) }, "5000 contextual grants per call");
    expect((await post("/api/v1/authorization/check/batch", { checks: Array.from({ length: 50 }, () => ({ ...ask, contextualGrants: hundred })) })).results).toHaveLength(50);
    await refused("/api/v1/authorization/check/batch", { checks: [ask, { ...ask, contextualGrants: [{ userId: "ann", resource: "doc", resourceId: "d1", relation: "nope" }] }] }, "checks[1].contextualGrants[0].relation");
    await refused("/api/v1/authorization/permissions", { userId: "ann", resource: "doc", resourceId: "d1", contextualGrants: [{ userId: "ann", resource: "doc", resourceId: "d1", relation: "nope" }] }, "contextualGrants[0].relation");
    await refused(
      "/api/v1/authorization/permissions/batch",
      { requests: [{ userId: "ann", resource: "doc", resourceId: "d1", contextualGrants: [{ userId: "ann", resource: "doc", resourceId: "d1", relation: "nope" }] }] },
      "requests[0].contextualGrants[0].relation",
    );
    await expect(grpc.call("CheckService", "Check", { ...ask, contextualGrants: [{ userId: "ann", resource: "doc", resourceId: "d1", relation: "nope" }] }, key)).rejects.toMatchObject({ code: 3 });
  });

  it("writes nothing and makes no change in the feed", async () => {
    const changes = async () => {
      const res = await service.call("GET", "/api/v1/authorization/changes?pageSize=1000", { key });
      expect(res.status).toBe(200);
      return (res.body.changes as unknown[]).length;
    };
    const grants = async () => {
      const res = await service.call("GET", "/api/v1/authorization/relationships?userId=ann&resource=team", { key });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return res.body.relationships as unknown[];
    };
    const before = await changes();
    expect(await allowed({ ...ask, contextualGrants: [member("ann", "t1"), inFolder("d1", "f1")] })).toBe(true);
    await post("/api/v1/authorization/check/batch", { checks: [{ ...ask, contextualGrants: [member("ann", "t2")] }] });
    await post("/api/v1/authorization/permissions", { userId: "ann", resource: "doc", resourceId: "d1", contextualGrants: [member("ann", "t3")] });
    expect(await changes()).toBe(before);
    expect(await grants()).toEqual([]);
    expect(await allowed(ask)).toBe(false);
  });
});

/** The world with only `grants` stored: for the answers without the contextual part. */
function worldOf(world: World, grants: ReturnType<typeof grantsOf>): World {
  const keep = new Set(grants.map((g) => JSON.stringify(g)));
  const all = grantsOf(world);
  const kept = (k: number) => keep.has(JSON.stringify(all[k]));
  // grantsOf lists held, then sets, then links, each in the maps' order: filter each map by the same positions.
  let k = 0;
  const filter = <V>(m: Map<string, V[]>) => new Map([...m].map(([key, vs]) => [key, vs.filter(() => kept(k++))]));
  const held = filter(world.held);
  const sets = filter(world.sets);
  const links = filter(world.links);
  return { ...world, held, sets, links };
}
