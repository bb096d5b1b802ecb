/**
 * What the OpenAPI document (openapi.ts) says of the AuthZEN routes beyond
 * what their descriptors give (docs/authzen.md): the key may also come as
 * a bearer token, their requests' unknown fields are ignored (their schemas
 * stay open), and the metadata route, which no annotation declares (it is
 * discovery, served without a key, like /openapi.json).
 */
import type { DescMessage } from "@bufbuild/protobuf";
import { AUTHZEN_PACKAGE } from "../rest/authzen-gateway.js";
import { AUTHZEN_METADATA_PATH } from "../rest/authzen-metadata.js";
import type { HttpBinding } from "../rest/http-rules.js";
import type { JsonSchema, OpenApiDocument } from "./openapi-types.js";

export const BEARER = "Bearer";

export const BEARER_SCHEME: JsonSchema = {
  type: "http",
  scheme: "bearer",
  description: "AuthZEN's routes (/access/v1/) only: the same application key as `Authorization: Bearer KEY`.",
};

/** A message of AuthZEN's API, whose requests are read by its rules. */
export const isAuthZenMessage = (desc: DescMessage): boolean => desc.file.proto.package === AUTHZEN_PACKAGE;

export const isAuthZenBinding = (b: HttpBinding): boolean => isAuthZenMessage(b.method.input);

/** Either header carries the key on an AuthZEN route. */
export const authZenSecurity = (apiKey: string): Record<string, string[]>[] => [{ [apiKey]: [] }, { [BEARER]: [] }];

const url = { type: "string", format: "uri" };

/** GET /.well-known/authzen-configuration, when the AuthZEN routes are served. */
export function authZenMetadataPaths(bindings: readonly HttpBinding[]): OpenApiDocument["paths"] {
  if (!bindings.some(isAuthZenBinding)) return {};
  const endpoints = ["access_evaluation_endpoint", "access_evaluations_endpoint", "search_subject_endpoint", "search_resource_endpoint", "search_action_endpoint"];
  return {
    [AUTHZEN_METADATA_PATH]: {
      get: {
        operationId: "AuthZenConfiguration",
        summary: "AuthZEN's Policy Decision Point metadata",
        description:
          "No key needed. The base URL (`policy_decision_point`) is PUBLIC_URL when set, else the request's Host " +
          "(and X-Forwarded-Proto's scheme); each endpoint is under it. A Host that makes no URL is a 400.",
        tags: ["AccessService"],
        security: [],
        responses: {
          "200": {
            description: "The metadata.",
            content: {
              "application/json": {
                schema: {
                  type: "object",
                  required: ["policy_decision_point", ...endpoints],
                  additionalProperties: false,
                  properties: Object.fromEntries(["policy_decision_point", ...endpoints].map((name) => [name, url])),
                },
              },
            },
          },
          "400": { $ref: "#/components/responses/BadRequest" },
        },
      },
    },
  };
}
