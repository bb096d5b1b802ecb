/**
 * The check and the batch check over REST and gRPC, on each engine, beyond
 * the scenario files (test/scenarios/*.json, which hold the relation and
 * tenant tables): the answer's shape, grants and roles together, the batch
 * limits and order, per-item tenants in one batch, and every kind of error.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { grpcCaller, type GrpcCaller } from "./support/grpc-client.js";
import { startTestService, type TestService } from "./support/service.js";
import {
  admin,
  authz,
  createApp,
  expectError,
  expectGrpcError,
  expectStatus,
  grant,
  GRPC,
  grpcAllowed,
  question,
  type Authz,
  type CheckQuestion,
} from "./helpers/authz.js";

const CATALOG = [
  {
    resource: "document",
    description: "",
    actions: ["create", "read", "update", "delete", "list", "comment", "share"],
    relations: [{ name: "reviewer", actions: ["read", "comment"] }],
  },
  { resource: "invoice", description: "", actions: ["read", "send", "approve"] },
];

/** Checks that must be refused: the field path and value the message names. */
const invalidChecks: { name: string; body: Record<string, unknown>; names: string[] }[] = [
  { name: "resource not in the catalog", body: { ...question("u", "spaceship", "s1", "read") }, names: ["resource", '"spaceship"'] },
  { name: "action not in the catalog", body: { ...question("u", "document", "d1", "fly") }, names: ["action", '"fly"'] },
  { name: "action of another resource", body: { ...question("u", "document", "d1", "approve") }, names: ["action", '"approve"'] },
  { name: "a relation name asked as the action", body: { ...question("u", "document", "d1", "owner") }, names: ["action", '"owner"'] },
  { name: "a permission string as the action", body: { ...question("u", "document", "d1", "document:read") }, names: ["action"] },
  { name: "malformed resource", body: { ...question("u", "Document", "d1", "read") }, names: ["resource"] },
  { name: "malformed action", body: { ...question("u", "document", "d1", "READ") }, names: ["action"] },
  { name: "empty userId", body: { ...question("", "document", "d1", "read") }, names: ["userId"] },
  { name: "empty resourceId", body: { ...question("u", "document", "", "read") }, names: ["resourceId"] },
  { name: "resourceId of 257 characters", body: { ...question("u", "document", "r".repeat(257), "read") }, names: ["resourceId"] },
  { name: "userId with a tab", body: { ...question("u\t1", "document", "d1", "read") }, names: ["userId"] },
  { name: "empty tenantId", body: { ...question("u", "document", "d1", "read", "") }, names: ["tenantId"] },
  { name: "tenantId of 257 characters", body: { ...question("u", "document", "d1", "read", "t".repeat(257)) }, names: ["tenantId"] },
  { name: "action missing", body: { userId: "u", resource: "document", resourceId: "d1" }, names: ["action"] },
  { name: "resource missing", body: { userId: "u", resourceId: "d1", action: "read" }, names: ["resource"] },
  { name: "an unknown field", body: { ...question("u", "document", "d1", "read"), relation: "owner" }, names: ["relation"] },
  { name: "userId a number", body: { ...question("u", "document", "d1", "read"), userId: 42 }, names: ["userId"] },
  { name: "tenantId a list", body: { ...question("u", "document", "d1", "read"), tenantId: ["t1"] }, names: ["tenantId"] },
];

describe.each(oneEngine(import.meta.url))("check on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let grpc: GrpcCaller;
  let x: Authz;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    grpc = grpcCaller(service.url);
    x = authz(service, await createApp(service, "check", CATALOG));
    const ops = admin(service, "check");
    const readers = await ops.createPolicy("Document readers", ["document:read", "document:list"]);
    const approvers = await ops.createPolicy("Approvers", ["invoice:approve"], "t1");
    const reader = await ops.createRole("Reader", [readers]);
    const approver = await ops.createRole("Approver", [approvers, readers], "t1");
    await ops.assign(reader, "rita");
    await ops.assign(approver, "tina");
    await ops.assign(reader, "both");
    expectStatus(
      await x.bulk([
        grant("gwen", "document", "d1", "editor"),
        grant("both", "document", "d1", "owner"),
        grant("tina", "invoice", "i1", "viewer"),
      ]),
      200,
    );
  });
  afterAll(async () => {
    grpc?.close();
    await service?.close();
    await database?.dispose();
  });

  describe("the answer", () => {
    it.each([
      { name: "allowed by a grant", q: question("gwen", "document", "d1", "update"), allowed: true },
      { name: "denied: {allowed: false}, never {}", q: question("gwen", "document", "d1", "delete"), allowed: false },
      { name: "denied for a user the service never heard of", q: question("stranger", "document", "d1", "read"), allowed: false },
      { name: "allowed by an application-wide role on any instance", q: question("rita", "document", "never-seen", "list"), allowed: true },
      { name: "a role grants only its permissions", q: question("rita", "document", "d1", "update"), allowed: false },
      { name: "grant and role together: the grant adds what the role lacks", q: question("both", "document", "d1", "share"), allowed: true },
      { name: "grant and role together: the role covers other instances", q: question("both", "document", "d2", "read"), allowed: true },
      { name: "grant and role together: neither covers this", q: question("both", "document", "d2", "share"), allowed: false },
      { name: "tenant role within its tenant", q: question("tina", "invoice", "i9", "approve", "t1"), allowed: true },
      { name: "tenant role outside its tenant", q: question("tina", "invoice", "i9", "approve", "t2"), allowed: false },
      { name: "tenant role with no tenant asked", q: question("tina", "invoice", "i9", "approve"), allowed: false },
      { name: "a grant counts whatever tenant is asked", q: question("tina", "invoice", "i1", "read", "t2"), allowed: true },
      { name: "a grant's relation limits it even inside the role's tenant", q: question("tina", "invoice", "i1", "send", "t1"), allowed: false },
    ])("$name", async ({ q, allowed }) => {
      const res = await x.check(q);
      expectStatus(res, 200);
      expect(res.body).toStrictEqual({ allowed });
      expect(res.headers.get("content-type")).toContain("application/json");
      expect(await grpcAllowed(grpc, x.key, q)).toBe(allowed);
      const batch = await x.batch([q]);
      expectStatus(batch, 200);
      expect(batch.body).toStrictEqual({ results: [{ allowed }] });
    });

    it("many single checks at once, from two applications, each answered for its own application and question", async () => {
      const y = authz(service, await createApp(service, "check-other", CATALOG));
      // In the other application gwen owns d2 (not d1), and rita has no role.
      expectStatus(await y.write(grant("gwen", "document", "d2", "owner")), 201);
      const cases: { who: Authz; q: CheckQuestion; allowed: boolean }[] = [];
      for (let i = 0; i < 300; i++) {
        const pick = i % 6;
        if (pick === 0) cases.push({ who: x, q: question("gwen", "document", "d1", "update"), allowed: true });
        if (pick === 1) cases.push({ who: y, q: question("gwen", "document", "d1", "update"), allowed: false });
        if (pick === 2) cases.push({ who: x, q: question("gwen", "document", "d2", "delete"), allowed: false });
        if (pick === 3) cases.push({ who: y, q: question("gwen", "document", "d2", "delete"), allowed: true });
        if (pick === 4) cases.push({ who: x, q: question("rita", "document", `r${i}`, "read"), allowed: true });
        if (pick === 5) cases.push({ who: y, q: question("rita", "document", `r${i}`, "read"), allowed: false });
      }
      const answers = await Promise.all(cases.map(({ who, q }) => who.check(q)));
      const wrong = cases
        .map((c, i) => ({ app: c.who === x ? "check" : "check-other", q: c.q, expected: c.allowed, got: answers[i]!.body }))
        .filter((c, i) => answers[i]!.status !== 200 || c.got.allowed !== c.expected);
      expect(wrong.slice(0, 5)).toEqual([]);
      // And an error in one does not leak into the others answered with it.
      const mixed = await Promise.all([
        x.check(question("gwen", "document", "d1", "update")),
        y.check(question("gwen", "document", "d1", "fly")),
        x.check(question("gwen", "spaceship", "d1", "update")),
        y.check(question("gwen", "document", "d2", "delete")),
      ]);
      expect(mixed.map((m) => m.status)).toEqual([200, 400, 400, 200]);
      expect(mixed[0]!.body).toEqual({ allowed: true });
      expect(mixed[3]!.body).toEqual({ allowed: true });
      expect(mixed[1]!.body.message).toContain("fly");
      expect(mixed[2]!.body.message).toContain("spaceship");
    });

    it("an application with no catalog: every check is a 400", async () => {
      const bare = authz(service, await createApp(service, "bare", []));
      expectError(await bare.check(question("u", "document", "d1", "read")), 400, "invalid_argument", "document");
    });
  });

  describe("errors", () => {
    it.each(invalidChecks)("$name → 400 naming it (REST, batch, gRPC)", async ({ body, names }) => {
      expectError(await service.call("POST", "/api/v1/authorization/check", { key: x.key, body }), 400, "invalid_argument", ...names);
      // In a batch, the same problem is named with its index.
      const batch = await service.call("POST", "/api/v1/authorization/check/batch", {
        key: x.key,
        body: { checks: [question("gwen", "document", "d1", "read"), body] },
      });
      expectError(batch, 400, "invalid_argument", "checks[1]");
    });

    // Over gRPC a message has no unknown fields or wrong types to send: the well-typed cases.
    it.each(invalidChecks.filter((c) => Object.keys(c.body).every((k) => ["userId", "resource", "resourceId", "action", "tenantId"].includes(k)) && Object.values(c.body).every((v) => typeof v === "string") && "action" in c.body && "resource" in c.body))(
      "gRPC: $name → INVALID_ARGUMENT",
      async ({ body, names }) => {
        await expectGrpcError(grpc.call("CheckService", "Check", body, x.key), GRPC.INVALID_ARGUMENT, names[0]!);
      },
    );

    it("a body that is not an object, or not JSON → 400", async () => {
      for (const rawBody of ["[]", "null", '"check"', "{", "{\"userId\":"]) {
        const res = await service.call("POST", "/api/v1/authorization/check", { key: x.key, rawBody });
        expectError(res, 400, "invalid_argument");
      }
    });
  });

  describe("batch", () => {
    /** 1,000 checks whose answers alternate in a pattern, so order mistakes show. */
    const pattern = (n: number): { checks: CheckQuestion[]; expected: boolean[] } => {
      const checks = Array.from({ length: n }, (_, i) => {
        switch (i % 4) {
          case 0:
            return question("gwen", "document", "d1", "update"); // true
          case 1:
            return question("gwen", "document", "d1", "delete"); // false
          case 2:
            return question("rita", "document", `doc-${i}`, "read"); // true
          default:
            return question("tina", "invoice", "i9", "approve", i % 8 === 3 ? "t1" : "t2"); // t1 true, t2 false
        }
      });
      const expected = checks.map((_, i) => [true, false, true, i % 8 === 3][i % 4]!);
      return { checks, expected };
    };

    it("1,000 checks → 1,000 answers in request order", async () => {
      const { checks, expected } = pattern(1000);
      const res = await x.batch(checks);
      expectStatus(res, 200);
      expect(Object.keys(res.body)).toEqual(["results"]);
      expect(res.body.results).toHaveLength(1000);
      expect(res.body.results).toEqual(expected.map((allowed) => ({ allowed })));
    });

    it("1,001 checks → 400 naming the limit", async () => {
      const { checks } = pattern(1001);
      expectError(await x.batch(checks), 400, "invalid_argument", "1000", "1001");
    });

    it("0 checks → 200 with no results", async () => {
      const res = await x.batch([]);
      expectStatus(res, 200);
      expect(res.body).toEqual({ results: [] });
    });

    it("the same question twice, and different tenants for one user, each answered by its own item", async () => {
      const checks = [
        question("tina", "invoice", "i9", "approve", "t1"),
        question("tina", "invoice", "i9", "approve", "t2"),
        question("tina", "invoice", "i9", "approve"),
        question("tina", "invoice", "i9", "approve", "t1"),
        question("tina", "document", "any", "read", "t1"),
        question("tina", "document", "any", "read"),
      ];
      const res = await x.batch(checks);
      expectStatus(res, 200);
      expect(res.body.results.map((r: { allowed: boolean }) => r.allowed)).toEqual([true, false, false, true, true, false]);
    });

    it("bad items at several indexes → 400 naming each; a bad item refuses the whole batch", async () => {
      const { checks } = pattern(1000);
      checks[0] = question("u", "spaceship", "s", "read");
      checks[500] = question("u", "document", "d", "fly");
      checks[999] = question("u", "invoice", "i", "share");
      const res = await x.batch(checks);
      expectError(res, 400, "invalid_argument", "checks[0].resource");
      const fields = res.body.details.map((d: { field: string }) => d.field);
      expect(fields).toEqual(["checks[0].resource", "checks[500].action", "checks[999].action"]);

      const malformed = pattern(10).checks;
      malformed[3] = question("", "document", "d", "read");
      malformed[7] = question("u", "document", "d", "read", "");
      const res2 = await x.batch(malformed);
      expectError(res2, 400, "invalid_argument", "checks[3].userId");
      expect(res2.body.details.map((d: { field: string }) => d.field)).toEqual(["checks[3].userId", "checks[7].tenantId"]);
    });

    it("`checks` not a list, or an item not an object → 400", async () => {
      for (const body of [{ checks: {} }, { checks: ["read"] }, { checks: [question("u", "document", "d1", "read")], extra: 1 }]) {
        expectError(await service.call("POST", "/api/v1/authorization/check/batch", { key: x.key, body }), 400, "invalid_argument");
      }
    });

    it("over gRPC: 1,000 in order, 1,001 → INVALID_ARGUMENT", async () => {
      const { checks, expected } = pattern(1000);
      const res = await grpc.call("CheckService", "BatchCheck", { checks }, x.key);
      expect(res.results.map((r: { allowed: boolean }) => r.allowed)).toEqual(expected);
      await expectGrpcError(grpc.call("CheckService", "BatchCheck", { checks: pattern(1001).checks }, x.key), GRPC.INVALID_ARGUMENT, "1000");
      const empty = await grpc.call("CheckService", "BatchCheck", { checks: [] }, x.key);
      expect(empty.results).toEqual([]);
    });
  });
});
