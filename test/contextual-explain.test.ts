/**
 * Explain with contextual grants (API.md, "Contextual grants"), through the
 * real REST API and gRPC on every engine: explain counts a question's
 * contextual grants exactly as the check does (a differential over random
 * worlds of test/support/relation-model.ts, part of each world's grants
 * sent with every question, and the contract's cases: a user's grant, a
 * subject set, a link, an allUsers grant, a condition that holds and one
 * that fails, an expiry); every contextual grant on a reason's path, and on
 * a blocked entry's, is marked `contextual: true` and every stored one is
 * not; they are validated as the check validates them (a 400 naming the
 * field); nothing is written.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";
import { grpcCaller, type GrpcCaller } from "./support/grpc-client.js";
import { createApp, expectError, expectGrpcError, GRPC, storedGrants } from "./helpers/authz.js";
import { isLink, IDS, randomWorld, USERS, type World } from "./support/relation-model.js";
import { action, catalogOf, CONTEXT, grantsOf } from "./support/relation-api.js";
import { sqlRuleViolations } from "./support/sql-rules.js";
import { EXPLAIN_CONTEXTUAL_SQL } from "../src/store/explain-store.js";
import { explainLines, type ExplainAnswer } from "../src/cli/questions.js";
import { random } from "../bench/random.js";

/** Worlds per engine, each with part of its grants sent as contextual; one on Citus, where each call costs more. */
const WORLDS = 2;
const CITUS_WORLDS = 1;

const worlds: World[] = [];
for (let seed = 4000; worlds.length < WORLDS; seed++) {
  const w = randomWorld(seed);
  if (w !== undefined) worlds.push(w);
}

/** A grant as the API takes it, in any of its shapes. */
interface GrantJson {
  userId?: string;
  allUsers?: boolean;
  resource: string;
  resourceId: string;
  relation: string;
  subject?: { resource: string; resourceId: string; relation?: string };
  condition?: string;
  expiresAt?: string;
  createdAt?: string;
  contextual?: boolean;
}

/** A grant's identity: instance, relation and holder (what explain shows of one). */
const keyOf = (g: GrantJson) =>
  JSON.stringify([g.resource, g.resourceId, g.relation, g.allUsers === true ? "*" : (g.userId ?? ""), g.subject?.resource ?? "", g.subject?.resourceId ?? "", g.subject?.relation ?? ""]);

interface Reason {
  kind: string;
  relation: string;
  grant: GrantJson;
  path: GrantJson[];
}
interface Blocked {
  relation: string;
  entry: { rule: string; relation: string; holds: string; path?: GrantJson[] };
}

/** Which grants of a path are marked contextual, in order. */
const marks = (path: GrantJson[]) => path.map((g) => g.contextual === true);

const catalog = (unless: boolean) => [
  { resource: "team", description: "", actions: ["see"], relations: [{ name: "member", actions: ["see"], subjects: ["user", "team#member"] }] },
  { resource: "folder", description: "", actions: ["read"], relations: [{ name: "reader", actions: ["read"], subjects: ["user", "team#member", "user:*"] }] },
  {
    resource: "doc",
    description: "",
    actions: ["read", "edit"],
    relations: [
      { name: "parent", actions: [], subjects: ["folder"] },
      { name: "blocked", actions: [], subjects: ["user", "team#member"] },
      {
        name: "reader",
        actions: ["read"],
        subjects: ["user", "team#member", "user:*"],
        inherits: [{ through: "parent", relation: "reader" }],
        ...(unless ? { unless: [{ relation: "blocked" }] } : {}),
      },
      { name: "writer", actions: ["read", "edit"], subjects: ["user"] },
    ],
  },
];

describe.each(engines)("explain with contextual grants on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let grpc: GrpcCaller;
  /** The catalog with no `unless`: a plain one, which explains without contextual grants by its walk alone. */
  let plainKey: string;
  /** The same catalog whose reader is taken away by `blocked`. */
  let exclKey: string;

  const post = async (path: string, body: unknown, key: string) => {
    const res = await service.call("POST", path, { key, body });
    expect(res.status, `${path} ${JSON.stringify(res.body)}`).toBeLessThan(300);
    return res.body;
  };
  const ask = { userId: "ann", resource: "doc", resourceId: "d1", action: "read" };
  const member = (userId: string, team: string): GrantJson => ({ userId, resource: "team", resourceId: team, relation: "member" });
  const inFolder = (doc: string, folder: string): GrantJson => ({ resource: "doc", resourceId: doc, relation: "parent", subject: { resource: "folder", resourceId: folder } });
  const teamReads = (team: string, resource: string, resourceId: string): GrantJson => ({ resource, resourceId, relation: "reader", subject: { resource: "team", resourceId: team, relation: "member" } });
  /** Explain and the check, asked the same question: explain's answer, which must be the check's. */
  const explained = async (body: object, key = plainKey) => {
    const answer = await post("/api/v1/authorization/check/explain", body, key);
    const check = await post("/api/v1/authorization/check", body, key);
    expect(answer.allowed, `explain and check: ${JSON.stringify(body)}`).toBe(check.allowed);
    return answer as { allowed: boolean; reasons: Reason[]; blocked: Blocked[]; conditions: { condition: string; holds: boolean }[] };
  };
  const onlyReason = (answer: { reasons: Reason[] }, relation: string) => {
    const reasons = answer.reasons.filter((r) => r.kind === "relation" && r.relation === relation);
    expect(reasons).toHaveLength(1);
    return reasons[0]!;
  };

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    service = await startTestService(database.db);
    grpc = grpcCaller(service.url);
    plainKey = await createApp(service, "ctx-explain", catalog(false));
    exclKey = await createApp(service, "ctx-explain-excl", catalog(true));
    // Stored in both: bob is in t1, t1 reads f1, d2 is in f1.
    for (const key of [plainKey, exclKey]) {
      await post("/api/v1/authorization/relationships/bulk", { writes: [member("bob", "t1"), teamReads("t1", "folder", "f1"), inFolder("d2", "f1")] }, key);
    }
  }, 60_000);
  afterAll(async () => {
    grpc?.close();
    await service?.close();
    await database?.dispose();
  });

  it.each(worlds.slice(0, engine === "citus" ? CITUS_WORLDS : WORLDS).map((world, n) => ({ world, n, name: `${n}` })))(
    "world $name: explain answers as the check with part of the grants contextual, and marks exactly those on its paths",
    async ({ world, n }) => {
      const key = await createApp(service, `ctx-explain-world-${n}`, catalogOf(world));
      const r = random(5_000 + n);
      const contextual: GrantJson[] = [];
      const stored: GrantJson[] = [];
      for (const g of grantsOf(world) as GrantJson[]) (contextual.length < 100 && r.next() < 0.4 ? contextual : stored).push(g);
      if (stored.length > 0) await post("/api/v1/authorization/relationships/bulk", { writes: stored }, key);
      const contextualKeys = new Set(contextual.map(keyOf));
      const storedKeys = new Set(stored.map(keyOf));
      const questions = USERS.flatMap((userId) =>
        Object.entries(world.catalog).flatMap(([resource, relations]) =>
          Object.entries(relations)
            .filter(([, rel]) => !isLink(rel))
            .flatMap(([relation]) => IDS.map((resourceId) => ({ userId, resource, resourceId, action: action(relation), context: CONTEXT, contextualGrants: contextual }))),
        ),
      );
      const checks = (await post("/api/v1/authorization/check/batch", { checks: questions }, key)).results as { allowed: boolean }[];
      let marked = 0;
      for (const [i, q] of questions.entries()) {
        const answer = await post("/api/v1/authorization/check/explain", q, key);
        const what = `${q.userId} ${q.resource}:${q.resourceId} ${q.action}`;
        expect(answer.allowed, what).toBe(checks[i]!.allowed);
        const paths = [
          ...(answer.reasons as Reason[]).filter((x) => x.kind === "relation").flatMap((x) => [x.path, [x.grant]]),
          ...(answer.blocked as Blocked[]).map((b) => b.entry.path ?? []),
        ];
        for (const g of paths.flat()) {
          // Each grant shown is one of the world's, contextual exactly when sent so.
          const k = keyOf(g);
          if (g.contextual === true) marked++;
          expect(g.contextual === true ? contextualKeys.has(k) : storedKeys.has(k), `${what}: ${k} contextual ${g.contextual === true}`).toBe(true);
          expect(g.createdAt === undefined, `${what}: ${k} has a creation time exactly when stored`).toBe(g.contextual === true);
        }
      }
      expect(marked, "some path runs through a contextual grant").toBeGreaterThan(0);
    },
    300_000,
  );

  it("a contextual grant of the user's own: the reason, marked, with no creation time", async () => {
    const answer = await explained({ ...ask, contextualGrants: [{ userId: "ann", resource: "doc", resourceId: "d1", relation: "writer" }] });
    expect(answer.allowed).toBe(true);
    const reason = onlyReason(answer, "writer");
    expect(reason.grant).toMatchObject({ userId: "ann", resource: "doc", resourceId: "d1", relation: "writer", contextual: true });
    expect(reason.grant.createdAt).toBeUndefined();
    expect(marks(reason.path)).toEqual([true]);
    // Another user's contextual grant is not the asker's.
    expect((await explained({ ...ask, userId: "cy", contextualGrants: [{ userId: "ann", resource: "doc", resourceId: "d1", relation: "writer" }] })).allowed).toBe(false);
    // `portcullis explain` says which grant was contextual.
    expect(explainLines(ask, answer as ExplainAnswer)).toContain("  grant: ann is writer of doc:d1 (contextual)");
  });

  it("a contextual link and subject set are walked: stored grants beyond them count, each marked as what it is", async () => {
    // d1 moved into f1 for this question: bob (stored member of t1, which reads f1) reads it.
    const link = await explained({ ...ask, userId: "bob", contextualGrants: [inFolder("d1", "f1")] });
    expect(link.allowed).toBe(true);
    const viaLink = onlyReason(link, "reader");
    expect(viaLink.path.map((g) => `${g.resource}:${g.resourceId}#${g.relation}`)).toEqual(["team:t1#member", "folder:f1#reader", "doc:d1#parent"]);
    expect(marks(viaLink.path)).toEqual([false, false, true]);
    expect(viaLink.grant.contextual).toBe(true);
    expect(viaLink.path[0]!.createdAt).toBeDefined();
    expect((await explained({ ...ask, userId: "bob" })).allowed).toBe(false);
    // t1's members read d3, for this question.
    const set = await explained({ ...ask, userId: "bob", resourceId: "d3", contextualGrants: [teamReads("t1", "doc", "d3")] });
    expect(marks(onlyReason(set, "reader").path)).toEqual([false, true]);
    expect((await explained({ ...ask, resourceId: "d3", contextualGrants: [teamReads("t1", "doc", "d3")] })).allowed).toBe(false);
    // ann in t1, for this question: the stored set and link beyond it count.
    const membership = await explained({ ...ask, resourceId: "d2", contextualGrants: [member("ann", "t1")] });
    expect(marks(onlyReason(membership, "reader").path)).toEqual([true, false, false]);
    expect(explainLines({ ...ask, resourceId: "d2" }, membership as ExplainAnswer)).toContain(
      "  reader through 2 hops: ann is member of team:t1 (contextual) → team:t1#member is reader of folder:f1 → folder:f1 is parent of doc:d2",
    );
    // Only contextual grants: every user reads f4, and d4 is in f4.
    const everyone = await explained({ ...ask, userId: "cy", resourceId: "d4", contextualGrants: [inFolder("d4", "f4"), { allUsers: true, resource: "folder", resourceId: "f4", relation: "reader" }] });
    const path = onlyReason(everyone, "reader").path;
    expect(path.map((g) => [g.allUsers === true, g.contextual === true])).toEqual([
      [true, true],
      [false, true],
    ]);
    // Asked together (one statement for the three): each question walks its own contextual grants only.
    const [withLink, without, otherUser] = await Promise.all([
      post("/api/v1/authorization/check/explain", { ...ask, userId: "bob", contextualGrants: [inFolder("d1", "f1")] }, plainKey),
      post("/api/v1/authorization/check/explain", { ...ask, userId: "bob" }, plainKey),
      post("/api/v1/authorization/check/explain", { ...ask, resourceId: "d2", contextualGrants: [member("ann", "t1")] }, plainKey),
    ]);
    expect([withLink.allowed, without.allowed, otherUser.allowed]).toEqual([true, false, true]);
  });

  it("a contextual grant's condition is evaluated and shown as a stored one's; an expiry ahead counts, one passed is refused", async () => {
    const when = { userId: "ann", resource: "doc", resourceId: "d1", relation: "writer", condition: "context.ok == true" };
    const holds = await explained({ ...ask, contextualGrants: [when], context: { ok: true } });
    expect(holds.allowed).toBe(true);
    expect(onlyReason(holds, "writer").grant).toMatchObject({ condition: "context.ok == true", contextual: true });
    expect(holds.conditions).toEqual([expect.objectContaining({ relation: "writer", condition: "context.ok == true", holds: true })]);
    const fails = await explained({ ...ask, contextualGrants: [when], context: { ok: false } });
    expect(fails.allowed).toBe(false);
    expect(fails.conditions).toEqual([expect.objectContaining({ relation: "writer", condition: "context.ok == true", holds: false, outcome: "false" })]);
    // On a path: a contextual link whose condition fails moves nothing.
    const conditionalLink = { ...inFolder("d1", "f1"), condition: "context.ok == true" };
    expect((await explained({ ...ask, userId: "bob", contextualGrants: [conditionalLink], context: { ok: true } })).allowed).toBe(true);
    expect((await explained({ ...ask, userId: "bob", contextualGrants: [conditionalLink], context: { ok: false } })).allowed).toBe(false);
    // An expiry ahead: counted, and shown.
    const until = new Date(Date.now() + 3_600_000).toISOString();
    const soon = await explained({ ...ask, contextualGrants: [{ ...when, condition: undefined, expiresAt: until }] });
    expect(soon.allowed).toBe(true);
    expect(Date.parse(onlyReason(soon, "writer").grant.expiresAt!)).toBe(Date.parse(until));
    // An expiry passed: refused by both, as a write is.
    for (const path of ["/api/v1/authorization/check/explain", "/api/v1/authorization/check"]) {
      const res = await service.call("POST", path, { key: plainKey, body: { ...ask, contextualGrants: [{ ...when, condition: undefined, expiresAt: "2001-01-01T00:00:00Z" }] } });
      expectError(res, 400, "invalid_argument");
      expect(res.body.message as string).toContain("contextualGrants[0].expiresAt");
    }
  });

  it("an unless a contextual grant meets takes the relation away: the blocked entry's path shows it", async () => {
    // bob reads d2 (stored: t1 reads f1, d2 in f1); blocked for this question.
    expect((await explained({ ...ask, userId: "bob", resourceId: "d2" }, exclKey)).allowed).toBe(true);
    const direct = await explained({ ...ask, userId: "bob", resourceId: "d2", contextualGrants: [{ userId: "bob", resource: "doc", resourceId: "d2", relation: "blocked" }] }, exclKey);
    expect(direct.allowed).toBe(false);
    expect(direct.blocked).toHaveLength(1);
    expect(direct.blocked[0]!.relation).toBe("reader");
    expect(direct.blocked[0]!.entry).toMatchObject({ rule: "unless", relation: "blocked", holds: "true" });
    expect(marks(direct.blocked[0]!.entry.path!)).toEqual([true]);
    // The team blocked, for this question: bob's stored membership, then the contextual set.
    const team = await explained({ ...ask, userId: "bob", resourceId: "d2", contextualGrants: [{ ...teamReads("t1", "doc", "d2"), relation: "blocked" }] }, exclKey);
    expect(team.allowed).toBe(false);
    expect(marks(team.blocked[0]!.entry.path!)).toEqual([false, true]);
    // A contextual reader path that the unless does not meet, in the same catalog.
    const ok = await explained({ ...ask, userId: "bob", contextualGrants: [inFolder("d1", "f1")] }, exclKey);
    expect(marks(onlyReason(ok, "reader").path)).toEqual([false, false, true]);
    expect(ok.blocked).toEqual([]);
  });

  it("refuses a contextual grant the catalog refuses, naming the field, and writes nothing", async () => {
    const before = await storedGrants(service.db, "ctx-explain");
    const listed = async () => (await service.call("GET", "/api/v1/authorization/relationships?resource=doc&resourceId=d1", { key: plainKey })).body;
    const listedBefore = await listed();
    const refused = async (body: object, field: string) => {
      const res = await service.call("POST", "/api/v1/authorization/check/explain", { key: plainKey, body });
      expectError(res, 400, "invalid_argument");
      expect(res.body.message as string, JSON.stringify(res.body)).toContain(field);
    };
    await refused({ ...ask, contextualGrants: [{ userId: "ann", resource: "doc", resourceId: "d1", relation: "nope" }] }, "contextualGrants[0].relation");
    await refused({ ...ask, contextualGrants: [member("ann", "t1"), { userId: "ann", resource: "nothing", resourceId: "d1", relation: "reader" }] }, "contextualGrants[1].resource");
    await refused({ ...ask, contextualGrants: [{ allUsers: true, resource: "doc", resourceId: "d1", relation: "writer" }] }, "contextualGrants[0].allUsers");
    await refused({ ...ask, contextualGrants: [{ userId: "ann", resource: "doc", resourceId: "d1", relation: "writer", condition: "context.ok ==" }] }, "contextualGrants[0].condition");
    await refused({ ...ask, contextualGrants: Array.from({ length: 101 }, (_, i) => member(`u${i}`, "t1")) }, "contextualGrants");
    // Explained with every kind of contextual grant above; none of them stored.
    expect(await storedGrants(service.db, "ctx-explain")).toBe(before);
    expect(await listed()).toEqual(listedBefore);
    expect(JSON.stringify(listedBefore)).not.toContain('"writer"');
  });

  it("over gRPC: the contextual grant marked, with no creation time; a refusal names the field", async () => {
    const answer = await grpc.call(
      "CheckService",
      "Explain",
      { ...ask, userId: "bob", contextualGrants: [{ resource: "doc", resourceId: "d1", relation: "parent", subject: { resource: "folder", resourceId: "f1", relation: "" } }] },
      plainKey,
    );
    expect(answer.allowed).toBe(true);
    const path = (answer.reasons as { relation: string; path: { contextual: boolean; createdAt: unknown }[] }[]).find((r) => r.relation === "reader")!.path;
    expect(path.map((g) => g.contextual === true)).toEqual([false, false, true]);
    expect(path.map((g) => g.createdAt === null || g.createdAt === undefined)).toEqual([false, false, true]);
    await expectGrpcError(
      grpc.call("CheckService", "Explain", { ...ask, contextualGrants: [{ userId: "ann", resource: "doc", resourceId: "d1", relation: "nope" }] }, plainKey),
      GRPC.INVALID_ARGUMENT,
      "contextualGrants[0].relation",
    );
  });

  it("the statement with the contextual steps keeps the SQL rules", () => {
    expect(sqlRuleViolations(EXPLAIN_CONTEXTUAL_SQL)).toEqual([]);
    expect(EXPLAIN_CONTEXTUAL_SQL).toContain("FROM ctx c WHERE c.r = w.resource");
  });
});
