/**
 * The JSON Schema of a model file (API.md, "Models as files"), served at
 * /model.schema.json beside the OpenAPI document, so that editors can
 * complete and check a model kept in YAML or JSON (a YAML file names it with
 * `# yaml-language-server: $schema=<url>/model.schema.json`).
 *
 * It is the body of `PUT /api/v1/applications/{app_id}/model` as the OpenAPI
 * document describes it, taken out with the components it reaches: one
 * contract, so the file's schema cannot drift from what apply accepts.
 */
import type { JsonSchema, OpenApiDocument } from "./openapi.js";

const APPLY_ROUTE = "/api/v1/applications/{app_id}/model";
const COMPONENTS = "#/components/schemas/";

export function modelSchema(openapi: OpenApiDocument): JsonSchema {
  const components = (openapi.components as { schemas: Record<string, JsonSchema> }).schemas;
  const put = (openapi.paths[APPLY_ROUTE] as Record<string, { requestBody: { content: Record<string, { schema: JsonSchema }> } }> | undefined)?.put;
  if (put === undefined) throw new Error(`the OpenAPI document has no PUT ${APPLY_ROUTE}`);
  const root = put.requestBody.content["application/json"]!.schema;
  const defs: Record<string, JsonSchema> = {};
  // Copies a schema with its references moved under $defs, collecting what they name.
  const rewrite = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(rewrite);
    if (value === null || typeof value !== "object") return value;
    const out: Record<string, unknown> = {};
    for (const [key, inner] of Object.entries(value)) {
      if (key === "$ref" && typeof inner === "string" && inner.startsWith(COMPONENTS)) {
        const name = inner.slice(COMPONENTS.length);
        out.$ref = `#/$defs/${name}`;
        if (!(name in defs)) {
          defs[name] = {}; // before the descent: a message may reach itself
          defs[name] = rewrite(components[name]) as JsonSchema;
        }
      } else out[key] = rewrite(inner);
    }
    return out;
  };
  const body = rewrite(root) as JsonSchema;
  return {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    $id: "/model.schema.json",
    title: "Portcullis model",
    description:
      "An application's model as one document: its catalog, policies and roles, named by name (GET, POST .../model/plan and PUT /api/v1/applications/{appId}/model; portcullis model).",
    ...body,
    $defs: defs,
  };
}
