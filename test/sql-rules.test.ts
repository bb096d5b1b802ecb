/**
 * The SQL rules of docs/scale-out.md, which keep Portcullis runnable on
 * Citus: the checker on statements that keep and break them, then every
 * statement the service sends while it is driven through the whole API on
 * each engine, each checked against the rules. The early warning, on any
 * machine: test/citus.test.ts runs the statements on a real Citus cluster
 * (where Citus is installed, and always in CI), this file on the text alone.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ExpirySweep } from "../src/domain/expiry-sweep.js";
import { changesStore } from "../src/store/changes-store.js";
import { DISTRIBUTED_TABLES, REFERENCE_TABLES } from "../src/store/distribute.js";
import type { Queryable } from "../src/store/db.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { applyScenario, checkOf, loadScenarios } from "./support/scenario.js";
import { startTestService, type RestAnswer, type TestService } from "./support/service.js";
import { createHash } from "node:crypto";
import { AccessModel } from "../src/domain/access-model.js";
import { checkFunction, functionBody, generationOf, type CheckFunction } from "../src/store/check-functions.js";
import { CHECK_FUNCTIONS, CheckStatements, type CheckInput } from "../src/store/check-store.js";
import { graphStore, LOOKUP_SQL, THROUGH_PATHS_SQL, WHO_CAN_FUNCTION, WHO_CAN_LEAN_FUNCTION, type WhoCanInput } from "../src/store/graph-store.js";
import { DECISION_FUNCTION, DECISION_SQL, DecisionStatements } from "../src/store/decision-store.js";
import { loadMigrations, migrate } from "../src/store/migrate.js";
import { modelStore } from "../src/store/model-store.js";
import { sqlRuleViolations } from "./support/sql-rules.js";
import { recordingDb } from "./support/recording-db.js";
import { admin, createApp } from "./helpers/authz.js";
import { ALL_USERS_CATALOG, everyone, GRAPH_CATALOG, set, user } from "./support/graph.js";

/** A statement, with the inline statement of each check function it calls after it: a call names no table itself. */
const withFunctions = (sql: string) =>
  [sql, ...CHECK_FUNCTIONS.filter((f) => sql.includes(`${f.name}(`)).map((f) => f.statement)].join("\n");

describe("the SQL rule checker", () => {
  it.each([
    { sql: "SELECT 1 FROM relationships WHERE app_id = $1 AND user_id = $2" },
    { sql: "SELECT r.role_id FROM roles r WHERE r.app_id = $1 AND EXISTS (SELECT 1 FROM role_assignments a WHERE a.app_id = r.app_id AND a.role_id = r.role_id)" },
    { sql: "SELECT p.name FROM policy_permissions pp JOIN policies p USING (app_id, policy_id) WHERE pp.app_id = $1" },
    { sql: "INSERT INTO relationships (app_id, resource) SELECT $1, t.r FROM unnest($2::text[]) AS t(r) ON CONFLICT DO NOTHING RETURNING 1" },
    { sql: "UPDATE model_versions SET version = (SELECT nextval('model_version_seq')) WHERE app_id = $1" },
    { sql: "SELECT EXISTS (SELECT 1 FROM api_keys k WHERE k.secret_hash = $2 AND k.app_id = $1), (SELECT v.version FROM model_versions v WHERE v.app_id = $1)" },
    { sql: "SELECT 1 FROM applications WHERE app_id > $1 ORDER BY app_id LIMIT $2" },
    { sql: "SELECT key_id FROM api_keys WHERE secret_hash = ANY($1::text[])" },
    { sql: "SELECT pg_advisory_xact_lock_shared(2, hashtext($1))" },
    { sql: "WITH gone AS (DELETE FROM relationships WHERE app_id = $1 AND resource = $2 RETURNING 1) SELECT (SELECT count(*) FROM gone)::int AS n" },
    { sql: "SELECT 1 FROM roles WHERE app_id = $1 AND role_id = $2 FOR UPDATE" },
    { sql: "SELECT p.name, (SELECT count(*) FROM role_policies rp WHERE rp.app_id = $1 AND rp.policy_id = p.policy_id) FROM policies p WHERE p.app_id = $1" },
    { sql: "INSERT INTO user_properties (app_id, user_id, properties, updated_at) VALUES ($1, $2, $3::jsonb, now()) ON CONFLICT (app_id, user_id) DO UPDATE SET properties = excluded.properties, updated_at = excluded.updated_at RETURNING properties" },
    { sql: "INSERT INTO change_horizons (app_id, swept_xid) VALUES ($1, $2) ON CONFLICT (app_id) DO UPDATE SET swept_xid = greatest(change_horizons.swept_xid, excluded.swept_xid) RETURNING 1" },
    { sql: "SELECT ARRAY(SELECT pp.action FROM role_policies rp JOIN policy_permissions pp ON pp.app_id = rp.app_id AND pp.policy_id = rp.policy_id WHERE rp.app_id = $1 AND rp.role_id = o.role_id) FROM roles o WHERE o.app_id = $1" },
  ])("keeps the rules: $sql", ({ sql }) => {
    expect(sqlRuleViolations(sql)).toEqual([]);
  });

  it.each([
    { sql: "SELECT 1 FROM relationships WHERE user_id = $1", problem: "relationships is not limited to one application" },
    { sql: "SELECT 1 FROM relationships g WHERE g.app_id = q.app_id", problem: "relationships is not limited to one application" },
    { sql: "SELECT 1 FROM relationships WHERE app_id = ANY($1::text[])", problem: "names several applications" },
    { sql: "SELECT 1 FROM roles r JOIN role_assignments a ON a.role_id = r.role_id WHERE r.app_id = $1", problem: "role_assignments is not limited" },
    { sql: "UPDATE model_versions SET version = nextval('model_version_seq') WHERE app_id = $1", problem: "nextval() outside a scalar subquery" },
    { sql: "INSERT INTO audit_events (app_id, event_id) VALUES ($1, gen_random_uuid()::text)", problem: "a volatile function in a write" },
    { sql: "SELECT 1 FROM applications WHERE app_id = $1 FOR SHARE", problem: "a row lock on a reference table" },
    { sql: "SELECT 1 FROM api_keys k, model_versions v WHERE v.app_id = $1 AND k.secret_hash = $2", problem: "api_keys is not limited" },
    { sql: "DELETE FROM role_permissions WHERE role_id = $1", problem: "role_permissions is not limited" },
    { sql: "INSERT INTO subject_relationships (app_id, resource) VALUES ($1, $2) RETURNING json_build_object('resource', resource) AS subject", problem: "a function in the RETURNING" },
    // Citus: "functions used in the DO UPDATE SET clause of INSERTs on distributed tables must be marked IMMUTABLE".
    { sql: "INSERT INTO user_properties (app_id, user_id, properties) VALUES ($1, $2, $3) ON CONFLICT (app_id, user_id) DO UPDATE SET properties = excluded.properties, updated_at = now() RETURNING properties", problem: "a function in the DO UPDATE SET" },
    // Scalar subqueries are pinned by their own app_id = $n: Citus does not prune through a correlation (it ran these on every shard).
    { sql: "SELECT p.name, (SELECT count(*) FROM role_policies rp WHERE rp.app_id = p.app_id AND rp.policy_id = p.policy_id) FROM policies p WHERE p.app_id = $1", problem: "role_policies is not limited" },
    { sql: "SELECT v.version, (SELECT json_agg(c.resource) FROM catalog_resources c WHERE c.app_id = v.app_id) FROM model_versions v WHERE v.app_id = $1", problem: "catalog_resources is not limited" },
    { sql: "SELECT r.name, ARRAY(SELECT x.policy_id FROM role_policies x WHERE x.app_id = r.app_id) FROM roles r WHERE r.app_id = $1", problem: "role_policies is not limited" },
  ])("flags $problem: $sql", ({ sql, problem }) => {
    expect(sqlRuleViolations(sql).join("; ")).toContain(problem);
  });

  it("reads the statements of the check's functions, and flags one of them when it breaks a rule", () => {
    expect(CHECK_FUNCTIONS.map((f) => f.kind)).toEqual(["check", "graph check", "graph check with no inherits within an instance", "graph check with requires and unless entries through links", "decision rows", "who can, plain only", "who can"]);
    for (const f of CHECK_FUNCTIONS) {
      expect(sqlRuleViolations(f.statement)).toEqual([]);
      expect(withFunctions(f.call.plain)).toContain(f.statement);
    }
    const check = CHECK_FUNCTIONS[0]!.statement;
    expect(sqlRuleViolations(check.replace("a.app_id = $1", "a.app_id = q.app_id")).join("; ")).toContain("role_assignments is not limited");
  });
});

/** Which of who can's and lookup's statements `sql` is, lean or full, called as a function or sent inline (Citus). */
const leanOrFull = (sql: string): "lean" | "full" | undefined =>
  sql.includes(`${WHO_CAN_LEAN_FUNCTION.name}(`) || sql === WHO_CAN_LEAN_FUNCTION.statement || sql === LOOKUP_SQL.lean
    ? "lean"
    : sql.includes(`${WHO_CAN_FUNCTION.name}(`) || sql === WHO_CAN_FUNCTION.statement || sql === LOOKUP_SQL.full
      ? "full"
      : undefined;

/** `db` whose lean who can answers say the application is not plain only, as though it held a conditional row: the full statement then answers. */
const leanRefused = (db: Queryable): Queryable => ({
  query: async <R,>(sql: string, params?: readonly unknown[]) => {
    const answer = await db.query<R>(sql, params);
    const lean = sql === WHO_CAN_LEAN_FUNCTION.statement || sql.includes(`${WHO_CAN_LEAN_FUNCTION.name}(`);
    return lean ? { ...answer, rows: answer.rows.map((r) => ({ ...r, plain_only: false })) } : answer;
  },
});

/** `db` as a database lacking function `name` (a standby still replaying it): a call of it fails with undefined_function. */
const withoutFunction = (db: Queryable, name: string): Queryable => ({
  query: (sql, params) => (sql.includes(`${name}(`) ? Promise.reject(Object.assign(new Error("no such function"), { code: "42883" })) : db.query(sql, params)),
});

describe.each(engines)("every statement the service sends, on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  const statements = new Set<string>();
  let on = false;
  /** While set, every statement the service sends, in order. */
  let tapped: string[] | undefined;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    // From the first request on: migrations run before any application
    // exists, and before the tables are distributed (see distribute.ts).
    service = await startTestService(
      recordingDb(database.db, (sql) => {
        if (on) statements.add(sql);
        tapped?.push(sql);
      }),
    );
    on = true;
  }, 60_000);
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  it("drives the whole API", async () => {
    const ok = (what: string, answer: RestAnswer) => {
      expect(answer.status, `${what}: ${JSON.stringify(answer.body)}`).toBeLessThan(300);
      return answer.body;
    };
    const call = service.call;
    for (const [i, { scenario }] of loadScenarios().entries()) {
      const appId = `rules-${i}`;
      const key = await applyScenario(call, appId, scenario);
      const base = `/api/v1/applications/${appId}`;
      ok("check", await call("POST", "/api/v1/authorization/check", { key, body: checkOf(scenario.checks[0]!) }));
      ok("batch", await call("POST", "/api/v1/authorization/check/batch", { key, body: { checks: scenario.checks.map(checkOf) } }));
      for (const c of scenario.checks.slice(0, 3).map(checkOf)) {
        const { action, resourceId, ...which } = c;
        ok("explain", await call("POST", "/api/v1/authorization/check/explain", { key, body: c }));
        ok("permissions", await call("POST", "/api/v1/authorization/permissions", { key, body: { ...which, resourceId } }));
        ok("permissions batch", await call("POST", "/api/v1/authorization/permissions/batch", { key, body: { requests: [{ ...which, resourceId }] } }));
        ok("lookup", await call("POST", "/api/v1/authorization/lookup", { key, body: { ...which, action, pageSize: 1 } }));
      }
      ok("scoped key", await call("POST", `${base}/api-keys`, { body: { name: "scoped", scopes: ["check"] } }));
      const grant = scenario.grants[0];
      if (grant !== undefined) {
        const query = new URLSearchParams(grant as unknown as Record<string, string>).toString();
        ok("list by instance", await call("GET", `/api/v1/authorization/relationships?resource=${grant.resource}&resourceId=${grant.resourceId}`, { key }));
        ok("list by user", await call("GET", `/api/v1/authorization/relationships?resource=${grant.resource}&userId=${grant.userId}`, { key }));
        ok("delete one", await call("DELETE", `/api/v1/authorization/relationships?${query}`, { key }));
        ok("write one", await call("POST", "/api/v1/authorization/relationships", { key, body: grant }));
        ok("bulk", await call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes: scenario.grants.slice(1), deletes: [grant] } }));
        const tomorrow = new Date(Date.now() + 86_400_000).toISOString();
        ok("write one expiring", await call("POST", "/api/v1/authorization/relationships", { key, body: { ...grant, expiresAt: tomorrow } }));
        ok("bulk expiring", await call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes: [{ ...grant, expiresAt: tomorrow }] } }));
        ok("list with expired", await call("GET", `/api/v1/authorization/relationships?resource=${grant.resource}&resourceId=${grant.resourceId}&includeExpired=true`, { key }));
        ok("delete by user", await call("POST", "/api/v1/authorization/relationships/delete", { key, body: { userId: grant.userId, relation: grant.relation } }));
        ok("delete by instance", await call("POST", "/api/v1/authorization/relationships/delete", { key, body: { resource: grant.resource, resourceId: grant.resourceId } }));
        ok("delete by user and resource", await call("POST", "/api/v1/authorization/relationships/delete", { key, body: { userId: grant.userId, resource: grant.resource } }));
        await new ExpirySweep(service.db, { intervalMs: 60_000, batchSize: 10, onError: (e) => { throw e; } }).sweepOnce();
      }
      // The model as a document: exported, planned (every role gone: the impact reaches every assigned user), applied with a policy
      // and a role more and the policies changed, then applied back as it was (the role and the policy removed).
      const { version, ...document } = ok("model", await call("GET", `${base}/model`)) as { version: string; policies: { name: string }[]; roles: unknown[] };
      ok("model plan", await call("POST", `${base}/model/plan`, { body: { ...document, roles: [] } }));
      const more = {
        ...document,
        policies: [...document.policies.map((p) => ({ ...p, description: "from the model" })), { name: "model-policy", description: "", permissions: [] }],
        roles: [...document.roles, { name: "model-role", description: "", policies: ["model-policy"] }],
      };
      ok("model apply", await call("PUT", `${base}/model`, { body: { ...more, expectedVersion: version } }));
      ok("model apply back", await call("PUT", `${base}/model`, { body: document }));
      const policies = ok("policies", await call("GET", `${base}/policies`)).policies as { policyId: string }[];
      const roles = ok("roles", await call("GET", `${base}/roles`)).roles as { roleId: string }[];
      for (const p of policies) {
        ok("policy", await call("GET", `${base}/policies/${p.policyId}`));
        ok("policy roles", await call("GET", `${base}/policies/${p.policyId}/roles`));
        ok("rename policy", await call("PATCH", `${base}/policies/${p.policyId}`, { body: { name: `renamed-${p.policyId}` } }));
        ok("preview", await call("POST", `${base}/policies/${p.policyId}/preview`, { body: { permissions: [] } }));
      }
      for (const r of roles) {
        ok("role", await call("GET", `${base}/roles/${r.roleId}`));
        ok("assignments", await call("GET", `${base}/roles/${r.roleId}/assignments`));
        ok("rename role", await call("PATCH", `${base}/roles/${r.roleId}`, { body: { name: `renamed-${r.roleId}`, policyIds: [] } }));
        ok("assign", await call("POST", `${base}/roles/${r.roleId}/assignments`, { body: { userId: "rules-user" } }));
        ok("assign another", await call("POST", `${base}/roles/${r.roleId}/assignments`, { body: { userId: "rules-user-2" } }));
        ok("user roles", await call("GET", `${base}/users/rules-user/roles`));
        ok("offboard", await call("DELETE", `${base}/users/rules-user-2/roles`));
        ok("unassign", await call("DELETE", `${base}/roles/${r.roleId}/assignments/rules-user`));
        ok("delete role", await call("DELETE", `${base}/roles/${r.roleId}`));
      }
      for (const p of policies) ok("delete policy", await call("DELETE", `${base}/policies/${p.policyId}`));
      ok("catalog", await call("GET", `${base}/resources`));
      ok("catalog again", await call("PUT", `${base}/resources`, { body: scenario.catalog }));
      ok("audit", await call("GET", `${base}/audit-log?type=policy.created`));
      const keys = ok("keys", await call("GET", `${base}/api-keys`)).apiKeys as { keyId: string }[];
      ok("revoke", await call("DELETE", `${base}/api-keys/${keys[0]!.keyId}`));
      ok("application", await call("GET", base));
    }
    // Groups and hierarchy: every statement of the walks, the grants to subjects and their lists and deletes.
    const graphKey = await createApp(service, "rules-graph", GRAPH_CATALOG);
    const asKey = (method: string, path: string, body?: unknown) => call(method, path, { key: graphKey, ...(body === undefined ? {} : { body }) });
    const tomorrow = new Date(Date.now() + 86_400_000).toISOString();
    ok("graph bulk", await asKey("POST", "/api/v1/authorization/relationships/bulk", {
      writes: [
        user("alice", "team", "eng", "member"),
        set("team:eng#member", "folder", "f1", "viewer"),
        { ...set("folder:f1", "document", "d1", "parent"), expiresAt: tomorrow },
        set("folder:f0", "folder", "f1", "parent"),
      ],
      deletes: [set("folder:f9", "document", "d9", "parent")],
    }));
    ok("graph write", await asKey("POST", "/api/v1/authorization/relationships", set("team:eng#member", "document", "d2", "editor")));
    ok("graph write expiring", await asKey("POST", "/api/v1/authorization/relationships", { ...set("team:eng#member", "document", "d2", "editor"), expiresAt: tomorrow }));
    const q = { userId: "alice", resource: "document", resourceId: "d1", action: "read" };
    // A conditional membership: a check it could allow asks the conditional paths' statement.
    ok("graph conditional write", await asKey("POST", "/api/v1/authorization/relationships", { ...user("bob", "team", "eng", "member"), condition: "context.ok == true" }));
    ok("graph conditional check", await asKey("POST", "/api/v1/authorization/check", { ...q, userId: "bob", context: { ok: true } }));
    ok("graph conditional permissions", await asKey("POST", "/api/v1/authorization/permissions", { userId: "bob", resource: "document", resourceId: "d1", context: { ok: true } }));
    ok("graph conditional explain", await asKey("POST", "/api/v1/authorization/check/explain", { ...q, userId: "bob" }));
    // Lookup and who can where a conditional row could lie on a path: their pages through conditional paths too.
    ok("graph conditional lookup", await asKey("POST", "/api/v1/authorization/lookup", { userId: "bob", resource: "document", action: "read", pageSize: 1 }));
    ok("graph conditional who can", await asKey("POST", "/api/v1/authorization/subjects", { resource: "document", resourceId: "d1", action: "read", pageSize: 1 }));
    ok("graph check", await asKey("POST", "/api/v1/authorization/check", q));
    ok("graph batch", await asKey("POST", "/api/v1/authorization/check/batch", { checks: [q, { ...q, resourceId: "d2" }] }));
    ok("graph permissions", await asKey("POST", "/api/v1/authorization/permissions", { userId: "alice", resource: "document", resourceId: "d1" }));
    ok("graph explain", await asKey("POST", "/api/v1/authorization/check/explain", q));
    ok("graph lookup", await asKey("POST", "/api/v1/authorization/lookup", { userId: "alice", resource: "document", action: "read", pageSize: 1 }));
    ok("who can", await asKey("POST", "/api/v1/authorization/subjects", { resource: "document", resourceId: "d1", action: "read", pageSize: 1 }));
    ok("graph list by instance", await asKey("GET", "/api/v1/authorization/relationships?resource=folder&resourceId=f1&pageSize=1"));
    ok("graph list by type", await asKey("GET", "/api/v1/authorization/relationships?resource=document&pageSize=1"));
    ok("graph list by subject", await asKey("GET", "/api/v1/authorization/relationships?resource=document&subjectResource=folder&subjectResourceId=f1"));
    ok("graph catalog 409", { status: (await admin(service, "rules-graph").putCatalog([])).status === 409 ? 200 : 500, body: {} } as RestAnswer);
    ok("graph delete one", await asKey("DELETE", "/api/v1/authorization/relationships?resource=document&resourceId=d2&relation=editor&subjectResource=team&subjectResourceId=eng&subjectRelation=member"));
    ok("graph delete by instance", await asKey("POST", "/api/v1/authorization/relationships/delete", { resource: "folder", resourceId: "f1" }));
    ok("graph delete by subject", await asKey("POST", "/api/v1/authorization/relationships/delete", { subject: { resource: "folder", resourceId: "f1" } }));
    await new ExpirySweep(service.db, { intervalMs: 60_000, batchSize: 10, onError: (e) => { throw e; } }).sweepOnce();
    // requires and unless (docs/exclusion.md): the decision's statement, for the check, permissions, lookup and who can.
    const opsCatalog = GRAPH_CATALOG.map((entry) =>
      entry.resource !== "document"
        ? entry
        : {
            ...entry,
            relations: [
              ...entry.relations.map((r) => (r.name === "viewer" ? { ...r, unless: [{ relation: "blocked" }], requires: [{ through: "parent", relation: "viewer" }] } : r)),
              { name: "blocked", actions: [], subjects: ["user", "team#member"] },
            ],
          },
    );
    const opsKey = await createApp(service, "rules-ops", opsCatalog);
    const asOps = (path: string, body: unknown) => call("POST", path, { key: opsKey, body });
    ok("ops bulk", await asOps("/api/v1/authorization/relationships/bulk", {
      writes: [user("alice", "team", "eng", "member"), set("team:eng#member", "folder", "f1", "viewer"), set("folder:f1", "document", "d1", "parent"), user("bob", "document", "d1", "blocked")],
    }));
    ok("ops check", await asOps("/api/v1/authorization/check", q));
    ok("ops permissions", await asOps("/api/v1/authorization/permissions", { userId: "bob", resource: "document", resourceId: "d1" }));
    ok("ops lookup", await asOps("/api/v1/authorization/lookup", { userId: "alice", resource: "document", action: "read", pageSize: 1 }));
    ok("ops who can", await asOps("/api/v1/authorization/subjects", { resource: "document", resourceId: "d1", action: "read", pageSize: 1 }));
    // Stored user properties: written, replaced, read, cleared (the row deleted), read when there are none.
    const properties = "/api/v1/applications/rules-graph/users/alice/properties";
    ok("set properties", await call("PUT", properties, { body: { plan: "pro", tags: ["beta"] } }));
    ok("replace properties", await call("PUT", properties, { body: { plan: "free" } }));
    ok("get properties", await call("GET", properties));
    ok("clear properties", await call("PUT", properties, { body: {} }));
    ok("get no properties", await call("GET", properties));
    // The change feed (docs/change-feed.md): its pages (read, and a window continued), its probe and its sweep;
    // every write above recorded its changes in its own statement.
    await service.db.transaction(async (tx) => {
      await changesStore.record(tx, "rules-graph", [{ kind: "grant_written", body: {} }, { kind: "grant_deleted", body: {} }]);
      await changesStore.seal(tx, "rules-graph");
    });
    const page = await asKey("GET", "/api/v1/authorization/changes?pageSize=1");
    ok("changes", page);
    ok("changes after a token", await asKey("GET", `/api/v1/authorization/changes?pageSize=3&after=${page.body.nextToken}`));
    const first = await changesStore.read(service.db, "rules-graph", { seq: undefined }, 1);
    await changesStore.newer(service.db, "rules-graph", [first.next.seq!]);
    // A token from before the commit order, placed in it.
    await changesStore.read(service.db, "rules-graph", { seq: undefined, legacy: { seen: "3:3:", window: { upTo: "3:9:", xid: "5", stmt: "1", ord: 1 } } }, 1);
    await changesStore.sweep(service.db, "rules-graph", 0, 10);
    ok("applications", await call("GET", "/api/v1/applications"));
    expect(statements.size).toBeGreaterThan(40);
    // The questions' own statements were among them (explain's, lookup's).
    const seen = [...statements];
    expect(seen.some((sql) => sql.includes("CROSS JOIN LATERAL") && sql.includes("relationships g"))).toBe(true);
    expect(seen.some((sql) => sql.includes("JOIN policy_permissions pp") && sql.includes("role_assignments a"))).toBe(true);
    // And the pages through conditional paths (graph-store.ts), lookup's and who can's.
    expect(statements.has(THROUGH_PATHS_SQL.lookup)).toBe(true);
    expect(statements.has(THROUGH_PATHS_SQL.whoCan)).toBe(true);
    // And the decision's, where the catalog has requires or unless (its function's call, or inline on Citus).
    expect([...statements].some((sql) => sql === DECISION_SQL || sql.includes(`${DECISION_FUNCTION.name}(`))).toBe(true);
  }, 120_000);

  it("every statement keeps the rules", () => {
    const broken = [...statements].map((sql) => ({ sql, problems: sqlRuleViolations(withFunctions(sql)) })).filter((s) => s.problems.length > 0);
    expect(broken).toEqual([]);
  });

  /** An application of GRAPH_CATALOG with `writes`: its key's hash, as a question names it. */
  const graphApp = async (appId: string, writes: unknown[], catalog: typeof GRAPH_CATALOG = GRAPH_CATALOG): Promise<string> => {
    const key = await createApp(service, appId, catalog);
    const answer = await service.call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes } });
    expect(answer.status).toBeLessThan(300);
    return createHash("sha256").update(key).digest("hex");
  };

  it("the check's functions answer as their inline statements do", async () => {
    const keyHash = await graphApp("rules-same", [
      user("alice", "team", "eng", "member"),
      set("team:eng#member", "folder", "f1", "viewer"),
      set("folder:f1", "document", "d1", "parent"),
      user("bob", "document", "d2", "editor"),
      { ...user("carol", "document", "d1", "editor"), condition: "context.ok == true" },
    ]);
    const asks: CheckInput[] = ["alice", "bob", "carol", "dave"].flatMap((userId) =>
      ["d1", "d2"].flatMap((resourceId) => [null, "read", "update"].map((action) => ({ appId: "rules-same", keyHash, userId, resource: "document", resourceId, action }))),
    );
    const groups = AccessModel.from((await modelStore.load(service.db, "rules-same"))!).groups();
    const withoutClock = <R extends { nowMs: number | undefined }>(rows: R[]) => rows.map(({ nowMs, ...rest }) => (expect(nowMs).toBeGreaterThan(0), rest));
    for (const graph of [undefined, () => groups]) {
      const planned = new CheckStatements();
      const viaFunction = withoutClock((await planned.check(service.db, asks, { graph })).rows);
      // Citus refuses the function: there both answers are the inline statement's.
      expect(planned.plannedOnce).toBe(engine !== "citus");
      const inline = withoutClock((await new CheckStatements(false).check(service.db, asks, { graph })).rows);
      expect(viaFunction).toEqual(inline);
      expect(viaFunction.filter((r) => r.keyValid && r.relations.length > 0).length).toBeGreaterThan(graph === undefined ? 1 : 3);
      expect(viaFunction.some((r) => r.conditional.length > 0)).toBe(true);
    }
  });

  it("the decision's function answers as its inline statement does", async () => {
    const asks = ["alice", "bob", "carol"].flatMap((userId) => [["viewer"], ["viewer", "editor", "owner"]].map((roots) => ({ appId: "rules-ops", userId, resource: "document", resourceId: "d1", roots })));
    const viaFunction = await new DecisionStatements().rows(service.db, asks);
    const inline = await service.db.query<Record<string, unknown>>(DECISION_SQL, [
      "rules-ops",
      JSON.stringify(asks.map((a) => ({ u: a.userId, r: a.resource, i: a.resourceId, o: a.roots }))),
      10_000,
      "[]",
      "[]",
    ]);
    const row = inline.rows[0]!;
    const sorted = (rows: unknown[]) => rows.map((r) => JSON.stringify(r)).sort();
    for (const [i, answer] of viaFunction.rows.entries()) {
      expect(answer.truncated).toBe(false);
      expect(answer.version).toBe(row.version);
      expect(sorted(answer.sets)).toEqual(sorted(row.sets as unknown[]));
      expect(sorted(answer.links)).toEqual(sorted(row.links as unknown[]));
      expect(sorted(answer.held)).toEqual(sorted((row.held as unknown[][])[i]!));
    }
    expect(viaFunction.rows.some((r) => r.sets.length > 0 && r.links.length > 0 && r.held.length > 0)).toBe(true);
  });

  it("who can's function answers as its inline statement does, page by page", async () => {
    const keyHash = await graphApp("rules-who", [
      user("alice", "team", "eng", "member"),
      user("erin", "team", "eng", "member"),
      set("team:eng#member", "folder", "f1", "viewer"),
      set("folder:f1", "document", "d1", "parent"),
      user("bob", "document", "d1", "editor"),
      { ...user("carol", "document", "d1", "editor"), condition: "context.ok == true" },
    ]);
    const ask = (after: string): WhoCanInput[] =>
      ["read", "update"].map((action) => ({ appId: "rules-who", keyHash, resource: "document", resourceId: "d1", action, tenantId: undefined, after, limit: 2 }));
    for (const after of ["", "alice", "bob"]) {
      const viaFunction = await graphStore.whoCan(service.db, ask(after));
      const inline = await graphStore.whoCan(withoutFunction(service.db, WHO_CAN_FUNCTION.name), ask(after));
      expect(viaFunction).toEqual(inline);
      expect(viaFunction.rows.every((r) => r.keyValid)).toBe(true);
    }
    expect((await graphStore.whoCan(service.db, ask(""))).rows[0]!.userIds).toEqual(["alice", "bob"]);
  });

  it("who can's lean statement answers as the full one where the application is plain only, and stands aside where it is not", async () => {
    const writes = [
      user("alice", "team", "eng", "member"),
      user("erin", "team", "eng", "member"),
      set("team:eng#member", "folder", "f1", "viewer"),
      set("folder:f1", "document", "d1", "parent"),
      user("bob", "document", "d1", "editor"),
      user("dave", "document", "d2", "viewer"),
    ];
    const sent: string[] = [];
    const counted: Queryable = { query: (sql, params) => (sent.push(sql), service.db.query(sql, params)) };
    const ask = (appId: string, keyHash: string, after: string): WhoCanInput[] =>
      ["read", "update"].flatMap((action) => ["d1", "d2"].map((resourceId) => ({ appId, keyHash, resource: "document", resourceId, action, tenantId: undefined, after, limit: 2 })));
    const plainKey = await graphApp("rules-lean", writes);
    for (const after of ["", "alice", "bob"]) {
      sent.length = 0;
      const lean = await graphStore.whoCan(counted, ask("rules-lean", plainKey, after));
      expect(sent.map(leanOrFull)).toEqual(["lean"]);
      expect(lean).toEqual(await graphStore.whoCan(leanRefused(service.db), ask("rules-lean", plainKey, after)));
    }
    expect((await graphStore.whoCan(service.db, ask("rules-lean", plainKey, ""))).rows[0]!.userIds).toEqual(["alice", "bob"]);
  });

  it("one row of each kind the lean statements leave out makes who can and lookup ask the full ones, which answer it; remembered", async () => {
    const conditional = { condition: "context.ok == true" };
    const writes = [
      user("alice", "team", "eng", "member"),
      set("team:eng#member", "folder", "f1", "viewer"),
      set("folder:f1", "document", "d1", "parent"),
      user("dave", "document", "d2", "viewer"),
    ];
    const create = (appId: string, path: string, body: unknown) => service.call("POST", `/api/v1/applications/${appId}${path}`, { body });
    const roleOf = async (appId: string, userId: string, policy: object, assignment: object) => {
      const policyId = (await create(appId, "/policies", { name: "Readers", permissions: ["document:read"], ...policy })).body.policyId as string;
      const roleId = (await create(appId, "/roles", { name: "Reader", policyIds: [policyId] })).body.roleId as string;
      expect((await create(appId, `/roles/${roleId}/assignments`, { userId, ...assignment })).status).toBeLessThan(300);
    };
    type Body = Record<string, unknown>;
    const listed = (body: Body, field: string) => (body.conditional as Body[]).map((c) => c[field]);
    // [what, its rows, who can's question and what shows it, lookup's (undefined: lookup's lean statement holds, allUsers being a plain holder there)]
    const kinds: [string, unknown[], (appId: string) => Promise<void>, Body, (b: Body) => unknown, unknown, Body | undefined, ((b: Body) => unknown) | undefined, unknown][] = [
      ["a grant with a condition", [{ ...user("carol", "document", "d2", "viewer"), ...conditional }], async () => {},
        { resourceId: "d2" }, (b) => listed(b, "userId"), ["carol"], { userId: "carol" }, (b) => listed(b, "resourceId"), ["d2"]],
      ["a subject set with a condition", [{ ...set("team:eng#member", "document", "d2", "viewer"), ...conditional }], async () => {},
        { resourceId: "d2" }, (b) => listed(b, "userId"), ["alice"], { userId: "alice" }, (b) => listed(b, "resourceId"), ["d2"]],
      ["an allUsers grant", [everyone("document", "d2", "viewer")], async () => {},
        { resourceId: "d2" }, (b) => b.allUsers, true, undefined, undefined, undefined],
      ["a role assignment with a condition", [], (appId) => roleOf(appId, "frank", {}, conditional),
        { resourceId: "d2" }, (b) => listed(b, "userId"), ["frank"], { userId: "frank" }, (b) => b.allInstancesConditions, [conditional.condition]],
      ["a policy with a condition", [], (appId) => roleOf(appId, "gina", conditional, {}),
        { resourceId: "d2" }, (b) => listed(b, "userId"), ["gina"], { userId: "gina" }, (b) => b.allInstancesConditions, [conditional.condition]],
    ];
    const asked = async (key: string, path: string, body: Body) => {
      tapped = [];
      const answer = await service.call("POST", `/api/v1/authorization/${path}`, { key, body });
      const sent = tapped.map(leanOrFull).filter((which) => which !== undefined);
      tapped = undefined;
      expect(answer.status, JSON.stringify(answer.body)).toBe(200);
      return { body: answer.body as Body, sent };
    };
    for (const [i, [what, rows, setup, whoQuestion, whoShows, whoExpected, lookupQuestion, lookupShows, lookupExpected]] of kinds.entries()) {
      // Named by engine too: the memory of which applications are not plain only is the process's.
      const appId = `rules-apart-${engine}-${i}`;
      const key = await createApp(service, appId, ALL_USERS_CATALOG);
      expect((await service.call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes: [...writes, ...rows] } })).status).toBeLessThan(300);
      await setup(appId);
      const who = { resource: "document", action: "read", ...whoQuestion };
      for (const sent of [["lean", "full"], ["full"]]) {
        const answer = await asked(key, "subjects", who);
        expect(answer.sent, what).toEqual(sent);
        expect(whoShows(answer.body), what).toEqual(whoExpected);
      }
      if (lookupQuestion === undefined) {
        const answer = await asked(key, "lookup", { resource: "document", action: "read", userId: "someone" });
        expect(answer.sent, what).toEqual(["lean"]);
        expect(answer.body.resourceIds, what).toEqual(["d2"]);
        continue;
      }
      for (const sent of [["lean", "full"], ["full"]]) {
        const answer = await asked(key, "lookup", { resource: "document", action: "read", ...lookupQuestion });
        expect(answer.sent, what).toEqual(sent);
        expect(lookupShows!(answer.body), what).toEqual(lookupExpected);
      }
    }
  });

  it("reads or writes every table the layout distributes", () => {
    const text = [...statements].map(withFunctions).join("\n");
    for (const table of [...DISTRIBUTED_TABLES, ...REFERENCE_TABLES]) expect(text, table).toMatch(new RegExp(`\\b${table}\\b`));
  });
});

/** The check's functions in the database: their names (the trigger function portcullis_change_xid is schema, not one of them). */
async function checkFunctionsIn(db: Queryable): Promise<string[]> {
  const { rows } = await db.query<{ name: string }>(
    `SELECT p.proname::text AS name FROM pg_proc p
     WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'portcullis\\_%' AND p.proname <> 'portcullis_change_xid'
     ORDER BY 1`,
  );
  return rows.map((r) => r.name);
}

async function generationsIn(db: Queryable): Promise<{ generation: string; names: string[] }[]> {
  const { rows } = await db.query<{ generation: string; names: string[] }>(
    "SELECT generation, array_agg(name::text ORDER BY name) AS names FROM check_functions GROUP BY generation ORDER BY min(created_at)",
  );
  return rows;
}

/** The schema a database ends with: its tables' columns, indexes, constraints and triggers. */
async function schemaOf(db: Queryable): Promise<unknown[]> {
  const { rows } = await db.query(
    `SELECT 'column' AS what, table_name || '.' || column_name AS name, concat_ws(' ', data_type, is_nullable, column_default) AS def
     FROM information_schema.columns WHERE table_schema = 'public'
     UNION ALL SELECT 'index', indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'
     UNION ALL SELECT 'constraint', conrelid::regclass::text || '.' || conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE connamespace = 'public'::regnamespace
     UNION ALL SELECT 'trigger', tgrelid::regclass::text || '.' || tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal
     ORDER BY 1, 2, 3`,
  );
  return rows;
}

/** A build whose statements differ from this one's by `extra` (here, trailing spaces): new text, new names. */
const rebuilt = (f: CheckFunction, extra: string): CheckFunction => checkFunction(f.name.replace(/_[0-9a-f]{12}$/, ""), f.kind, f.parameters, f.statement + extra);

describe.each(engines)("the check's functions on %s", (engine) => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase(engine);
    await migrate(database.db);
  }, 60_000);
  afterAll(async () => {
    await database?.dispose();
  });

  it("each function's body, read back from the database, is the inline statement the store sends", async () => {
    const sent: string[] = [];
    const recorded: Queryable = { query: (sql, params) => (sent.push(sql), database.db.query(sql, params)) };
    const ask: CheckInput[] = [{ appId: "none", keyHash: "none", userId: "u1", resource: "doc", resourceId: "d1", action: "read" }];
    const inline = new CheckStatements(false);
    await inline.check(recorded, ask);
    await inline.check(recorded, ask, { graph: () => ({ pairs: [], steps: [], within: true, walks: {}, entries: [], key: "" }) });
    await inline.check(recorded, ask, { graph: () => ({ pairs: [], steps: [], within: false, walks: {}, entries: [], key: "" }) });
    await inline.check(recorded, ask, {
      graph: () => ({ pairs: [], steps: [], within: true, walks: { "doc\0read": ["org>member"] }, entries: [{ r: "doc", n: "org>member", t: "org", l: "member" }], key: "" }),
    });
    // The decision's, as its store sends it inline where the database lacks its function (undefined_function).
    const lacking = withoutFunction(recorded, DECISION_FUNCTION.name);
    await new DecisionStatements().rows(lacking, [{ appId: "none", userId: "u1", resource: "doc", resourceId: "d1", roots: ["viewer"] }]);
    // Who can's, the same way: the lean statement, answered as though the
    // application were not plain only, and then the full one.
    await graphStore.whoCan(withoutFunction(withoutFunction(leanRefused(recorded), WHO_CAN_FUNCTION.name), WHO_CAN_LEAN_FUNCTION.name), [
      { appId: "none", keyHash: "none", resource: "doc", resourceId: "d1", action: "read", tenantId: undefined, after: "", limit: 11 },
    ]);
    expect(sent).toHaveLength(7);
    for (const [i, f] of CHECK_FUNCTIONS.entries()) {
      expect(f.statement).toBe(sent[i]);
      const { rows } = await database.db.query<{ body: string }>("SELECT prosrc AS body FROM pg_proc WHERE oid = to_regproc($1)::oid", [f.name]);
      expect(rows).toEqual([{ body: functionBody(sent[i]!) }]);
      expect(rows[0]!.body).toContain(sent[i]!);
      // Named by the hash of the definition made with the bare prefix as its name.
      const prefix = f.name.slice(0, -13);
      const hash = createHash("sha256").update(f.definition.replace(f.name, prefix)).digest("hex").slice(0, 12);
      expect(f.name).toBe(`${prefix}_${hash}`);
    }
  });

  it("a database this build migrated has this build's functions, one generation, and keeps them on a second run", async () => {
    const names = CHECK_FUNCTIONS.map((f) => f.name).sort();
    expect(await checkFunctionsIn(database.db)).toEqual(names);
    expect(await generationsIn(database.db)).toEqual([{ generation: generationOf(CHECK_FUNCTIONS), names }]);
    expect(await migrate(database.db)).toEqual([]);
    expect(await checkFunctionsIn(database.db)).toEqual(names);
    expect(await generationsIn(database.db)).toEqual([{ generation: generationOf(CHECK_FUNCTIONS), names }]);
  });

  it("upgrading a database an older build migrated: the fixed-name functions dropped, 020's kept a generation; newer builds keep two generations", async () => {
    const fresh = await createTestDatabase(engine);
    try {
      const all = await loadMigrations();
      expect(await migrate(fresh.db, all.slice(0, 21))).toEqual(all.slice(0, 21).map((m) => m.version));
      expect(await checkFunctionsIn(fresh.db)).toEqual([]);
      // What the older builds' migrations 006 to 020 left (their signatures are what matters here).
      for (const [name, types] of [
        ["portcullis_check_facts", "text, text[], jsonb"],
        ["portcullis_graph_facts", "text, text[], jsonb"],
        ["portcullis_graph_check", "text, text[], jsonb, jsonb, jsonb"],
        ["portcullis_check_facts_v2", "text, text[], jsonb"],
        ["portcullis_graph_check_v2", "text, text[], jsonb, jsonb, jsonb"],
      ]) {
        await fresh.db.query(`CREATE FUNCTION ${name}(${types}) RETURNS integer LANGUAGE sql STABLE AS 'SELECT 1'`);
      }
      expect(await migrate(fresh.db)).toEqual([22, 23]);
      const mine = CHECK_FUNCTIONS.map((f) => f.name);
      const v2 = ["portcullis_check_facts_v2", "portcullis_graph_check_v2"];
      expect(await checkFunctionsIn(fresh.db)).toEqual([...mine, ...v2].sort());
      expect(await generationsIn(fresh.db)).toEqual([
        { generation: "v2", names: v2 },
        { generation: generationOf(CHECK_FUNCTIONS), names: [...mine].sort() },
      ]);
      // The schema ends as a fresh database's.
      expect(await schemaOf(fresh.db)).toEqual(await schemaOf(database.db));

      // A newer build: its functions beside this build's; 020's are two generations old.
      const newer = CHECK_FUNCTIONS.map((f) => rebuilt(f, " "));
      expect(newer.map((f) => f.name).some((n) => mine.includes(n))).toBe(false);
      expect(await migrate(fresh.db, all, newer)).toEqual([]);
      expect(await checkFunctionsIn(fresh.db)).toEqual([...mine, ...newer.map((f) => f.name)].sort());
      expect((await generationsIn(fresh.db)).map((g) => g.generation)).toEqual([generationOf(CHECK_FUNCTIONS), generationOf(newer)]);
      // This build restarting meanwhile changes nothing.
      expect(await migrate(fresh.db)).toEqual([]);
      expect((await generationsIn(fresh.db)).map((g) => g.generation)).toEqual([generationOf(CHECK_FUNCTIONS), generationOf(newer)]);
      // A third build: this build's functions go.
      const third = CHECK_FUNCTIONS.map((f) => rebuilt(f, "  "));
      expect(await migrate(fresh.db, all, third)).toEqual([]);
      expect(await checkFunctionsIn(fresh.db)).toEqual([...newer, ...third].map((f) => f.name).sort());
      // A build changing the graph's statement alone shares the check's function with the one before it,
      // which stays while a kept generation names it.
      const fourth = [third[0]!, rebuilt(CHECK_FUNCTIONS[1]!, "   ")];
      expect(await migrate(fresh.db, all, fourth)).toEqual([]);
      expect(await checkFunctionsIn(fresh.db)).toEqual([...third, fourth[1]!].map((f) => f.name).sort());
      const fifth = [rebuilt(CHECK_FUNCTIONS[0]!, "   "), fourth[1]!];
      expect(await migrate(fresh.db, all, fifth)).toEqual([]);
      expect(await checkFunctionsIn(fresh.db)).toEqual([third[0]!, ...fifth].map((f) => f.name).sort());
      expect((await generationsIn(fresh.db)).map((g) => g.generation)).toEqual([generationOf(fourth), generationOf(fifth)]);
    } finally {
      await fresh.dispose();
    }
  });

  it.skipIf(engine !== "postgres")("replicas of two builds starting at once on a fresh database: each migrate() succeeds, and both builds' functions stay", async () => {
    const fresh = await createTestDatabase(engine);
    try {
      const newer = CHECK_FUNCTIONS.map((f) => rebuilt(f, " "));
      const pools = [fresh.db, await fresh.openAnother(), await fresh.openAnother(), await fresh.openAnother()];
      const applied = await Promise.all(pools.map((pool, i) => migrate(pool, undefined, i % 2 === 0 ? CHECK_FUNCTIONS : newer)));
      expect(applied.filter((a) => a.length > 0)).toHaveLength(1);
      expect(await checkFunctionsIn(fresh.db)).toEqual([...CHECK_FUNCTIONS, ...newer].map((f) => f.name).sort());
      expect((await generationsIn(fresh.db)).map((g) => g.generation).sort()).toEqual([generationOf(CHECK_FUNCTIONS), generationOf(newer)].sort());
    } finally {
      await fresh.dispose();
    }
  });
});
