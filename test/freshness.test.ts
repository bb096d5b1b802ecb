/**
 * Freshness: after any committed change the very next check answers
 * accordingly, on the replica that made the change and on another replica
 * over the same Postgres database (each with its own pool). Every kind of
 * change: policy permissions, role policies, assignments, roles, policies
 * force-deleted, grants (single and bulk), and catalog changes (custom
 * relations edited, actions added that owner then implies, built-ins
 * redefined, actions removed). PGlite runs the single-replica half. The
 * other questions (explain, permissions, lookup) are held to the same rule:
 * right after each change, half the cases ask them before the check.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, engines, type EngineName, type TestDatabase } from "./support/engines.js";
import { grpcCaller, type GrpcCaller } from "./support/grpc-client.js";
import { startTestService, type TestService } from "./support/service.js";
import {
  admin,
  authz,
  createApp,
  expectError,
  expectStatus,
  grant,
  GRPC,
  question,
  type Admin,
  type Authz,
  type CheckQuestion,
} from "./helpers/authz.js";

/** What a check answers: allowed, denied, or refused (400: the action or resource is not in the catalog). */
type Answer = true | false | "invalid";

const DOCUMENT = {
  resource: "document",
  description: "",
  actions: ["create", "read", "update", "delete", "list", "comment"],
  relations: [{ name: "reviewer", actions: ["read", "comment"] }],
};
const CATALOG = [DOCUMENT];
const withDocument = (over: Partial<typeof DOCUMENT>) => [{ ...DOCUMENT, ...over }];

interface Ctx {
  ops: Admin;
  x: Authz;
  ids: Record<string, string>;
}

interface FreshCase {
  name: string;
  catalog?: unknown[];
  setup(ctx: Ctx): Promise<void>;
  change(ctx: Ctx): Promise<void>;
  /** Each question with its answer before and after the change. */
  questions: { q: CheckQuestion; before: Answer; after: Answer }[];
}

/** A role "reader" holding policy P (document:read) assigned to "ulla". */
async function roleWithPolicy(ctx: Ctx, permissions = ["document:read"], tenantId?: string): Promise<void> {
  ctx.ids.policy = await ctx.ops.createPolicy("P", permissions, tenantId);
  ctx.ids.role = await ctx.ops.createRole("Reader", [ctx.ids.policy], tenantId);
  await ctx.ops.assign(ctx.ids.role, "ulla");
}

const ulla = (action: string, tenantId?: string) => question("ulla", "document", "d1", action, tenantId);
const owner = (action: string) => question("olga", "document", "d1", action);

const cases: FreshCase[] = [
  {
    name: "a permission added to a policy",
    setup: (c) => roleWithPolicy(c),
    change: async (c) => void (await c.ops.setPermissions(c.ids.policy!, ["document:read", "document:update"])),
    questions: [
      { q: ulla("update"), before: false, after: true },
      { q: ulla("read"), before: true, after: true },
    ],
  },
  {
    name: "a permission removed from a policy",
    setup: (c) => roleWithPolicy(c, ["document:read", "document:delete"]),
    change: async (c) => void (await c.ops.setPermissions(c.ids.policy!, ["document:read"])),
    questions: [
      { q: ulla("delete"), before: true, after: false },
      { q: ulla("read"), before: true, after: true },
    ],
  },
  {
    name: "every permission removed from a tenant policy",
    setup: (c) => roleWithPolicy(c, ["document:read"], "t1"),
    change: async (c) => void (await c.ops.setPermissions(c.ids.policy!, [])),
    questions: [{ q: ulla("read", "t1"), before: true, after: false }],
  },
  {
    name: "a policy detached from a role",
    setup: (c) => roleWithPolicy(c),
    change: async (c) => void (await c.ops.setRolePolicies(c.ids.role!, [])),
    questions: [{ q: ulla("read"), before: true, after: false }],
  },
  {
    name: "a role's policy swapped for another",
    setup: async (c) => {
      await roleWithPolicy(c);
      c.ids.other = await c.ops.createPolicy("Q", ["document:comment"]);
    },
    change: async (c) => void (await c.ops.setRolePolicies(c.ids.role!, [c.ids.other!])),
    questions: [
      { q: ulla("read"), before: true, after: false },
      { q: ulla("comment"), before: false, after: true },
    ],
  },
  {
    name: "an attached policy force-deleted",
    setup: (c) => roleWithPolicy(c),
    change: async (c) => void (await c.ops.deletePolicy(c.ids.policy!, true)),
    questions: [{ q: ulla("read"), before: true, after: false }],
  },
  {
    name: "a role unassigned",
    setup: (c) => roleWithPolicy(c),
    change: async (c) => void (await c.ops.unassign(c.ids.role!, "ulla")),
    questions: [{ q: ulla("read"), before: true, after: false }],
  },
  {
    name: "a role assigned",
    setup: async (c) => {
      c.ids.policy = await c.ops.createPolicy("P", ["document:read"]);
      c.ids.role = await c.ops.createRole("Reader", [c.ids.policy]);
    },
    change: async (c) => void (await c.ops.assign(c.ids.role!, "ulla")),
    questions: [{ q: ulla("read"), before: false, after: true }],
  },
  {
    name: "a role deleted",
    setup: (c) => roleWithPolicy(c),
    change: async (c) => void (await c.ops.deleteRole(c.ids.role!)),
    questions: [{ q: ulla("read"), before: true, after: false }],
  },
  {
    name: "a grant written",
    setup: async () => undefined,
    change: async (c) => expectStatus(await c.x.write(grant("olga", "document", "d1", "owner")), 201),
    questions: [
      { q: owner("delete"), before: false, after: true },
      { q: question("olga", "document", "d2", "delete"), before: false, after: false },
    ],
  },
  {
    name: "a grant deleted",
    setup: async (c) => expectStatus(await c.x.write(grant("olga", "document", "d1", "owner")), 201),
    change: async (c) => expect((await c.x.delete(grant("olga", "document", "d1", "owner"))).body).toEqual({ deleted: true }),
    questions: [{ q: owner("delete"), before: true, after: false }],
  },
  {
    name: "a user's grants deleted by filter",
    setup: async (c) => expectStatus(await c.x.bulk([grant("olga", "document", "d1", "owner"), grant("olga", "document", "d2", "viewer")]), 200),
    change: async (c) => expect((await c.x.deleteMatching({ userId: "olga" })).body).toEqual({ deleted: 2 }),
    questions: [
      { q: owner("delete"), before: true, after: false },
      { q: question("olga", "document", "d2", "read"), before: true, after: false },
    ],
  },
  {
    name: "an instance's grants deleted by filter",
    setup: async (c) => expectStatus(await c.x.bulk([grant("olga", "document", "d1", "owner"), grant("vera", "document", "d1", "viewer")]), 200),
    change: async (c) => expect((await c.x.deleteMatching({ resource: "document", resourceId: "d1" })).body).toEqual({ deleted: 2 }),
    questions: [
      { q: owner("delete"), before: true, after: false },
      { q: question("vera", "document", "d1", "read"), before: true, after: false },
    ],
  },
  {
    name: "a user offboarded: every role assignment removed in one call",
    setup: async (c) => {
      await roleWithPolicy(c, ["document:read"]);
      const acme = await c.ops.createPolicy("Acme update", ["document:update"], "acme");
      await c.ops.assign(await c.ops.createRole("Acme editor", [acme], "acme"), "ulla");
    },
    change: async (c) => expect(await c.ops.offboard("ulla")).toMatchObject({ deleted: 2 }),
    questions: [
      { q: ulla("read"), before: true, after: false },
      { q: ulla("update", "acme"), before: true, after: false },
    ],
  },
  {
    name: "grants written and deleted in one bulk call",
    setup: async (c) => expectStatus(await c.x.write(grant("olga", "document", "d1", "owner")), 201),
    change: async (c) =>
      expect((await c.x.bulk([grant("vera", "document", "d1", "viewer")], [grant("olga", "document", "d1", "owner")])).body).toEqual({
        written: 1,
        unchanged: 0,
        deleted: 1,
      }),
    questions: [
      { q: owner("delete"), before: true, after: false },
      { q: question("vera", "document", "d1", "list"), before: false, after: true },
    ],
  },
  {
    name: "catalog: an action removed from a custom relation",
    setup: async (c) => expectStatus(await c.x.write(grant("rex", "document", "d1", "reviewer")), 201),
    change: async (c) => void (await c.ops.setCatalog(withDocument({ relations: [{ name: "reviewer", actions: ["read"] }] }))),
    questions: [
      { q: question("rex", "document", "d1", "comment"), before: true, after: false },
      { q: question("rex", "document", "d1", "read"), before: true, after: true },
    ],
  },
  {
    name: "catalog: an action added to a custom relation",
    catalog: withDocument({ relations: [{ name: "reviewer", actions: ["read"] }] }),
    setup: async (c) => expectStatus(await c.x.write(grant("rex", "document", "d1", "reviewer")), 201),
    change: async (c) => void (await c.ops.setCatalog(CATALOG)),
    questions: [{ q: question("rex", "document", "d1", "comment"), before: false, after: true }],
  },
  {
    name: "catalog: an action added to the resource, which owner then implies",
    setup: async (c) => {
      expectStatus(await c.x.bulk([grant("olga", "document", "d1", "owner"), grant("vera", "document", "d1", "viewer")]), 200);
    },
    change: async (c) => void (await c.ops.setCatalog(withDocument({ actions: [...DOCUMENT.actions, "archive"] }))),
    questions: [
      { q: owner("archive"), before: "invalid", after: true },
      { q: question("vera", "document", "d1", "archive"), before: "invalid", after: false },
      { q: owner("read"), before: true, after: true },
    ],
  },
  {
    name: "catalog: an action added that a role's policy can then hold (no change for roles until a policy holds it)",
    setup: (c) => roleWithPolicy(c),
    change: async (c) => {
      await c.ops.setCatalog(withDocument({ actions: [...DOCUMENT.actions, "archive"] }));
      await c.ops.setPermissions(c.ids.policy!, ["document:read", "document:archive"]);
    },
    questions: [{ q: ulla("archive"), before: "invalid", after: true }],
  },
  {
    name: "catalog: an action removed from the resource",
    setup: async (c) => expectStatus(await c.x.write(grant("olga", "document", "d1", "owner")), 201),
    change: async (c) => void (await c.ops.setCatalog(withDocument({ actions: ["create", "read", "update", "list", "comment"] }))),
    questions: [
      { q: owner("delete"), before: true, after: "invalid" },
      { q: owner("update"), before: true, after: true },
    ],
  },
  {
    name: "catalog: a built-in redefined as a custom relation, then restored",
    setup: async (c) => expectStatus(await c.x.write(grant("vera", "document", "d1", "viewer")), 201),
    change: async (c) =>
      void (await c.ops.setCatalog(withDocument({ relations: [...DOCUMENT.relations, { name: "viewer", actions: ["read"] }] }))),
    questions: [
      { q: question("vera", "document", "d1", "list"), before: true, after: false },
      { q: question("vera", "document", "d1", "read"), before: true, after: true },
    ],
  },
];

describe.each(engines)("freshness on %s", (engine: EngineName) => {
  let database: TestDatabase;
  const services: Record<"A" | "B", TestService | undefined> = { A: undefined, B: undefined };
  const grpcs: Record<"A" | "B", GrpcCaller | undefined> = { A: undefined, B: undefined };
  // PGlite is one in-process database: one replica. Postgres: both directions and the same replica.
  const directions: { writer: "A" | "B"; reader: "A" | "B" }[] =
    engine === "postgres"
      ? [
          { writer: "A", reader: "A" },
          { writer: "A", reader: "B" },
          { writer: "B", reader: "A" },
        ]
      : [{ writer: "A", reader: "A" }];
  let counter = 0;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    services.A = await startTestService(database.db);
    grpcs.A = grpcCaller(services.A.url);
    if (engine === "postgres") {
      services.B = await startTestService(await database.openAnother());
      grpcs.B = grpcCaller(services.B.url);
    }
  });
  afterAll(async () => {
    grpcs.A?.close();
    grpcs.B?.close();
    await Promise.allSettled([services.A?.close(), services.B?.close()]);
    await database?.dispose();
  });

  /** Asks `q` on a replica over REST (single and batch) and gRPC; each must give `expected`. */
  async function expectAnswer(replica: "A" | "B", key: string, q: CheckQuestion, expected: Answer, when: string): Promise<void> {
    const service = services[replica]!;
    const grpc = grpcs[replica]!;
    const label = `${when}, on ${replica}: ${JSON.stringify(q)}`;
    const single = await service.call("POST", "/api/v1/authorization/check", { key, body: q });
    const batch = await service.call("POST", "/api/v1/authorization/check/batch", { key, body: { checks: [q, q] } });
    if (expected === "invalid") {
      expectError(single, 400, "invalid_argument");
      expectError(batch, 400, "invalid_argument");
      const error = await grpc.call("CheckService", "Check", q, key).then(
        () => undefined,
        (e: { code: number }) => e,
      );
      expect(error?.code, label).toBe(GRPC.INVALID_ARGUMENT);
      return;
    }
    expect(single.status, `${label} ${JSON.stringify(single.body)}`).toBe(200);
    expect(single.body, label).toStrictEqual({ allowed: expected });
    expect(batch.body, label).toStrictEqual({ results: [{ allowed: expected }, { allowed: expected }] });
    expect((await grpc.call("CheckService", "Check", q, key)).allowed, `${label} (gRPC)`).toBe(expected);
  }

  /** Asks explain, permissions and lookup about `q` on a replica; each must agree with `expected`. */
  async function expectQuestions(replica: "A" | "B", key: string, q: CheckQuestion, expected: Answer, when: string): Promise<void> {
    const service = services[replica]!;
    const grpc = grpcs[replica]!;
    const label = `${when}, on ${replica}: ${JSON.stringify(q)}`;
    const explained = await service.call("POST", "/api/v1/authorization/check/explain", { key, body: q });
    const { action, resourceId, ...which } = q;
    const permissions = await grpc.call("CheckService", "Permissions", { ...which, resourceId }, key);
    const lookup = await service.call("POST", "/api/v1/authorization/lookup", { key, body: { ...which, action, pageSize: 1000 } });
    if (expected === "invalid") {
      expectError(explained, 400, "invalid_argument");
      expectError(lookup, 400, "invalid_argument");
      expect(permissions.actions, label).not.toContain(action);
      return;
    }
    expect(explained.status, `${label} ${JSON.stringify(explained.body)}`).toBe(200);
    expect(explained.body.allowed, `${label} (explain)`).toBe(expected);
    expect(permissions.actions.includes(action), `${label} (permissions)`).toBe(expected);
    expect(lookup.status, `${label} ${JSON.stringify(lookup.body)}`).toBe(200);
    expect(lookup.body.allInstances || lookup.body.resourceIds.includes(resourceId), `${label} (lookup)`).toBe(expected);
  }

  describe.each(directions)("changed through $writer, checked on $reader", ({ writer, reader }) => {
    it.each(cases.map((c, i) => ({ ...c, questionsFirst: i % 2 === 0 })))("$name", async (c) => {
      const w = services[writer]!;
      const appId = `fresh-${counter++}`;
      const key = await createApp(w, appId, c.catalog ?? CATALOG);
      const ctx: Ctx = { ops: admin(w, appId), x: authz(w, key), ids: {} };
      await c.setup(ctx);
      // Warm both replicas with the old answer (several times: anything they might cache is filled).
      for (let round = 0; round < 3; round++) {
        for (const { q, before } of c.questions) {
          await expectAnswer(reader, key, q, before, "before the change");
          await expectAnswer(writer, key, q, before, "before the change");
        }
      }
      await c.change(ctx);
      // The very next answer, on the reader first, then the writer: the
      // check first in half the cases, the other questions first in the rest.
      for (const replica of [reader, writer]) {
        for (const { q, after } of c.questions) {
          if (c.questionsFirst) await expectQuestions(replica, key, q, after, "right after the change");
          await expectAnswer(replica, key, q, after, "right after the change");
          if (!c.questionsFirst) await expectQuestions(replica, key, q, after, "right after the change");
        }
      }
    });

    it("a grant expiring 2 s ahead: counted by every question on both replicas just before, by none just after, with no write between", async () => {
      const w = services[writer]!;
      const appId = `expiry-${counter++}`;
      const key = await createApp(w, appId, CATALOG);
      const clock = async () => Number((await database.db.query<{ ms: number }>("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms")).rows[0]!.ms);
      const expiresAt = Math.floor(await clock()) + 2_000;
      const written = await w.call("POST", "/api/v1/authorization/relationships", {
        key,
        body: { ...grant("olga", "document", "d1", "reviewer"), expiresAt: new Date(expiresAt).toISOString() },
      });
      expectStatus(written, 201);
      const asked = [question("olga", "document", "d1", "comment"), question("olga", "document", "d1", "read")];
      for (const replica of [reader, writer]) {
        for (const q of asked) {
          await expectAnswer(replica, key, q, true, "just before the expiry");
          await expectQuestions(replica, key, q, true, "just before the expiry");
        }
      }
      expect(await clock(), "the answers before took too long to be 'just before'").toBeLessThan(expiresAt);
      while ((await clock()) <= expiresAt) await new Promise((resolve) => setTimeout(resolve, 5));
      for (const replica of [reader, writer]) {
        for (const q of asked) {
          await expectAnswer(replica, key, q, false, "just after the expiry");
          await expectQuestions(replica, key, q, false, "just after the expiry");
        }
      }
    });

    it("flip-flop: a permission added and removed ten times, each answer right after its change", async () => {
      const w = services[writer]!;
      const appId = `flip-${counter++}`;
      const key = await createApp(w, appId, CATALOG);
      const ctx: Ctx = { ops: admin(w, appId), x: authz(w, key), ids: {} };
      await roleWithPolicy(ctx, []);
      for (let round = 0; round < 10; round++) {
        const on = round % 2 === 0;
        await ctx.ops.setPermissions(ctx.ids.policy!, on ? ["document:update"] : []);
        await expectAnswer(reader, key, ulla("update"), on, `round ${round}`);
      }
    });

    it("with other checks in flight on the reader all along, each change is seen by the next check", async () => {
      const w = services[writer]!;
      const appId = `busy-${counter++}`;
      const key = await createApp(w, appId, CATALOG);
      const x = authz(w, key);
      const r = services[reader]!;
      expectStatus(await x.write(grant("bg", "document", "bg", "viewer")), 201);
      // Background load: 8 workers asking unrelated questions back to back on the reader.
      let stop = false;
      let backgroundChecks = 0;
      const workers = Array.from({ length: 8 }, async (_, n) => {
        while (!stop) {
          const res = await r.call("POST", "/api/v1/authorization/check", { key, body: question("bg", "document", "bg", n % 2 ? "read" : "list") });
          expect(res.body).toEqual({ allowed: true });
          backgroundChecks++;
        }
      });
      try {
        const g = grant("gil", "document", "d1", "editor");
        for (let round = 0; round < 20; round++) {
          const on = round % 2 === 0;
          expect((on ? await x.write(g) : await x.delete(g)).status).toBeLessThan(300);
          const next = await r.call("POST", "/api/v1/authorization/check", { key, body: question("gil", "document", "d1", "update") });
          expect(next.body, `round ${round}`).toEqual({ allowed: on });
        }
      } finally {
        stop = true;
        await Promise.all(workers);
      }
      expect(backgroundChecks).toBeGreaterThan(20);
    });

    it("flip-flop: a grant written and deleted ten times, alternating single and bulk calls", async () => {
      const w = services[writer]!;
      const appId = `flip-${counter++}`;
      const key = await createApp(w, appId, CATALOG);
      const x = authz(w, key);
      const g = grant("gil", "document", "d1", "editor");
      for (let round = 0; round < 10; round++) {
        const on = round % 2 === 0;
        const viaBulk = round % 4 >= 2;
        if (on) expect((viaBulk ? await x.bulk([g]) : await x.write(g)).status).toBeLessThan(300);
        else expect((viaBulk ? await x.bulk([], [g]) : await x.delete(g)).status).toBe(200);
        await expectAnswer(reader, key, question("gil", "document", "d1", "update"), on, `round ${round}`);
      }
    });
  });
});
