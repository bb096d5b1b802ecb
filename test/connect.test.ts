/**
 * Connect-ES clients end to end, on each engine: the same calls over every
 * transport connect-node offers (Connect JSON and binary over HTTP/1.1,
 * Connect over HTTP/2, gRPC-Web over HTTP/1.1, gRPC over HTTP/2), with the
 * error codes and error details. Plus raw Connect-protocol JSON over fetch:
 * unknown fields are refused and booleans are always written.
 */
import { toJson, type JsonValue } from "@bufbuild/protobuf";
import { StructSchema, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApplicationSchema, ApplicationService } from "../gen/authz/v1/applications_pb.js";
import { CatalogService, GetCatalogResponseSchema, PutCatalogResponseSchema } from "../gen/authz/v1/catalog_pb.js";
import { CheckService } from "../gen/authz/v1/check_pb.js";
import { PolicyService } from "../gen/authz/v1/policies_pb.js";
import { RelationshipService } from "../gen/authz/v1/relationships_pb.js";
import { RoleService } from "../gen/authz/v1/roles_pb.js";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, startTestService, type TestService } from "./support/service.js";
import { sampleEffectiveResources, sampleResources } from "./support/fixtures.js";

// ---------------------------------------------------------------------------
// The transports, table-driven.

interface TransportCase {
  name: string;
  /** Short, appId-safe tag so each transport works on applications of its own. */
  tag: string;
  make(baseUrl: string, sessions: Http2SessionManager[]): Transport;
}

function h2Session(baseUrl: string, sessions: Http2SessionManager[]): Http2SessionManager {
  const session = new Http2SessionManager(baseUrl);
  sessions.push(session);
  return session;
}

const transports: TransportCase[] = [
  {
    name: "Connect (JSON) over HTTP/1.1",
    tag: "cj1",
    make: (baseUrl) => createConnectTransport({ baseUrl, httpVersion: "1.1" }),
  },
  {
    name: "Connect (binary) over HTTP/1.1",
    tag: "cb1",
    make: (baseUrl) => createConnectTransport({ baseUrl, httpVersion: "1.1", useBinaryFormat: true }),
  },
  {
    name: "Connect (JSON) over HTTP/2",
    tag: "cj2",
    make: (baseUrl, sessions) =>
      createConnectTransport({ baseUrl, httpVersion: "2", sessionManager: h2Session(baseUrl, sessions) }),
  },
  {
    name: "gRPC-Web over HTTP/1.1",
    tag: "gw1",
    make: (baseUrl) => createGrpcWebTransport({ baseUrl, httpVersion: "1.1" }),
  },
  {
    // createGrpcTransport speaks HTTP/2 only; its options have no httpVersion.
    name: "gRPC over HTTP/2",
    tag: "gr2",
    make: (baseUrl, sessions) => createGrpcTransport({ baseUrl, sessionManager: h2Session(baseUrl, sessions) }),
  },
];

// ---------------------------------------------------------------------------
// Helpers.

const withKey = (key: string | null) => ({ headers: key === null ? {} : { "x-api-key": key } });

/** The ConnectError a call fails with; fails the test when it succeeds. */
async function failure(call: Promise<unknown>): Promise<ConnectError> {
  try {
    const response = await call;
    throw new Error(`expected the call to fail, got ${JSON.stringify(response, (_, v) => (typeof v === "bigint" ? String(v) : v))}`);
  } catch (error) {
    if (error instanceof ConnectError) return error;
    throw error;
  }
}

/** The google.protobuf.Struct details of an error, as plain JSON. */
const structDetails = (error: ConnectError): JsonValue[] =>
  error.findDetails(StructSchema).map((s) => toJson(StructSchema, s));

/** A raw Connect-protocol unary call with JSON, as curl would make it. */
async function connectJsonPost(baseUrl: string, procedure: string, body: string, key: string | null = ADMIN_KEY) {
  const headers: Record<string, string> = { "content-type": "application/json", "connect-protocol-version": "1" };
  if (key !== null) headers["x-api-key"] = key;
  const res = await fetch(`${baseUrl}/${procedure}`, { method: "POST", headers, body });
  const text = await res.text();
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const json: any = text === "" ? undefined : JSON.parse(text);
  return { status: res.status, contentType: res.headers.get("content-type"), body: json, text };
}

const catalog = sampleResources;
const effectiveCatalog = sampleEffectiveResources;

const implicit = { alwaysEmitImplicit: true } as const;

// ---------------------------------------------------------------------------

describe.each(oneEngine(import.meta.url))("Connect-ES clients on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  const sessions: Http2SessionManager[] = [];

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
  });
  afterAll(async () => {
    for (const session of sessions) session.abort();
    await service?.close();
    await database?.dispose();
  });

  describe.each(transports)("$name", ({ tag, make }) => {
    let transport: Transport;
    let apps: ReturnType<typeof createClient<typeof ApplicationService>>;
    let catalogs: ReturnType<typeof createClient<typeof CatalogService>>;
    let checks: ReturnType<typeof createClient<typeof CheckService>>;
    let policies: ReturnType<typeof createClient<typeof PolicyService>>;
    const appId = `app-${tag}`;
    let appKey: string;

    beforeAll(async () => {
      transport = make(service.url, sessions);
      apps = createClient(ApplicationService, transport);
      catalogs = createClient(CatalogService, transport);
      checks = createClient(CheckService, transport);
      policies = createClient(PolicyService, transport);
    });

    it("creates and reads an application, and creates an API key that then works", async () => {
      const created = await apps.createApplication({ appId, name: `App ${tag}` }, withKey(ADMIN_KEY));
      expect(created.application?.appId).toBe(appId);
      expect(created.application?.name).toBe(`App ${tag}`);
      expect(Number(created.application?.createdAt?.seconds)).toBeGreaterThan(Date.now() / 1000 - 300);

      const got = await apps.getApplication({ appId }, withKey(ADMIN_KEY));
      expect(toJson(ApplicationSchema, got.application!)).toEqual(toJson(ApplicationSchema, created.application!));

      const key = await apps.createApiKey({ appId, name: "ci" }, withKey(ADMIN_KEY));
      expect(key.name).toBe("ci");
      expect(key.keyId).not.toBe("");
      expect(key.key.length).toBeGreaterThanOrEqual(20);
      appKey = key.key;

      const own = await apps.getApplication({ appId }, withKey(appKey));
      expect(own.application?.appId).toBe(appId);

      // The same answer over REST.
      const rest = await service.call("GET", `/api/v1/applications/${appId}`, { key: appKey });
      expect(rest.body).toEqual(toJson(ApplicationSchema, got.application!));
    });

    it("puts and gets a catalog with its effective relations", async () => {
      const put = await catalogs.putCatalog({ appId, resources: catalog }, withKey(appKey));
      expect(toJson(PutCatalogResponseSchema, put, implicit)).toEqual({ resources: effectiveCatalog });
      const get = await catalogs.getCatalog({ appId }, withKey(appKey));
      expect(toJson(GetCatalogResponseSchema, get, implicit)).toEqual({ resources: effectiveCatalog });
      // Booleans arrive as booleans on every codec, false included.
      expect(get.resources[0]?.relations.map((r) => r.builtIn)).toEqual([true, true, true, true, false]);

      const rest = await service.call("GET", `/api/v1/applications/${appId}/resources`, { key: appKey });
      expect(rest.body).toEqual({ resources: effectiveCatalog });
    });

    describe("error codes", () => {
      it("no key → Unauthenticated", async () => {
        const error = await failure(catalogs.getCatalog({ appId }, withKey(null)));
        expect(error.code).toBe(Code.Unauthenticated);
        expect(error.rawMessage).toBe("the X-API-Key header is missing");
      });

      it("an application key on another application → PermissionDenied", async () => {
        const other = `other-${tag}`;
        await apps.createApplication({ appId: other }, withKey(ADMIN_KEY));
        const error = await failure(catalogs.getCatalog({ appId: other }, withKey(appKey)));
        expect(error.code).toBe(Code.PermissionDenied);
        expect(error.rawMessage).toBe(`this API key belongs to application "${appId}" and cannot act on application "${other}"`);
      });

      it("unknown application → NotFound", async () => {
        const error = await failure(apps.getApplication({ appId: "no-such-app" }, withKey(ADMIN_KEY)));
        expect(error.code).toBe(Code.NotFound);
        expect(error.rawMessage).toBe('application "no-such-app" does not exist');
      });

      it("invalid catalog → InvalidArgument naming the field, with the field in the details", async () => {
        const error = await failure(
          catalogs.putCatalog(
            {
              appId,
              resources: [
                { resource: "document", actions: ["read", "Bad Action"] },
                { resource: "document", actions: ["read"] },
              ],
            },
            withKey(appKey),
          ),
        );
        expect(error.code).toBe(Code.InvalidArgument);
        expect(error.rawMessage).toBe('resources[0].actions[1]: "Bad Action" must start with a lowercase letter and use only lowercase letters, digits and "_", at most 64 characters (and 1 more)');
        expect(structDetails(error)).toEqual([
          { field: "resources[0].actions[1]", reason: '"Bad Action" must start with a lowercase letter and use only lowercase letters, digits and "_", at most 64 characters' },
          { field: "resources[1].resource", reason: '"document" is already defined by resources[0]' },
        ]);
        // Nothing changed.
        const get = await catalogs.getCatalog({ appId }, withKey(appKey));
        expect(toJson(GetCatalogResponseSchema, get, implicit)).toEqual({ resources: effectiveCatalog });
      });

      it("duplicate application → AlreadyExists", async () => {
        const error = await failure(apps.createApplication({ appId }, withKey(ADMIN_KEY)));
        expect(error.code).toBe(Code.AlreadyExists);
        expect(error.rawMessage).toBe(`application "${appId}" already exists`);
      });

      it("the check is built: a well-formed check answers, an unknown action → InvalidArgument naming it", async () => {
        const answer = await checks.check({ userId: "u1", resource: "document", resourceId: "d1", action: "read" }, withKey(appKey));
        expect(answer.allowed).toBe(false);
        const error = await failure(
          checks.check({ userId: "u1", resource: "document", resourceId: "d1", action: "delete" }, withKey(appKey)),
        );
        expect(error.code).toBe(Code.InvalidArgument);
        expect(error.rawMessage).toBe('action: "delete" is not an action of resource "document"');
      });

      it("explain, permissions and lookup answer, and a check-scoped key may ask but not write", async () => {
        const scoped = await apps.createApiKey({ appId, name: "questions", scopes: ["check"] }, withKey(ADMIN_KEY));
        expect(scoped.scopes).toEqual(["check"]);
        const q = { userId: "u1", resource: "document", resourceId: "d1", action: "read" };
        const explained = await checks.explain(q, withKey(scoped.key));
        expect(explained.allowed).toBe(false);
        expect(explained.reasons).toEqual([]);
        const permissions = await checks.permissions({ userId: "u1", resource: "document", resourceId: "d1" }, withKey(scoped.key));
        expect(permissions.actions).toEqual([]);
        const batch = await checks.batchPermissions({ requests: [{ userId: "u1", resource: "document", resourceId: "d1" }] }, withKey(scoped.key));
        expect(batch.results.map((r) => r.actions)).toEqual([[]]);
        const lookup = await checks.lookup({ userId: "u1", resource: "document", action: "read" }, withKey(scoped.key));
        expect(lookup.allInstances).toBe(false);
        expect(lookup.resourceIds).toEqual([]);
        const refused = await failure(catalogs.putCatalog({ appId, resources: catalog }, withKey(scoped.key)));
        expect(refused.code).toBe(Code.PermissionDenied);
        expect(refused.rawMessage).toContain('lacks the "write" scope');
      });

      it("expiring grants, delete by filter, the impact preview and offboarding answer", async () => {
        const relationships = createClient(RelationshipService, transport);
        const roles = createClient(RoleService, transport);
        const expiresAt = timestampFromMs(Math.floor(Date.now() / 1000) * 1000 + 3_600_000);
        const grant = { userId: "x1", resource: "document", resourceId: "d9", relation: "viewer" };
        const written = await relationships.writeRelationship({ ...grant, expiresAt }, withKey(appKey));
        expect(written.created).toBe(true);
        expect(written.relationship?.expiresAt).toEqual(expiresAt);
        const explained = await checks.explain({ userId: "x1", resource: "document", resourceId: "d9", action: "read" }, withKey(appKey));
        expect(explained.reasons[0]?.grant?.expiresAt).toEqual(expiresAt);
        const bulk = await relationships.bulkWriteRelationships({ writes: [grant] }, withKey(appKey));
        expect(bulk).toMatchObject({ written: 1, unchanged: 0 }); // the expiry removed
        expect((await relationships.deleteRelationships({ userId: "x1" }, withKey(appKey))).deleted).toBe(1);

        const policy = (await policies.createPolicy({ appId, name: `preview-${tag}`, permissions: ["document:read"] }, withKey(appKey))).policy!;
        const role = (await roles.createRole({ appId, name: `role-${tag}`, policyIds: [policy.policyId] }, withKey(appKey))).role!;
        await roles.assignRole({ appId, roleId: role.roleId, userId: "x2" }, withKey(appKey));
        // Over gRPC an empty list changes only when the mask names it.
        const preview = await policies.previewPolicyUpdate({ appId, policyId: policy.policyId, updateMask: { paths: ["permissions"] } }, withKey(appKey));
        expect(preview.removed).toEqual(["document:read"]);
        expect(preview.roles.map((r) => [r.roleId, r.assignmentCount])).toEqual([[role.roleId, 1]]);
        expect(preview.users).toMatchObject({ gaining: 0, losing: 1, losingSample: ["x2"] });
        const offboarded = await roles.deleteUserRoles({ appId, userId: "x2" }, withKey(appKey));
        expect(offboarded).toMatchObject({ deleted: 1, roleIds: [role.roleId] });
      });

      it("policies are built: an unknown permission → InvalidArgument naming it, an unknown policy → NotFound", async () => {
        const invalid = await failure(
          policies.createPolicy({ appId, name: "editors", permissions: ["document:read", "document:delete"] }, withKey(appKey)),
        );
        expect(invalid.code).toBe(Code.InvalidArgument);
        expect(invalid.rawMessage).toBe('permissions[1]: "document:delete" is not in the catalog: resource "document" has no action "delete"');
        const missing = await failure(policies.getPolicy({ appId, policyId: "pol_nope" }, withKey(appKey)));
        expect(missing.code).toBe(Code.NotFound);
        expect(missing.rawMessage).toBe(`policy "pol_nope" does not exist in application "${appId}"`);
      });
    });
  });

  describe("raw Connect protocol (JSON over fetch)", () => {
    let key: string;

    beforeAll(async () => {
      expect((await service.call("POST", "/api/v1/applications", { body: { appId: "raw" } })).status).toBe(201);
      const created = await service.call("POST", "/api/v1/applications/raw/api-keys", { body: { name: "raw" } });
      key = created.body.key;
      const put = await service.call("PUT", "/api/v1/applications/raw/resources", { key, body: { resources: catalog } });
      expect(put.status).toBe(200);
    });

    it("answers a well-formed call, writing booleans (false included) and empty strings", async () => {
      const res = await connectJsonPost(service.url, "authz.v1.CatalogService/GetCatalog", '{"appId":"raw"}', key);
      expect(res.status).toBe(200);
      expect(res.contentType).toMatch(/^application\/json/);
      expect(res.body).toEqual({ resources: effectiveCatalog });
      expect(res.text).toContain('"builtIn":false');
      expect(res.text).toContain('"description":""');
    });

    it.each([
      { name: "a gzip bomb (16 MiB of spaces in 16 KiB)", body: () => gzipSync(Buffer.from(`{"appId":"raw"${" ".repeat(16 * 1024 * 1024)}}`)), status: 429, code: "resource_exhausted" },
      { name: "broken gzip", body: () => Buffer.from("not gzip at all"), status: 400, code: "invalid_argument" },
    ])("refuses $name in a gzip body with $status $code, and serves the next call", async ({ body, status, code }) => {
      const res = await fetch(`${service.url}/authz.v1.CatalogService/GetCatalog`, {
        method: "POST",
        headers: { "content-type": "application/json", "content-encoding": "gzip", "x-api-key": key },
        body: body(),
      });
      const answer = (await res.json()) as { code: string };
      expect(res.status).toBe(status);
      expect(answer.code).toBe(code);
      expect((await connectJsonPost(service.url, "authz.v1.CatalogService/GetCatalog", '{"appId":"raw"}', key)).status).toBe(200);
    });

    it("refuses an unknown JSON field with 400 invalid_argument", async () => {
      const res = await connectJsonPost(service.url, "authz.v1.CatalogService/GetCatalog", '{"appId":"raw","bogus":1}', key);
      expect(res.status).toBe(400);
      expect(res.body.code).toBe("invalid_argument");
      expect(res.body.message).toMatch(/key "bogus" is unknown/);
    });

    it("refuses a wrongly typed field and malformed JSON with 400 invalid_argument", async () => {
      const wrongType = await connectJsonPost(service.url, "authz.v1.CatalogService/GetCatalog", '{"appId":42}', key);
      expect(wrongType.status).toBe(400);
      expect(wrongType.body.code).toBe("invalid_argument");
      expect(wrongType.body.message).toMatch(/app_id.*expected string, got 42/);

      const malformed = await connectJsonPost(service.url, "authz.v1.CatalogService/GetCatalog", '{"appId":', key);
      expect(malformed.status).toBe(400);
      expect(malformed.body.code).toBe("invalid_argument");
    });

    it("writes error details as google.protobuf.Struct", async () => {
      const res = await connectJsonPost(
        service.url,
        "authz.v1.CatalogService/PutCatalog",
        JSON.stringify({ appId: "raw", resources: [{ resource: "Bad", actions: [] }] }),
        key,
      );
      expect(res.status).toBe(400);
      expect(res.body.code).toBe("invalid_argument");
      expect(res.body.message).toBe('resources[0].resource: "Bad" must start with a lowercase letter and use only lowercase letters, digits and "_", at most 64 characters');
      expect(res.body.details).toHaveLength(1);
      expect(res.body.details[0].type).toBe("google.protobuf.Struct");
      expect(res.body.details[0].value).toMatch(/^[A-Za-z0-9+/]+=*$/);
    });

    it("maps a missing key to 401 unauthenticated", async () => {
      const res = await connectJsonPost(service.url, "authz.v1.CatalogService/GetCatalog", '{"appId":"raw"}', null);
      expect(res.status).toBe(401);
      expect(res.body).toEqual({ code: "unauthenticated", message: "the X-API-Key header is missing" });
    });
  });
});
