/**
 * On Citus every statement a question sends is a router query: one task, on
 * the node that holds the application's shard, with no subplan run apart
 * (docs/scaling.md). The service answers check, batch check, permissions,
 * explain, lookup, who can and the change feed over a world with nested
 * teams, folders, an `unless`, a `requires`, a condition and contextual
 * grants, through a database that records each read it sends with its
 * parameters; then each distinct read is explained on the coordinator with
 * those parameters and its plan read: a Citus plan with more than one task,
 * or with a distributed subplan, fails the test naming the statement.
 * Citus only: the Citus leg (scripts/test-citus.mjs) runs it; elsewhere it is
 * skipped.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";
import { createApp, expectStatus } from "./helpers/authz.js";
import { set, user } from "./support/graph.js";
import { recordingDb } from "./support/recording-db.js";
import { PgDb } from "../src/store/pg-db.js";

/** A read: a statement that writes nothing (a question's, or the feed's). */
const isRead = (sql: string) => /^\s*(WITH|SELECT)\b/i.test(sql) && !/\b(INSERT|UPDATE|DELETE)\b/i.test(sql) && !/\bFOR (UPDATE|SHARE)\b/i.test(sql);

interface PlanNode {
  "Node Type"?: string;
  "Custom Plan Provider"?: string;
  "Distributed Query"?: { Job?: { "Task Count"?: number } };
  Plans?: PlanNode[];
}

/** Each Citus node of a plan: its task count. */
function citusTasks(node: PlanNode, out: number[] = []): number[] {
  const job = node["Distributed Query"]?.Job;
  if (node["Custom Plan Provider"]?.startsWith("Citus") === true) out.push(job?.["Task Count"] ?? -1);
  for (const child of node.Plans ?? []) citusTasks(child, out);
  return out;
}

const CATALOG = [
  { resource: "team", description: "", actions: ["read"], relations: [{ name: "member", actions: ["read"], subjects: ["user", "team#member"] }] },
  { resource: "org", description: "", actions: ["read"], relations: [{ name: "member", actions: ["read"], subjects: ["user"] }] },
  {
    resource: "folder",
    description: "",
    actions: ["read"],
    relations: [
      { name: "parent", actions: [], subjects: ["folder"] },
      { name: "viewer", actions: ["read"], subjects: ["user", "team#member"], inherits: [{ through: "parent", relation: "viewer" }] },
    ],
  },
  {
    resource: "document",
    description: "",
    actions: ["read", "review"],
    relations: [
      { name: "parent", actions: [], subjects: ["folder"] },
      { name: "org", actions: [], subjects: ["org"] },
      { name: "blocked", actions: [], subjects: ["user", "team#member"] },
      { name: "viewer", actions: ["read"], subjects: ["user", "team#member"], inherits: [{ through: "parent", relation: "viewer" }], unless: [{ relation: "blocked" }] },
      { name: "reviewer", actions: ["review"], subjects: ["user"], requires: [{ through: "org", relation: "member" }] },
    ],
  },
];

const GRANTS = [
  user("ann", "team", "eng", "member"),
  set("team:eng#member", "team", "all", "member"),
  set("team:all#member", "folder", "root", "viewer"),
  set("folder:root", "folder", "sub", "parent"),
  set("folder:sub", "document", "d1", "parent"),
  set("folder:sub", "document", "d2", "parent"),
  user("bob", "document", "d2", "blocked"),
  user("bob", "team", "eng", "member"),
  user("ann", "document", "d1", "reviewer"),
  set("org:acme", "document", "d1", "org"),
  user("ann", "org", "acme", "member"),
  { ...user("cy", "document", "d1", "viewer"), condition: "context.ok == true" },
];

describe.skipIf(!engines.includes("citus"))("every read a question sends is a router query on citus", () => {
  let database: TestDatabase;
  let service: TestService;
  const reads = new Map<string, readonly unknown[]>();
  let on = false;

  beforeAll(async () => {
    database = await createTestDatabase("citus", { migrated: true });
    // Each read with its first parameters (a function Citus refuses is recorded too: explained, it plans no Citus node).
    service = await startTestService(recordingDb(database.db, (sql, params) => on && isRead(sql) && !reads.has(sql) && reads.set(sql, params ?? [])));
  }, 60_000);
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  it("check, batch check, permissions, explain, lookup, who can and the feed: one task each, no subplan", async () => {
    const key = await createApp(service, "router", CATALOG);
    const call = async (path: string, body: unknown, method = "POST") => {
      const res = await service.call(method, path, { key, body });
      expectStatus(res, 200);
      return res.body;
    };
    await call("/api/v1/authorization/relationships/bulk", { writes: GRANTS });
    on = true;
    const contextualGrants = [user("dee", "team", "eng", "member")];
    const questions = [
      { userId: "ann", resource: "document", resourceId: "d1", action: "read" },
      { userId: "bob", resource: "document", resourceId: "d2", action: "read" },
      { userId: "ann", resource: "document", resourceId: "d1", action: "review" },
      { userId: "cy", resource: "document", resourceId: "d1", action: "read", context: { ok: true } },
      { userId: "dee", resource: "document", resourceId: "d1", action: "read", contextualGrants },
    ];
    for (const q of questions) {
      await call("/api/v1/authorization/check", q);
      await call("/api/v1/authorization/check/explain", q);
      const { action: _, ...instance } = q;
      await call("/api/v1/authorization/permissions", instance);
      await call("/api/v1/authorization/lookup", { userId: q.userId, resource: "document", action: q.action, pageSize: 1, ...(q.contextualGrants ? { contextualGrants } : {}) });
      await call("/api/v1/authorization/subjects", { resource: "document", resourceId: q.resourceId, action: q.action, pageSize: 1, ...(q.contextualGrants ? { contextualGrants } : {}) });
    }
    await call("/api/v1/authorization/check/batch", { checks: questions });
    await call("/api/v1/authorization/permissions/batch", { requests: questions.map(({ action: _, ...instance }) => instance) });
    await call("/api/v1/authorization/changes?pageSize=5", undefined, "GET");
    on = false;

    expect(reads.size).toBeGreaterThan(10);
    const problems: string[] = [];
    let routed = 0;
    for (const [sql, params] of reads) {
      const { rows } = await database.db.query<{ "QUERY PLAN": [{ Plan: PlanNode }] }>(`EXPLAIN (FORMAT JSON) ${sql}`, params);
      const plan = rows[0]!["QUERY PLAN"][0].Plan;
      const tasks = citusTasks(plan);
      const text = JSON.stringify(plan);
      if (tasks.some((t) => t !== 1) || text.includes("Distributed Subplan")) problems.push(`${JSON.stringify(tasks)} tasks: ${sql.replace(/\s+/g, " ").slice(0, 160)}`);
      if (tasks.length > 0) routed++;
    }
    expect(problems).toEqual([]);
    // The questions' statements were Citus's to route: not only statements on the coordinator's own tables.
    expect(routed).toBeGreaterThan(10);
  }, 120_000);
});

/**
 * The questions' statements go to Citus bound (src/store/bound-statements.ts):
 * with the application's id in their text, prepared once per connection, so
 * that Postgres keeps their generic plan, which Citus routes. Three applications
 * with the same world asked through a service on one connection that may
 * bind four statements, against one that binds none: every answer the same,
 * and the connection holds exactly four bound statements, each planned with
 * its values five times at most, then run from its generic plan
 * (pg_prepared_statements counts the runs of each plan).
 */
describe.skipIf(!engines.includes("citus"))("the questions' statements, bound on citus", () => {
  let database: TestDatabase;
  let bound: PgDb;
  let unbound: PgDb;
  let onBound: TestService;
  let onUnbound: TestService;

  beforeAll(async () => {
    database = await createTestDatabase("citus", { migrated: true });
    bound = new PgDb(database.url!, { max: 1, boundStatements: 4, onError: () => undefined });
    unbound = new PgDb(database.url!, { max: 2, boundStatements: 0, onError: () => undefined });
    [onBound, onUnbound] = await Promise.all([startTestService(bound), startTestService(unbound)]);
  }, 60_000);
  afterAll(async () => {
    await Promise.all([onBound?.close(), onUnbound?.close()]);
    await database?.dispose();
  });

  it("answer as unbound; a connection binds at most its capacity, each run from its kept plan", async () => {
    const apps = ["bound-a", "bound-b", "bound-c"];
    const keys: string[] = [];
    for (const appId of apps) {
      const key = await createApp(onUnbound, appId, CATALOG);
      expectStatus(await onUnbound.call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes: GRANTS } }), 200);
      keys.push(key);
    }
    const asks = [
      ["/api/v1/authorization/check", { userId: "ann", resource: "document", resourceId: "d1", action: "read" }],
      ["/api/v1/authorization/check", { userId: "bob", resource: "document", resourceId: "d2", action: "read" }],
      ["/api/v1/authorization/subjects", { resource: "document", resourceId: "d1", action: "read", pageSize: 2 }],
      ["/api/v1/authorization/subjects", { resource: "document", resourceId: "d2", action: "read" }],
      ["/api/v1/authorization/lookup", { userId: "ann", resource: "document", action: "read", pageSize: 1 }],
      ["/api/v1/authorization/lookup", { userId: "bob", resource: "document", action: "read" }],
    ] as const;
    for (const key of keys) {
      for (const [path, body] of asks) {
        const expected = await onUnbound.call("POST", path, { key, body });
        expectStatus(expected, 200);
        // Seven runs: Postgres plans a prepared statement with its values five times, then keeps the generic plan.
        for (let run = 0; run < 7; run++) {
          const res = await onBound.call("POST", path, { key, body });
          expectStatus(res, 200);
          expect(res.body, `${path} ${JSON.stringify(body)}, run ${run}`).toEqual(expected.body);
        }
      }
    }
    const { rows } = await bound.query<{ name: string; statement: string; generic_plans: string; custom_plans: string }>(
      "SELECT name, statement, generic_plans::text, custom_plans::text FROM pg_prepared_statements WHERE name LIKE 'pcb\\_%' ORDER BY name",
    );
    expect(rows).toHaveLength(4);
    for (const row of rows) {
      // The first application's, with its id in the text and no parameter for it.
      expect(row.statement).toMatch(/app_id = +'bound-a'/);
      expect(row.statement).not.toContain("bound-b");
      // Planned with its values five times at most: from the sixth run on, the kept plan.
      expect(Number(row.custom_plans), `${row.name}: ${row.statement.slice(0, 200)}`).toBeLessThanOrEqual(5);
    }
    // The statements run most (the graph check's, who can's: 21 runs and more) ran from their kept plans after the fifth.
    expect(rows.filter((r) => Number(r.generic_plans) >= 9).length).toBeGreaterThanOrEqual(2);
  }, 120_000);
});
