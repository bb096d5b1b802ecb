/**
 * Models as files (docs/models.md) through the REST API, on every engine:
 * the document round-trips; a plan changes nothing and says exactly what
 * apply does; its impact agrees with a brute force over every user of
 * random worlds (differential, as the policy preview's); apply is one
 * transaction and one audit event, refused whole on a stale version or
 * stranded grants, and exactly one of two racing appliers wins; bad
 * documents are 400s naming the document path and change nothing.
 */
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { Api } from "../src/cli/client.js";
import { modelExport } from "../src/cli/model.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, startTestService, type TestService } from "./support/service.js";
import { admin, createApp, expectError, expectStatus } from "./helpers/authz.js";
import { GRAPH_CATALOG } from "./support/graph.js";
import { random } from "../bench/random.js";

interface Doc {
  version?: string;
  catalog: unknown[];
  policies: { name: string; description: string; permissions: string[]; tenantId?: string }[];
  roles: { name: string; description: string; tenantId?: string; policies: string[] }[];
}

const CATALOG = [
  ...GRAPH_CATALOG,
  { resource: "invoice", description: "An invoice", actions: ["read", "approve", "pay"], relations: [{ name: "approver", actions: ["read", "approve"] }] },
];

const DOC: Doc = {
  catalog: CATALOG,
  policies: [
    { name: "invoice-approvers", description: "approve invoices", permissions: ["invoice:approve", "invoice:read"] },
    { name: "readers", description: "", permissions: ["document:read", "folder:read", "folder:list"] },
    { name: "acme-payers", description: "acme only", permissions: ["invoice:pay"], tenantId: "acme" },
  ],
  roles: [
    { name: "finance", description: "the finance team", policies: ["invoice-approvers", "readers"] },
    { name: "payer", description: "", tenantId: "acme", policies: ["acme-payers", "readers"] },
  ],
};

/** The document without its version (two applications' versions differ). */
const body = (doc: Doc) => {
  const { version: _, ...rest } = doc;
  return rest;
};

describe.each(engines)("models as files on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    service = await startTestService(database.db);
  }, 60_000);
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  const path = (appId: string) => `/api/v1/applications/${appId}/model`;
  const get = async (appId: string, key?: string): Promise<Doc> => {
    const res = await service.call("GET", path(appId), key === undefined ? {} : { key });
    expectStatus(res, 200);
    return res.body as Doc;
  };
  const plan = (appId: string, doc: unknown) => service.call("POST", `${path(appId)}/plan`, { body: doc });
  const apply = (appId: string, doc: unknown) => service.call("PUT", path(appId), { body: doc });
  const auditTypes = async (appId: string) => {
    const res = await service.call("GET", `/api/v1/applications/${appId}/audit-log?pageSize=1000`);
    expectStatus(res, 200);
    return (res.body.events as { type: string }[]).map((e) => e.type);
  };

  it("round-trips: export, apply to an empty application, export again gives the same document", async () => {
    await createApp(service, "model-a", []);
    const applied = await apply("model-a", DOC);
    expectStatus(applied, 200);
    expect(applied.body.catalog).toEqual({ created: ["document", "folder", "invoice", "team"], changed: [], removed: [] });
    expect(applied.body.policies).toEqual({ created: ["acme-payers", "invoice-approvers", "readers"], changed: [], removed: [] });
    expect(applied.body.roles).toEqual({ created: ["acme/payer", "finance"], changed: [], removed: [] });
    const a = await get("model-a");
    expect(a.version).toBe(applied.body.version);
    await createApp(service, "model-b", []);
    expectStatus(await apply("model-b", a), 200);
    const b = await get("model-b");
    expect(body(b)).toEqual(body(a));
    // Applying the export to itself changes nothing: no new version, no event.
    const events = await auditTypes("model-b");
    const again = await apply("model-b", b);
    expectStatus(again, 200);
    expect(again.body.version).toBe(b.version);
    expect(again.body.impact ?? []).toEqual([]);
    expect(await auditTypes("model-b")).toEqual(events);
    // The catalog exported is the catalog the API serves, custom relations as given.
    const invoice = (a.catalog as { resource: string; relations: unknown[] }[]).find((e) => e.resource === "invoice")!;
    expect(invoice.relations).toEqual([{ name: "approver", actions: ["read", "approve"], builtIn: false, subjects: ["user"], inherits: [], requires: [], unless: [] }]);
  });

  it("a rule within an instance: the API answers through \"\", the file leaves it out, and either applies back unchanged", async () => {
    type Entry = { resource: string; relations: { name: string; inherits: unknown[] }[] };
    const inheritsOf = (catalog: unknown[], resource: string, relation: string) =>
      (catalog as Entry[]).find((e) => e.resource === resource)!.relations.find((r) => r.name === relation)!.inherits;
    // Teams whose admins are members: a subject set team#member includes them.
    const team = {
      resource: "team",
      description: "",
      actions: ["read", "manage"],
      relations: [
        { name: "admin", actions: ["read", "manage"] },
        { name: "member", actions: ["read"], subjects: ["user", "team#member"], inherits: [{ relation: "admin" }] },
      ],
    };
    const doc = { ...body(DOC), catalog: CATALOG.map((e) => (e.resource === "team" ? team : e)) };
    await createApp(service, "model-within", []);
    expectStatus(await apply("model-within", doc), 200);
    const a = await get("model-within");
    expect(inheritsOf(a.catalog, "team", "member")).toEqual([{ through: "", relation: "admin" }]);

    const exported = async (format: "yaml" | "json") => {
      let text = "";
      const out = new Writable({
        write(chunk, _encoding, done) {
          text += String(chunk);
          done();
        },
      });
      await modelExport(new Api(service.url, ADMIN_KEY), { app: "model-within", format }, out);
      return text;
    };
    const yaml = await exported("yaml");
    expect(yaml).toContain("        inherits:\n          - relation: admin\n");
    expect(yaml).not.toContain('through: ""');
    const file = parse(yaml) as Doc;
    expect(JSON.parse(await exported("json"))).toEqual(file);
    expect(inheritsOf(file.catalog, "team", "member")).toEqual([{ relation: "admin" }]);
    // A rule through a link keeps its through.
    expect(inheritsOf(file.catalog, "folder", "viewer")).toEqual([{ through: "parent", relation: "viewer" }]);
    // Only the empty throughs, and the empty requires and unless the file leaves out, differ from the API's answer.
    const withoutEmpty = JSON.parse(JSON.stringify(a), (k, v: unknown) => ((k === "requires" || k === "unless") && Array.isArray(v) && v.length === 0 ? undefined : v));
    expect(JSON.parse(JSON.stringify(file).replaceAll('{"relation":"admin"}', '{"through":"","relation":"admin"}'))).toEqual(withoutEmpty);

    // The file plans no change where it came from, and applied elsewhere gives the same model.
    const planned = await plan("model-within", file);
    expectStatus(planned, 200);
    expect(planned.body.catalog).toEqual({ created: [], changed: [], removed: [] });
    expect(planned.body.impact ?? []).toEqual([]);
    await createApp(service, "model-within-copy", []);
    expectStatus(await apply("model-within-copy", file), 200);
    expect(body(await get("model-within-copy"))).toEqual(body(a));
  });

  it("a plan changes nothing and says exactly what apply does, with who gains and loses what", async () => {
    await createApp(service, "model-plan", []);
    expectStatus(await apply("model-plan", DOC), 200);
    const a = admin(service, "model-plan");
    const before = await get("model-plan");
    const roles = (await service.call("GET", "/api/v1/applications/model-plan/roles?pageSize=100")).body.roles as { roleId: string; name: string }[];
    const finance = roles.find((r) => r.name === "finance")!.roleId;
    const payer = roles.find((r) => r.name === "payer")!.roleId;
    for (const u of ["ann", "bob", "cat"]) await a.assign(finance, u);
    for (const u of ["cat", "dan"]) await a.assign(payer, u);
    const changed: Doc = {
      catalog: CATALOG,
      policies: [
        // approvers lose approve; readers gain document:update; acme-payers goes.
        { name: "invoice-approvers", description: "read invoices", permissions: ["invoice:read"] },
        { name: "readers", description: "", permissions: ["document:read", "document:update", "folder:read", "folder:list"] },
        { name: "new-one", description: "", permissions: ["team:read"] },
      ],
      roles: [
        { name: "finance", description: "the finance team", policies: ["invoice-approvers", "readers"] },
        { name: "payer", description: "", tenantId: "acme", policies: ["readers"] },
        { name: "auditor", description: "", policies: ["new-one"] },
      ],
    };
    const planned = await plan("model-plan", changed);
    expectStatus(planned, 200);
    const mid = await get("model-plan");
    expect(mid).toEqual(before);
    expect(planned.body.version).toBe(before.version);
    expect(planned.body.policies).toEqual({ created: ["new-one"], changed: ["invoice-approvers", "readers"], removed: ["acme-payers"] });
    expect(planned.body.roles).toEqual({ created: ["auditor"], changed: ["acme/payer"], removed: [] });
    expect(planned.body.catalog ?? { created: [], changed: [], removed: [] }).toEqual({ created: [], changed: [], removed: [] });
    expect(planned.body.impact).toEqual([
      { permission: "document:update", gaining: 4, losing: 0, gainingSample: ["ann", "bob", "cat", "dan"], losingSample: [] },
      { permission: "invoice:approve", gaining: 0, losing: 3, gainingSample: [], losingSample: ["ann", "bob", "cat"] },
      { permission: "invoice:pay", gaining: 0, losing: 2, gainingSample: [], losingSample: ["cat", "dan"] },
    ].map((i) => ({ ...i, gainingPairs: [], losingPairs: [], atLeast: false })));
    const applied = await apply("model-plan", { ...changed, expectedVersion: planned.body.version });
    expectStatus(applied, 200);
    expect({ ...applied.body, version: planned.body.version }).toEqual(planned.body);
    // One apply, one version (nothing else writes this database meanwhile).
    expect(BigInt(applied.body.version as string) - BigInt(before.version!)).toBe(1n);
    // What apply did is what the plan said, and the check sees it.
    const after = await get("model-plan");
    expect(body(after)).toEqual({ ...changed, catalog: before.catalog, roles: [changed.roles[2], changed.roles[0], changed.roles[1]].map((r) => ({ ...r })) , policies: [changed.policies[0], changed.policies[2], changed.policies[1]] });
    const key = (await service.call("POST", "/api/v1/applications/model-plan/api-keys", { body: { name: "k" } })).body.key as string;
    const allowed = async (userId: string, resource: string, action: string, tenantId?: string) =>
      (await service.call("POST", "/api/v1/authorization/check", { key, body: { userId, resource, resourceId: "x", action, ...(tenantId ? { tenantId } : {}) } })).body.allowed;
    expect(await allowed("ann", "invoice", "approve")).toBe(false);
    expect(await allowed("ann", "document", "update")).toBe(true);
    expect(await allowed("dan", "invoice", "pay", "acme")).toBe(false);
    expect(await allowed("dan", "document", "update", "acme")).toBe(true);
    // One audit event, naming the parts.
    const log = await service.call("GET", "/api/v1/applications/model-plan/audit-log?pageSize=100");
    const applies = (log.body.events as { type: string; data: Record<string, unknown> }[]).filter((e) => e.type === "model.applied");
    expect(applies).toHaveLength(2); // the first document, then the change
    expect(applies[0]!.data.policies).toEqual(planned.body.policies);
    expect(applies[0]!.data.roles).toEqual(planned.body.roles);
    expect(applies[0]!.data.fromVersion).toBe(before.version);
  });

  it("refuses a stale expectedVersion and a catalog that strands grants, changing nothing", async () => {
    const key = await createApp(service, "model-refuse", []);
    expectStatus(await apply("model-refuse", DOC), 200);
    const before = await get("model-refuse");
    expectError(await apply("model-refuse", { ...DOC, expectedVersion: "1" }), 409, "failed_precondition", "not the expected 1");
    expectStatus(await service.call("POST", "/api/v1/authorization/relationships", { key, body: { userId: "u", resource: "invoice", resourceId: "i1", relation: "approver" } }), 201);
    const withoutInvoice: Doc = {
      catalog: CATALOG.filter((e) => e.resource !== "invoice"),
      policies: [{ name: "readers", description: "", permissions: ["document:read"] }],
      roles: [],
    };
    expectError(await apply("model-refuse", withoutInvoice), 409, "failed_precondition", "invoice");
    expect(await get("model-refuse")).toEqual(before);
  });

  it.each([
    [{ ...DOC, policies: [...DOC.policies, { name: "x", description: "", permissions: ["invoice:read", "invoice:sign"] }] }, "policies[3].permissions[1]"],
    [{ ...DOC, policies: [...DOC.policies, { name: "y", description: "", permissions: ["nothing:read"] }] }, "policies[3].permissions[0]"],
    [{ ...DOC, roles: [{ name: "r", description: "", policies: ["readers", "missing"] }] }, "roles[0].policies[1]"],
    [{ ...DOC, policies: [...DOC.policies, DOC.policies[0]] }, "policies[3].name"],
    [{ ...DOC, roles: [...DOC.roles, DOC.roles[0]] }, "roles[2].name"],
    [{ ...DOC, roles: [{ name: "wide", description: "", policies: ["acme-payers"] }] }, "roles[0].policies[0]"],
    [{ ...DOC, catalog: [{ resource: "Bad", description: "", actions: [] }] }, "catalog[0].resource"],
    [{ ...DOC, policies: [{ ...DOC.policies[0], surprise: 1 }] }, "surprise"],
  ])("a bad document is a 400 naming $1", async (doc, field) => {
    const appId = `model-bad-${field.replace(/[^a-z0-9]/g, "")}`;
    await createApp(service, appId, []);
    const before = await get(appId);
    for (const res of [await plan(appId, doc), await apply(appId, doc)]) {
      expectError(res, 400, "invalid_argument", field);
    }
    expect(await get(appId)).toEqual(before);
  });

  it("the impact agrees with a brute force over every user (random worlds)", async () => {
    for (const seed of [1, 2, 3]) {
      const appId = `model-world-${seed}`;
      await createApp(service, appId, []);
      const r = random(seed);
      const permissions = CATALOG.flatMap((e) => e.actions.map((a) => `${e.resource}:${a}`));
      const tenants = ["t1", "t2"];
      const makeDoc = (): Doc => {
        const policies = Array.from({ length: 6 }, (_, i) => {
          const tenantId = r.next() < 0.3 ? r.pick(tenants) : undefined;
          const held = permissions.filter(() => r.next() < 0.25);
          return { name: `p${i}`, description: "", permissions: held, ...(tenantId ? { tenantId } : {}) };
        }).filter(() => r.next() < 0.9);
        const roles = Array.from({ length: 6 }, (_, i) => {
          const tenantId = i >= 3 ? tenants[i % 2] : undefined;
          const usable = policies.filter((p) => p.tenantId === undefined || p.tenantId === tenantId);
          return { name: `r${i}`, description: "", policies: usable.filter(() => r.next() < 0.4).map((p) => p.name), ...(tenantId ? { tenantId } : {}) };
        }).filter(() => r.next() < 0.85);
        return { catalog: CATALOG, policies, roles };
      };
      const first = makeDoc();
      expectStatus(await apply(appId, first), 200);
      const roles = (await service.call("GET", `/api/v1/applications/${appId}/roles?pageSize=100`)).body.roles as { roleId: string; name: string; tenantId?: string }[];
      const users = Array.from({ length: 40 }, (_, i) => `user-${String(i).padStart(2, "0")}`);
      const assigned = new Map<string, Set<string>>(); // user → role keys
      for (const u of users) {
        assigned.set(u, new Set());
        for (const role of roles) {
          if (r.next() < 0.2) {
            expectStatus(await service.call("POST", `/api/v1/applications/${appId}/roles/${role.roleId}/assignments`, { body: { userId: u } }), 201);
            assigned.get(u)!.add(role.tenantId ? `${role.tenantId}/${role.name}` : role.name);
          }
        }
      }
      const second = makeDoc();
      const planned = await plan(appId, second);
      expectStatus(planned, 200);
      // The brute force: every user's permissions in every scope, before and after.
      const holds = (doc: Doc, user: string, scope: string | null) => {
        const out = new Set<string>();
        for (const role of doc.roles) {
          const key = role.tenantId ? `${role.tenantId}/${role.name}` : role.name;
          if (!assigned.get(user)!.has(key)) continue;
          if (role.tenantId !== undefined && role.tenantId !== scope) continue;
          for (const name of role.policies) for (const p of doc.policies.find((x) => x.name === name)!.permissions) out.add(p);
        }
        return out;
      };
      const expected = new Map<string, { gaining: string[]; losing: string[] }>();
      for (const u of users) {
        const gains = new Set<string>();
        const losses = new Set<string>();
        for (const scope of [null, ...tenants]) {
          const b = holds(first, u, scope);
          const a = holds(second, u, scope);
          for (const p of a) if (!b.has(p)) gains.add(p);
          for (const p of b) if (!a.has(p)) losses.add(p);
        }
        for (const [set, kind] of [[gains, "gaining"], [losses, "losing"]] as const) {
          for (const p of set) {
            if (!expected.has(p)) expected.set(p, { gaining: [], losing: [] });
            expected.get(p)![kind].push(u);
          }
        }
      }
      const want = [...expected.keys()].sort().map((permission) => {
        const { gaining, losing } = expected.get(permission)!;
        // No grants in these worlds: nothing changes through them (plan-impact-model.test.ts).
        return { permission, gaining: gaining.length, losing: losing.length, gainingSample: gaining.slice(0, 20), losingSample: losing.slice(0, 20), gainingPairs: [], losingPairs: [], atLeast: false };
      });
      expect(planned.body.impact ?? [], `seed ${seed}`).toEqual(want);
      const applied = await apply(appId, second);
      expectStatus(applied, 200);
      expect(applied.body.impact ?? []).toEqual(want);
    }
  });

  // PGlite is one connection: racers would only queue. Postgres and Citus run them side by side.
  if (engine !== "pglite") {
    it("two appliers racing with the same expectedVersion: exactly one wins", async () => {
      await createApp(service, "model-race", []);
      expectStatus(await apply("model-race", DOC), 200);
      const { version } = await get("model-race");
      const docs = [0, 1, 2, 3].map((i) => ({ ...DOC, policies: DOC.policies.map((p) => ({ ...p, description: `racer ${i}` })), expectedVersion: version }));
      const answers = await Promise.all(docs.map((d) => apply("model-race", d)));
      expect(answers.map((a) => a.status).sort()).toEqual([200, 409, 409, 409]);
      const winner = answers.findIndex((a) => a.status === 200);
      expect((await get("model-race")).policies[0]!.description).toBe(`racer ${winner}`);
      expect((await auditTypes("model-race")).filter((t) => t === "model.applied")).toHaveLength(2);
    });
  }
});
