/**
 * Two replicas of the service over one Postgres database, each with its own
 * connection pool, started at the same moment. Nothing a replica caches may
 * hide a change committed through the other: keys, revocations, catalogs,
 * and a catalog that gains or loses hierarchy (which statement a check and
 * a lookup take depends on the model each replica last read).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadMigrations } from "../src/store/migrate.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { GRAPH_CATALOG, set, user } from "./support/graph.js";
import { startTestService, type RestAnswer, type TestService } from "./support/service.js";

const catalogs = [
  {
    resources: [
      { resource: "document", description: "v1", actions: ["read", "update"], relations: [{ name: "reviewer", actions: ["read"] }] },
    ],
  },
  {
    resources: [
      { resource: "invoice", description: "v2", actions: ["send", "read"] },
      { resource: "document", description: "v2", actions: ["read", "update", "comment"] },
    ],
  },
  { resources: [{ resource: "folder", description: "v3", actions: ["list"] }] },
];

function expectStatus(answer: RestAnswer, status: number): void {
  expect(answer.status, JSON.stringify(answer.body)).toBe(status);
}

describe.skipIf(!engines.includes("postgres"))("two replicas over one Postgres database (Postgres only: PGlite is a single in-process database)", () => {
  let database: TestDatabase;
  let a: TestService;
  let b: TestService;
  const both = () => [
    { name: "A", writer: a, reader: b },
    { name: "B", writer: b, reader: a },
  ];

  beforeAll(async () => {
    database = await createTestDatabase("postgres");
    const [poolA, poolB] = await Promise.all([database.openAnother(), database.openAnother()]);
    // Both start at once on a fresh database: both run the migrations.
    const started = await Promise.allSettled([startTestService(poolA), startTestService(poolB)]);
    const [startedA, startedB] = started;
    if (startedA?.status === "fulfilled") a = startedA.value;
    if (startedB?.status === "fulfilled") b = startedB.value;
    const failed = started.filter((s): s is PromiseRejectedResult => s.status === "rejected");
    if (failed.length > 0) throw failed[0]!.reason;
  });
  afterAll(async () => {
    await Promise.allSettled([a?.close(), b?.close()]);
    await database?.dispose();
  });

  it("both started, and the schema was migrated exactly once", async () => {
    const { rows } = await database.db.query<{ version: number }>("SELECT version FROM schema_migrations ORDER BY version");
    expect(rows).toEqual((await loadMigrations()).map((m) => ({ version: m.version })));
    for (const replica of [a, b]) expectStatus(await replica.call("GET", "/readyz", { key: null }), 200);
  });

  it("an application created on one replica is seen by the other at once", async () => {
    for (const { name, writer, reader } of both()) {
      const appId = `made-on-${name.toLowerCase()}`;
      expectStatus(await writer.call("POST", "/api/v1/applications", { body: { appId } }), 201);
      const seen = await reader.call("GET", `/api/v1/applications/${appId}`);
      expectStatus(seen, 200);
      expect(seen.body.appId).toBe(appId);
      expectStatus(await reader.call("POST", "/api/v1/applications", { body: { appId } }), 409);
    }
  });

  it.each(["A", "B"])("a key created through replica %s works on the other; revoked there, it fails with 401 on the other's very next call", async (writerName) => {
    const { writer, reader } = both().find((x) => x.name === writerName)!;
    const appId = `keys-via-${writerName.toLowerCase()}`;
    expectStatus(await writer.call("POST", "/api/v1/applications", { body: { appId } }), 201);
    const created = await writer.call("POST", `/api/v1/applications/${appId}/api-keys`, { body: { name: "ci" } });
    expectStatus(created, 201);
    const { key, keyId } = created.body as { key: string; keyId: string };

    // Warm whatever the reader might cache about this key.
    for (let i = 0; i < 3; i++) expectStatus(await reader.call("GET", `/api/v1/applications/${appId}/resources`, { key }), 200);
    expectStatus(await writer.call("GET", `/api/v1/applications/${appId}/resources`, { key }), 200);
    const listed = await reader.call("GET", `/api/v1/applications/${appId}/api-keys`);
    expect(listed.body.apiKeys.map((k: { keyId: string }) => k.keyId)).toEqual([keyId]);

    expectStatus(await writer.call("DELETE", `/api/v1/applications/${appId}/api-keys/${keyId}`), 200);
    const next = await reader.call("GET", `/api/v1/applications/${appId}/resources`, { key });
    expectStatus(next, 401);
    expect(next.body.code).toBe("unauthenticated");
    expectStatus(await writer.call("GET", `/api/v1/applications/${appId}/resources`, { key }), 401);
    expect((await reader.call("GET", `/api/v1/applications/${appId}/api-keys`)).body.apiKeys).toEqual([]);
    // Revoking again, from either side, finds nothing.
    expectStatus(await reader.call("DELETE", `/api/v1/applications/${appId}/api-keys/${keyId}`), 404);
  });

  it.each(["A", "B"])(
    "a key revoked through replica %s fails the other's very next check, single and batch, though the check path remembers keys",
    async (writerName) => {
      const { writer, reader } = both().find((x) => x.name === writerName)!;
      const appId = `checks-via-${writerName.toLowerCase()}`;
      expectStatus(await writer.call("POST", "/api/v1/applications", { body: { appId } }), 201);
      expectStatus(await writer.call("PUT", `/api/v1/applications/${appId}/resources`, { body: { resources: [{ resource: "doc", description: "", actions: ["read"] }] } }), 200);
      const created = await writer.call("POST", `/api/v1/applications/${appId}/api-keys`, { body: { name: "checks" } });
      const { key, keyId } = created.body as { key: string; keyId: string };
      const question = { userId: "u", resource: "doc", resourceId: "d", action: "read" };
      // Both replicas now hold the key in their check path's memory.
      for (const replica of [writer, reader]) {
        expect((await replica.call("POST", "/api/v1/authorization/check", { key, body: question })).body).toEqual({ allowed: false });
      }
      expectStatus(await writer.call("DELETE", `/api/v1/applications/${appId}/api-keys/${keyId}`), 200);
      for (const replica of [reader, writer]) {
        const single = await replica.call("POST", "/api/v1/authorization/check", { key, body: question });
        expectStatus(single, 401);
        expect(single.body.code).toBe("unauthenticated");
        expectStatus(await replica.call("POST", "/api/v1/authorization/check/batch", { key, body: { checks: [question] } }), 401);
        expectStatus(await replica.call("POST", "/api/v1/authorization/check/batch", { key, body: { checks: [] } }), 401);
      }
    },
  );

  it("a catalog PUT through one replica is what the other's GET returns right after, every time", async () => {
    const appId = "catalog-shared";
    expectStatus(await a.call("POST", "/api/v1/applications", { body: { appId } }), 201);
    const path = `/api/v1/applications/${appId}/resources`;
    let round = 0;
    for (const catalog of [...catalogs, ...catalogs]) {
      const { writer, reader } = both()[round++ % 2]!;
      const before = await reader.call("GET", path); // the reader has just read the previous catalog
      expectStatus(before, 200);
      const put = await writer.call("PUT", path, { body: catalog });
      expectStatus(put, 200);
      const got = await reader.call("GET", path);
      expectStatus(got, 200);
      expect(got.body).toEqual(put.body);
      expect(got.body.resources.map((r: { resource: string; description: string }) => `${r.resource}:${r.description}`)).toEqual(
        catalog.resources.map((r) => `${r.resource}:${r.description}`),
      );
    }
    const put = await b.call("PUT", path, { body: { resources: [] } });
    expectStatus(put, 200);
    expect((await a.call("GET", path)).body).toEqual({ resources: [] });
  });

  it("a catalog made hierarchical through one replica, with a team's grant, is what the other's very next check, lookup and who can answer by; made flat again likewise; alternating replicas", async () => {
    const appId = "shape-flips";
    expectStatus(await a.call("POST", "/api/v1/applications", { body: { appId } }), 201);
    const created = await a.call("POST", `/api/v1/applications/${appId}/api-keys`, { body: { name: "t" } });
    expectStatus(created, 201);
    const key = created.body.key as string;
    const path = `/api/v1/applications/${appId}/resources`;
    // Flat: users only, and an action "archive" the hierarchical catalog lacks (which olga, an owner, holds).
    const flat = {
      resources: [
        { resource: "team", description: "", actions: ["read"], relations: [{ name: "member", actions: ["read"] }] },
        { resource: "document", description: "", actions: ["read", "update", "delete", "archive"] },
      ],
    };
    const teamViews = set("team:eng#member", "document", "d1", "viewer");
    const call = (replica: TestService, method: string, route: string, body?: unknown) =>
      replica.call(method, route, { key, ...(body === undefined ? {} : { body }) });
    expectStatus(await a.call("PUT", path, { body: flat }), 200);
    expectStatus(
      await call(a, "POST", "/api/v1/authorization/relationships/bulk", { writes: [user("alice", "team", "eng", "member"), user("olga", "document", "d1", "owner")] }),
      200,
    );
    const alice = { userId: "alice", resource: "document", resourceId: "d1", action: "read" };
    const archive = { userId: "olga", resource: "document", resourceId: "d1", action: "archive" };
    for (let round = 0; round < 8; round++) {
      const { writer, reader } = both()[Math.floor(round / 2) % 2]!;
      const hierarchical = round % 2 === 0;
      // The reader has just answered by the previous model.
      expectStatus(await call(reader, "POST", "/api/v1/authorization/check", alice), 200);
      if (hierarchical) {
        expectStatus(await writer.call("PUT", path, { body: { resources: GRAPH_CATALOG } }), 200);
        expectStatus(await call(writer, "POST", "/api/v1/authorization/relationships", teamViews), 201);
      } else {
        const { subject, ...grant } = teamViews;
        const query = new URLSearchParams({ ...grant, subjectResource: subject!.resource, subjectResourceId: subject!.resourceId, subjectRelation: subject!.relation! });
        expect((await call(writer, "DELETE", `/api/v1/authorization/relationships?${query.toString()}`)).body).toEqual({ deleted: true });
        expectStatus(await writer.call("PUT", path, { body: flat }), 200);
      }
      const label = `round ${round}: made ${hierarchical ? "hierarchical" : "flat"} through ${writer === a ? "A" : "B"}`;
      // The very next answers on the reader: a check first, in even pairs of rounds; a lookup first in the others.
      const lookupFirst = Math.floor(round / 2) % 2 === 1;
      const lookup = async () => {
        const res = await call(reader, "POST", "/api/v1/authorization/lookup", { userId: "alice", resource: "document", action: "read" });
        expectStatus(res, 200);
        expect(res.body.resourceIds, `${label} (lookup)`).toEqual(hierarchical ? ["d1"] : []);
      };
      if (lookupFirst) await lookup();
      const single = await call(reader, "POST", "/api/v1/authorization/check", alice);
      expect(single.body, `${label} (check)`).toEqual({ allowed: hierarchical });
      if (!lookupFirst) await lookup();
      const batch = await call(reader, "POST", "/api/v1/authorization/check/batch", { checks: [alice, archive] });
      if (hierarchical) {
        expect(batch.status, label).toBe(400); // "archive" is not an action of the hierarchical catalog
        expect((await call(reader, "POST", "/api/v1/authorization/check/batch", { checks: [alice] })).body, `${label} (batch)`).toEqual({ results: [{ allowed: true }] });
      } else {
        expect(batch.body, `${label} (batch)`).toEqual({ results: [{ allowed: false }, { allowed: true }] });
      }
      const who = await call(reader, "POST", "/api/v1/authorization/subjects", { resource: "document", resourceId: "d1", action: "read" });
      expectStatus(who, 200);
      expect(who.body.userIds, `${label} (who can)`).toEqual(hierarchical ? ["alice", "olga"] : ["olga"]);
      // And the writer agrees.
      expect((await call(writer, "POST", "/api/v1/authorization/check", alice)).body, `${label} (on the writer)`).toEqual({ allowed: hierarchical });
    }
  });

  it("catalog PUTs racing on both replicas serialize: each succeeds and both replicas then agree on the last one", async () => {
    const appId = "catalog-race";
    expectStatus(await a.call("POST", "/api/v1/applications", { body: { appId } }), 201);
    const path = `/api/v1/applications/${appId}/resources`;
    const puts = await Promise.all(
      Array.from({ length: 6 }, (_, i) => (i % 2 === 0 ? a : b).call("PUT", path, { body: catalogs[i % catalogs.length] })),
    );
    for (const put of puts) expectStatus(put, 200);
    const [fromA, fromB] = await Promise.all([a.call("GET", path), b.call("GET", path)]);
    expect(fromA.body).toEqual(fromB.body);
    expect(puts.map((p) => JSON.stringify(p.body))).toContain(JSON.stringify(fromA.body));
    // One audit event per replacement, whichever replica made it.
    const audit = await a.call("GET", `/api/v1/applications/${appId}/audit-log?type=catalog.replaced`);
    expectStatus(audit, 200);
    expect(audit.body.events).toHaveLength(puts.length);
  });
});

describe.skipIf(!engines.includes("postgres"))("two replicas starting at once with no AUTHZ_ADMIN_KEY (Postgres only)", () => {
  let database: TestDatabase;
  const replicas: TestService[] = [];

  beforeAll(async () => {
    database = await createTestDatabase("postgres");
    const pools = await Promise.all([database.openAnother(), database.openAnother()]);
    const started = await Promise.allSettled(pools.map((pool) => startTestService(pool, { adminKey: undefined })));
    for (const s of started) if (s.status === "fulfilled") replicas.push(s.value);
    const failed = started.find((s): s is PromiseRejectedResult => s.status === "rejected");
    if (failed !== undefined) throw failed.reason;
  });
  afterAll(async () => {
    await Promise.allSettled(replicas.map((r) => r.close()));
    await database?.dispose();
  });

  it("exactly one of them generates the operator key, and it opens the operator routes on both", async () => {
    const starts = await Promise.all(replicas.map((r) => r.ready));
    const generated = starts.map((r) => r.generatedOperatorKey).filter((k): k is string => k !== undefined);
    expect(generated).toHaveLength(1);
    const { rows } = await database.db.query("SELECT key_id FROM api_keys WHERE kind = 'operator' AND revoked_at IS NULL");
    expect(rows).toHaveLength(1);
    for (const replica of replicas) {
      expectStatus(await replica.call("GET", "/api/v1/applications", { key: generated[0]! }), 200);
      expectStatus(await replica.call("GET", "/api/v1/applications"), 401); // the test suite's default key is not configured here
    }
  });
});
