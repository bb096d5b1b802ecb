/**
 * The REST gateway: JSON over HTTP on the exact /api/v1 paths of the
 * google.api.http annotations, transcoded onto the same guarded service
 * implementations that Connect and gRPC reach.
 */
import { create, isMessage, ScalarType, toJson, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";
import { FieldMaskSchema } from "@bufbuild/protobuf/wkt";
import { ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Logger } from "pino";
import { invalidArgument, Violations } from "../domain/errors.js";
import type { KeyAuthenticator } from "../domain/keys.js";
import { authorizeCall, wasCreated } from "./auth.js";
import { CallContext } from "./call-context.js";
import { restError, toConnectError } from "./errors.js";
import type { ServiceBinding } from "./guard.js";
import { httpBindings, type HttpBinding } from "./http-rules.js";
import { flatReader, flatWriter } from "./flat-json.js";
import { fieldByJsonKey, messageFromJson } from "./json-input.js";

type UnaryFn = (request: Message, ctx: HandlerContext) => Promise<unknown>;

const jsonWrite = { alwaysEmitImplicit: true } as const;

/** Registers one Fastify route per annotated RPC of the bindings. Returns the bindings, for logs and docs. */
export function registerRestGateway(
  app: FastifyInstance,
  bindings: ServiceBinding[],
  deps: { keys: KeyAuthenticator; log: Logger },
): HttpBinding[] {
  const { keys, log } = deps;
  // Bodies arrive as text whatever their Content-Type (curl -d sends a form
  // type by default); they are JSON by contract, parsed here for clear errors.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", { parseAs: "string" }, (_req, body, done) => done(null, body));

  const routes = httpBindings(bindings.map((b) => b.service));
  for (const route of routes) {
    const binding = bindings.find((b) => b.service === route.method.parent)!;
    const call = (binding.impl as unknown as Record<string, UnaryFn>)[route.method.localName]!;
    const read = readerOf(route);
    const write = writerOf(route);
    app.route({
      method: route.verb,
      url: route.routePath,
      handler: async (req, reply) => {
        try {
          const ctx = new CallContext(route.method, "rest", req.method, req.url, req.headers);
          // Credentials before content: a caller without a valid key learns
          // nothing about the request format (401/403 before any 400).
          const appId = (req.params as Record<string, string | undefined>).app_id;
          await authorizeCall(keys, route.method, ctx, appId);
          const request = readRequest(route, req, read);
          const result = await call(request, ctx);
          return reply.code(wasCreated(ctx) ? 201 : 200).send(write(result as object));
        } catch (error) {
          return sendError(reply, error instanceof ConnectError ? error : toConnectError(error, log));
        }
      },
    });
  }
  return routes;
}

export function sendError(reply: FastifyReply, error: ConnectError): FastifyReply {
  const { status, body } = restError(error);
  return reply.code(status).send(body);
}

/** The route's JSON reader: direct for flat requests, else the strict walk of json-input. */
function readerOf(route: HttpBinding): (json: Record<string, unknown>) => Message {
  const fast = flatReader(route.method.input);
  const strict = (json: Record<string, unknown>) => messageFromJson(route.method.input, json, route.boundFields);
  return fast === undefined ? strict : (json) => fast(json) ?? strict(json);
}

/** The route's JSON writer for what the implementation returned: the response, or its response_body field. */
function writerOf(route: HttpBinding): (result: object) => unknown {
  const output = route.method.output;
  const fast = route.responseBody === undefined ? flatWriter(output) : undefined;
  if (fast !== undefined) return fast;
  return (result) => {
    const response = isMessage(result, output) ? result : create(output, result as never);
    return route.responseBody === undefined ? toJson(output, response, jsonWrite) : fieldJson(route.responseBody, response);
  };
}

function fieldJson(field: DescField, response: Message): unknown {
  if (field.fieldKind !== "message") throw new Error(`response_body ${field.name} must be a message field`);
  const value = (response as unknown as Record<string, Message | undefined>)[field.localName];
  return toJson(field.message, value ?? create(field.message), jsonWrite);
}

/** Builds the request message from the path, the query string and the body. */
function readRequest(route: HttpBinding, req: FastifyRequest, read: (json: Record<string, unknown>) => Message): Message {
  const input = route.method.input;
  const json: Record<string, unknown> = {};
  const { pathNames } = route;
  const v = new Violations();

  if (route.body !== undefined) {
    const body = parseBody(req.body);
    if (route.body === "*") {
      if (body !== undefined && (typeof body !== "object" || body === null || Array.isArray(body))) {
        const kind = body === null ? "null" : Array.isArray(body) ? "an array" : `a ${typeof body}`;
        throw invalidArgument(`request body must be a JSON object, got ${kind}`);
      }
      for (const [key, value] of Object.entries((body ?? {}) as Record<string, unknown>)) {
        if (pathNames.has(key)) v.add(key, `is given by the path (${route.template}), not the body`);
        else json[key] = value;
      }
    } else if (body !== undefined) {
      json[route.body.jsonName] = body;
    }
  }

  const query = (req.query ?? {}) as Record<string, string | string[]>;
  for (const [key, raw] of Object.entries(query)) {
    const field = route.body === "*" || pathNames.has(key) ? undefined : fieldByJsonKey(input, key);
    if (field === undefined || field.fieldKind === "message" || field.fieldKind === "map") {
      const accepted = queryFields(route).join(", ");
      v.add(key, `is not a query parameter of ${route.verb} ${route.template}${accepted === "" ? " (it takes none)" : ` (accepted: ${accepted})`}`);
      continue;
    }
    const values = Array.isArray(raw) ? raw : [raw];
    if (field.fieldKind !== "list" && values.length > 1) {
      v.add(key, "is given more than once");
      continue;
    }
    const converted = values.map((x) => queryValue(field, key, x, v));
    json[field.jsonName] = field.fieldKind === "list" ? converted : converted[0];
  }
  for (const field of route.requiredFields) {
    const value = json[field.jsonName] ?? json[field.name];
    if (value === undefined || value === null) v.add(field.jsonName, "is required");
  }
  v.throwIfAny();

  const params = req.params as Record<string, string>;
  for (const field of route.pathFields) json[field.jsonName] = params[field.name];

  const message = read(json);
  deriveUpdateMask(input, message, route, json, pathNames);
  return message;
}

function parseBody(body: unknown): unknown {
  if (typeof body !== "string" || body.trim() === "") return undefined;
  try {
    return JSON.parse(body);
  } catch (error) {
    throw invalidArgument(`request body is not valid JSON: ${error instanceof SyntaxError ? error.message : "parse error"}`);
  }
}

/** The names a route accepts in its query string. */
function queryFields(route: HttpBinding): string[] {
  if (route.body === "*") return [];
  return route.method.input.fields
    .filter((f) => !route.boundFields.has(f) && f.fieldKind !== "message" && f.fieldKind !== "map" && f !== route.body)
    .map((f) => f.jsonName);
}

/** A query string value as the JSON value of its field; a violation when it cannot be one. */
function queryValue(field: DescField, key: string, raw: string, v: Violations): unknown {
  const kind = field.fieldKind === "list" ? field.listKind : field.fieldKind;
  if (kind === "enum") return raw;
  const scalar = field.scalar;
  if (scalar === undefined) return raw;
  switch (scalar) {
    case ScalarType.BOOL:
      if (raw === "true" || raw === "false") return raw === "true";
      v.add(key, `must be true or false, got ${JSON.stringify(raw)}`);
      return undefined;
    case ScalarType.STRING:
    case ScalarType.BYTES:
      return raw;
    default:
      if (/^-?\d+$/.test(raw)) return Number(raw);
      v.add(key, `must be a whole number, got ${JSON.stringify(raw)}`);
      return undefined;
  }
}

/**
 * PATCH semantics over REST: when the request has an `update_mask` and the
 * caller did not send one, the mask is the set of fields present in the body,
 * so `{"permissions": []}` clears the list and an absent key leaves it be.
 */
function deriveUpdateMask(
  input: DescMessage,
  message: Message,
  route: HttpBinding,
  json: Record<string, unknown>,
  pathNames: ReadonlySet<string>,
): void {
  const maskField = input.fields.find((f) => f.name === "update_mask");
  if (maskField === undefined || route.body !== "*" || "updateMask" in json || "update_mask" in json) return;
  const paths = Object.keys(json)
    .filter((key) => !pathNames.has(key) && json[key] !== null)
    .map((key) => fieldByJsonKey(input, key)!.name);
  (message as unknown as Record<string, unknown>)[maskField.localName] = create(FieldMaskSchema, { paths });
}
