/**
 * The OpenAPI document (src/transport/pages/openapi.ts) as a real service serves it
 * at /openapi.json: it validates as OpenAPI 3.1 (@seriousme/openapi-schema-validator)
 * and its schemas as JSON Schema 2020-12 (ajv, strict); its routes are exactly
 * the gateway's (the google.api.http bindings of every service, and the
 * health routes), each of which the server answers; a call of every route,
 * in an order that builds what the next needs, answers a status the document
 * lists with a body its schema accepts; and every JSON body of the curl
 * commands of the README and of docs/ is accepted by the schema of the route
 * it calls. About the API's description, not storage: PGlite only.
 */
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { Validator } from "@seriousme/openapi-schema-validator";
// ajv is not a dependency of ours: it comes with the validator above (and is
// resolvable from here because npm hoists it), as does ajv-formats.
import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApplicationService } from "../gen/authz/v1/applications_pb.js";
import { AuditService } from "../gen/authz/v1/audit_pb.js";
import { ModelService } from "../gen/authz/v1/model_pb.js";
import { ChangeService } from "../gen/authz/v1/changes_pb.js";
import { CatalogService } from "../gen/authz/v1/catalog_pb.js";
import { CheckService } from "../gen/authz/v1/check_pb.js";
import { PolicyService } from "../gen/authz/v1/policies_pb.js";
import { RelationshipService } from "../gen/authz/v1/relationships_pb.js";
import { RoleService } from "../gen/authz/v1/roles_pb.js";
import { UserService } from "../gen/authz/v1/users_pb.js";
import { AccessService } from "../gen/authzen/v1/access_pb.js";
import { httpBindings } from "../src/transport/rest/http-rules.js";
import type { OpenApiDocument, Operation } from "../src/transport/pages/openapi-types.js";
import { createTestDatabase, type TestDatabase } from "./support/engines.js";
import { startTestService, type RestAnswer, type TestService } from "./support/service.js";

// The services app.ts serves (the document is built from the app's own list; a service missing here shows as a difference).
const SERVICES = [ApplicationService, CatalogService, PolicyService, RoleService, UserService, RelationshipService, CheckService, AuditService, ModelService, ChangeService, AccessService];
// The routes no annotation declares, served without a key: health, and AuthZEN's metadata.
const HEALTH = ["GET /healthz", "GET /readyz", "GET /.well-known/authzen-configuration"];
const VERBS = ["get", "put", "post", "delete", "patch"] as const;

const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020;

/** Every operation of the document as "VERB /template". */
function operationsOf(doc: OpenApiDocument): Map<string, Operation> {
  const out = new Map<string, Operation>();
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const verb of VERBS) {
      const op = item[verb];
      if (op !== undefined) out.set(`${verb.toUpperCase()} ${path}`, op);
    }
  }
  return out;
}

/** The route template a concrete path reaches, among the document's paths. */
function templateOf(doc: OpenApiDocument, path: string): string | undefined {
  const segments = path.split("/");
  return Object.keys(doc.paths).find((template) => {
    const parts = template.split("/");
    return parts.length === segments.length && parts.every((p, i) => p.startsWith("{") || p === segments[i]);
  });
}

/**
 * JSON Schema validators over the document's components: one ajv (strict,
 * 2020-12, the dialect of OpenAPI 3.1) holding them all under one id, so
 * their references resolve; OpenAPI's own formats are known and not checked.
 */
class Schemas {
  private readonly ajv = new Ajv2020({ strict: true, allErrors: true });
  private readonly cache = new Map<string, ValidateFunction>();

  constructor(private readonly doc: OpenApiDocument) {
    addFormats(this.ajv);
    for (const format of ["int32", "int64", "float", "double"]) this.ajv.addFormat(format, true);
    const defs = JSON.parse(JSON.stringify(doc.components.schemas).replaceAll('"#/components/schemas/', '"https://portcullis.invalid/openapi.json#/$defs/'));
    this.ajv.addSchema({ $id: "https://portcullis.invalid/openapi.json", $defs: defs });
  }

  /** A validator for a schema as it appears in the document (a $ref or inline). */
  validator(schema: object): ValidateFunction {
    const key = JSON.stringify(schema);
    let fn = this.cache.get(key);
    if (fn === undefined) {
      fn = this.ajv.compile(JSON.parse(key.replaceAll('"#/components/schemas/', '"https://portcullis.invalid/openapi.json#/$defs/')));
      this.cache.set(key, fn);
    }
    return fn;
  }

  /** The response schema of an operation for a status, following the document's response references. */
  responseSchema(op: Operation, status: number): object | undefined {
    let response = op.responses[String(status)] as { $ref?: string; content?: { "application/json": { schema: object } } } | undefined;
    if (response?.$ref !== undefined) response = this.doc.components.responses[response.$ref.split("/").pop()!];
    return response?.content?.["application/json"].schema;
  }

  /** Problems of `value` against `schema`, as readable lines. */
  problems(schema: object, value: unknown): string[] {
    const validate = this.validator(schema);
    return validate(value) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath || "/"} ${e.message ?? ""} ${JSON.stringify(e.params)}`);
  }
}

describe("the OpenAPI document", () => {
  let database: TestDatabase;
  let service: TestService;
  let doc: OpenApiDocument;
  let ops: Map<string, Operation>;
  let schemas: Schemas;

  beforeAll(async () => {
    database = await createTestDatabase("pglite");
    service = await startTestService(database.db);
    const res = await fetch(`${service.url}/openapi.json`);
    expect(res.status).toBe(200);
    doc = (await res.json()) as OpenApiDocument;
    ops = operationsOf(doc);
    schemas = new Schemas(doc);
  });

  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  it("validates as OpenAPI 3.1, and the validator refuses a broken copy", async () => {
    const validator = new Validator({ strict: false });
    const result = await validator.validate(structuredClone(doc) as unknown as Record<string, unknown>);
    expect(result.errors).toBeUndefined();
    expect(result.valid).toBe(true);
    expect(validator.version).toBe("3.1");

    // The same document with a path variable made optional, and without a title: both invalid.
    const optionalPath = structuredClone(doc) as unknown as { paths: Record<string, Record<string, { parameters: Record<string, unknown>[] }>> };
    optionalPath.paths["/api/v1/applications/{app_id}"]!.get!.parameters[0]!.required = false;
    expect((await new Validator({ strict: false }).validate(optionalPath)).valid).toBe(false);
    const noTitle = structuredClone(doc) as unknown as { info: Record<string, unknown> };
    delete noTitle.info.title;
    expect((await new Validator({ strict: false }).validate(noTitle)).valid).toBe(false);
  });

  it("has JSON Schemas that compile under ajv's strict 2020-12 rules", () => {
    for (const name of Object.keys(doc.components.schemas)) {
      expect(() => schemas.validator({ $ref: `#/components/schemas/${name}` }), name).not.toThrow();
    }
    // Every schema a route names resolves, and a schema refuses what it must.
    for (const [route, op] of ops) {
      for (const status of Object.keys(op.responses)) {
        const schema = schemas.responseSchema(op, Number(status));
        expect(schema, `${route} ${status}`).toBeDefined();
        schemas.validator(schema!);
      }
    }
    const check = ops.get("POST /api/v1/authorization/check")!;
    const body = check.requestBody!.content["application/json"].schema;
    expect(schemas.problems(body, { userId: "u", resource: "document", resourceId: "d1", action: "read" })).toEqual([]);
    expect(schemas.problems(body, { userId: "u", resource: "document", resourceId: "d1", acton: "read" })).not.toEqual([]);
    expect(schemas.problems(body, { userId: 7 })).not.toEqual([]);
    expect(schemas.problems(schemas.responseSchema(check, 200)!, {})).not.toEqual([]); // "allowed" is always written
    // AuthZEN's requests take unknown fields (ignored), in snake_case; its answers are closed.
    const evaluations = ops.get("POST /access/v1/evaluations")!;
    const request = evaluations.requestBody!.content["application/json"].schema;
    expect(schemas.problems(request, { subject: { type: "user", id: "u", _note: 1 }, options: { evaluations_semantic: "deny_on_first_deny", other: 1 }, extra: true })).toEqual([]);
    expect(schemas.problems(request, { subject: { type: 7 } })).not.toEqual([]);
    const answer = schemas.responseSchema(evaluations, 200)!;
    expect(schemas.problems(answer, { decision: true })).toEqual([]); // without items: the list left out
    expect(schemas.problems(answer, { evaluations: [{ decision: false, context: { error: { status: 400 } } }] })).toEqual([]);
    expect(schemas.problems(answer, { evaluations: [{ decision: false, reason: "x" }] })).not.toEqual([]);
    const search = schemas.responseSchema(ops.get("POST /access/v1/search/subject")!, 200)!;
    expect(schemas.problems(search, { page: { next_token: "", count: 0 }, results: [] })).toEqual([]);
    expect(doc.components.securitySchemes.Bearer).toMatchObject({ type: "http", scheme: "bearer" });
  });

  it("serves a model file's schema at /model.schema.json: what apply takes, and nothing else", async () => {
    const res = await fetch(`${service.url}/model.schema.json`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/schema+json; charset=utf-8");
    const schema = (await res.json()) as object;
    const ajv = new Ajv2020({ strict: true, allErrors: true });
    addFormats(ajv);
    for (const format of ["int32", "int64", "float", "double"]) ajv.addFormat(format, true);
    const validate = ajv.compile(schema);
    const model = {
      version: "7",
      catalog: [{ resource: "invoice", description: "", actions: ["read", "approve"], relations: [{ name: "approver", actions: ["approve"], subjects: ["user"] }] }],
      policies: [{ name: "approvers", description: "", permissions: ["invoice:approve"], tenantId: "acme" }],
      roles: [{ name: "finance", description: "", policies: ["approvers"], tenantId: "acme" }],
    };
    expect(validate(model), JSON.stringify(validate.errors)).toBe(true);
    expect(validate({ ...model, policies: [{ ...model.policies[0], surprise: 1 }] })).toBe(false);
    expect(validate({ ...model, roles: [{ name: 7 }] })).toBe(false);
    expect(validate({ policies: [] })).toBe(false); // the catalog is required, as apply requires it
  });

  it("serves a model test file's schema at /model-test.schema.json: a model, grants, assignments and assertions", async () => {
    const res = await fetch(`${service.url}/model-test.schema.json`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/schema+json; charset=utf-8");
    const ajv = new Ajv2020({ strict: true, allErrors: true });
    addFormats(ajv);
    for (const format of ["int32", "int64", "float", "double"]) ajv.addFormat(format, true);
    const validate = ajv.compile((await res.json()) as object);
    const body = { userId: "alice", resource: "document", resourceId: "d1", action: "read" };
    const file = {
      model: { catalog: [{ resource: "document", actions: ["read"], relations: [{ name: "viewer", actions: ["read"], subjects: ["user", "team#member"] }] }], policies: [], roles: [] },
      grants: [
        { userId: "alice", resource: "team", resourceId: "eng", relation: "member", expiresAt: "2030-01-01T00:00:00Z" },
        { subject: { resource: "team", resourceId: "eng", relation: "member" }, resource: "document", resourceId: "d1", relation: "viewer" },
      ],
      assignments: [{ role: "auditor", userId: "carol" }, { role: "janitor", userId: "dan", tenantId: "acme" }],
      assertions: [
        { name: "alice reads d1", check: body, expect: "allowed" },
        { check: { ...body, tenantId: "acme" }, expect: "denied" },
        { lookup: body, expect: "allowed" },
        { whoCan: body, expect: "denied" },
      ],
    };
    expect(validate(file), JSON.stringify(validate.errors)).toBe(true);
    const bad: [string, unknown][] = [
      ["a part a test file has not", { ...file, asserts: [] }],
      ["no model", { assertions: [] }],
      ["two questions in one assertion", { ...file, assertions: [{ check: body, whoCan: body, expect: "allowed" }] }],
      ["an expectation that is neither", { ...file, assertions: [{ check: body, expect: "yes" }] }],
      ["a question without its user", { ...file, assertions: [{ check: { ...body, userId: undefined }, expect: "allowed" }] }],
      ["a page size (the test reads every page)", { ...file, assertions: [{ lookup: { ...body, pageSize: 10 }, expect: "allowed" }] }],
      ["an assignment without its user", { ...file, assignments: [{ role: "auditor" }] }],
      ["a grant with a field it has not", { ...file, grants: [{ ...file.grants[0], surprise: 1 }] }],
      ["a model with a field it has not", { ...file, model: { ...file.model, surprise: 1 } }],
    ];
    for (const [what, value] of bad) expect(validate(JSON.parse(JSON.stringify(value))), what).toBe(false);
  });

  it("has exactly the gateway's routes and the health routes", () => {
    const gateway = httpBindings(SERVICES).map((b) => `${b.verb} ${b.template}`);
    expect(gateway.length).toBeGreaterThan(30);
    expect([...ops.keys()].sort()).toEqual([...gateway, ...HEALTH].sort());
  });

  it("names only routes the server answers: without a key each is a 401 in the documented error shape", async () => {
    const unknown = await service.call("GET", "/api/v1/nothing-here", { key: null });
    expect(unknown.status).toBe(404);
    expect(unknown.body.message).toMatch(/^no route for/);
    for (const [route, op] of ops) {
      const [verb, template] = route.split(" ") as [string, string];
      const path = template.replace(/\{[^}]+\}/g, "x");
      const answer = await service.call(verb, path, { key: null });
      if (HEALTH.includes(route)) {
        expect(answer.status, route).toBe(200);
        expect(op.security).toEqual([]);
      } else {
        expect(answer.status, `${route}: ${JSON.stringify(answer.body)}`).toBe(401);
        // The document's default, the API key; AuthZEN's routes take it as a bearer token too.
        expect(op.security).toEqual(template.startsWith("/access/") ? [{ ApiKey: [] }, { Bearer: [] }] : undefined);
      }
      expect(schemas.problems(schemas.responseSchema(op, answer.status)!, answer.body), route).toEqual([]);
    }
  });

  it("describes each RPC with its comment in proto/, its access and its RPC name", () => {
    const check = ops.get("POST /api/v1/authorization/check")!;
    expect(check.summary).toBe("May the user perform the action on the resource instance?");
    expect(check.description).toContain("an application key with the `check` scope");
    expect(check["x-rpc"]).toBe("/authz.v1.CheckService/Check");
    const put = ops.get("PUT /api/v1/applications/{app_id}/resources")!;
    expect(put.description).toContain("Replaces the whole catalog atomically. Refused with FAILED_PRECONDITION");
    expect(put.description).toContain("a key of this application with the `write` scope");
    expect(put.requestBody!.required).toBe(true); // resources is REQUIRED
    expect(ops.get("POST /api/v1/applications")!.description).toContain("the operator key only");
    expect(doc.components.securitySchemes.ApiKey).toMatchObject({ type: "apiKey", in: "header", name: "X-API-Key" });
    // A field's comment is its property's description.
    const tuple = doc.components.schemas.RelationshipTuple as { properties: Record<string, { description?: string }> };
    expect(tuple.properties.expiresAt!.description).toMatch(/^Writes only: when the grant stops counting/);
  });

  it("takes its comments from a file that is current with proto/", () => {
    // Fails (exit 1) when a comment in proto/ changed without `npm run generate`.
    expect(() => execFileSync(process.execPath, ["scripts/proto-comments.mjs", "--check"], { stdio: "pipe" })).not.toThrow();
  });

  it("gives path and query parameters as the gateway reads them", () => {
    const list = ops.get("GET /api/v1/authorization/relationships")!;
    expect(list.parameters!.map((p) => `${p.in}:${p.name}`)).toEqual([
      "query:userId",
      "query:resource",
      "query:resourceId",
      "query:relation",
      "query:pageSize",
      "query:pageToken",
      "query:includeExpired",
      "query:subjectResource",
      "query:subjectResourceId",
      "query:subjectRelation",
      "query:allUsers",
    ]);
    const unassign = ops.get("DELETE /api/v1/applications/{app_id}/roles/{role_id}/assignments/{user_id}")!;
    expect(unassign.parameters!.map((p) => `${p.in}:${p.name}:${p.required}`)).toEqual(["path:app_id:true", "path:role_id:true", "path:user_id:true"]);
    // A whole-message body takes no query parameters.
    expect(ops.get("POST /api/v1/authorization/check")!.parameters).toBeUndefined();
  });

  it("documents a body that is one field (body: \"properties\"): the field's schema, required, and the answer likewise", () => {
    const put = ops.get("PUT /api/v1/applications/{app_id}/users/{user_id}/properties")!;
    expect(put.parameters!.map((p) => `${p.in}:${p.name}`)).toEqual(["path:app_id", "path:user_id"]);
    expect(put.requestBody).toEqual({ required: true, content: { "application/json": { schema: { type: "object" } } } });
    const answer = (op: Operation) => (op.responses["200"] as { content: { "application/json": { schema: unknown } } }).content["application/json"].schema;
    expect(answer(put)).toEqual({ type: "object" });
    expect(put.description).toContain("16 KiB");
    expect(answer(ops.get("GET /api/v1/applications/{app_id}/users/{user_id}/properties")!)).toEqual({ type: "object" });
  });

  /**
   * Every route, called in an order that builds what the next needs; the
   * answer's status must be one the document lists for the route, and its
   * body must match that status's schema. `{name}` in a path or body is
   * taken from an earlier answer.
   */
  it("answers every route with a documented status and a body its schema accepts", async () => {
    const OP = undefined; // the operator key (the test service's default)
    const ids: Record<string, string> = { app: "oa" };
    let appKey = "";
    let modelDoc: unknown;
    // `refused`: a body the request schema itself refuses (the 400 it gets is foreseen by the document).
    type Step = { route: string; path?: string; key?: "op" | "app"; body?: unknown; refused?: true; status: number; keep?: (body: any) => void };
    const A = "/api/v1/applications/{app}";
    const steps: Step[] = [
      { route: "POST /api/v1/applications", body: { appId: "oa", name: "OpenAPI" }, status: 201 },
      { route: "GET /api/v1/applications", path: "/api/v1/applications?pageSize=10", status: 200 },
      { route: "GET /api/v1/applications/{app_id}", path: A, status: 200 },
      {
        route: "POST /api/v1/applications/{app_id}/api-keys",
        path: `${A}/api-keys`,
        body: { name: "backend" },
        status: 201,
        keep: (b) => ((appKey = b.key), (ids.keyId = b.keyId)),
      },
      { route: "GET /api/v1/applications/{app_id}/api-keys", path: `${A}/api-keys`, status: 200 },
      { route: "GET /api/v1/api-keys/current", key: "app", status: 200 },
      {
        route: "PUT /api/v1/applications/{app_id}/resources",
        path: `${A}/resources`,
        body: {
          resources: [
            { resource: "document", description: "A document", actions: ["read", "update", "comment"], relations: [{ name: "reviewer", actions: ["read", "comment"] }] },
          ],
        },
        status: 200,
      },
      { route: "GET /api/v1/applications/{app_id}/resources", path: `${A}/resources`, status: 200 },
      {
        route: "POST /api/v1/applications/{app_id}/policies",
        path: `${A}/policies`,
        body: { name: "Readers", permissions: ["document:read"] },
        status: 201,
        keep: (b) => (ids.pol = b.policyId),
      },
      { route: "GET /api/v1/applications/{app_id}/policies", path: `${A}/policies?pageSize=10`, status: 200 },
      { route: "GET /api/v1/applications/{app_id}/policies/{policy_id}", path: `${A}/policies/{pol}`, status: 200 },
      { route: "PATCH /api/v1/applications/{app_id}/policies/{policy_id}", path: `${A}/policies/{pol}`, body: { description: "Reads" }, status: 200 },
      {
        route: "POST /api/v1/applications/{app_id}/roles",
        path: `${A}/roles`,
        body: { name: "Reader", policyIds: ["{pol}"] },
        status: 201,
        keep: (b) => (ids.role = b.roleId),
      },
      { route: "GET /api/v1/applications/{app_id}/roles", path: `${A}/roles`, status: 200 },
      { route: "GET /api/v1/applications/{app_id}/roles/{role_id}", path: `${A}/roles/{role}`, status: 200 },
      { route: "PATCH /api/v1/applications/{app_id}/roles/{role_id}", path: `${A}/roles/{role}`, body: { description: "Reads" }, status: 200 },
      { route: "GET /api/v1/applications/{app_id}/policies/{policy_id}/roles", path: `${A}/policies/{pol}/roles`, status: 200 },
      { route: "POST /api/v1/applications/{app_id}/roles/{role_id}/assignments", path: `${A}/roles/{role}/assignments`, body: { userId: "alice" }, status: 201 },
      { route: "POST /api/v1/applications/{app_id}/roles/{role_id}/assignments", path: `${A}/roles/{role}/assignments`, body: { userId: "alice" }, status: 200 },
      { route: "GET /api/v1/applications/{app_id}/roles/{role_id}/assignments", path: `${A}/roles/{role}/assignments`, status: 200 },
      { route: "GET /api/v1/applications/{app_id}/users/{user_id}/roles", path: `${A}/users/alice/roles`, status: 200 },
      {
        route: "PUT /api/v1/applications/{app_id}/users/{user_id}/properties",
        path: `${A}/users/alice/properties`,
        body: { plan: "pro", seats: 5, tags: ["beta"], manager: null, address: { country: "NZ" } },
        status: 200,
      },
      { route: "GET /api/v1/applications/{app_id}/users/{user_id}/properties", path: `${A}/users/alice/properties`, status: 200 },
      { route: "GET /api/v1/applications/{app_id}/users/{user_id}/properties", path: `${A}/users/nobody/properties`, status: 200 },
      { route: "PUT /api/v1/applications/{app_id}/users/{user_id}/properties", path: `${A}/users/alice/properties`, body: ["plan"], refused: true, status: 400 },
      {
        route: "POST /api/v1/applications/{app_id}/policies/{policy_id}/preview",
        path: `${A}/policies/{pol}/preview`,
        body: { permissions: ["document:read", "document:comment"] },
        status: 200,
      },
      // The model as it stands, planned and applied unchanged (the steps after need it as it is).
      { route: "GET /api/v1/applications/{app_id}/model", path: `${A}/model`, status: 200, keep: (b) => (modelDoc = b) },
      { route: "POST /api/v1/applications/{app_id}/model/plan", path: `${A}/model/plan`, body: () => modelDoc, status: 200 },
      { route: "PUT /api/v1/applications/{app_id}/model", path: `${A}/model`, body: () => modelDoc, status: 200 },
      ...[201, 200].map((status) => ({
        route: "POST /api/v1/authorization/relationships",
        key: "app" as const,
        body: { userId: "bob", resource: "document", resourceId: "d1", relation: "editor", expiresAt: "2030-01-25T17:00:00Z" },
        status,
      })),
      { route: "GET /api/v1/authorization/relationships", path: "/api/v1/authorization/relationships?resource=document&resourceId=d1", key: "app", status: 200 },
      {
        route: "POST /api/v1/authorization/relationships/bulk",
        key: "app",
        body: { writes: [{ userId: "carol", resource: "document", resourceId: "d1", relation: "reviewer" }], deletes: [] },
        status: 200,
      },
      { route: "POST /api/v1/authorization/check", key: "app", body: { userId: "bob", resource: "document", resourceId: "d1", action: "update" }, status: 200 },
      {
        route: "POST /api/v1/authorization/check/batch",
        key: "app",
        body: { checks: [{ userId: "carol", resource: "document", resourceId: "d1", action: "comment", tenantId: "acme" }] },
        status: 200,
      },
      ...["bob", "alice"].map((userId) => ({
        route: "POST /api/v1/authorization/check/explain",
        key: "app" as const,
        body: { userId, resource: "document", resourceId: "d1", action: "read" },
        status: 200,
      })),
      { route: "POST /api/v1/authorization/permissions", key: "app", body: { userId: "bob", resource: "document", resourceId: "d1" }, status: 200 },
      {
        route: "POST /api/v1/authorization/permissions/batch",
        key: "app",
        body: { requests: [{ userId: "bob", resource: "document", resourceId: "d1" }] },
        status: 200,
      },
      { route: "POST /api/v1/authorization/lookup", key: "app", body: { userId: "carol", resource: "document", action: "comment", pageSize: 10 }, status: 200 },
      { route: "POST /api/v1/authorization/subjects", key: "app", body: { resource: "document", resourceId: "d1", action: "comment", pageSize: 10 }, status: 200 },
      // AuthZEN, with the application key: bob is d1's editor.
      ...[
        { route: "POST /access/v1/evaluation", body: { subject: { type: "user", id: "bob" }, action: { name: "update" }, resource: { type: "document", id: "d1" } } },
        { route: "POST /access/v1/evaluation", body: { subject: { type: "user", id: "bob" }, action: { name: "launch" }, resource: { type: "rocket", id: "r1" }, note: "ignored" } },
        { route: "POST /access/v1/evaluations", body: { subject: { type: "user", id: "bob" }, action: { name: "read" }, resource: { type: "document", id: "d1" } } },
        {
          route: "POST /access/v1/evaluations",
          body: { subject: { type: "user", id: "bob" }, action: { name: "read" }, evaluations: [{ resource: { type: "document", id: "d1" } }, {}], options: { evaluations_semantic: "execute_all" } },
        },
        { route: "POST /access/v1/search/subject", body: { subject: { type: "user" }, action: { name: "read" }, resource: { type: "document", id: "d1" }, page: { limit: 1 } } },
        { route: "POST /access/v1/search/resource", body: { subject: { type: "user", id: "bob" }, action: { name: "read" }, resource: { type: "document" } } },
        { route: "POST /access/v1/search/action", body: { subject: { type: "user", id: "bob" }, resource: { type: "document", id: "d1" }, context: {} } },
      ].map((step) => ({ ...step, key: "app" as const, status: 200 })),
      { route: "POST /access/v1/evaluation", key: "app", body: { action: { name: "read" } }, status: 400 },
      { route: "POST /access/v1/search/action", key: "app", body: { subject: "bob" }, refused: true, status: 400 },
      { route: "POST /access/v1/evaluation", body: { subject: { type: "user", id: "bob" }, action: { name: "read" }, resource: { type: "document", id: "d1" } }, status: 403 },
      { route: "GET /.well-known/authzen-configuration", status: 200 },
      { route: "GET /api/v1/applications/{app_id}/audit-log", path: `${A}/audit-log?pageSize=50`, status: 200 },
      {
        route: "DELETE /api/v1/authorization/relationships",
        path: "/api/v1/authorization/relationships?userId=carol&resource=document&resourceId=d1&relation=reviewer",
        key: "app",
        status: 200,
      },
      { route: "POST /api/v1/authorization/relationships/delete", key: "app", body: { userId: "bob" }, status: 200 },
      { route: "GET /api/v1/authorization/changes", path: "/api/v1/authorization/changes?pageSize=5", key: "app", status: 200 },
      { route: "GET /api/v1/authorization/changes", path: "/api/v1/authorization/changes?after=nope", key: "app", status: 400 },
      { route: "DELETE /api/v1/applications/{app_id}/roles/{role_id}/assignments/{user_id}", path: `${A}/roles/{role}/assignments/alice`, status: 200 },
      { route: "DELETE /api/v1/applications/{app_id}/users/{user_id}/roles", path: `${A}/users/alice/roles`, status: 200 },
      { route: "DELETE /api/v1/applications/{app_id}/policies/{policy_id}", path: `${A}/policies/{pol}?force=true`, status: 200 },
      { route: "DELETE /api/v1/applications/{app_id}/roles/{role_id}", path: `${A}/roles/{role}`, status: 200 },
      { route: "DELETE /api/v1/applications/{app_id}/api-keys/{key_id}", path: `${A}/api-keys/{keyId}`, status: 200 },
      { route: "GET /healthz", status: 200 },
      { route: "GET /readyz", status: 200 },
      // Errors, in the one documented shape.
      { route: "POST /api/v1/applications", body: { appId: "oa" }, status: 409 },
      { route: "POST /api/v1/applications", body: { appId: "Not An Id" }, status: 400 },
      { route: "GET /api/v1/applications/{app_id}", path: "/api/v1/applications/missing", status: 404 },
      { route: "POST /api/v1/authorization/check", body: { userId: "u", resource: "document", resourceId: "d1", action: "read" }, status: 403 },
      { route: "PUT /api/v1/applications/{app_id}/resources", path: `${A}/resources`, body: {}, refused: true, status: 400 },
      { route: "POST /api/v1/authorization/check", key: "app", body: { userId: "u", resource: "document", resourceId: 7, action: "read" }, refused: true, status: 400 },
    ];

    const fill = (text: string) => text.replace(/\{(\w+)\}/g, (_, name: string) => ids[name] ?? `{${name}}`);
    const succeeded = new Set<string>();
    for (const step of steps) {
      const op = ops.get(step.route);
      expect(op, step.route).toBeDefined();
      const [verb, template] = step.route.split(" ") as [string, string];
      const path = fill(step.path ?? template);
      const given = typeof step.body === "function" ? (step.body as () => unknown)() : step.body;
      const body = given === undefined ? undefined : JSON.parse(fill(JSON.stringify(given)));
      if (body !== undefined) {
        const requestSchema = op!.requestBody!.content["application/json"].schema;
        const problems = schemas.problems(requestSchema, body);
        if (step.refused) expect(problems, `${step.route} request`).not.toEqual([]);
        else expect(problems, `${step.route} request`).toEqual([]);
      }
      const answer: RestAnswer = await service.call(verb, path, { key: step.key === "app" ? appKey : OP, body });
      const where = `${verb} ${path} → ${answer.status} ${JSON.stringify(answer.body)}`;
      expect(answer.status, where).toBe(step.status);
      const schema = schemas.responseSchema(op!, answer.status);
      expect(schema, `${where}: status not in the document`).toBeDefined();
      expect(schemas.problems(schema!, answer.body), where).toEqual([]);
      expect(answer.headers.get("content-type"), where).toMatch(/^application\/json/);
      if (answer.status < 300) succeeded.add(step.route);
      step.keep?.(answer.body);
    }
    // No route left uncalled: a route added to the proto needs a step here.
    expect([...ops.keys()].filter((route) => !succeeded.has(route))).toEqual([]);
  });

  /** Every `curl ... -d '{...}'` of the README and of docs/, with its method and path. */
  const pageCurls = DOC_PAGES.flatMap(curlsOfPage);
  const bodyCurls = pageCurls.filter((c) => c.body !== undefined);

  it("finds the pages' curl bodies", () => {
    expect(bodyCurls.length).toBeGreaterThan(20);
  });

  it.each(bodyCurls.map((c) => [`${c.method} ${c.path} (${c.page} line ${c.line})`, c] as const))(
    "accepts the body of %s",
    (_, curl) => {
      const template = templateOf(doc, curl.path);
      expect(template, `no route for ${curl.path}`).toBeDefined();
      const op = ops.get(`${curl.method} ${template}`);
      expect(op, `${curl.method} ${template} is not in the document`).toBeDefined();
      let body: unknown;
      expect(() => (body = JSON.parse(curl.body!)), `the body is not JSON: ${curl.body}`).not.toThrow();
      const schema = op!.requestBody?.content["application/json"].schema;
      expect(schema, `${curl.method} ${template} takes no body`).toBeDefined();
      expect(schemas.problems(schema!, body)).toEqual([]);
      const accepted = new Set((op!.parameters ?? []).filter((p) => p.in === "query").map((p) => p.name));
      for (const name of curl.query) expect(accepted, `query parameter ${name}`).toContain(name);
    },
  );

  it("reads the pages' bodyless curl commands' query parameters as parameters of their route", () => {
    const bodyless = pageCurls.filter((c) => c.body === undefined && c.path.startsWith("/api/"));
    expect(bodyless.length).toBeGreaterThan(15);
    for (const curl of bodyless) {
      const template = templateOf(doc, curl.path);
      const op = template === undefined ? undefined : ops.get(`${curl.method} ${template}`);
      expect(op, `${curl.page} line ${curl.line}: ${curl.method} ${curl.path}`).toBeDefined();
      const accepted = new Set((op!.parameters ?? []).filter((p) => p.in === "query").map((p) => p.name));
      for (const name of curl.query) expect(accepted, `${curl.page} line ${curl.line}: query parameter ${name}`).toContain(name);
    }
  });
});

/** The pages whose curl commands are checked: the README and every page of docs/. */
const DOC_PAGES = ["README.md", ...readdirSync(new URL("../docs/", import.meta.url)).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`)];

function curlsOfPage(page: string): Curl[] {
  return curlsOf(readFileSync(new URL(`../${page}`, import.meta.url), "utf8")).map((c) => ({ ...c, page }));
}

interface Curl {
  /** The page it is on, once known. */
  page?: string;
  line: number;
  method: string;
  /** The path, $URL removed, variables ($POL) left as they are. */
  path: string;
  query: string[];
  body: string | undefined;
}

/**
 * The curl commands of a page's sh blocks, read as a shell would split
 * them into words: single quotes literal, double quotes with \" and \\
 * escapes, a backslash before a newline continues the line, # starts a
 * comment at a word's start. Variables are kept as written. A curl may open
 * a command substitution (`A=$(curl ...); echo "$A"`), whose `)` ends it, and
 * a pipe or a `;` ends it too.
 */
function curlsOf(readme: string): Curl[] {
  const curls: Curl[] = [];
  const blocks = readme.matchAll(/^```sh\n([\s\S]*?)^```/gm);
  for (const block of blocks) {
    const startLine = readme.slice(0, block.index).split("\n").length + 1;
    for (const { words, line } of shellCommands(block[1]!)) {
      // curl itself, or its answer kept in a variable (`A=$(curl ...`); not `buf curl`.
      const substituted = /^\w+=\$\(curl$/.test(words[0] ?? "");
      if (words[0] !== "curl" && !substituted) continue;
      // The curl's own words: up to a pipe or a `;`, or the `)` that closes its substitution.
      const own: string[] = [];
      for (const word of words.slice(1)) {
        if (["|", ";", "&&", ">"].includes(word)) break;
        if (substituted && /\);?$/.test(word)) {
          own.push(word.replace(/\);?$/, ""));
          break;
        }
        own.push(word);
      }
      let method: string | undefined;
      let body: string | undefined;
      let url: string | undefined;
      for (let i = 0; i < own.length; i++) {
        const word = own[i]!;
        if (word === "-X") method = own[++i];
        else if (word === "-d" || word === "--data") body = own[++i];
        else if (word === "-H" || word === "-w" || word === "-o") i++;
        else if (!word.startsWith("-")) url = word;
      }
      if (url === undefined || !url.startsWith("$URL")) continue;
      const [path, query = ""] = url.slice("$URL".length).split("?") as [string, string?];
      curls.push({
        line: startLine + line,
        method: method ?? (body === undefined ? "GET" : "POST"),
        path,
        query: query === "" ? [] : query.split("&").map((p) => p.split("=")[0]!),
        body,
      });
    }
  }
  return curls;
}

function shellCommands(text: string): { words: string[]; line: number }[] {
  const commands: { words: string[]; line: number }[] = [];
  let words: string[] = [];
  let word: string | undefined;
  let line = 0;
  let commandLine = 0;
  const endWord = () => {
    if (word !== undefined) words.push(word);
    word = undefined;
  };
  const endCommand = () => {
    endWord();
    if (words.length > 0) commands.push({ words, line: commandLine });
    words = [];
  };
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (word === undefined && words.length === 0 && c !== " " && c !== "\n") commandLine = line;
    if (c === "\n") {
      line++;
      endCommand();
    } else if (c === " " || c === "\t") {
      endWord();
    } else if (c === "\\" && text[i + 1] === "\n") {
      i++;
      line++;
      endWord();
    } else if (c === "#" && word === undefined) {
      while (i + 1 < text.length && text[i + 1] !== "\n") i++;
    } else if (c === "'") {
      const end = text.indexOf("'", i + 1);
      const quoted = text.slice(i + 1, end);
      line += quoted.split("\n").length - 1;
      word = (word ?? "") + quoted;
      i = end;
    } else if (c === '"') {
      let quoted = "";
      for (i++; i < text.length && text[i] !== '"'; i++) {
        if (text[i] === "\\" && ['"', "\\", "$", "`"].includes(text[i + 1]!)) quoted += text[++i];
        else quoted += text[i];
        if (text[i] === "\n") line++;
      }
      word = (word ?? "") + quoted;
    } else {
      word = (word ?? "") + c;
    }
  }
  endCommand();
  return commands;
}
