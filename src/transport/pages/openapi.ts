/**
 * The OpenAPI 3.1 document of the REST API, generated at start-up from the
 * very bindings the REST gateway registers its routes from (http-rules.ts:
 * the google.api.http annotations of the service descriptors), so a route
 * cannot exist in one and not in the other. Everything is read off the
 * descriptors: paths and verbs, path variables (named as in the template,
 * which is how the gateway's router names them), query parameters (what
 * rest-gateway.ts accepts: the scalar fields a route binds neither to the
 * path nor to the body), the body (`body: "*"`, a field, or none), the
 * response (`response_body`), and JSON Schemas of the messages as proto3
 * JSON writes them (lowerCamelCase, 64-bit integers as strings, Timestamp as
 * RFC 3339, FieldMask as a string, Struct as any object). Who may call a
 * route and with which scope comes from auth.ts; descriptions are the
 * comments of proto/ (proto-comments.ts, generated, since the descriptors
 * in gen/ carry no source info).
 *
 * Written here rather than taken from a library: the generators that turn
 * protobuf into OpenAPI (protoc-gen-openapiv2, gnostic's protoc-gen-openapi)
 * are protoc plugins in Go that write a file at build time, for OpenAPI 2 or
 * 3.0; neither knows this gateway's rules (query fields, the 201s, the
 * key's scopes), and a file written at build time is a second source that
 * can drift from the routes.
 */
import { getOption, ScalarType, type DescEnum, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import { LIMITS } from "../../domain/formats.js";
import { accessOf, scopeOf } from "../call/auth.js";
import { connectToRest } from "../call/errors.js";
import type { HttpBinding } from "../rest/http-rules.js";
import { FieldBehavior, field_behavior } from "../../../gen/google/api/field_behavior_pb.js";
import { authZenMetadataPaths, authZenSecurity, BEARER, BEARER_SCHEME, isAuthZenBinding, isAuthZenMessage } from "./openapi-authzen.js";
import { protoComments } from "./proto-comments.js";
import type { JsonSchema, OpenApiDocument, Operation, Parameter } from "./openapi-types.js";

const API_KEY = "ApiKey";
const ERROR = "Error";

/**
 * The RPCs whose REST answer is 201 when they create something (the
 * services call markCreated, which no descriptor records): "always" for a
 * create, "when new" for a write that answers 200 when the thing existed.
 * test/openapi.test.ts calls every route and fails on a status the document
 * does not list.
 */
const created: Record<string, "always" | "when new"> = {
  "authz.v1.ApplicationService.CreateApplication": "always",
  "authz.v1.ApplicationService.CreateApiKey": "always",
  "authz.v1.PolicyService.CreatePolicy": "always",
  "authz.v1.RoleService.CreateRole": "always",
  "authz.v1.RoleService.AssignRole": "when new",
  "authz.v1.RelationshipService.WriteRelationship": "when new",
};

/** The routes the gateway does not build from annotations (fastify-app.ts): health, no key. */
const healthPaths: OpenApiDocument["paths"] = {
  "/healthz": {
    get: {
      operationId: "Healthz",
      summary: "Liveness: the process answers",
      description: "No key needed. Answers as soon as the service listens, before the database is open.",
      tags: ["Health"],
      security: [],
      responses: {
        "200": {
          description: "The service is up.",
          content: {
            "application/json": {
              schema: { type: "object", required: ["status"], additionalProperties: false, properties: { status: { const: "ok" } } },
            },
          },
        },
      },
    },
  },
  "/readyz": {
    get: {
      operationId: "Readyz",
      summary: "Readiness: the database answers",
      description:
        "No key needed. 503 while the database is opening or cannot be reached. With read replicas, each is reported; " +
        "a skipped replica does not make the service unready (the primary answers its checks).",
      tags: ["Health"],
      security: [],
      responses: {
        "200": {
          description: "The database answered `SELECT 1` within 2 seconds.",
          content: {
            "application/json": {
              schema: {
                type: "object",
                required: ["status", "database"],
                additionalProperties: false,
                properties: {
                  status: { const: "ready" },
                  database: { enum: ["postgres", "pglite"] },
                  replicas: {
                    type: "array",
                    items: {
                      type: "object",
                      required: ["name", "healthy", "answered", "passedToPrimary"],
                      properties: {
                        name: { type: "string" },
                        healthy: { type: "boolean" },
                        reason: { type: "string", description: "Why the replica is skipped." },
                        answered: { type: "integer" },
                        passedToPrimary: { type: "integer" },
                      },
                    },
                  },
                },
              },
            },
          },
        },
        "503": { $ref: "#/components/responses/Unavailable" },
      },
    },
  },
};

/** The document for the routes of `bindings` (those the gateway serves) and the health routes. */
export function openApiDocument(bindings: readonly HttpBinding[]): OpenApiDocument {
  const schemas = new SchemaSet(bindings);
  const paths: OpenApiDocument["paths"] = {};
  const tags = new Map<string, string | undefined>();
  const names = new Map<string, number>();
  for (const b of bindings) names.set(b.method.name, (names.get(b.method.name) ?? 0) + 1);

  for (const b of bindings) {
    const service = b.method.parent;
    tags.set(service.name, protoComments[service.typeName]);
    const rpc = `${service.typeName}.${b.method.name}`;
    const comment = protoComments[rpc];
    const operation: Operation = {
      operationId: names.get(b.method.name) === 1 ? b.method.name : `${service.name}_${b.method.name}`,
      summary: summaryOf(comment, b.method.name),
      description: [comment, accessText(b)].filter((x) => x !== undefined).join("\n\n"),
      tags: [service.name],
      parameters: parametersOf(b, schemas),
      responses: responsesOf(b, rpc, schemas),
      "x-rpc": `/${service.typeName}/${b.method.name}`,
    };
    if (operation.parameters!.length === 0) delete operation.parameters;
    if (isAuthZenBinding(b)) operation.security = authZenSecurity(API_KEY);
    const body = requestBodyOf(b, schemas);
    if (body !== undefined) operation.requestBody = body;
    const item = (paths[b.template] ??= {});
    const verb = b.verb.toLowerCase();
    if (item[verb] !== undefined) throw new Error(`two RPCs bound to ${b.verb} ${b.template}`);
    item[verb] = operation;
  }
  for (const [path, item] of Object.entries({ ...healthPaths, ...authZenMetadataPaths(bindings) })) {
    if (paths[path] !== undefined) throw new Error(`${path} is both a health route and an annotated one`);
    paths[path] = item;
  }

  const errorCodes = [...new Set(Object.values(connectToRest).map((c) => c.code))].sort();
  // Each error response names the codes its status carries (errors.ts maps them); 413 is the HTTP layer's own.
  const errorResponse = (status: number, description: string) => {
    const codes = status === 413 ? ["resource_exhausted"] : [...new Set(Object.values(connectToRest).filter((c) => c.status === status).map((c) => c.code))];
    if (codes.length === 0) throw new Error(`no error code has the HTTP status ${status}`);
    const code = codes.length === 1 ? { const: codes[0] } : { enum: codes };
    return {
      description,
      content: { "application/json": { schema: { allOf: [{ $ref: `#/components/schemas/${ERROR}` }, { type: "object", properties: { code } }] } } },
    };
  };
  return {
    openapi: "3.1.0",
    info: {
      title: "Portcullis",
      version: apiVersion(bindings),
      description: [
        "The REST API of Portcullis, an authorization service. Every route is also an RPC of the same name over gRPC, " +
          "Connect and gRPC-Web on the same port (`x-rpc` names it).",
        "Bodies and answers are JSON, in the proto3 JSON mapping: field names in lowerCamelCase (the proto names, " +
          "`user_id`, are accepted in requests too), timestamps in RFC 3339, 64-bit integers as strings. A JSON `null` " +
          "means \"not set\". Unknown fields are refused (400 naming them).",
        "Send the key in the `X-API-Key` header. Every error has one shape (`Error`), with a message that names the " +
          "offending field.",
        "The AuthZEN Authorization API 1.0 under `/access/v1/` (AccessService) follows that standard where it differs: " +
          "snake_case names, unknown fields ignored, `application/json` bodies, the key also as `Authorization: Bearer`.",
      ].join("\n\n"),
    },
    tags: [...[...tags].map(([name, description]) => (description === undefined ? { name } : { name, description })), { name: "Health" }],
    security: [{ [API_KEY]: [] }],
    paths,
    components: {
      schemas: {
        ...schemas.components(),
        [ERROR]: {
          type: "object",
          description: "Every error's body, whatever the route.",
          required: ["code", "message", "details", "requestId"],
          // Not closed: a field added to every error body breaks no client.
          properties: {
            code: { type: "string", enum: errorCodes, description: "The error code, by the HTTP status in the responses." },
            message: { type: "string", description: "What is wrong, naming the offending field or value; never a key." },
            details: {
              type: "array",
              description: "For machines: for a bad request, one `{field, reason}` per problem.",
              items: { type: "object" },
            },
            requestId: { type: "string", description: "The request's id, as its `x-request-id` header and its log lines carry it." },
          },
        },
      },
      responses: {
        BadRequest: errorResponse(
          400,
          "`invalid_argument`: a bad format, an unknown field, a wrong type, malformed JSON, a value over a limit, " +
            "a forged page token. The message and `details` name the field.",
        ),
        Unauthenticated: errorResponse(401, "`unauthenticated`: `X-API-Key` missing, unknown or revoked."),
        PermissionDenied: errorResponse(
          403,
          "`permission_denied`: the key is outside its application or lacks the scope the route takes (the message names it).",
        ),
        NotFound: errorResponse(404, "`not_found`: what the path names (application, policy, role, key) does not exist."),
        Conflict: errorResponse(
          409,
          "`already_exists`: an id or name that is taken; `failed_precondition`: the change would leave the model " +
            "inconsistent (the message names what is in the way); `aborted`: a concurrent change got there first, try again.",
        ),
        PayloadTooLarge: errorResponse(413, `\`resource_exhausted\`: the body is over ${LIMITS.bodyBytes / 1024 / 1024} MiB.`),
        TooManyRequests: errorResponse(429, "`resource_exhausted`: a bound per key or per application is reached (docs/limits.md); the message names it."),
        Internal: errorResponse(500, "`internal`: a fault of the service; the message carries an error id the log has."),
        Unavailable: errorResponse(503, "`unavailable`: the database cannot be reached; try again shortly."),
      },
      securitySchemes: {
        [BEARER]: BEARER_SCHEME,
        [API_KEY]: {
          type: "apiKey",
          in: "header",
          name: "X-API-Key",
          description:
            "The operator key (printed on first start, or AUTHZ_ADMIN_KEY) or an application key " +
            "(POST /api/v1/applications/{app_id}/api-keys), with the scopes the route takes.",
        },
      },
    },
  };
}

/** "v1" of the services' package (authz.v1). */
function apiVersion(bindings: readonly HttpBinding[]): string {
  const pkg = bindings[0]?.method.parent.file.proto.package ?? "";
  return pkg.split(".").pop() ?? pkg;
}

/** The comment's first sentence when it is short, else the RPC's name in words. */
function summaryOf(comment: string | undefined, name: string): string {
  const first = comment?.replace(/\s+/g, " ").match(/^(.+?[.?])(?:\s|$)/)?.[1];
  if (first !== undefined && first.length <= 90) return first.replace(/\.$/, "");
  const words = name.replace(/([a-z0-9])([A-Z])/g, "$1 $2").toLowerCase();
  return words.charAt(0).toUpperCase() + words.slice(1);
}

/** Who may call the route, from the rules auth.ts applies. */
function accessText(b: HttpBinding): string {
  const { scope } = scopeOf(b.method);
  switch (accessOf(b.method)) {
    case "operator":
      return "**Key:** the operator key only.";
    case "any":
      return "**Key:** any valid key, whatever its scopes.";
    case "own-application":
      return `**Key:** an application key with the \`${scope}\` scope; acts on that key's own application (the operator key is refused).`;
    case "application":
      return `**Key:** the operator key, or a key of this application with the \`${scope}\` scope.`;
  }
}

function parametersOf(b: HttpBinding, schemas: SchemaSet): Parameter[] {
  const path: Parameter[] = b.pathFields.map((f) => ({
    name: f.name,
    in: "path",
    required: true,
    ...describe(f),
    schema: schemas.field(f, "in"),
  }));
  // As rest-gateway.ts reads them: none with a whole-message body; else every
  // field bound neither to the path nor to the body that is not a message or a map.
  const query: Parameter[] =
    b.body === "*"
      ? []
      : b.method.input.fields
          .filter((f) => !b.boundFields.has(f) && f !== b.body && f.fieldKind !== "message" && f.fieldKind !== "map")
          .map((f) => {
            const p: Parameter = { name: f.jsonName, in: "query", required: false, ...describe(f), schema: schemas.field(f, "in") };
            if (f.fieldKind === "list") Object.assign(p, { style: "form", explode: true });
            return p;
          });
  return [...path, ...query];
}

function requestBodyOf(b: HttpBinding, schemas: SchemaSet): Operation["requestBody"] {
  if (b.body === undefined) return undefined;
  const schema = b.body === "*" ? schemas.body(b) : schemas.field(b.body, "in");
  // An absent or empty body reads as {} (every field at its default), unless a field is required.
  const required = b.body === "*" ? b.requiredFields.length > 0 : b.requiredFields.includes(b.body);
  return { required, content: { "application/json": { schema } } };
}

function responsesOf(b: HttpBinding, rpc: string, schemas: SchemaSet): Operation["responses"] {
  const schema = b.responseBody === undefined ? schemas.message(b.method.output, "out") : schemas.field(b.responseBody, "out");
  const content = { "application/json": { schema } };
  const responses: Operation["responses"] = {};
  const creates = created[rpc];
  if (creates !== "always") responses["200"] = { description: creates === "when new" ? "It already existed." : "OK.", content };
  if (creates !== undefined) responses["201"] = { description: "Created.", content };
  const ref = (name: string) => ({ $ref: `#/components/responses/${name}` });
  responses["400"] = ref("BadRequest");
  responses["401"] = ref("Unauthenticated");
  if (accessOf(b.method) !== "any") responses["403"] = ref("PermissionDenied");
  if (b.pathFields.length > 0) responses["404"] = ref("NotFound");
  if (scopeOf(b.method).scope === "write") responses["409"] = ref("Conflict");
  if (b.body !== undefined) responses["413"] = ref("PayloadTooLarge");
  if (scopeOf(b.method).scope !== "check") responses["429"] = ref("TooManyRequests"); // the questions never queue
  responses["500"] = ref("Internal");
  responses["503"] = ref("Unavailable");
  return responses;
}

const describe = (f: DescField): { description?: string } => {
  const text = protoComments[`${f.parent.typeName}.${f.name}`];
  return text === undefined ? {} : { description: text };
};

type Direction = "in" | "out";

/**
 * The JSON Schemas of the messages the routes reach, as components. A
 * message differs by direction only in what is required: an answer always
 * carries its implicit-presence fields (the gateway writes JSON with
 * alwaysEmitImplicit), a request needs none of them. A message reached both
 * ways gets two components, the request's named ...Input.
 */
class SchemaSet {
  private readonly reached = new Map<string, { desc: DescMessage; dirs: Set<Direction> }>();
  private readonly bodies = new Map<string, JsonSchema>();

  constructor(bindings: readonly HttpBinding[]) {
    for (const b of bindings) {
      // Query parameters are scalars: only a body reaches messages.
      if (b.body === "*") for (const f of b.method.input.fields) if (!b.boundFields.has(f)) this.reach(f, "in");
      if (b.body !== undefined && b.body !== "*") this.reach(b.body, "in");
      if (b.responseBody !== undefined) this.reach(b.responseBody, "out");
      else this.reachMessage(b.method.output, "out");
    }
  }

  private reach(f: DescField, dir: Direction): void {
    const message = f.fieldKind === "message" ? f.message : f.fieldKind === "list" || f.fieldKind === "map" ? f.message : undefined;
    if (message !== undefined) this.reachMessage(message, dir);
  }

  private reachMessage(desc: DescMessage, dir: Direction): void {
    if (wellKnown(desc, dir) !== undefined) return;
    const entry = this.reached.get(desc.typeName);
    if (entry?.dirs.has(dir)) return;
    if (entry === undefined) this.reached.set(desc.typeName, { desc, dirs: new Set([dir]) });
    else entry.dirs.add(dir);
    for (const f of desc.fields) this.reach(f, dir);
  }

  /** The component name of a message in one direction. */
  private nameOf(desc: DescMessage, dir: Direction): string {
    const entry = this.reached.get(desc.typeName);
    const clash = [...this.reached.values()].some((e) => e.desc !== desc && e.desc.name === desc.name);
    const base = clash ? desc.typeName : desc.name;
    return dir === "in" && entry !== undefined && entry.dirs.size === 2 ? `${base}Input` : base;
  }

  /** A reference to a message's schema (inline for the well-known types). */
  message(desc: DescMessage, dir: Direction): JsonSchema {
    return wellKnown(desc, dir) ?? { $ref: `#/components/schemas/${this.nameOf(desc, dir)}` };
  }

  /**
   * The body of a `body: "*"` route: the request without the fields the
   * path gives (the gateway refuses them in the body), with the route's
   * required and non-empty rules.
   */
  body(b: HttpBinding): JsonSchema {
    const desc = b.method.input;
    const fields = desc.fields.filter((f) => !b.boundFields.has(f));
    const schema = this.object(desc, fields, "in");
    if (b.requiredFields.length > 0) schema.required = b.requiredFields.map((f) => f.jsonName);
    const properties = schema.properties as Record<string, JsonSchema>;
    for (const f of b.nonEmptyFields) {
      properties[f.jsonName] = { ...properties[f.jsonName], minItems: 1 };
    }
    const name = desc.name;
    const existing = this.bodies.get(name);
    if (existing !== undefined && JSON.stringify(existing) !== JSON.stringify(schema)) {
      throw new Error(`${desc.typeName} is the body of two routes that bind different fields`);
    }
    this.bodies.set(name, schema);
    return { $ref: `#/components/schemas/${name}` };
  }

  /** Every message component, then the route bodies. */
  components(): Record<string, JsonSchema> {
    const out: Record<string, JsonSchema> = {};
    const sorted = [...this.reached.values()].sort((a, b) => a.desc.typeName.localeCompare(b.desc.typeName));
    for (const { desc, dirs } of sorted) {
      for (const dir of ["out", "in"] as const) {
        if (dirs.has(dir)) out[this.nameOf(desc, dir)] = this.object(desc, desc.fields, dir);
      }
    }
    for (const [name, schema] of this.bodies) {
      if (out[name] !== undefined) throw new Error(`two schemas named ${name}`);
      out[name] = schema;
    }
    return out;
  }

  private object(desc: DescMessage, fields: readonly DescField[], dir: Direction): JsonSchema {
    const properties: Record<string, JsonSchema> = {};
    for (const f of fields) properties[f.jsonName] = { ...this.field(f, dir), ...describe(f) };
    const schema: JsonSchema = { type: "object" };
    const comment = protoComments[desc.typeName];
    if (comment !== undefined) schema.description = comment;
    schema.properties = properties;
    // What an answer always carries: toJson with alwaysEmitImplicit writes
    // every field without explicit presence (plain scalars, lists, maps);
    // message fields, proto3 optional fields and oneof members only when set.
    if (dir === "out") {
      const required = fields.filter(alwaysWritten).map((f) => f.jsonName);
      if (required.length > 0) schema.required = required;
    }
    // The gateway refuses unknown fields (400 naming them), and writes none;
    // AuthZEN's requests ignore them (authzen-gateway.ts), so theirs stay open.
    if (dir === "out" || !isAuthZenMessage(desc)) schema.additionalProperties = false;
    return schema;
  }

  /** The schema of one field's JSON value. */
  field(f: DescField, dir: Direction): JsonSchema {
    switch (f.fieldKind) {
      case "scalar":
        return scalarSchema(f.scalar, dir);
      case "enum":
        return enumSchema(f.enum, dir);
      case "message":
        return this.message(f.message, dir);
      case "list": {
        const items =
          f.listKind === "scalar" ? scalarSchema(f.scalar, dir) : f.listKind === "enum" ? enumSchema(f.enum, dir) : this.message(f.message, dir);
        return { type: "array", items };
      }
      case "map": {
        const values =
          f.mapKind === "scalar" ? scalarSchema(f.scalar, dir) : f.mapKind === "enum" ? enumSchema(f.enum, dir) : this.message(f.message, dir);
        const keys = mapKeySchema(f.mapKey);
        return { type: "object", ...(keys === undefined ? {} : { propertyNames: keys }), additionalProperties: values };
      }
    }
  }
}

function alwaysWritten(f: DescField): boolean {
  // A list marked OPTIONAL is left out when empty (authzen-gateway.ts: Evaluations answered without items).
  if (f.fieldKind === "list" && getOption(f, field_behavior).includes(FieldBehavior.OPTIONAL)) return false;
  if (f.fieldKind === "list" || f.fieldKind === "map") return true;
  if (f.fieldKind === "message" || f.oneof !== undefined) return false;
  return f.presence === FeatureSet_FieldPresence.IMPLICIT;
}

const INT64 = "^-?[0-9]+$";
const UINT64 = "^[0-9]+$";

/**
 * proto3 JSON of a scalar. Requests may give an integer as a number or a
 * decimal string (json-input.ts takes both); answers write 32-bit integers as
 * numbers and 64-bit ones as strings (a JSON number loses precision above 2^53).
 */
function scalarSchema(type: ScalarType, dir: Direction): JsonSchema {
  switch (type) {
    case ScalarType.STRING:
      return { type: "string" };
    case ScalarType.BOOL:
      return { type: "boolean" };
    case ScalarType.BYTES:
      return { type: "string", contentEncoding: "base64" };
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT: {
      const format = type === ScalarType.DOUBLE ? "double" : "float";
      return { oneOf: [{ type: "number", format }, { enum: ["NaN", "Infinity", "-Infinity"] }] };
    }
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return { type: "integer", format: "int32", minimum: -2147483648, maximum: 2147483647 };
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return { type: "integer", minimum: 0, maximum: 4294967295 };
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return dir === "out" ? { type: "string", format: "int64", pattern: INT64 } : { type: ["string", "integer"], format: "int64", pattern: INT64 };
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return dir === "out" ? { type: "string", format: "int64", pattern: UINT64 } : { type: ["string", "integer"], format: "int64", pattern: UINT64, minimum: 0 };
  }
}

/** An enum by its value names; a request may give the number. */
function enumSchema(desc: DescEnum, dir: Direction): JsonSchema {
  const names = { type: "string", enum: desc.values.map((v) => v.name) };
  return dir === "out" ? names : { oneOf: [names, { type: "integer", format: "int32" }] };
}

/** Map keys are strings in JSON; integer and boolean keys are written in decimal or as true/false. */
function mapKeySchema(type: ScalarType): JsonSchema | undefined {
  if (type === ScalarType.STRING) return undefined;
  if (type === ScalarType.BOOL) return { enum: ["true", "false"] };
  return { pattern: type === ScalarType.UINT32 || type === ScalarType.FIXED32 || type === ScalarType.UINT64 || type === ScalarType.FIXED64 ? UINT64 : INT64 };
}

/**
 * The well-known types' own JSON forms, inline (json-input.ts checks
 * requests against the same forms). Any other google.protobuf type (Any) has
 * no form here: a route reaching one fails at start-up rather than being
 * documented as a plain message.
 */
function wellKnown(desc: DescMessage, dir: Direction): JsonSchema | undefined {
  const wrapped = wrappers[desc.typeName];
  if (wrapped !== undefined) return scalarSchema(wrapped, dir);
  switch (desc.typeName) {
    case "google.protobuf.Timestamp":
      return { type: "string", format: "date-time", description: "RFC 3339 with Z or an offset, e.g. 2030-01-31T17:00:00Z." };
    case "google.protobuf.Duration":
      return { type: "string", pattern: "^-?[0-9]+(\\.[0-9]+)?s$", description: 'Seconds with an "s", e.g. "1.5s".' };
    case "google.protobuf.FieldMask":
      return { type: "string", pattern: "^([a-zA-Z0-9_.]+(,[a-zA-Z0-9_.]+)*)?$", description: "Comma-separated field names." };
    case "google.protobuf.Struct":
      return { type: "object" };
    case "google.protobuf.Value":
      return {};
    case "google.protobuf.ListValue":
      return { type: "array" };
    case "google.protobuf.Empty":
      return { type: "object", additionalProperties: false };
  }
  if (desc.typeName.startsWith("google.protobuf.")) throw new Error(`${desc.typeName} has no JSON Schema in openapi.ts`);
  return undefined;
}

const wrappers: Record<string, ScalarType> = {
  "google.protobuf.StringValue": ScalarType.STRING,
  "google.protobuf.BytesValue": ScalarType.BYTES,
  "google.protobuf.BoolValue": ScalarType.BOOL,
  "google.protobuf.Int32Value": ScalarType.INT32,
  "google.protobuf.UInt32Value": ScalarType.UINT32,
  "google.protobuf.Int64Value": ScalarType.INT64,
  "google.protobuf.UInt64Value": ScalarType.UINT64,
  "google.protobuf.DoubleValue": ScalarType.DOUBLE,
  "google.protobuf.FloatValue": ScalarType.FLOAT,
};
