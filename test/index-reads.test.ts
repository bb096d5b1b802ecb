/**
 * The questions read a user's grants by the user, not every grant of the
 * instance. An instance shared with thousands (a company-wide document, a
 * team folder) is where a check's statement, planned once with unknown
 * values (the check's functions use a generic plan), could fall back to the
 * primary key's range of the instance and filter the user: correct, and
 * thousands of rows a check. That is what `user_id IN (user, '')` does
 * (docs/hierarchy.md, "Everyone: allUsers grants"). Each statement
 * here runs in a transaction of its own, which reads how many index and
 * table rows of relationships it returned (pg_stat_get_xact_tuples_returned,
 * before and after: this backend's own counts, whatever else the server does).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHash } from "node:crypto";
import type { Db, Queryable } from "../src/store/db.js";
import { CheckStatements, type CheckInput } from "../src/store/check-store.js";
import { conditionalPathsStore } from "../src/store/conditional-paths-store.js";
import { explainStore } from "../src/store/explain-store.js";
import { modelStore } from "../src/store/model-store.js";
import { AccessModel } from "../src/domain/access-model.js";
import { createTestDatabase, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";
import { createApp, expectStatus } from "./helpers/authz.js";
import { ALL_USERS_CATALOG, everyone, user, type AnyGrant, type EveryoneGrant } from "./support/graph.js";

/** Grants of others on each shared instance: the range a bad plan reads. */
const SHARED = 3_000;
/** Instances with a grant or two each, as most are: what the planner's statistics see. */
const SPREAD = 6_000;
/** Rows a statement may read for one question here: a few index entries and heap rows per probe. */
const BOUND = 200;

const DIRECT = [
  {
    resource: "document",
    description: "",
    actions: ["read", "update"],
    relations: [
      { name: "viewer", actions: ["read"], subjects: ["user", "user:*"] },
      { name: "editor", actions: ["read", "update"], subjects: ["user"] },
    ],
  },
];

let t: TestDatabase;
let service: TestService;
const keys: Record<string, string> = {};
const hash = (key: string) => createHash("sha256").update(key).digest("hex");

/** Rows of relationships (the table and its indexes) the statements of `fn` returned, in one transaction. */
async function rowsRead(db: Db, fn: (tx: Queryable) => Promise<unknown>): Promise<number> {
  // The counts are the backend's not yet reported to the server, which may
  // hold earlier transactions' too: the difference across fn is its own.
  const counted = async (tx: Queryable) =>
    (
      await tx.query<{ n: number }>(
        `SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(c.oid)), 0)::int AS n
         FROM pg_class c WHERE c.oid = 'relationships'::regclass
            OR c.oid IN (SELECT i.indexrelid FROM pg_index i WHERE i.indrelid = 'relationships'::regclass)`,
      )
    ).rows[0]!.n;
  return db.transaction(async (tx) => {
    const before = await counted(tx);
    await fn(tx);
    return (await counted(tx)) - before;
  });
}

async function write(appId: string, writes: (AnyGrant | EveryoneGrant | (AnyGrant & { condition: string }))[]): Promise<void> {
  for (let i = 0; i < writes.length; i += 5000) {
    expectStatus(await service.call("POST", "/api/v1/authorization/relationships/bulk", { key: keys[appId]!, body: { writes: writes.slice(i, i + 5000) } }), 200);
  }
}

/** Grants on SPREAD instances of the resource, two users each. */
const spread = (resource: string, relation: string): AnyGrant[] =>
  Array.from({ length: SPREAD }, (_, i) => user(`spread-${i % 500}`, resource, `spread-${i >> 1}`, relation));

/** SHARED others' grants on the instance, plain and conditional. */
function sharedWith(resource: string, resourceId: string, relation: string): (AnyGrant | (AnyGrant & { condition: string }))[] {
  return [
    ...Array.from({ length: SHARED }, (_, i) => user(`other-${i}`, resource, resourceId, relation)),
    ...Array.from({ length: SHARED / 3 }, (_, i) => ({ ...user(`cond-${i}`, resource, resourceId, relation), condition: "context.ok == true" })),
  ];
}

beforeAll(async () => {
  t = await createTestDatabase("postgres");
  service = await startTestService(t.db);
  keys.direct = await createApp(service, "direct", DIRECT);
  keys.graph = await createApp(service, "graph", ALL_USERS_CATALOG);
  await write("direct", [...spread("document", "viewer"), ...sharedWith("document", "shared", "viewer"), user("ann", "document", "shared", "editor"), everyone("document", "public", "viewer")]);
  await write("graph", [
    ...spread("document", "viewer"),
    ...spread("folder", "viewer"),
    ...sharedWith("folder", "shared", "viewer"),
    ...sharedWith("document", "shared", "viewer"),
    { resource: "document", resourceId: "shared", relation: "parent", subject: { resource: "folder", resourceId: "shared" } },
    user("ann", "document", "shared", "editor"),
    everyone("folder", "public", "viewer"),
  ]);
  // The statistics a real application's table has: most instances have few grants.
  await t.db.query("ANALYZE relationships");
}, 120_000);

afterAll(async () => {
  await service?.close();
  await t?.dispose();
});

const ask = (appId: string, userId: string, resourceId: string, action: string): CheckInput => ({
  appId,
  keyHash: hash(keys[appId]!),
  userId,
  resource: "document",
  resourceId,
  action,
});

describe("a question about a shared instance reads the user's grants, not every grant of it (postgres)", () => {
  const cases = [
    { statement: "check, planned once", app: "direct", planned: true },
    { statement: "check, inline (Citus)", app: "direct", planned: false },
    { statement: "graph check, planned once", app: "graph", planned: true },
    { statement: "graph check, inline (Citus)", app: "graph", planned: false },
  ];
  it.each(cases)("$statement: allowed, denied and by nobody's grant alike", async ({ app, planned }) => {
    const groups = app === "graph" ? AccessModel.from((await modelStore.load(t.db, app))!).groups() : undefined;
    const statements = new CheckStatements(planned);
    for (const [userId, action, allowed] of [
      ["ann", "update", true],
      ["bob", "read", false],
      ["other-7", "read", true],
    ] as const) {
      let answer: { relations: string[] } | undefined;
      const read = await rowsRead(t.db, async (tx) => {
        answer = (await statements.check(tx, [ask(app, userId, "shared", action)], { graph: () => groups })).rows[0];
      });
      expect(statements.plannedOnce).toBe(planned);
      expect(answer!.relations.length > 0, `${userId} ${action}`).toBe(allowed);
      expect(read, `${userId} ${action}: rows read`).toBeLessThan(BOUND);
    }
  });

  it("explain reads the user's grants of the instance", async () => {
    const read = await rowsRead(t.db, (tx) =>
      explainStore.explain(tx, [{ ...ask("direct", "bob", "shared", "read"), action: "read", tenantId: undefined }]),
    );
    expect(read).toBeLessThan(BOUND);
  });

  it("the conditional paths read the user's grants of the walk", async () => {
    const read = await rowsRead(t.db, (tx) =>
      conditionalPathsStore.paths(tx, [{ appId: "graph", userId: "bob", resource: "document", resourceId: "shared", action: "read" }]),
    );
    expect(read).toBeLessThan(BOUND);
  });
});
