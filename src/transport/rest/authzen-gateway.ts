/**
 * AuthZEN's HTTPS JSON binding (docs/authzen.md) for the routes of
 * authzen.v1.AccessService, which its google.api.http annotations declare
 * as they declare every other route. They are served as every REST route
 * is (rest-gateway.ts: authorization, body reading, the guard, the one
 * error mapping; by the fast path, rest-fast-path.ts, or by Fastify), each
 * made here into a route that follows what the standard asks where it
 * differs from this API, whichever of the two takes the request:
 *
 * - unknown fields are ignored, at any depth (this API refuses them);
 * - the body is `application/json` (this API takes any media type, for curl);
 * - the caller's `X-Request-ID` comes back as it was sent, whatever it
 *   holds (this API keeps it as the request's id only when it is a short
 *   token, and sends its own otherwise; the log still uses that one);
 * - a 401 says `WWW-Authenticate: Bearer`, the key being also a bearer
 *   token here (transport/call/auth.ts);
 * - an answer's list marked OPTIONAL (google.api.field_behavior) is left
 *   out when empty: Access Evaluations without items is `{"decision": ...}`.
 *
 * Error bodies keep this API's shape ({code, message, details, requestId}):
 * the standard defines none beyond "an error message", and its statuses
 * (400, 401, 403, 500) are the ones the codes map to.
 */
import { create, getOption, isMessage, toJson, type DescField, type DescMessage, type JsonObject } from "@bufbuild/protobuf";
import { invalidArgument } from "../../domain/errors.js";
import { FieldBehavior, field_behavior } from "../../../gen/google/api/field_behavior_pb.js";
import type { JsonReading } from "./json-input.js";
import { jsonReader, type RestRequest, type RestRoute } from "./rest-gateway.js";

/** The package whose routes follow AuthZEN's rules rather than this API's. */
export const AUTHZEN_PACKAGE = "authzen.v1";

export const isAuthZenRoute = (r: RestRoute): boolean => r.route.method.parent.file.proto.package === AUTHZEN_PACKAGE;

/** AuthZEN's reading of a request's JSON: a key that is no field is skipped, at any depth. */
const AUTHZEN_READING: JsonReading = { ignoreUnknownFields: true };

const JSON_TYPE = /^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i;

/** The routes, AuthZEN's made to follow its rules (authZenRoute), the others as they are. */
export function withAuthZenRules(routes: RestRoute[]): RestRoute[] {
  return routes.map((r) => (isAuthZenRoute(r) ? authZenRoute(r) : r));
}

/** The route read, written and answered by AuthZEN's rules instead of this API's. */
export function authZenRoute(r: RestRoute): RestRoute {
  const output = r.route.method.output;
  const read = jsonReader(r.route, AUTHZEN_READING);
  return {
    ...r,
    // The media type is checked once the key is (serveRest authorizes before it reads the body).
    read: (json, req) => {
      requireJson(req);
      return read(json);
    },
    write: (result) => answerJson(output, result),
    answerHeaders,
  };
}

/** A body must say it is JSON; a request without one (an empty body) is read as {} and refused for what it lacks. */
function requireJson(req: RestRequest): void {
  const type = req.headers["content-type"] ?? "";
  const body = req.body;
  if (body === undefined || body.length === 0 || JSON_TYPE.test(type)) return;
  const reason = `must be application/json, got ${type === "" ? "none" : JSON.stringify(type.slice(0, 80))}`;
  throw invalidArgument(`Content-Type: ${reason}`, [{ field: "Content-Type", reason }]);
}

const BEARER_CHALLENGE: Readonly<Record<string, string>> = Object.freeze({ "www-authenticate": 'Bearer realm="portcullis"' });

/**
 * The standard's headers: a request's X-Request-ID is returned as it came
 * (in place of the request log's own id, which the request line and an
 * error body keep), and a 401 challenges for a bearer token.
 */
function answerHeaders(req: RestRequest, status: number): Record<string, string> | undefined {
  const given = req.headers["x-request-id"];
  const id = Array.isArray(given) ? given[0] : given;
  const echo = id !== undefined && id !== "";
  if (status === 401) return echo ? { "x-request-id": id, ...BEARER_CHALLENGE } : BEARER_CHALLENGE;
  return echo ? { "x-request-id": id } : undefined;
}

/** The answer's JSON: every scalar and list written, except a list marked OPTIONAL that is empty. */
function answerJson(output: DescMessage, result: object): unknown {
  const response = isMessage(result, output) ? result : create(output, result as never);
  const json = toJson(output, response, { alwaysEmitImplicit: true }) as JsonObject;
  for (const field of optionalLists(output)) {
    const value = json[field.jsonName];
    if (Array.isArray(value) && value.length === 0) delete json[field.jsonName];
  }
  return json;
}

const optionalListsOf = new Map<DescMessage, DescField[]>();

function optionalLists(desc: DescMessage): DescField[] {
  let fields = optionalListsOf.get(desc);
  if (fields === undefined) {
    fields = desc.fields.filter((f) => f.fieldKind === "list" && getOption(f, field_behavior).includes(FieldBehavior.OPTIONAL));
    optionalListsOf.set(desc, fields);
  }
  return fields;
}
