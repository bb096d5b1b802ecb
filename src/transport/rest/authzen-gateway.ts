/**
 * AuthZEN's HTTPS JSON binding (docs/authzen.md) for the routes of
 * authzen.v1.AccessService, which its google.api.http annotations declare
 * as they declare every other route. They are served by the REST gateway's
 * own serveRest (authorization, body reading, the guard, the one error
 * mapping), with what the standard asks where it differs from this API:
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
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { invalidArgument } from "../../domain/errors.js";
import { FieldBehavior, field_behavior } from "../../../gen/google/api/field_behavior_pb.js";
import { onClientGone } from "../call/client-gone.js";
import { messageFromJson } from "./json-input.js";
import { serveRest, type RestDeps, type RestRequest, type RestRoute } from "./rest-gateway.js";

/** The package whose routes follow AuthZEN's rules rather than this API's. */
export const AUTHZEN_PACKAGE = "authzen.v1";

export const isAuthZenRoute = (r: RestRoute): boolean => r.route.method.parent.file.proto.package === AUTHZEN_PACKAGE;

const JSON_TYPE = /^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i;

/** The route read and written by AuthZEN's JSON rules instead of this API's. */
export function authZenRoute(r: RestRoute): RestRoute {
  const input = r.route.method.input;
  const output = r.route.method.output;
  return {
    ...r,
    read: (json) => messageFromJson(input, json, r.route.boundFields, { ignoreUnknownFields: true }),
    write: (result) => answerJson(output, result),
  };
}

/** Registers the AuthZEN routes (made by authZenRoute) on Fastify. */
export function registerAuthZen(app: FastifyInstance, routes: RestRoute[], deps: RestDeps): void {
  for (const r of routes) {
    app.route({
      method: r.route.verb,
      url: r.route.routePath,
      config: { restRoute: r },
      handler: async (req, reply) => {
        // The media type is checked once the key is (serveRest authorizes before it reads the body).
        const route: RestRoute = { ...r, read: (json) => (requireJson(req), r.read(json)) };
        const { status, payload, keyId } = await serveRest(route, req as unknown as RestRequest, deps, req.id, (abort) => onClientGone(reply.raw, abort), req.rpcSpan);
        req.callerKeyId = keyId;
        echoRequestId(req, reply);
        if (status === 401) reply.header("www-authenticate", 'Bearer realm="portcullis"');
        return reply.code(status).send(payload);
      },
    });
  }
}

/** A body must say it is JSON; a request without one (an empty body) is read as {} and refused for what it lacks. */
function requireJson(req: FastifyRequest): void {
  const type = req.headers["content-type"] ?? "";
  const body = req.body as Buffer | undefined;
  if (body === undefined || body.length === 0 || JSON_TYPE.test(type)) return;
  const reason = `must be application/json, got ${type === "" ? "none" : JSON.stringify(type.slice(0, 80))}`;
  throw invalidArgument(`Content-Type: ${reason}`, [{ field: "Content-Type", reason }]);
}

/** The standard: a request's X-Request-ID is returned as it came (the request log's own id is set already, fastify-request-log.ts). */
function echoRequestId(req: FastifyRequest, reply: FastifyReply): void {
  const given = req.headers["x-request-id"];
  const value = Array.isArray(given) ? given[0] : given;
  if (value !== undefined && value !== "") reply.raw.setHeader("x-request-id", value);
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
