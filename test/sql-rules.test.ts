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
import type { Db, Queryable } from "../src/store/db.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { applyScenario, checkOf, loadScenarios } from "./support/scenario.js";
import { startTestService, type RestAnswer, type TestService } from "./support/service.js";
import { CHECK_SQL_INLINE, GRAPH_CHECK_SQL_INLINE } from "../src/store/check-store.js";
import { THROUGH_PATHS_SQL } from "../src/store/graph-store.js";
import { loadMigrations } from "../src/store/migrate.js";
import { migrationFunctionQueries, sqlRuleViolations } from "./support/sql-rules.js";
import { admin, createApp } from "./helpers/authz.js";
import { GRAPH_CATALOG, set, user } from "./support/graph.js";

/** The queries inside the migrations' functions, by name (portcullis_check_facts...). */
const functionQueries = migrationFunctionQueries((await loadMigrations()).map((m) => m.sql));

/** A statement, with the query of each migration function it calls after it. */
const withFunctions = (sql: string) =>
  [sql, ...[...functionQueries].filter(([name]) => new RegExp(`\\b${name}\\s*\\(`).test(sql)).map(([, query]) => query)].join("\n");

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

  it("reads the queries of the migrations' functions, their parameters as $1, $2...", () => {
    const check = functionQueries.get("portcullis_check_facts_v2");
    expect(check).toMatch(/^SELECT\b/);
    expect(check).toContain("g.app_id = $1 AND g.user_id = q.user_id AND");
    expect(check).toContain("g.app_id = $1 AND g.user_id = '' AND");
    expect(check).toContain("jsonb_to_recordset($3)");
    expect(check).not.toMatch(/\bINTO\b|\bp_app\b/);
    expect(sqlRuleViolations(check!)).toEqual([]);
    // The function's query is the check's inline statement (used where Citus refuses the function).
    const same = (sql: string) => sql.replace(/::(text\[\]|jsonb)|\s+AS (keys|version|now_ms|rows)\b/g, "").replace(/\s+/g, " ").trim();
    expect(same(check!)).toBe(same(CHECK_SQL_INLINE));
    // The graph's function (020; 010 first) likewise.
    const graph = functionQueries.get("portcullis_graph_check_v2");
    expect(graph).toMatch(/^WITH RECURSIVE\b/);
    expect(sqlRuleViolations(graph!)).toEqual([]);
    expect(same(graph!)).toBe(same(GRAPH_CHECK_SQL_INLINE));
    // And flags one of them when it breaks a rule.
    expect(sqlRuleViolations(check!.replace("a.app_id = $1", "a.app_id = q.app_id")).join("; ")).toContain("role_assignments is not limited");
  });
});

/** The database, recording the text of every statement sent through it (transactions included). */
function recording(db: Db, statements: Set<string>, on: () => boolean): Db {
  const record = (sql: string) => on() && statements.add(sql);
  return new Proxy(db, {
    get(target, property, receiver) {
      if (property === "query") {
        return (sql: string, params?: readonly unknown[], options?: never) => (record(sql), target.query(sql, params, options));
      }
      if (property === "transaction") {
        return <T>(fn: (tx: Queryable) => Promise<T>, options?: never) =>
          target.transaction((tx) => fn({ query: (sql, params) => (record(sql), tx.query(sql, params)) }), options);
      }
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === "function" ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

describe.each(engines)("every statement the service sends, on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  const statements = new Set<string>();
  let on = false;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    // From the first request on: migrations run before any application
    // exists, and before the tables are distributed (see distribute.ts).
    service = await startTestService(recording(database.db, statements, () => on));
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
    // A conditional membership: a check it could allow asks the conditional paths' statement (issue 29).
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
    expect(statements.has(THROUGH_PATHS_SQL.subjects)).toBe(true);
  });

  it("every statement keeps the rules", () => {
    const broken = [...statements].map((sql) => ({ sql, problems: sqlRuleViolations(withFunctions(sql)) })).filter((s) => s.problems.length > 0);
    expect(broken).toEqual([]);
  });

  it("reads or writes every table the layout distributes", () => {
    const text = [...statements].map(withFunctions).join("\n");
    for (const table of [...DISTRIBUTED_TABLES, ...REFERENCE_TABLES]) expect(text, table).toMatch(new RegExp(`\\b${table}\\b`));
  });
});
