/**
 * Inherits without `through` (API.md, round 4, "Relations within an
 * instance") in the catalog's contract, through the real REST API and
 * Connect-ES clients: `{relation: "editor"}` is stored, read back and put
 * back unchanged (`through: ""` explicit or left out alike); every refusal
 * is a 400 naming the exact path of the rule (an unknown relation, the
 * relation itself, a link, a rule listed twice, a cycle within an instance
 * of two and of three relations) and changes nothing; a cycle that passes
 * through a link is other instances, and allowed.
 */
import { createClient, ConnectError, Code } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { toJson } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CatalogService, PutCatalogResponseSchema } from "../gen/authz/v1/catalog_pb.js";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { createAppWithKey, startTestService, type TestService } from "./support/service.js";
import { expectError } from "./helpers/authz.js";

interface InheritJson {
  through?: string;
  relation?: string;
}
interface RelationJson {
  name: string;
  actions: string[];
  subjects?: string[];
  inherits?: InheritJson[];
}
interface EntryJson {
  resource: string;
  description: string;
  actions: string[];
  relations: RelationJson[];
}

/** Teams whose members include their admins, and documents in folders. */
const team = (inherits: InheritJson[] = [{ relation: "admin" }]): EntryJson => ({
  resource: "team",
  description: "",
  actions: ["read", "manage"],
  relations: [
    { name: "admin", actions: ["read", "manage"] },
    { name: "member", actions: ["read"], subjects: ["user", "team#member"], inherits },
  ],
});
const folder: EntryJson = {
  resource: "folder",
  description: "",
  actions: ["read", "update"],
  relations: [
    { name: "parent", actions: [], subjects: ["folder"] },
    { name: "viewer", actions: ["read"], subjects: ["user", "team#member"], inherits: [{ through: "parent", relation: "viewer" }] },
  ],
};
/** A document's relations 0..3; `reader` (index 3) is where the cases put their rules. */
const document = (readerInherits: InheritJson[], more: RelationJson[] = []): EntryJson => ({
  resource: "document",
  description: "",
  actions: ["read", "comment", "update"],
  relations: [
    { name: "parent", actions: [], subjects: ["folder"] },
    { name: "approver", actions: ["read", "update"], subjects: ["user", "team#member"] },
    { name: "reviewer", actions: ["comment"], inherits: [{ relation: "approver" }] },
    { name: "reader", actions: ["read"], subjects: ["user", "team#member"], inherits: readerInherits },
    ...more,
  ],
});
const catalogOf = (...resources: EntryJson[]) => ({ resources });

/** The catalog every refused PUT is tried against: it must be left as it was. */
const BASELINE = catalogOf(team(), folder, document([{ relation: "reviewer" }, { through: "parent", relation: "viewer" }]));

/** Catalogs refused: each a 400 whose message starts with `field`, listed in the details with exactly that field. */
const refused: { name: string; body: unknown; field: string; fragments: string[] }[] = [
  {
    name: "an unknown relation",
    body: catalogOf(team(), folder, document([{ relation: "nosuch" }])),
    field: "resources[2].relations[3].inherits[0].relation",
    fragments: ['"nosuch" is not a relation of resource "document"'],
  },
  {
    name: "a relation another resource has and this one lacks",
    body: catalogOf(team(), folder, document([{ relation: "member" }])),
    field: "resources[2].relations[3].inherits[0].relation",
    fragments: ['"member" is not a relation of resource "document"'],
  },
  {
    name: "an empty relation",
    body: catalogOf(team(), folder, document([{ relation: "" }])),
    field: "resources[2].relations[3].inherits[0].relation",
    fragments: ["required"],
  },
  {
    name: "no relation at all",
    body: catalogOf(team(), folder, document([{}])),
    field: "resources[2].relations[3].inherits[0].relation",
    fragments: ["required"],
  },
  {
    name: "the relation itself",
    body: catalogOf(team(), folder, document([{ relation: "approver" }, { relation: "reader" }])),
    field: "resources[2].relations[3].inherits[1].relation",
    fragments: ['"reader" is this relation'],
  },
  {
    name: "the relation itself, on another resource's entry",
    body: catalogOf(team([{ relation: "member" }]), folder, document([])),
    field: "resources[0].relations[1].inherits[0].relation",
    fragments: ['"member" is this relation'],
  },
  {
    name: "a link relation",
    body: catalogOf(team(), folder, document([{ relation: "parent" }])),
    field: "resources[2].relations[3].inherits[0].relation",
    fragments: ['"document#parent" is a link relation'],
  },
  {
    name: "a rule listed twice",
    body: catalogOf(team(), folder, document([{ relation: "approver" }, { through: "parent", relation: "viewer" }, { through: "", relation: "approver" }])),
    field: "resources[2].relations[3].inherits[2]",
    fragments: ['{relation: "approver"} is listed twice'],
  },
  {
    name: "a cycle of two within an instance",
    body: catalogOf(
      team(),
      folder,
      document([{ relation: "approver" }], [
        { name: "viewer", actions: ["read"], inherits: [{ relation: "editor" }] },
        { name: "editor", actions: ["read", "update"], inherits: [{ through: "parent", relation: "viewer" }, { relation: "viewer" }] },
      ]),
    ),
    field: "resources[2].relations[5].inherits[1].relation",
    fragments: ['"document" relations depend on themselves within an instance: viewer → editor → viewer'],
  },
  {
    name: "a cycle of two with a relation leading into it",
    body: catalogOf(
      team(),
      folder,
      document([{ relation: "commenter" }], [
        { name: "commenter", actions: ["comment"], inherits: [{ relation: "reader" }] },
        { name: "viewer", actions: ["read"], inherits: [{ relation: "commenter" }] },
      ]),
    ),
    // reader → commenter → reader is the cycle (viewer only leads into it): closed by commenter's rule.
    field: "resources[2].relations[4].inherits[0].relation",
    fragments: ["within an instance: reader → commenter → reader"],
  },
  {
    name: "a cycle of three within an instance",
    body: catalogOf(
      team(),
      folder,
      document([{ relation: "editor" }], [
        { name: "editor", actions: ["read", "update"], inherits: [{ relation: "viewer" }] },
        { name: "viewer", actions: ["read"], inherits: [{ through: "parent", relation: "viewer" }, { relation: "reader" }] },
      ]),
    ),
    field: "resources[2].relations[5].inherits[1].relation",
    fragments: ["reader → editor → viewer → reader"],
  },
];

describe.each(oneEngine(import.meta.url))("inherits within an instance on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;
  const path = "/api/v1/applications/inherits/resources";
  const put = (body: unknown) => service.call("PUT", path, { key, body });
  const get = async () => {
    const res = await service.call("GET", path, { key });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body as { resources: (EntryJson & { relations: (RelationJson & { builtIn: boolean })[] })[] };
  };
  const putOk = async (body: unknown) => {
    const res = await put(body);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body as Awaited<ReturnType<typeof get>>;
  };
  const relation = (catalog: Awaited<ReturnType<typeof get>>, resource: string, name: string) =>
    catalog.resources.find((e) => e.resource === resource)!.relations.find((r) => r.name === name)!;
  const catalogEvents = async () => {
    const res = await service.call("GET", "/api/v1/applications/inherits/audit-log?type=catalog.replaced&pageSize=1000", { key });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return (res.body.events as unknown[]).length;
  };

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    key = await createAppWithKey(service, "inherits");
  }, 60_000);
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  it("a rule without through is stored in its place and read back with through empty", async () => {
    const stored = await putOk(BASELINE);
    const read = await get();
    expect(read).toEqual(stored);
    expect(relation(read, "team", "member").inherits).toEqual([{ through: "", relation: "admin" }]);
    expect(relation(read, "document", "reviewer").inherits).toEqual([{ through: "", relation: "approver" }]);
    // In the order given, beside a rule through a link.
    expect(relation(read, "document", "reader").inherits).toEqual([
      { through: "", relation: "reviewer" },
      { through: "parent", relation: "viewer" },
    ]);
  });

  it("PUT of what GET returned stores the same catalog; through: \"\" sent explicitly is the same as left out", async () => {
    await putOk(BASELINE);
    const first = await get();
    const events = await catalogEvents();
    const again = await putOk(first);
    expect(again).toEqual(first);
    expect(await get()).toEqual(first);
    // The same catalog: its replacement gives and takes no permission.
    expect(await catalogEvents()).toBe(events + 1);
    const res = await service.call("GET", "/api/v1/applications/inherits/audit-log?type=catalog.replaced&pageSize=1", { key });
    expect(res.body.events[0].data).toMatchObject({ permissionsAdded: [], permissionsRemoved: [] });

    const spelled = catalogOf(team([{ through: "", relation: "admin" }]), folder, document([{ through: "", relation: "reviewer" }, { through: "parent", relation: "viewer" }]));
    expect(await putOk(spelled)).toEqual(first);
  });

  it("a cycle that passes through a link is allowed: the names are other instances", async () => {
    const looped = catalogOf(
      team(),
      {
        ...folder,
        relations: [
          { name: "parent", actions: [], subjects: ["folder"] },
          // viewer ← editor here ← viewer of the parent ← its editor ← its parent's viewer ...
          { name: "viewer", actions: ["read"], inherits: [{ relation: "editor" }] },
          { name: "editor", actions: ["read", "update"], inherits: [{ through: "parent", relation: "viewer" }] },
        ],
      },
      document([{ relation: "approver" }, { through: "parent", relation: "viewer" }]),
    );
    const stored = await putOk(looped);
    expect(relation(stored, "folder", "viewer").inherits).toEqual([{ through: "", relation: "editor" }]);
    expect(relation(stored, "folder", "editor").inherits).toEqual([{ through: "parent", relation: "viewer" }]);
    // A relation inheriting, within the instance, from a built-in and from a redefined built-in.
    const builtIns = catalogOf(team(), folder, document([{ relation: "owner" }, { relation: "viewer" }], [{ name: "viewer", actions: ["read"] }]));
    expect(relation(await putOk(builtIns), "document", "reader").inherits).toEqual([
      { through: "", relation: "owner" },
      { through: "", relation: "viewer" },
    ]);
  });

  describe("refusals", () => {
    let before: unknown;
    beforeAll(async () => {
      await putOk(BASELINE);
      before = await get();
    });

    it.each(refused)("$name → 400 naming $field", async ({ body, field, fragments }) => {
      const events = await catalogEvents();
      const res = await put(body);
      expectError(res, 400, "invalid_argument", ...fragments);
      expect(res.body.message.startsWith(`${field}: `), res.body.message).toBe(true);
      expect(res.body.details).toContainEqual(expect.objectContaining({ field }));
      expect(res.body.details).toHaveLength(1);
      // Nothing changed, and no event was written.
      expect(await get()).toEqual(before);
      expect(await catalogEvents()).toBe(events);
    });
  });

  describe("over Connect and gRPC", () => {
    const sessions: Http2SessionManager[] = [];
    afterAll(() => {
      for (const session of sessions) session.abort();
    });
    const transports = [
      { name: "Connect (JSON) over HTTP/1.1", make: (url: string) => createConnectTransport({ baseUrl: url, httpVersion: "1.1" }) },
      {
        name: "gRPC over HTTP/2",
        make: (url: string) => {
          const session = new Http2SessionManager(url);
          sessions.push(session);
          return createGrpcTransport({ baseUrl: url, sessionManager: session });
        },
      },
    ];

    it.each(transports)("$name: a rule with through unset is stored as over REST, and a cycle is refused naming its path", async ({ make }) => {
      const client = createClient(CatalogService, make(service.url));
      const headers = { headers: { "x-api-key": key } };
      // BASELINE's rules as messages: `through` left unset where the JSON leaves it out.
      const resources = BASELINE.resources.map((e) => ({
        ...e,
        relations: e.relations.map((r) => ({ ...r, inherits: (r.inherits ?? []).map((i) => ({ relation: i.relation!, ...(i.through === undefined ? {} : { through: i.through }) })) })),
      }));
      const stored = await client.putCatalog({ appId: "inherits", resources }, headers);
      const rest = await get();
      expect(toJson(PutCatalogResponseSchema, stored, { alwaysEmitImplicit: true })).toEqual(rest);
      expect(stored.resources[0]!.relations.find((r) => r.name === "member")!.inherits.map((i) => [i.through, i.relation])).toEqual([["", "admin"]]);

      const cycle = refused.find((c) => c.name === "a cycle of two within an instance")!;
      const error = await client.putCatalog({ appId: "inherits", ...(cycle.body as { resources: EntryJson[] }) }, headers).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ConnectError);
      expect((error as ConnectError).code).toBe(Code.InvalidArgument);
      expect((error as ConnectError).rawMessage.startsWith(`${cycle.field}: `)).toBe(true);
      expect(await get()).toEqual(rest);
    });
  });
});
