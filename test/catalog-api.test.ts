/**
 * The catalog over REST, on each engine: replace, read back, effective
 * relations, validation, the orphan rule, and atomicity.
 */
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectErrorBody } from "./helpers/error-body.js";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { createAppWithKey, startTestService, type RestAnswer, type TestService } from "./support/service.js";

const catalog = {
  resources: [
    {
      resource: "document",
      description: "A text document",
      actions: ["create", "read", "update", "delete", "comment", "list"],
      relations: [{ name: "reviewer", actions: ["read", "comment"] }],
    },
    { resource: "invoice", description: "", actions: ["read", "send", "approve"] },
  ],
};

interface RelationJson {
  name: string;
  actions: string[];
  builtIn?: boolean;
  subjects?: string[];
  inherits?: unknown[];
  requires?: unknown[];
  unless?: unknown[];
}
interface EntryJson {
  resource: string;
  description: string;
  actions: string[];
  relations?: RelationJson[];
}

/** Every non-2xx answer: exactly {code, message, details, requestId}, details an array, requestId the answer's x-request-id. */
function expectError(res: RestAnswer, status: number, code: string, ...fragments: string[]): void {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expectErrorBody(res.body, res.headers.get("x-request-id"));
  expect(res.body.code).toBe(code);
  expect(typeof res.body.message).toBe("string");
  expect(Array.isArray(res.body.details)).toBe(true);
  for (const fragment of fragments) expect(res.body.message).toContain(fragment);
}

/** An entry's relations by name, each with its actions sorted and builtIn as sent (order-free comparison). */
function relationsOf(
  entry: EntryJson,
): Record<string, { actions: string[]; builtIn: boolean | undefined; subjects: string[] | undefined; inherits: unknown[] | undefined; requires: unknown[] | undefined; unless: unknown[] | undefined }> {
  return Object.fromEntries(
    (entry.relations ?? []).map((r) => [r.name, { actions: [...r.actions].sort(), builtIn: r.builtIn, subjects: r.subjects, inherits: r.inherits, requires: r.requires, unless: r.unless }]),
  );
}

const sorted = (xs: string[]) => [...xs].sort();

/** A catalog of `n` resources r0..r(n-1), each with one action. */
const manyResources = (n: number): EntryJson[] =>
  Array.from({ length: n }, (_, i) => ({ resource: `r${i}`, description: "", actions: ["read"] }));

/** `n` distinct valid action names. */
const manyActions = (n: number): string[] => Array.from({ length: n }, (_, i) => `act${i}`);

/** The baseline the validation cases start from: every failed PUT must leave it as it was. */
const baseline: { resources: EntryJson[] } = {
  resources: [
    {
      resource: "document",
      description: "A text document",
      actions: ["create", "read", "update", "delete", "comment", "list"],
      relations: [{ name: "reviewer", actions: ["read", "comment"] }],
    },
    { resource: "invoice", description: "", actions: ["read", "send", "approve"] },
  ],
};

const doc = (over: Partial<EntryJson> = {}): EntryJson => ({ ...baseline.resources[0]!, ...over });
const inv = (over: Partial<EntryJson> = {}): EntryJson => ({ ...baseline.resources[1]!, ...over });

/** Invalid catalogs: each → 400 invalid_argument whose message names the field path and the value. */
const invalidCatalogs: { name: string; body: unknown; field: string; fragments: string[] }[] = [
  { name: "bad resource name (upper case)", body: { resources: [doc(), inv({ resource: "Invoice" })] }, field: "resources[1].resource", fragments: ['"Invoice"'] },
  { name: "bad resource name (hyphen)", body: { resources: [doc({ resource: "sales-order" })] }, field: "resources[0].resource", fragments: ['"sales-order"'] },
  { name: "bad resource name (65 characters)", body: { resources: [doc({ resource: "r".repeat(65) })] }, field: "resources[0].resource", fragments: ["r".repeat(65)] },
  { name: "missing resource name", body: { resources: [{ description: "", actions: ["read"] }] }, field: "resources[0].resource", fragments: ["required"] },
  { name: "duplicate resource", body: { resources: [doc(), inv({ resource: "document" })] }, field: "resources[1].resource", fragments: ['"document"'] },
  { name: "bad action (upper case)", body: { resources: [doc(), inv({ actions: ["Read", "send"] })] }, field: "resources[1].actions[0]", fragments: ['"Read"'] },
  { name: "bad action (leading digit)", body: { resources: [inv({ actions: ["read", "2fa"] })] }, field: "resources[0].actions[1]", fragments: ['"2fa"'] },
  { name: "bad action (empty)", body: { resources: [inv({ actions: ["read", ""] })] }, field: "resources[0].actions[1]", fragments: ["required"] },
  { name: "duplicate action", body: { resources: [inv({ actions: ["read", "send", "read"] })] }, field: "resources[0].actions[2]", fragments: ['"read"'] },
  { name: "description of 2001 characters", body: { resources: [doc({ description: "d".repeat(2001) })] }, field: "resources[0].description", fragments: ["2000", "2001"] },
  { name: "1001 resources", body: { resources: manyResources(1001) }, field: "resources", fragments: ["1000", "1001"] },
  { name: "101 actions", body: { resources: [inv({ actions: manyActions(101) })] }, field: "resources[0].actions", fragments: ["100", "101"] },
  {
    name: "custom relation implying an action the resource lacks",
    body: { resources: [doc({ relations: [{ name: "reviewer", actions: ["read", "publish"] }] })] },
    field: "resources[0].relations[0].actions[1]",
    fragments: ['"publish"', '"document"'],
  },
  {
    name: "redefined built-in implying an action the resource lacks",
    body: { resources: [inv({ relations: [{ name: "editor", actions: ["update"] }] })] },
    field: "resources[0].relations[0].actions[0]",
    fragments: ['"update"', '"invoice"'],
  },
  {
    name: "builtIn: true on a name that is not built in",
    body: { resources: [doc({ relations: [{ name: "reviewer", actions: ["read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] }] })] },
    field: "resources[0].relations[0].builtIn",
    fragments: ['"reviewer"'],
  },
  {
    name: "duplicate relation name",
    body: { resources: [doc({ relations: [{ name: "reviewer", actions: ["read"] }, { name: "reviewer", actions: ["comment"] }] })] },
    field: "resources[0].relations[1].name",
    fragments: ['"reviewer"'],
  },
  {
    name: "duplicate redefinition of a built-in",
    body: { resources: [doc({ relations: [{ name: "editor", actions: ["read"] }, { name: "editor", actions: ["update"] }] })] },
    field: "resources[0].relations[1].name",
    fragments: ['"editor"'],
  },
  { name: "bad relation name (upper case)", body: { resources: [doc({ relations: [{ name: "Reviewer", actions: ["read"] }] })] }, field: "resources[0].relations[0].name", fragments: ['"Reviewer"'] },
  { name: "bad relation name (hyphen)", body: { resources: [doc({ relations: [{ name: "co-owner", actions: ["read"] }] })] }, field: "resources[0].relations[0].name", fragments: ['"co-owner"'] },
  { name: "empty relation name", body: { resources: [doc({ relations: [{ name: "", actions: ["read"] }] })] }, field: "resources[0].relations[0].name", fragments: ["required"] },
  { name: "duplicate action in a relation", body: { resources: [doc({ relations: [{ name: "reviewer", actions: ["read", "read"] }] })] }, field: "resources[0].relations[0].actions[1]", fragments: ['"read"'] },
  { name: "`resources` an object, not an array", body: { resources: {} }, field: "resources", fragments: ["array", "object"] },
  { name: "`resources` a string", body: { resources: "document" }, field: "resources", fragments: ["array", "string"] },
  { name: "an entry that is a string", body: { resources: [doc(), "invoice"] }, field: "resources[1]", fragments: ["object", "string"] },
  { name: "an entry that is an array", body: { resources: [[]] }, field: "resources[0]", fragments: ["object", "array"] },
  { name: "an entry that is null", body: { resources: [null] }, field: "resources[0]", fragments: [] },
  { name: "`actions` a string", body: { resources: [inv({ actions: "read" as unknown as string[] })] }, field: "resources[0].actions", fragments: ["array", "string"] },
  { name: "an action that is a number", body: { resources: [inv({ actions: ["read", 7 as unknown as string] })] }, field: "resources[0].actions[1]", fragments: ["string", "number"] },
  { name: "`description` a number", body: { resources: [inv({ description: 5 as unknown as string })] }, field: "resources[0].description", fragments: ["string", "number"] },
  { name: "an unknown entry field", body: { resources: [{ ...inv(), permissions: ["invoice:read"] }] }, field: "resources[0].permissions", fragments: [] },
  { name: "an unknown relation field", body: { resources: [doc({ relations: [{ name: "reviewer", actions: ["read"], implies: [] } as RelationJson] })] }, field: "resources[0].relations[0].implies", fragments: [] },
];

describe.each(oneEngine(import.meta.url))("catalog API on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let appKey: string;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    appKey = await createAppWithKey(service, "shop");
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  it("replaces the catalog and returns the stored one with effective relations", async () => {
    const put = await service.call("PUT", "/api/v1/applications/shop/resources", { body: catalog });
    expect(put.status).toBe(200);
    const get = await service.call("GET", "/api/v1/applications/shop/resources", { key: appKey });
    expect(get.status).toBe(200);
    expect(get.body).toEqual(put.body);
    const [document, invoice] = get.body.resources;
    expect(document.relations).toEqual([
      { name: "owner", actions: ["create", "read", "update", "delete", "comment", "list"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      { name: "editor", actions: ["create", "read", "update"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      { name: "viewer", actions: ["read", "list"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      { name: "commenter", actions: ["read", "comment"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      { name: "reviewer", actions: ["read", "comment"], builtIn: false, subjects: ["user"], inherits: [], requires: [], unless: [] },
    ]);
    expect(invoice.relations).toEqual([
      { name: "owner", actions: ["read", "send", "approve"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      { name: "editor", actions: ["read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      { name: "viewer", actions: ["read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      { name: "commenter", actions: ["read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
    ]);
  });

  const path = (appId: string) => `/api/v1/applications/${appId}/resources`;
  const put = (appId: string, body: unknown, key?: string) =>
    service.call("PUT", path(appId), { body, ...(key !== undefined ? { key } : {}) });
  const get = (appId: string) => service.call("GET", path(appId));
  /** Creates an application (operator key). */
  const newApp = async (appId: string) => {
    const res = await service.call("POST", "/api/v1/applications", { body: { appId } });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
  };
  /** PUTs a catalog that must be accepted; returns the answer's body. */
  const putOk = async (appId: string, body: unknown) => {
    const res = await put(appId, body);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body as { resources: EntryJson[] };
  };
  const catalogEvents = async (appId: string) => {
    const res = await service.call("GET", `/api/v1/applications/${appId}/audit-log?type=catalog.replaced&pageSize=1000`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body.events as { type: string; actorKeyId: string; targetType: string; targetId: string; data: Record<string, unknown> }[];
  };

  describe("replace and read", () => {
    it("an application with no catalog yet has an empty one", async () => {
      await newApp("fresh");
      const res = await get("fresh");
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ resources: [] });
    });

    it("an empty catalog is accepted", async () => {
      await newApp("empty");
      await putOk("empty", baseline);
      expect(await putOk("empty", { resources: [] })).toEqual({ resources: [] });
      expect((await get("empty")).body).toEqual({ resources: [] });
    });

    it("PUT replaces the whole catalog: a second PUT with fewer resources removes the others", async () => {
      await newApp("replace");
      const three = {
        resources: [...baseline.resources, { resource: "folder", description: "Folders", actions: ["read", "list"] }],
      };
      const first = await putOk("replace", three);
      expect(first.resources.map((r) => r.resource)).toEqual(["document", "invoice", "folder"]);

      const second = await putOk("replace", { resources: [{ resource: "folder", description: "Only folders", actions: ["list"] }] });
      const read = await get("replace");
      expect(read.body).toEqual(second);
      expect(read.body.resources).toHaveLength(1);
      expect(read.body.resources[0]).toMatchObject({ resource: "folder", description: "Only folders", actions: ["list"] });
    });

    it("PUT drops custom relations the new catalog leaves out", async () => {
      await newApp("drop-relation");
      await putOk("drop-relation", baseline);
      await putOk("drop-relation", { resources: [doc({ relations: [] }), inv()] });
      const [document] = (await get("drop-relation")).body.resources as EntryJson[];
      expect(Object.keys(relationsOf(document!)).sort()).toEqual(["commenter", "editor", "owner", "viewer"]);
    });

    it("keeps the order of resources and actions, and the descriptions", async () => {
      await newApp("order");
      const body = {
        resources: [
          { resource: "zeta", description: "last letter", actions: ["update", "archive", "read"] },
          { resource: "alpha", description: "first letter", actions: ["read"] },
        ],
      };
      const read = await putOk("order", body);
      expect(read.resources.map((r) => [r.resource, r.description, r.actions])).toEqual([
        ["zeta", "last letter", ["update", "archive", "read"]],
        ["alpha", "first letter", ["read"]],
      ]);
    });

    it("concurrent replacements are atomic: each succeeds, and the result is exactly one of them", async () => {
      await newApp("race");
      const bodies = Array.from({ length: 8 }, (_, i) => ({
        resources: [
          { resource: `first_${i}`, description: `round ${i}`, actions: ["read", `act_${i}`] },
          { resource: `second_${i}`, description: "", actions: ["read"], relations: [{ name: `rel_${i}`, actions: ["read"] }] },
        ],
      }));
      const answers = await Promise.all(bodies.map((body) => put("race", body)));
      for (const answer of answers) expect(answer.status, JSON.stringify(answer.body)).toBe(200);
      const final = (await get("race")).body;
      expect(answers.map((a) => a.body)).toContainEqual(final);
      expect(await catalogEvents("race")).toHaveLength(8);
    });

    it("GET and PUT of an unknown application → 404 naming it", async () => {
      expectError(await get("ghost"), 404, "not_found", "ghost");
      expectError(await put("ghost", baseline), 404, "not_found", "ghost");
    });
  });

  describe("effective relations", () => {
    let entries: Record<string, EntryJson>;

    beforeAll(async () => {
      await newApp("effective");
      const body = await putOk("effective", {
        resources: [
          {
            resource: "ticket",
            description: "",
            actions: ["read", "update", "comment", "close"],
            relations: [
              { name: "editor", actions: ["read", "update", "close"] },
              { name: "assignee", actions: ["close"] },
            ],
          },
          { resource: "invoice", description: "", actions: ["read", "send"] },
          { resource: "payment", description: "", actions: ["send"] },
          { resource: "note", description: "", actions: ["read", "comment"], relations: [{ name: "commenter", actions: ["comment"] }] },
          { resource: "report", description: "", actions: ["create", "read", "update", "list", "export"] },
        ],
      });
      entries = Object.fromEntries(body.resources.map((e) => [e.resource, e]));
      expect((await get("effective")).body).toEqual(body);
    });

    it("built-ins are limited to the resource's actions; owner implies every action", () => {
      expect(relationsOf(entries.report!)).toEqual({
        owner: { actions: sorted(["create", "read", "update", "list", "export"]), builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        editor: { actions: sorted(["create", "read", "update"]), builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        viewer: { actions: sorted(["read", "list"]), builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        commenter: { actions: ["read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      });
    });

    it("commenter on a resource without `comment` implies read only", () => {
      expect(relationsOf(entries.invoice!).commenter).toEqual({ actions: ["read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] });
      expect(relationsOf(entries.invoice!).owner).toEqual({ actions: sorted(["read", "send"]), builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] });
    });

    it("a resource with none of a built-in's actions still lists it, implying nothing (owner: its every action)", () => {
      expect(relationsOf(entries.payment!)).toEqual({
        owner: { actions: ["send"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        editor: { actions: [], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        viewer: { actions: [], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        commenter: { actions: [], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      });
    });

    it("a custom relation named like a built-in replaces it, with builtIn false", () => {
      const ticket = relationsOf(entries.ticket!);
      expect(ticket).toEqual({
        owner: { actions: sorted(["read", "update", "comment", "close"]), builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        editor: { actions: sorted(["read", "update", "close"]), builtIn: false, subjects: ["user"], inherits: [], requires: [], unless: [] },
        viewer: { actions: ["read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        commenter: { actions: sorted(["read", "comment"]), builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        assignee: { actions: ["close"], builtIn: false, subjects: ["user"], inherits: [], requires: [], unless: [] },
      });
      expect(relationsOf(entries.note!).commenter).toEqual({ actions: ["comment"], builtIn: false, subjects: ["user"], inherits: [], requires: [], unless: [] });
      // Each relation name appears once.
      const names = entries.ticket!.relations!.map((r) => r.name);
      expect(new Set(names).size).toBe(names.length);
    });

    it("booleans are always emitted: builtIn: false is present, not omitted", () => {
      const assignee = entries.ticket!.relations!.find((r) => r.name === "assignee")!;
      expect(assignee).toHaveProperty("builtIn", false);
      for (const entry of Object.values(entries)) {
        for (const relation of entry.relations!) expect(typeof relation.builtIn).toBe("boolean");
      }
    });
  });

  describe("round trip", () => {
    it("PUT of the body a GET returned (built-ins with builtIn: true included) stores the same catalog", async () => {
      await newApp("roundtrip");
      await putOk("roundtrip", {
        resources: [
          doc({ relations: [{ name: "reviewer", actions: ["read", "comment"] }, { name: "viewer", actions: ["read"] }] }),
          inv(),
        ],
      });
      const first = await get("roundtrip");
      const eventsBefore = await catalogEvents("roundtrip");
      expect(first.body.resources[0].relations.some((r: RelationJson) => r.builtIn === true)).toBe(true);

      const again = await put("roundtrip", first.body);
      expect(again.status, JSON.stringify(again.body)).toBe(200);
      expect(again.body).toEqual(first.body);
      expect((await get("roundtrip")).body).toEqual(first.body);

      const eventsAfter = await catalogEvents("roundtrip");
      expect(eventsAfter).toHaveLength(eventsBefore.length + 1);
      expect(eventsAfter[0]!.data).toMatchObject({ permissionsAdded: [], permissionsRemoved: [] });
    });

    it("built-ins sent back with stale actions are ignored: their actions are derived", async () => {
      await newApp("stale-builtins");
      const body = {
        resources: [inv({ relations: [{ name: "owner", actions: ["read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] }, { name: "viewer", actions: [], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] }] })],
      };
      const stored = await putOk("stale-builtins", body);
      expect(relationsOf(stored.resources[0]!).owner).toEqual({ actions: sorted(["read", "send", "approve"]), builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] });
      expect(relationsOf(stored.resources[0]!).viewer).toEqual({ actions: ["read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] });
    });
  });

  describe("validation", () => {
    let baselineRead: unknown;
    beforeAll(async () => {
      await newApp("strict");
      await putOk("strict", baseline);
      baselineRead = (await get("strict")).body;
    });

    it.each(invalidCatalogs)("$name → 400 naming $field", async ({ body, field, fragments }) => {
      const eventsBefore = await catalogEvents("strict");
      const res = await put("strict", body);
      expectError(res, 400, "invalid_argument", field, ...fragments);
      expect(res.body.message.startsWith(field)).toBe(true);
      expect(res.body.details).toContainEqual(expect.objectContaining({ field }));
      // Nothing changed, and no event was written.
      expect((await get("strict")).body).toEqual(baselineRead);
      expect(await catalogEvents("strict")).toHaveLength(eventsBefore.length);
    });

    it("every violation is listed in the details, not just the first", async () => {
      const res = await put("strict", { resources: [inv({ resource: "Bad", actions: ["read", "Send"] })] });
      expectError(res, 400, "invalid_argument", "resources[0].resource");
      const fields = (res.body.details as { field: string }[]).map((d) => d.field);
      expect(fields).toEqual(expect.arrayContaining(["resources[0].resource", "resources[0].actions[1]"]));
    });

    it("the limits themselves are accepted: 1000 resources, 100 actions, 2000-character descriptions, 64-character names", async () => {
      await newApp("limits");
      const big = await putOk("limits", { resources: manyResources(1000) });
      expect(big.resources).toHaveLength(1000);
      expect((await get("limits")).body.resources).toHaveLength(1000);

      const name64 = `n${"x".repeat(63)}`;
      const wide = await putOk("limits", {
        resources: [{ resource: name64, description: "d".repeat(2000), actions: [...manyActions(99), name64], relations: [{ name: name64, actions: [name64] }] }],
      });
      expect(wide.resources[0]!.actions).toHaveLength(100);
      expect(wide.resources[0]!.description).toHaveLength(2000);
      expect(relationsOf(wide.resources[0]!)[name64]).toEqual({ actions: [name64], builtIn: false, subjects: ["user"], inherits: [], requires: [], unless: [] });

      // Characters, not UTF-16 units or bytes: 2000 emoji fit, 2001 do not.
      const emoji = "\u{1F600}";
      const fits = await putOk("limits", { resources: [{ resource: "smile", description: emoji.repeat(2000), actions: ["read"] }] });
      expect([...fits.resources[0]!.description]).toHaveLength(2000);
      expectError(
        await put("limits", { resources: [{ resource: "smile", description: emoji.repeat(2001), actions: ["read"] }] }),
        400,
        "invalid_argument",
        "resources[0].description",
      );
    });
  });

  describe("orphan rule", () => {
    const orphanBase: { resources: EntryJson[] } = {
      resources: [...baseline.resources, { resource: "folder", description: "", actions: ["read", "list"] }],
    };
    let before: unknown;

    const without = (resource: string): EntryJson[] => orphanBase.resources.filter((r) => r.resource !== resource);
    const replaced = (entry: EntryJson): EntryJson[] => orphanBase.resources.map((r) => (r.resource === entry.resource ? entry : r));

    /** PUT must answer 409 failed_precondition naming `fragments`, and change nothing. */
    async function expectOrphanRefusal(body: unknown, fragments: string[], details: object[]): Promise<RestAnswer> {
      const eventsBefore = await catalogEvents("orph");
      const res = await put("orph", body);
      expectError(res, 409, "failed_precondition", ...fragments);
      for (const detail of details) expect(res.body.details).toContainEqual(expect.objectContaining(detail));
      expect((await get("orph")).body).toEqual(before);
      expect(await catalogEvents("orph")).toHaveLength(eventsBefore.length);
      return res;
    }

    beforeAll(async () => {
      await newApp("orph");
      await newApp("orph-other");
      await putOk("orph", orphanBase);
      await putOk("orph-other", orphanBase);
      before = (await get("orph")).body;
      const q = (sql: string, params: unknown[]) => service.db.query(sql, params);
      // The policy and grant endpoints are not built yet: their rows go in by SQL.
      await q("INSERT INTO policies (app_id, policy_id, name) VALUES ($1, $2, $3)", ["orph", "pol_billing", "Billing admins"]);
      await q(
        "INSERT INTO policy_permissions (app_id, policy_id, resource, action, position) VALUES ($1, $2, $3, $4, 0), ($1, $2, $5, $6, 1)",
        ["orph", "pol_billing", "invoice", "approve", "document", "delete"],
      );
      await q(
        "INSERT INTO relationships (app_id, resource, resource_id, relation, user_id) VALUES ($1, 'folder', 'f1', 'viewer', 'alice'), ($1, 'document', 'd1', 'reviewer', 'bob')",
        ["orph"],
      );
      // Another application's policy and grants never block this one's catalog.
      await q("INSERT INTO policies (app_id, policy_id, name) VALUES ($1, $2, $3)", ["orph-other", "pol_other", "Other app"]);
      await q(
        "INSERT INTO policy_permissions (app_id, policy_id, resource, action, position) VALUES ($1, $2, 'invoice', 'send', 0)",
        ["orph-other", "pol_other"],
      );
      await q(
        "INSERT INTO relationships (app_id, resource, resource_id, relation, user_id) VALUES ($1, 'tag', 't1', 'owner', 'carol')",
        ["orph-other"],
      );
    });

    it("(a) dropping a permission a policy holds → 409 naming the policy and the permission", async () => {
      const res = await expectOrphanRefusal(
        { resources: replaced(inv({ actions: ["read", "send"] })) },
        ["invoice:approve", "Billing admins"],
        [{ policyId: "pol_billing", policyName: "Billing admins", permission: "invoice:approve" }],
      );
      // Only what the new catalog drops: document:delete is kept, so it is not listed.
      expect(res.body.message).not.toContain("document:delete");
      expect(res.body.details).toHaveLength(1);
    });

    it("(b) dropping a resource a grant uses → 409 naming the resource", async () => {
      await expectOrphanRefusal({ resources: without("folder") }, ["folder"], [{ resource: "folder" }]);
    });

    it("(c) dropping a custom relation a grant uses → 409 naming the resource and the relation", async () => {
      await expectOrphanRefusal(
        { resources: replaced(doc({ relations: [] })) },
        ["document", "reviewer"],
        [{ resource: "document", relation: "reviewer" }],
      );
    });

    it("(c') renaming a used custom relation is dropping it → 409", async () => {
      await expectOrphanRefusal(
        { resources: replaced(doc({ relations: [{ name: "critic", actions: ["read", "comment"] }] })) },
        ["reviewer"],
        [{ resource: "document", relation: "reviewer" }],
      );
    });

    it("dropping a whole resource held by a policy and used by grants names all of it", async () => {
      await expectOrphanRefusal(
        { resources: without("document") },
        ["document:delete", "Billing admins", "document"],
        [{ policyId: "pol_billing", permission: "document:delete" }, { resource: "document" }],
      );
    });

    it("a new catalog that keeps every held permission and used resource and relation is accepted", async () => {
      const body = {
        resources: [
          doc({ description: "edited", actions: [...doc().actions, "share"], relations: [{ name: "reviewer", actions: ["read"] }] }),
          // invoice:send is dropped: only the other application's policy holds it.
          inv({ actions: ["read", "approve", "archive"] }),
          { resource: "folder", description: "", actions: ["read", "list", "rename"] },
          { resource: "label", description: "new", actions: ["read"] },
        ],
      };
      const stored = await putOk("orph", body);
      expect(stored.resources.map((r) => r.resource)).toEqual(["document", "invoice", "folder", "label"]);
      expect((await get("orph")).body).toEqual(stored);
      before = stored;
    });

    it("another application's policies and grants do not block", async () => {
      // orph-other's own policy holds invoice:send, its grant uses "tag"; orph dropped invoice:send above.
      expect((await get("orph")).body.resources[1].actions).toEqual(["read", "approve", "archive"]);
      // And orph's rows do not block orph-other.
      await putOk("orph-other", { resources: [inv({ actions: ["read", "send"] })] });
    });

    it("once the policy no longer holds the permission, dropping it is accepted", async () => {
      await service.db.query("DELETE FROM policy_permissions WHERE app_id = $1 AND policy_id = $2 AND resource = 'invoice'", ["orph", "pol_billing"]);
      const current = (await get("orph")).body as { resources: EntryJson[] };
      const body = { resources: current.resources.map((r) => (r.resource === "invoice" ? { ...r, actions: ["read"], relations: [] } : r)) };
      const stored = await putOk("orph", body);
      expect(stored.resources.find((r) => r.resource === "invoice")!.actions).toEqual(["read"]);
    });
  });

  // Deterministic where the race above is left to chance: a catalog change in flight (a
  // transaction of the test's own holding the application's lock, as PUT's does, with the
  // relation's row gone) holds a single grant's write back until it commits; the write then
  // sees the new catalog and is refused. PGlite is one connection: the test cannot hold it apart.
  it.skipIf(engine === "pglite")("a single grant's write waits for a catalog change in flight, then meets the new catalog", async () => {
    const key = await createAppWithKey(service, "grant-held");
    await putOk("grant-held", { resources: [doc(), inv()] });
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    try {
      await client.query("BEGIN");
      await client.query("SELECT pg_advisory_xact_lock(2, hashtext($1))", ["grant-held"]);
      await client.query("DELETE FROM catalog_relations WHERE app_id = $1 AND resource = 'document' AND relation = 'reviewer'", ["grant-held"]);
      let answered = false;
      const write = service
        .call("POST", "/api/v1/authorization/relationships", { key, body: { userId: "ann", resource: "document", resourceId: "d1", relation: "reviewer" } })
        .finally(() => (answered = true));
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(answered).toBe(false);
      await client.query("COMMIT");
      expectError(await write, 400, "invalid_argument", "reviewer");
    } finally {
      await client.end();
    }
    const stored = await service.call("GET", "/api/v1/authorization/relationships?resource=document&resourceId=d1", { key });
    expect(stored.body.relationships).toEqual([]);
  });

  it("a grant written while the catalog drops its relation: never a grant the catalog lacks, never an acknowledged grant lost", async () => {
    const key = await createAppWithKey(service, "grant-race");
    const withReviewer = { resources: [doc(), inv()] };
    const withoutReviewer = { resources: [doc({ relations: [] }), inv()] };
    const outcomes = { catalogFirst: 0, grantsFirst: 0 };
    for (let round = 0; round < 8; round++) {
      await putOk("grant-race", withReviewer);
      const users = Array.from({ length: 8 }, (_, i) => `u${round}-${i}`);
      const writes = users.map((userId) =>
        service.call("POST", "/api/v1/authorization/relationships", {
          key,
          body: { userId, resource: "document", resourceId: "d1", relation: "reviewer" },
        }),
      );
      // The drop goes out among the writes, so that some land before it and some after.
      const [before, drop, after] = await Promise.all([Promise.all(writes.slice(0, 4)), put("grant-race", withoutReviewer), Promise.all(writes.slice(4))]);
      const answers = [...before, ...after];
      for (const a of answers) expect([200, 201, 400], JSON.stringify(a.body)).toContain(a.status);
      expect([200, 409], JSON.stringify(drop.body)).toContain(drop.status);
      const acknowledged = users.filter((_, i) => answers[i]!.status < 300).sort();
      const stored = await service.call("GET", "/api/v1/authorization/relationships?resource=document&resourceId=d1&pageSize=1000", { key });
      expect(stored.status, JSON.stringify(stored.body)).toBe(200);
      const holders = (stored.body.relationships as { userId: string; relation: string }[]).filter((r) => r.relation === "reviewer").map((r) => r.userId);
      // Every acknowledged grant is there, and no other.
      expect(holders.sort()).toEqual(acknowledged);
      const relations = ((await get("grant-race")).body.resources as EntryJson[])[0]!.relations!.map((r) => r.name);
      if (drop.status === 200) {
        outcomes.catalogFirst++;
        expect(relations).not.toContain("reviewer");
        expect(acknowledged).toEqual([]);
      } else {
        outcomes.grantsFirst++;
        expect(relations).toContain("reviewer");
        expect(acknowledged.length).toBeGreaterThan(0);
        const cleared = await service.call("POST", "/api/v1/authorization/relationships/delete", { key, body: { resource: "document", resourceId: "d1" } });
        expect(cleared.status, JSON.stringify(cleared.body)).toBe(200);
      }
      // A refused write is refused for the relation the catalog no longer has.
      for (const a of answers.filter((x) => x.status === 400)) expect(a.body.message).toContain("reviewer");
    }
    expect(outcomes.catalogFirst + outcomes.grantsFirst).toBe(8);
  });

  describe("audit", () => {
    it("each replacement writes catalog.replaced with permissionsAdded and permissionsRemoved", async () => {
      const appKey = await createAppWithKey(service, "audited");
      const keys = await service.call("GET", "/api/v1/applications/audited/api-keys");
      const keyId = keys.body.apiKeys[0].keyId as string;

      const v1 = {
        resources: [
          { resource: "document", description: "", actions: ["read", "update"] },
          { resource: "invoice", description: "", actions: ["read", "send"] },
        ],
      };
      expect((await put("audited", v1, appKey)).status).toBe(200);
      let events = await catalogEvents("audited");
      expect(events).toHaveLength(1);
      expect(events[0]).toMatchObject({ type: "catalog.replaced", targetType: "catalog", targetId: "audited", actorKeyId: keyId });
      expect(sorted(events[0]!.data.permissionsAdded as string[])).toEqual(["document:read", "document:update", "invoice:read", "invoice:send"]);
      expect(events[0]!.data.permissionsRemoved).toEqual([]);

      const v2 = {
        resources: [
          { resource: "document", description: "", actions: ["read", "update", "delete"] },
          { resource: "invoice", description: "", actions: ["read"] },
        ],
      };
      expect((await put("audited", v2)).status).toBe(200);
      events = await catalogEvents("audited");
      expect(events).toHaveLength(2);
      expect(events[0]).toMatchObject({ actorKeyId: "operator" }); // newest first
      expect(events[0]!.data.permissionsAdded).toEqual(["document:delete"]);
      expect(events[0]!.data.permissionsRemoved).toEqual(["invoice:send"]);
    });
  });
});
