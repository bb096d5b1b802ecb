/**
 * Portcullis on a real Citus cluster (a coordinator and two workers on
 * loopback ports: test/support/citus.ts). The schema migrated and
 * distributed by the service's own code (distributeOnCitus, what
 * AUTHZ_DISTRIBUTE=citus runs), the layout read back from Citus's own
 * catalogs; then the service on the coordinator driven through every
 * statement family of the public API (REST, a few calls over gRPC), side by
 * side with the same service on a plain database: every answer must be the
 * same, ids and instants aside. A statement Citus refuses fails its call
 * with a 5xx, which the run does not accept, and an answer Citus computes
 * differently shows as a difference.
 *
 * It runs in the Citus leg (`npm run test:citus`, PORTCULLIS_TEST_ENGINES=citus),
 * on the cluster the leg's global setup starts, in databases of its own
 * (Citus's default 32 shards a table), and is skipped in runs without the
 * citus engine: a cluster of its own would cost the run a second start. In
 * CI (CI=true) the leg runs or fails: .ci/run installs Citus.
 */
import { toJson } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import pino from "pino";
import { ChangeSchema, ChangeService } from "../gen/authz/v1/changes_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startPortcullis } from "../src/app.js";
import type { Config } from "../src/config.js";
import { ExpirySweep } from "../src/domain/expiry-sweep.js";
import type { Db } from "../src/store/db.js";
import { DISTRIBUTED_TABLES, distributeOnCitus, REFERENCE_TABLES } from "../src/store/distribute.js";
import { migrate } from "../src/store/migrate.js";
import { PgDb } from "../src/store/pg-db.js";
import { relationshipsStore } from "../src/store/relationships-store.js";
import { pgQuery } from "../bench/pg-server.js";
import { CITUS_MISSING, citusInstalled, IN_CI, joinCitusCluster, type CitusNodes } from "./support/citus.js";
import { citusUrls, createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { grpcCaller, type GrpcCaller, type GrpcService } from "./support/grpc-client.js";
import { applyScenario, checkOf, loadScenarios } from "./support/scenario.js";
import { ADMIN_KEY, restCaller, testConfig, type TestService } from "./support/service.js";
import { cleanUpServiceProcesses, startService, stopService } from "./support/service-process.js";

const installed = citusInstalled();
const inLeg = engines.includes("citus");
if (!installed && !IN_CI) process.stderr.write(`\n  test/citus.test.ts is skipped: ${CITUS_MISSING}.\n\n`);

describe("Citus", () => {
  it("is installed where the test must run (CI)", () => {
    if (IN_CI) expect(installed, CITUS_MISSING).toBe(true);
  });
});

/** One call's answer, as the transcript keeps it. */
interface Step {
  name: string;
  status: number | string;
  body: unknown;
}

/**
 * One run of the script against one service: every answer in call order
 * (concurrent calls keep the order they were made in), each call required
 * to answer the status the script expects.
 */
class Run {
  readonly steps: Step[] = [];
  readonly grpc: GrpcCaller;

  constructor(
    readonly label: string,
    readonly service: TestService,
    /** The database under the service: its clock and the sweep. */
    readonly db: Db,
    /** The service's warnings and errors (a 500 says only "the server log has the details"). */
    readonly serverLog: string[],
  ) {
    this.grpc = grpcCaller(service.url);
  }

  private why(name: string, body: unknown): string {
    return `${this.label}: ${name}: ${JSON.stringify(body)}${this.serverLog.length > 0 ? `\nserver log:\n${this.serverLog.slice(-5).join("")}` : ""}`;
  }

  /** A REST call recorded whatever it answers (for callers that check the status themselves). */
  async record(name: string, method: string, path: string, options: { key?: string | null; body?: unknown } = {}) {
    const slot = this.steps.push({ name, status: 0, body: undefined }) - 1;
    const answer = await this.service.call(method, path, options);
    this.steps[slot] = { name, status: answer.status, body: answer.body };
    return answer;
  }

  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  async rest(name: string, method: string, path: string, options: { key?: string; body?: unknown; status?: number } = {}): Promise<any> {
    const answer = await this.record(name, method, path, { key: options.key, body: options.body });
    expect(answer.status, this.why(name, answer.body)).toBe(options.status ?? 200);
    return answer.body;
  }

  /** A gRPC call; `code` is the status it must end with (0: OK). */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  async rpc(name: string, service: GrpcService, method: string, request: object, key: string, code = 0): Promise<any> {
    const slot = this.steps.push({ name, status: 0, body: undefined }) - 1;
    const answer = await this.grpc.call(service, method, request, key).then(
      (body: unknown) => ({ status: 0, body }),
      (error: { code: number; details: string }) => ({ status: error.code, body: error.details }),
    );
    this.steps[slot] = { name, status: `grpc ${answer.status}`, body: answer.body };
    expect(answer.status, this.why(name, answer.body)).toBe(code);
    return answer.body;
  }

  note(name: string, body: unknown): void {
    this.steps.push({ name, status: "-", body });
  }

  /** Resolves once the database's clock has passed `ms`. */
  async untilClockPasses(ms: number): Promise<void> {
    while ((await relationshipsStore.clock(this.db)) <= ms) await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * The answers with what differs from run to run replaced: generated ids and
 * key secrets by their order of first appearance (`pol#1`, so the same id
 * stays the same name across the transcript), instants, request ids, page
 * tokens (which hold instants or sequence numbers).
 */
function normalized(steps: Step[]): Step[] {
  const names = new Map<string, string>();
  const counts = new Map<string, number>();
  const text = (s: string) =>
    s
      .replace(/\b(pol|rol|key|evt|pcl)_[a-z2-7]{16,}\b/g, (id: string, prefix: string) => {
        let name = names.get(id);
        if (name === undefined) {
          const n = (counts.get(prefix) ?? 0) + 1;
          counts.set(prefix, n);
          name = `${prefix}#${n}`;
          names.set(id, name);
        }
        return name;
      })
      .replace(/\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)/g, "<instant>")
      .replace(/\breq_[a-z0-9]+/g, "req_*");
  const walk = (value: unknown, field?: string): unknown => {
    // Page tokens hold instants or sequence numbers; the change feed's tokens, transaction ids.
    if (typeof value === "string") return (field === "nextPageToken" || field === "token" || field === "nextToken") && value !== "" ? "<token>" : text(value);
    if (Array.isArray(value)) return value.map((v) => walk(v));
    if (value !== null && typeof value === "object") {
      const entries = Object.entries(value);
      // A google.protobuf.Timestamp over gRPC.
      if (entries.length === 2 && "seconds" in value && "nanos" in value) return "<instant>";
      return Object.fromEntries(entries.map(([k, v]) => [k, walk(v, k)]));
    }
    return value;
  };
  return steps.map((s) => ({ name: text(s.name), status: s.status, body: walk(s.body) }));
}

const CATALOG = [
  { resource: "document", description: "A document", actions: ["read", "update", "delete", "comment", "list"], relations: [{ name: "reviewer", actions: ["read", "comment"] }] },
  { resource: "folder", description: "", actions: ["read", "list"] },
];
const REL = "/api/v1/authorization/relationships";
const AUTHZ = "/api/v1/authorization";
const app = (appId: string) => `/api/v1/applications/${appId}`;
const grant = (userId: string, resource: string, resourceId: string, relation: string, expiresAt?: string) => ({
  userId,
  resource,
  resourceId,
  relation,
  ...(expiresAt === undefined ? {} : { expiresAt }),
});
const ask = (userId: string, resource: string, resourceId: string, action: string, tenantId?: string) => ({
  userId,
  resource,
  resourceId,
  action,
  ...(tenantId === undefined ? {} : { tenantId }),
});

/** Applications whose checks arrive together: their rows sit on both workers (asserted on Citus). */
const FLEET = Array.from({ length: 12 }, (_, i) => `fleet-${String(i + 1).padStart(2, "0")}`);

/** Every page of a REST list; returns the items of `field`. */
async function walkPages(r: Run, name: string, path: string, field: string, key?: string): Promise<unknown[]> {
  const items: unknown[] = [];
  let token = "";
  for (let page = 1; page < 100; page++) {
    const body = await r.rest(`${name}, page ${page}`, "GET", `${path}${path.includes("?") ? "&" : "?"}pageToken=${encodeURIComponent(token)}`, { key });
    items.push(...(body[field] as unknown[]));
    token = body.nextPageToken as string;
    if (token === "") return items;
  }
  throw new Error(`${name}: no last page`);
}

/** The script: every statement family of the API, in an order where each builds on the last. */
async function drive(r: Run): Promise<void> {
  // Applications and keys: the reference tables.
  await r.rest("create application", "POST", "/api/v1/applications", { body: { appId: "acme", name: "Acme" }, status: 201 });
  await r.rest("duplicate application", "POST", "/api/v1/applications", { body: { appId: "acme" }, status: 409 });
  for (const appId of FLEET) await r.rest(`create ${appId}`, "POST", "/api/v1/applications", { body: { appId }, status: 201 });
  expect(await walkPages(r, "list applications", "/api/v1/applications?pageSize=5", "applications")).toHaveLength(FLEET.length + 1);
  await r.rest("get application", "GET", app("acme"));
  await r.rest("unknown application", "GET", app("nobody"), { status: 404 });
  const key = (await r.rest("create key", "POST", `${app("acme")}/api-keys`, { body: { name: "backend" }, status: 201 })).key as string;
  const checkKey = (await r.rest("create check key", "POST", `${app("acme")}/api-keys`, { body: { name: "web", scopes: ["check"] }, status: 201 })) as { key: string; keyId: string };
  await r.rest("list keys", "GET", `${app("acme")}/api-keys`, { key });
  await r.rest("current key", "GET", "/api/v1/api-keys/current", { key: checkKey.key });

  // The catalog, replaced whole.
  await r.rest("put catalog", "PUT", `${app("acme")}/resources`, { key, body: { resources: CATALOG } });
  await r.rest("bad catalog", "PUT", `${app("acme")}/resources`, { key, body: { resources: [{ resource: "document", actions: ["Read"] }] }, status: 400 });
  await r.rest("get catalog", "GET", `${app("acme")}/resources`, { key });

  // Policies and roles.
  const policy = async (name: string, permissions: string[], status = 201) =>
    (await r.rest(`policy ${name}`, "POST", `${app("acme")}/policies`, { key, body: { name, permissions }, status })).policyId as string;
  const readers = await policy("Readers", ["document:read", "document:list"]);
  const editors = await policy("Editors", ["document:read", "document:update"]);
  const folders = await policy("Folder readers", ["folder:read", "folder:list"]);
  await policy("Readers", ["document:read"], 409);
  await policy("Unknown", ["document:fly"], 400);
  await walkPages(r, "list policies", `${app("acme")}/policies?pageSize=2`, "policies", key);
  await r.rest("get policy", "GET", `${app("acme")}/policies/${readers}`, { key });
  await r.rest("patch policy", "PATCH", `${app("acme")}/policies/${readers}`, { key, body: { permissions: ["document:read", "document:list", "document:comment"] } });
  await r.rest("rename policy to a taken name", "PATCH", `${app("acme")}/policies/${folders}`, { key, body: { name: "Editors" }, status: 409 });
  const role = async (name: string, policyIds: string[], tenantId?: string, status = 201) =>
    (await r.rest(`role ${name}`, "POST", `${app("acme")}/roles`, { key, body: { name, policyIds, ...(tenantId ? { tenantId } : {}) }, status })).roleId as string;
  const reader = await role("Reader", [readers]);
  const editor = await role("Editor", [editors, readers]);
  const tenantEditor = await role("Editor", [editors], "t1");
  const browser = await role("Browser", [folders]);
  await role("Reader", [readers], undefined, 409);
  await walkPages(r, "list roles", `${app("acme")}/roles?pageSize=2`, "roles", key);
  await r.rest("list a tenant's roles", "GET", `${app("acme")}/roles?tenantId=t1`, { key });
  await r.rest("list a tenant's policies", "GET", `${app("acme")}/policies?tenantId=t1`, { key });
  await r.rest("get role", "GET", `${app("acme")}/roles/${editor}`, { key });
  await r.rest("patch role", "PATCH", `${app("acme")}/roles/${reader}`, { key, body: { description: "Reads documents" } });
  await r.rest("policy's roles", "GET", `${app("acme")}/policies/${readers}/roles`, { key });

  // Assignments.
  const assign = (roleId: string, userId: string) =>
    r.rest(`assign ${userId}`, "POST", `${app("acme")}/roles/${roleId}/assignments`, { key, body: { userId }, status: 201 });
  for (const userId of ["alice", "erin", "frank", "gina"]) await assign(reader, userId);
  await assign(editor, "bob");
  await assign(editor, "erin");
  await assign(tenantEditor, "carol");
  await assign(browser, "erin");
  await walkPages(r, "role assignments", `${app("acme")}/roles/${reader}/assignments?pageSize=3`, "assignments", key);
  await r.rest("user's roles", "GET", `${app("acme")}/users/erin/roles`, { key });
  await r.rest("unassign", "DELETE", `${app("acme")}/roles/${reader}/assignments/gina`, { key });

  // Stored user properties: written, replaced, read, cleared, read when there are none.
  const properties = `${app("acme")}/users/erin/properties`;
  await r.rest("user properties", "PUT", properties, { key, body: { plan: "pro", seats: 5, tags: ["beta", null], address: { country: "NZ" } } });
  await r.rest("user properties replaced", "PUT", properties, { key, body: { plan: "free" } });
  await r.rest("user properties read", "GET", properties, { key });
  let deep: unknown = {};
  for (let level = 1; level < 33; level++) deep = { d: deep };
  await r.rest("user properties 33 levels deep", "PUT", properties, { key, body: deep, status: 400 });
  await r.rest("user properties cleared", "PUT", properties, { key, body: {} });
  await r.rest("no user properties", "GET", properties, { key });

  // Grants, one by one.
  await r.rest("grant", "POST", REL, { key, body: grant("bob", "document", "d1", "reviewer"), status: 201 });
  await r.rest("grant again", "POST", REL, { key, body: grant("bob", "document", "d1", "reviewer") });
  await r.rest("grant folder", "POST", REL, { key, body: grant("dan", "folder", "f1", "viewer"), status: 201 });
  await r.rest("grant to delete", "POST", REL, { key, body: grant("dan", "document", "d9", "editor"), status: 201 });
  await r.rest("delete grant", "DELETE", `${REL}?${new URLSearchParams(grant("dan", "document", "d9", "editor"))}`, { key });
  await r.rest("grant with an unknown relation", "POST", REL, { key, body: grant("dan", "document", "d9", "pilot"), status: 400 });

  // The catalog's 409s: a permission a policy holds, a relation or a resource a grant uses.
  const without = (drop: (c: typeof CATALOG) => typeof CATALOG) => ({ resources: drop(structuredClone(CATALOG)) });
  await r.rest("catalog dropping a held permission", "PUT", `${app("acme")}/resources`, {
    key, body: without((c) => [{ ...c[0]!, actions: ["read", "delete", "comment", "list"] }, c[1]!]), status: 409,
  });
  await r.rest("catalog dropping a used relation", "PUT", `${app("acme")}/resources`, { key, body: without((c) => [{ ...c[0]!, relations: [] }, c[1]!]), status: 409 });
  await r.rest("catalog dropping a used resource", "PUT", `${app("acme")}/resources`, { key, body: without((c) => [c[0]!]), status: 409 });

  // Bulk: 5,000 grants in one call, again (unchanged), then writes and deletes together.
  const many = Array.from({ length: 5_000 }, (_, i) => grant(`u${String(i).padStart(4, "0")}`, "document", `doc-${String(i % 250).padStart(3, "0")}`, i % 7 === 0 ? "editor" : "viewer"));
  expect(await r.rest("bulk 5,000", "POST", `${REL}/bulk`, { key, body: { writes: many } })).toEqual({ written: 5_000, unchanged: 0, deleted: 0 });
  await r.rest("bulk 5,000 again", "POST", `${REL}/bulk`, { key, body: { writes: many } });
  const lena = Array.from({ length: 230 }, (_, i) => grant("lena", "document", `doc-${String(i).padStart(3, "0")}`, "viewer"));
  await r.rest("bulk writes and deletes", "POST", `${REL}/bulk`, { key, body: { writes: lena, deletes: many.slice(0, 100) } });

  // Lists: an instance's grants, a user's, every grant of a type (paged).
  await r.rest("list an instance's grants", "GET", `${REL}?resource=document&resourceId=d1`, { key });
  await walkPages(r, "list lena's grants", `${REL}?resource=document&userId=lena&pageSize=100`, "relationships", key);
  expect(await walkPages(r, "export documents", `${REL}?resource=document&pageSize=1000`, "relationships", key)).toHaveLength(5_000 - 100 + 230 + 1);

  // The questions.
  const questions = [
    ask("bob", "document", "d1", "update"),
    ask("bob", "document", "d1", "delete"),
    ask("bob", "document", "d1", "comment"),
    ask("alice", "document", "any", "list"),
    ask("carol", "document", "d2", "update", "t1"),
    ask("carol", "document", "d2", "update"),
    ask("dan", "folder", "f1", "read"),
    ask("u0101", "document", "doc-101", "read"),
    ask("u0105", "document", "doc-105", "update"),
    ask("lena", "document", "doc-229", "read"),
    ask("nobody", "document", "d1", "read"),
  ];
  for (const q of questions) await r.rest(`check ${JSON.stringify(q)}`, "POST", `${AUTHZ}/check`, { key: checkKey.key, body: q });
  await r.rest("batch check", "POST", `${AUTHZ}/check/batch`, { key: checkKey.key, body: { checks: questions } });
  for (const q of questions.slice(0, 5)) await r.rest(`explain ${JSON.stringify(q)}`, "POST", `${AUTHZ}/check/explain`, { key: checkKey.key, body: q });
  const { action: _action, ...bobD1 } = questions[0]!;
  await r.rest("permissions", "POST", `${AUTHZ}/permissions`, { key: checkKey.key, body: bobD1 });
  await r.rest("permissions batch", "POST", `${AUTHZ}/permissions/batch`, {
    key: checkKey.key, body: { requests: questions.map(({ action: _, ...rest }) => rest) },
  });
  let token = "";
  for (let page = 1; ; page++) {
    const body = await r.rest(`lookup, page ${page}`, "POST", `${AUTHZ}/lookup`, {
      key: checkKey.key, body: { userId: "lena", resource: "document", action: "read", pageSize: 100, pageToken: token },
    });
    token = body.nextPageToken as string;
    if (token === "") break;
  }
  await r.rest("lookup through a role", "POST", `${AUTHZ}/lookup`, { key: checkKey.key, body: { userId: "alice", resource: "document", action: "read" } });

  // A few over gRPC.
  await r.rpc("grpc check", "CheckService", "Check", questions[0]!, checkKey.key);
  await r.rpc("grpc batch check", "CheckService", "BatchCheck", { checks: questions }, checkKey.key);
  await r.rpc("grpc explain", "CheckService", "Explain", questions[4]!, checkKey.key);
  await r.rpc("grpc write", "RelationshipService", "WriteRelationship", grant("hana", "document", "d5", "editor"), key);
  await r.rpc("grpc list policies", "PolicyService", "ListPolicies", { appId: "acme" }, key);
  await r.rpc("grpc check without the scope", "RelationshipService", "WriteRelationship", grant("x", "document", "d5", "viewer"), checkKey.key, 7);

  // Expiring grants: counted until the database's clock passes them, then swept.
  const soon = new Date(Math.ceil((await relationshipsStore.clock(r.db)) + 3_000)).toISOString();
  await r.rest("expiring grant", "POST", REL, { key, body: grant("ida", "document", "d1", "reviewer", soon), status: 201 });
  await r.rest("expiring bulk", "POST", `${REL}/bulk`, { key, body: { writes: [grant("ida", "folder", "f2", "viewer", soon), grant("jo", "document", "d1", "reviewer", soon)] } });
  await r.rest("check before the expiry", "POST", `${AUTHZ}/check`, { key, body: ask("ida", "document", "d1", "comment") });
  await r.untilClockPasses(Date.parse(soon));
  await r.rest("check after the expiry", "POST", `${AUTHZ}/check`, { key, body: ask("ida", "document", "d1", "comment") });
  await r.rest("list with expired", "GET", `${REL}?resource=document&resourceId=d1&includeExpired=true`, { key });
  await r.rest("list without expired", "GET", `${REL}?resource=document&resourceId=d1`, { key });
  await r.rest("delete bob's reviewer grant", "DELETE", `${REL}?${new URLSearchParams(grant("bob", "document", "d1", "reviewer"))}`, { key });
  await r.rest("catalog dropping a relation only expired grants use", "PUT", `${app("acme")}/resources`, { key, body: without((c) => [{ ...c[0]!, relations: [] }, c[1]!]), status: 409 });
  const swept = await new ExpirySweep(r.db, { intervalMs: 60_000, batchSize: 2, onError: (e) => { throw e; } }).sweepOnce();
  r.note("swept", swept);
  await r.rest("catalog dropping that relation after the sweep", "PUT", `${app("acme")}/resources`, { key, body: without((c) => [{ ...c[0]!, relations: [] }, c[1]!]) });

  // Delete by filter.
  await r.rest("delete a user's grants", "POST", `${REL}/delete`, { key, body: { userId: "u0101" } });
  await r.rest("delete a user's grants on a type", "POST", `${REL}/delete`, { key, body: { userId: "lena", resource: "document" } });
  await r.rest("delete an instance's grants", "POST", `${REL}/delete`, { key, body: { resource: "document", resourceId: "doc-003" } });

  // The impact preview, offboarding.
  await r.rest("impact preview", "POST", `${app("acme")}/policies/${readers}/preview`, { key, body: { permissions: ["document:read", "document:delete"] } });
  await r.rest("offboard erin", "DELETE", `${app("acme")}/users/erin/roles`, { key });
  await r.rest("erin after offboarding", "POST", `${AUTHZ}/check`, { key, body: ask("erin", "document", "d1", "read") });

  // Many applications at once: checks of several coalesced, one statement each.
  const fleetKeys: string[] = [];
  for (const [i, appId] of FLEET.entries()) {
    fleetKeys.push((await r.rest(`${appId} key`, "POST", `${app(appId)}/api-keys`, { body: { name: "k" }, status: 201 })).key as string);
    await r.rest(`${appId} catalog`, "PUT", `${app(appId)}/resources`, { key: fleetKeys[i]!, body: { resources: CATALOG } });
    await r.rest(`${appId} grants`, "POST", `${REL}/bulk`, {
      key: fleetKeys[i]!, body: { writes: Array.from({ length: 20 }, (_, j) => grant(`user-${j}`, "document", `${appId}-doc-${j % (i + 2)}`, j % 2 ? "viewer" : "editor")) },
    });
  }
  await Promise.all(
    FLEET.flatMap((appId, i) => {
      const k = fleetKeys[i]!;
      const qs = Array.from({ length: 6 }, (_, j) => ask(`user-${j}`, "document", `${appId}-doc-${j % 3}`, j % 2 ? "update" : "read"));
      return [
        ...qs.map((q, j) => r.rest(`${appId} check ${j}`, "POST", `${AUTHZ}/check`, { key: k, body: q })),
        r.rest(`${appId} batch`, "POST", `${AUTHZ}/check/batch`, { key: k, body: { checks: qs } }),
        r.rest(`${appId} explain`, "POST", `${AUTHZ}/check/explain`, { key: k, body: qs[0] }),
        r.rest(`${appId} lookup`, "POST", `${AUTHZ}/lookup`, { key: k, body: { userId: "user-0", resource: "document", action: "read" } }),
        r.rpc(`${appId} grpc check`, "CheckService", "Check", qs[1]!, k),
      ];
    }),
  );

  // The scenarios (test/scenarios): each its own application, every check's answer known.
  for (const [i, { file, scenario }] of loadScenarios().entries()) {
    const appId = `scenario-${i}`;
    const key = await applyScenario((method, path, options) => r.record(`${file}: ${method} ${path}`, method, path, options), appId, scenario);
    const answers = await r.rest(`${file}: batch check`, "POST", `${AUTHZ}/check/batch`, { key, body: { checks: scenario.checks.map(checkOf) } });
    expect(answers.results.map((a: { allowed: boolean }) => a.allowed), `${r.label}: ${file}`).toEqual(scenario.checks.map((c) => c.allowed));
    for (const c of scenario.checks.slice(0, 4)) await r.rest(`${file}: explain`, "POST", `${AUTHZ}/check/explain`, { key, body: checkOf(c) });
  }

  // The audit log, paged and filtered.
  await walkPages(r, "audit log", `${app("acme")}/audit-log?pageSize=10`, "events", key);
  await r.rest("audit log of one type", "GET", `${app("acme")}/audit-log?type=policy.created`, { key });

  // Deletions, and a revoked key.
  await r.rest("delete an attached policy", "DELETE", `${app("acme")}/policies/${folders}`, { key, status: 409 });
  await r.rest("delete it by force", "DELETE", `${app("acme")}/policies/${folders}?force=true`, { key });
  await r.rest("delete a role", "DELETE", `${app("acme")}/roles/${browser}`, { key });
  await r.rest("deleted role", "GET", `${app("acme")}/roles/${browser}`, { key, status: 404 });
  await r.rest("revoke the check key", "DELETE", `${app("acme")}/api-keys/${checkKey.keyId}`, { key });
  await r.rest("a check with the revoked key", "POST", `${AUTHZ}/check`, { key: checkKey.key, body: questions[0], status: 401 });
  await r.rpc("grpc check with the revoked key", "CheckService", "Check", questions[0]!, checkKey.key, 16);
  await r.rest("list applications at the end", "GET", "/api/v1/applications?pageSize=100");

  // The change feed: every change the script made, in commit order, read in pages of 7 (windows
  // continued across pages), and again over Watch from the start: the same changes.
  // Roles by name: a statement's changes come in key order, and role ids are random, so two runs
  // may order one user's removed assignments differently; compared as "role name@user" in order.
  const roleNames = new Map([[reader, "Reader"], [editor, "Editor"], [tenantEditor, "Editor t1"], [browser, "Browser"]]);
  type FeedChange = { token: string; kind: string; assignment?: { roleId: string; userId: string } };
  const feed: FeedChange[] = [];
  let after = "";
  for (let page = 1; page < 1_000; page++) {
    const answer = await r.service.call("GET", `${AUTHZ}/changes?pageSize=7&after=${after}`, { key });
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    feed.push(...(answer.body.changes as FeedChange[]));
    after = answer.body.nextToken as string;
    if ((answer.body.changes as unknown[]).length < 7) break;
  }
  expect(feed.length).toBeGreaterThan(40);
  const byName = (c: FeedChange) => (c.assignment === undefined ? c : { ...c, assignment: { ...c.assignment, roleId: roleNames.get(c.assignment.roleId) } });
  const assignments = feed.filter((c) => c.assignment !== undefined).map(byName);
  r.note("the change feed, its assignments with role names, each user's in name order", [
    ...feed.filter((c) => c.assignment === undefined),
    ...assignments.sort((a, b) => JSON.stringify(a.assignment).localeCompare(JSON.stringify(b.assignment))),
  ]);
  const watched: unknown[] = [];
  const controller = new AbortController();
  const client = createClient(ChangeService, createGrpcTransport({ baseUrl: r.service.url }));
  for await (const res of client.watch({}, { signal: controller.signal, headers: { "x-api-key": key } })) {
    // As the REST gateway writes it: every field, defaults (allUsers: false) included.
    watched.push(toJson(ChangeSchema, res.change!, { alwaysEmitImplicit: true }));
    if (watched.length === feed.length) break;
  }
  controller.abort();
  expect(normalized([{ name: "", status: 0, body: watched }])).toEqual(normalized([{ name: "", status: 0, body: feed }]));
}

/** The service in this process over `db`, its warnings and errors kept rather than printed. */
async function startLogged(db: Db, overrides: Partial<Config> = {}): Promise<{ service: TestService; serverLog: string[] }> {
  const serverLog: string[] = [];
  const log = pino({ level: "warn" }, { write: (line: string) => void serverLog.push(line) });
  const service = await startPortcullis(testConfig(overrides), { db, log });
  await service.ready;
  return { service: Object.assign(service, { call: restCaller(service.url) }), serverLog };
}

describe.skipIf(!inLeg)("a Citus coordinator with two workers", () => {
  let cluster: CitusNodes;
  let citusDb: PgDb;
  let citusUrl: string;
  /** A second database of the cluster, for the service started as its own process. */
  let processUrl: string;

  beforeAll(async () => {
    const { coordinator, workers } = citusUrls();
    cluster = joinCitusCluster(coordinator, workers);
    const [url, other] = await Promise.all([cluster.createDatabase(), cluster.createDatabase()]);
    citusDb = new PgDb(url, { max: 10, boundStatements: 8, onError: () => undefined });
    citusUrl = url;
    processUrl = other;
  }, 120_000);
  afterAll(async () => {
    await citusDb?.close();
    await cluster?.close();
  });

  /** A statement on the coordinator. */
  const coordinator = async <R>(sql: string, params: unknown[] = []) => (await citusDb.query<R>(sql, params)).rows;

  describe("the layout distributeOnCitus makes, read from Citus's catalogs", () => {
    let changed: string[];
    beforeAll(async () => {
      await migrate(citusDb);
      changed = await distributeOnCitus(citusDb);
    }, 60_000);

    it("distributes every table of the layout, in order, and a second run finds nothing to do", async () => {
      expect(changed).toEqual([...REFERENCE_TABLES, ...DISTRIBUTED_TABLES]);
      expect(await distributeOnCitus(citusDb)).toEqual([]);
    });

    it("applications and api_keys are reference tables; every other table but schema_migrations and check_functions is hash-distributed by app_id", async () => {
      const rows = await coordinator<{ table: string; method: string; column: string | null }>(
        `SELECT logicalrelid::regclass::text AS table, partmethod AS method, column_to_column_name(logicalrelid, partkey) AS column
         FROM pg_dist_partition ORDER BY 1`,
      );
      const expected = [
        ...REFERENCE_TABLES.map((table) => ({ table, method: "n", column: null })),
        ...DISTRIBUTED_TABLES.map((table) => ({ table, method: "h", column: "app_id" })),
      ].sort((a, b) => a.table.localeCompare(b.table));
      expect(rows).toEqual(expected);
    });

    it("the distributed tables are one colocation group", async () => {
      const rows = await coordinator<{ groups: number }>(
        "SELECT count(DISTINCT colocationid)::int AS groups FROM pg_dist_partition WHERE partmethod = 'h'",
      );
      expect(rows).toEqual([{ groups: 1 }]);
    });

    it("every distributed table has shards on both workers and none on the coordinator; reference tables are on every node", async () => {
      const rows = await coordinator<{ table: string; ports: number[] }>(
        `SELECT s.logicalrelid::regclass::text AS table, array_agg(DISTINCT n.nodeport ORDER BY n.nodeport) AS ports
         FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid) JOIN pg_dist_node n USING (groupid)
         GROUP BY 1 ORDER BY 1`,
      );
      const workers = cluster.workers.map((w) => w.port).sort((a, b) => a - b);
      const everyNode = [cluster.coordinator.port, ...workers].sort((a, b) => a - b);
      expect(new Map(rows.map((r) => [r.table, r.ports]))).toEqual(
        new Map([...REFERENCE_TABLES.map((t) => [t, everyNode] as const), ...DISTRIBUTED_TABLES.map((t) => [t, workers] as const)]),
      );
    });
  });

  describe("the service on the coordinator, side by side with a plain database", () => {
    let plain: TestDatabase;
    let serviceDb: PgDb;
    let citusService: TestService;
    let plainService: TestService;
    let citusRun: Run;
    let plainRun: Run;

    beforeAll(async () => {
      // The plain engine: the real Postgres, which every run of the tests has.
      plain = await createTestDatabase("postgres");
      // Every statement must go to one shard (rule 1 of docs/scale-out.md):
      // from here on, Citus fails one that would run on several rather than
      // logging it. On the service's connections, which open after this.
      await pgQuery(citusUrl, `ALTER DATABASE ${new URL(citusUrl).pathname.slice(1)} SET citus.multi_task_query_log_level = 'error'`);
      serviceDb = new PgDb(citusUrl, { max: 10, boundStatements: 8, onError: () => undefined });
      // AUTHZ_DISTRIBUTE=citus: at start the service finds the tables distributed already.
      const [onCitus, onPlain] = await Promise.all([startLogged(serviceDb, { distribute: "citus" }), startLogged(plain.db)]);
      [citusService, plainService] = [onCitus.service, onPlain.service];
      citusRun = new Run("citus", citusService, serviceDb, onCitus.serverLog);
      plainRun = new Run(plain.engine, plainService, plain.db, onPlain.serverLog);
      await Promise.all([drive(citusRun), drive(plainRun)]);
    }, 180_000); // about 20 s alone on two busy cores; the whole suite runs beside it
    afterAll(async () => {
      citusRun?.grpc.close();
      plainRun?.grpc.close();
      await Promise.allSettled([citusService?.close(), plainService?.close()]);
      await Promise.allSettled([serviceDb?.close(), plain?.dispose()]);
    });

    it("answers every call as the plain database does, ids and instants aside", () => {
      const [citus, other] = [normalized(citusRun.steps), normalized(plainRun.steps)];
      expect(citus.map((s) => s.name)).toEqual(other.map((s) => s.name));
      const differences = citus.flatMap((s, i) => (JSON.stringify(s) === JSON.stringify(other[i]) ? [] : [{ citus: s, [plain.engine]: other[i] }]));
      expect(differences).toEqual([]);
      expect(citus.length).toBeGreaterThan(250);
    });

    it("the service's connections refuse a statement that would run on several shards", async () => {
      const error = await serviceDb.query("SELECT count(*) FROM relationships").then(
        () => undefined,
        (e: unknown) => e as Error,
      );
      expect(error?.message).toBe("multi-task query about to be executed");
    });

    it("the answers are the expected ones where the script knows them", () => {
      const body = (name: string) => citusRun.steps.find((s) => s.name === name)?.body;
      expect(body("batch check")).toEqual({
        results: [true, false, true, true, true, false, true, true, true, true, false].map((allowed) => ({ allowed })),
      });
      expect(body("check before the expiry")).toEqual({ allowed: true });
      expect(body("check after the expiry")).toEqual({ allowed: false });
      expect(body("swept")).toBe(3);
      expect(body("erin after offboarding")).toEqual({ allowed: false });
      expect(body("bulk 5,000 again")).toEqual({ written: 0, unchanged: 5_000, deleted: 0 });
      expect(body("delete a user's grants on a type")).toEqual({ deleted: 230 });
      const lookups = citusRun.steps.filter((s) => s.name.startsWith("lookup, page"));
      expect(lookups.flatMap((s) => (s.body as { resourceIds: string[] }).resourceIds)).toHaveLength(230);
    });

    it("the fleet's rows sit on both workers (so its checks, coalesced together, went to both)", async () => {
      const rows = await coordinator<{ port: number }>(
        `SELECT DISTINCT n.nodeport AS port
         FROM unnest($1::text[]) AS a(app_id)
         JOIN pg_dist_placement p ON p.shardid = get_shard_id_for_distribution_column('relationships', a.app_id)
         JOIN pg_dist_node n USING (groupid) ORDER BY 1`,
        [FLEET],
      );
      expect(rows.map((r) => r.port)).toEqual(cluster.workers.map((w) => w.port).sort((a, b) => a - b));
    });

    it("the grants are stored on the workers, some on each, none on the coordinator", async () => {
      const [total, perNode] = await citusDb.transaction(async (tx) => {
        await tx.query("SET LOCAL citus.multi_task_query_log_level = 'off'");
        return [
          (await tx.query<{ n: number }>("SELECT count(*)::int AS n FROM relationships")).rows[0]!.n,
          (await tx.query<{ port: number; n: number }>(
            `SELECT nodeport AS port, sum(result::int)::int AS n
             FROM run_command_on_placements('relationships', 'SELECT count(*) FROM %s') GROUP BY 1 ORDER BY 1`,
          )).rows,
        ] as const;
      });
      expect(perNode.map((r) => r.port)).toEqual(cluster.workers.map((w) => w.port).sort((a, b) => a - b));
      expect(perNode.every((r) => r.n > 0)).toBe(true);
      expect(perNode.reduce((sum, r) => sum + r.n, 0)).toBe(total);
      expect(total).toBeGreaterThan(5_000);
    });
  });

  describe("the service as its own process: DATABASE_URL on the coordinator, AUTHZ_DISTRIBUTE=citus", () => {
    cleanUpServiceProcesses();

    it("migrates and distributes a fresh database at start, and answers", async () => {
      const env = { DATABASE_URL: processUrl, AUTHZ_DISTRIBUTE: "citus", AUTHZ_ADMIN_KEY: ADMIN_KEY };
      const first = await startService(env, { readyWithinMs: null });
      expect(first.stdout).toContain("distributed the tables on Citus");
      expect((await first.call("POST", "/api/v1/applications", { body: { appId: "proc" } })).status).toBe(201);
      const key = (await first.call("POST", "/api/v1/applications/proc/api-keys", { body: { name: "k" } })).body.key as string;
      expect((await first.call("PUT", "/api/v1/applications/proc/resources", { key, body: { resources: CATALOG } })).status).toBe(200);
      expect((await first.call("POST", REL, { key, body: grant("ann", "document", "d1", "viewer") })).status).toBe(201);
      expect((await first.call("POST", `${AUTHZ}/check`, { key, body: ask("ann", "document", "d1", "read") })).body).toEqual({ allowed: true });
      expect(await stopService(first)).toEqual({ code: 0, signal: null });
      const tables = await pgQuery<{ n: number }>(processUrl, "SELECT count(*)::int AS n FROM pg_dist_partition");
      expect(tables).toEqual([{ n: REFERENCE_TABLES.length + DISTRIBUTED_TABLES.length }]);
    }, 60_000);
  });
});
