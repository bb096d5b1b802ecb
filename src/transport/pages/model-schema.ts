/**
 * The JSON Schemas of the model's files (API.md, "Models as files"), served
 * beside the OpenAPI document so that editors can complete and check files
 * kept in YAML or JSON (a YAML file names one with
 * `# yaml-language-server: $schema=<url>/model.schema.json`):
 * - /model.schema.json, a model: the body of `PUT
 *   /api/v1/applications/{app_id}/model`;
 * - /model-test.schema.json, a test file of `portcullis model test`: a
 *   model, grants as the bulk write takes them, role assignments by name,
 *   and assertions whose questions are the bodies of the check, lookup and
 *   who-can routes.
 *
 * Each is taken out of the OpenAPI document with the components it reaches:
 * one contract, so a file's schema cannot drift from what the API accepts.
 */
import type { JsonSchema, OpenApiDocument } from "./openapi-types.js";

const COMPONENTS = "#/components/schemas/";
const DIALECT = "https://json-schema.org/draft/2020-12/schema";

type Operations = Record<string, Record<string, { requestBody: { content: Record<string, { schema: JsonSchema }> } }> | undefined>;

/** The OpenAPI document's schemas, copied with their references moved under $defs. */
class Extract {
  readonly defs: Record<string, JsonSchema> = {};
  private readonly components: Record<string, JsonSchema>;

  constructor(private readonly openapi: OpenApiDocument) {
    this.components = (openapi.components as { schemas: Record<string, JsonSchema> }).schemas;
  }

  /** The JSON body of `verb route`, its references rewritten. */
  body(verb: string, route: string): JsonSchema {
    const op = (this.openapi.paths as Operations)[route]?.[verb];
    if (op === undefined) throw new Error(`the OpenAPI document has no ${verb.toUpperCase()} ${route}`);
    return this.rewrite(op.requestBody.content["application/json"]!.schema) as JsonSchema;
  }

  /** The schema a rewritten `$ref` names, or the schema itself. */
  deref(schema: JsonSchema): JsonSchema {
    const ref = schema.$ref;
    return typeof ref === "string" && ref.startsWith("#/$defs/") ? this.defs[ref.slice("#/$defs/".length)]! : schema;
  }

  /** A schema with its references moved under $defs, collecting what they name. */
  rewrite(value: unknown): unknown {
    if (Array.isArray(value)) return value.map((v) => this.rewrite(v));
    if (value === null || typeof value !== "object") return value;
    const out: Record<string, unknown> = {};
    for (const [key, inner] of Object.entries(value)) {
      if (key === "$ref" && typeof inner === "string" && inner.startsWith(COMPONENTS)) {
        const name = inner.slice(COMPONENTS.length);
        out.$ref = `#/$defs/${name}`;
        if (!(name in this.defs)) {
          this.defs[name] = {}; // before the descent: a message may reach itself
          this.defs[name] = this.rewrite(this.components[name]) as JsonSchema;
        }
      } else out[key] = this.rewrite(inner);
    }
    return out;
  }
}

export function modelSchema(openapi: OpenApiDocument): JsonSchema {
  const extract = new Extract(openapi);
  const body = extract.body("put", "/api/v1/applications/{app_id}/model");
  return {
    $schema: DIALECT,
    $id: "/model.schema.json",
    title: "Portcullis model",
    description:
      "An application's model as one document: its catalog, policies and roles, named by name (GET, POST .../model/plan and PUT /api/v1/applications/{appId}/model; portcullis model).",
    ...body,
    $defs: extract.defs,
  };
}

/** A body with fields dropped (those the test reads itself) and fields made required. */
function question(body: JsonSchema, drop: readonly string[], add: Record<string, JsonSchema>, required: readonly string[]): JsonSchema {
  const properties = { ...(body.properties as Record<string, JsonSchema>) };
  for (const name of drop) delete properties[name];
  return { ...body, properties: { ...properties, ...add }, required: [...required], additionalProperties: false };
}

export function modelTestSchema(openapi: OpenApiDocument): JsonSchema {
  const extract = new Extract(openapi);
  const model = extract.body("put", "/api/v1/applications/{app_id}/model");
  const bulk = extract.deref(extract.body("post", "/api/v1/authorization/relationships/bulk"));
  const grant = (bulk.properties as Record<string, JsonSchema>).writes!.items as JsonSchema;
  const ask = (route: string) => extract.deref(extract.body("post", route));
  const text: JsonSchema = { type: "string", minLength: 1 };
  const asked = ["userId", "resource", "resourceId", "action"];
  const paging = ["pageSize", "pageToken"];
  const expectation: JsonSchema = { enum: ["allowed", "denied"], description: "What the question must answer." };
  const assertion = (kind: string, body: JsonSchema, description: string): JsonSchema => ({
    type: "object",
    description,
    properties: { name: { type: "string", description: "Printed when the assertion fails." }, [kind]: body, expect: expectation },
    required: [kind, "expect"],
    additionalProperties: false,
  });
  return {
    $schema: DIALECT,
    $id: "/model-test.schema.json",
    title: "Portcullis model test",
    description: "A test file of portcullis model test: a model, the grants and role assignments of a small world, and what must hold in it.",
    type: "object",
    properties: {
      model: { ...model, description: "The model, as GET /api/v1/applications/{appId}/model gives it (what /model.schema.json describes)." },
      grants: { type: "array", items: grant, description: "Grants, as the bulk write takes them." },
      assignments: {
        type: "array",
        description: "Role assignments, the role named by name (and tenantId for a tenant's role), with an optional CEL condition.",
        items: {
          type: "object",
          properties: { role: text, userId: text, tenantId: { type: "string" }, condition: { type: "string", description: "A CEL condition under which the role counts (docs/conditions.md)." } },
          required: ["role", "userId"],
          additionalProperties: false,
        },
      },
      assertions: {
        type: "array",
        items: {
          oneOf: [
            assertion("check", question(ask("/api/v1/authorization/check"), [], {}, asked), "May the user do the action on the instance?"),
            assertion(
              "lookup",
              question(ask("/api/v1/authorization/lookup"), paging, { resourceId: text }, asked),
              "Does the user's lookup list the instance (resourceId)?",
            ),
            assertion(
              "whoCan",
              question(ask("/api/v1/authorization/subjects"), paging, { userId: text }, asked),
              "Does who can of the instance list the user (userId)?",
            ),
          ],
        },
      },
    },
    required: ["model", "assertions"],
    additionalProperties: false,
    $defs: extract.defs,
  };
}
