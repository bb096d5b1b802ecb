/**
 * The REST gateway: JSON over HTTP on the exact /api/v1 paths of the
 * google.api.http annotations, transcoded onto the same guarded service
 * implementations that Connect and gRPC reach.
 */
import { create, isMessage, ScalarType, toJson, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";
import { FieldMaskSchema } from "@bufbuild/protobuf/wkt";
import { ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import type { IncomingHttpHeaders } from "node:http";
import type { Logger } from "pino";
import { invalidArgument, Violations } from "../../domain/errors.js";
import { PROCESS_CPU } from "../../domain/fair-cpu.js";
import { LIMITS, show } from "../../domain/formats.js";
import type { KeyAuthenticator } from "../../domain/keys.js";
import { rpcName, type RpcName, type Span, type Tracing } from "../../lib/tracing.js";
import { callerOf, wasCreated } from "../../services/call-values.js";
import { authorizeCall } from "../call/auth.js";
import { CallContext } from "../call/call-context.js";
import { onClientGone } from "../call/client-gone.js";
import { restError, toConnectError } from "../call/errors.js";
import type { ServiceBinding } from "../call/guard.js";
import { httpBindings, type HttpBinding } from "./http-rules.js";
import { flatReader, flatWriter } from "./flat-json.js";
import { fieldByJsonKey, messageFromJson, unknownFieldReason, type JsonReading } from "./json-input.js";
import { jsonDepthExceeds } from "../../lib/json.js";
import { bodyText } from "../call/utf8.js";

type UnaryFn = (request: Message, ctx: HandlerContext) => Promise<unknown>;

const jsonWrite = { alwaysEmitImplicit: true } as const;

/**
 * One annotated RPC as the gateway serves it, whether Fastify or the fast
 * path (rest-fast-path.ts) takes the request: both answer through serveRest
 * and send what answerHeaders adds, so a route's own rules (AuthZEN's:
 * authzen-gateway.ts) hold on either.
 */
export interface RestRoute {
  route: HttpBinding;
  call: UnaryFn;
  /** The request message from the body's JSON (and the path's and query's values); the request, for a route whose rules read more of it. */
  read: (json: Record<string, unknown>, req: RestRequest) => Message;
  write: (result: object) => unknown;
  /** The RPC it calls, named once (the metrics and spans go by RPC). */
  rpc: RpcName;
  /** Its method and template, as a span records them. */
  http: { method: string; route: string };
  /**
   * Headers its answers carry beyond the JSON's and x-request-id, or an
   * x-request-id other than the request's id (AuthZEN's: the caller's as
   * sent, and WWW-Authenticate on a 401). Absent: none.
   */
  answerHeaders?: (req: RestRequest, status: number) => Record<string, string> | undefined;
}

/** What the gateway reads of a request, whether Fastify or the fast path (rest-fast-path) took it. */
export interface RestRequest {
  method: string;
  /** The raw request target: the gateway reads the query string from it itself (see queryOf). */
  url: string;
  headers: IncomingHttpHeaders;
  params: Record<string, string | undefined>;
  /** The body's bytes (text is accepted too), or undefined when there was none. */
  body: Buffer | string | undefined;
}

export interface RestDeps {
  keys: KeyAuthenticator;
  log: Logger;
  /** Spans of REST calls are made by the transport (the fast path, the request lines); the call runs in its span. */
  tracing?: Tracing;
}

/** Every annotated RPC of the bindings, with its reader and writer made once. */
export function restRoutes(bindings: ServiceBinding[]): RestRoute[] {
  return httpBindings(bindings.map((b) => b.service)).map((route) => {
    const binding = bindings.find((b) => b.service === route.method.parent)!;
    const call = (binding.impl as unknown as Record<string, UnaryFn>)[route.method.localName]!;
    const rpc = rpcName(route.method.parent.typeName, route.method.name);
    return { route, call, read: jsonReader(route), write: writerOf(route), rpc, http: { method: route.verb, route: route.template } };
  });
}

/** Registers one Fastify route per annotated RPC. */
export function registerRestGateway(app: FastifyInstance, routes: RestRoute[], deps: RestDeps): void {
  // Bodies arrive whatever their Content-Type (curl -d sends a form type by
  // default); they are JSON by contract, parsed here for clear errors. As
  // bytes, not text: a decoder would turn bytes that are not UTF-8 into
  // U+FFFD, and serveRest refuses them instead.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", { parseAs: "buffer" }, (_req, body, done) => done(null, body));

  for (const r of routes) {
    app.route({
      method: r.route.verb,
      url: r.route.routePath,
      // For the request lines (fastify-request-log.ts): one path serves several verbs.
      config: { restRoute: r },
      handler: async (req, reply) => {
        const request = req as unknown as RestRequest;
        const { status, payload, keyId } = await serveRest(r, request, deps, req.id, (abort) => onClientGone(reply.raw, abort), req.rpcSpan);
        req.callerKeyId = keyId; // for the request line (fastify-request-log.ts)
        const headers = r.answerHeaders?.(request, status);
        // On the raw response, as the request line's x-request-id is (fastify-request-log.ts), so that it is replaced.
        if (headers !== undefined) for (const name of Object.keys(headers)) reply.raw.setHeader(name, headers[name]!);
        return reply.code(status).send(payload);
      },
    });
  }
}

type RestAnswer = { status: number; payload: unknown; keyId: string | undefined };

/**
 * Answers one request of a route: the status and the JSON value to send, an
 * error body on failure (carrying `requestId`). `onAbort` registers what
 * stops the call when the client goes away first (its writes then roll
 * back). With a span (tracing on), the call runs with it current, its key
 * lookup included.
 */
export function serveRest(
  r: RestRoute,
  req: RestRequest,
  deps: RestDeps,
  requestId: string,
  onAbort?: (abort: () => void) => void,
  span?: Span,
): Promise<RestAnswer> {
  if (span === undefined || deps.tracing === undefined) return answerRest(r, req, deps, requestId, onAbort, undefined);
  return deps.tracing.within(span, () => answerRest(r, req, deps, requestId, onAbort, span));
}

async function answerRest(
  r: RestRoute,
  req: RestRequest,
  deps: RestDeps,
  requestId: string,
  onAbort: ((abort: () => void) => void) | undefined,
  span: Span | undefined,
): Promise<RestAnswer> {
  let ctx: CallContext | undefined;
  try {
    const call = (ctx = new CallContext(r.route.method, "rest", req.method, req.url, req.headers, undefined, requestId, span));
    onAbort?.(() => call.abort());
    // Credentials before content: a caller without a valid key learns
    // nothing about the request format (401/403 before any 400).
    await authorizeCall(deps.keys, r.route.method, ctx, req.params.app_id);
    // A large body is read in its caller's turn (fair-cpu.ts): parsing megabytes is one synchronous stretch.
    const request = req.body !== undefined && req.body.length > LARGE_BODY ? await readInTurn(r, req, ctx) : readRequest(r, req);
    const result = await r.call(request, ctx);
    return { status: wasCreated(ctx) ? 201 : 200, payload: r.write(result as object), keyId: callerOf(ctx)?.keyId };
  } catch (error) {
    const { status, body } = restError(error instanceof ConnectError ? error : toConnectError(error, deps.log, requestId), requestId);
    // The caller's key id for the request line, when the key was recognised before the failure.
    return { status, payload: body, keyId: ctx === undefined ? undefined : callerOf(ctx)?.keyId };
  }
}

/**
 * Bodies longer than this (bytes, or characters of text) are read in their
 * caller's turn of the process's fair scheduler: a batch of questions
 * carrying facts can be megabytes, a few milliseconds a megabyte to parse,
 * and an application with many in flight would otherwise hold the event
 * loop for all of them at once. A plain check's body is a few hundred bytes.
 */
const LARGE_BODY = 16 * 1024;

/** Reads the request in its caller's turn: its application's, or the operator's. */
function readInTurn(r: RestRoute, req: RestRequest, ctx: CallContext): Promise<Message> {
  const caller = callerOf(ctx);
  return PROCESS_CPU.run(caller?.kind === "application" ? caller.appId : "", () => readRequest(r, req));
}

/**
 * The route's JSON reader: direct for flat requests (flat-json.ts), else
 * the strict walk of json-input, which names what is wrong; both by the
 * same `reading` (this API's by default: a key that is no field is a 400).
 */
export function jsonReader(route: HttpBinding, reading: JsonReading = {}): (json: Record<string, unknown>) => Message {
  const fast = flatReader(route.method.input, reading);
  const strict = (json: Record<string, unknown>) => messageFromJson(route.method.input, json, route.boundFields, reading);
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
  if (field.message.typeName.startsWith("google.protobuf.")) {
    // protobuf-es holds a Struct field as its JSON already (a plain object, not a message), and a wrapper as
    // its value: the field's JSON form is read from the response's own JSON.
    const json = toJson(field.parent, response, jsonWrite) as Record<string, unknown>;
    return json[field.jsonName] ?? toJson(field.message, create(field.message), jsonWrite);
  }
  const value = (response as unknown as Record<string, Message | undefined>)[field.localName];
  return toJson(field.message, value ?? create(field.message), jsonWrite);
}

/**
 * Builds the request message from the path, the query string and the body.
 * `json` has no prototype: a client's "__proto__" key is then a key like any
 * other (and no field), never the object's prototype, whose properties would
 * pass for fields that were never sent.
 */
function readRequest(r: RestRoute, req: RestRequest): Message {
  const { route } = r;
  const input = route.method.input;
  const json: Record<string, unknown> = Object.create(null) as Record<string, unknown>;
  const { pathNames } = route;
  const v = new Violations();

  if (route.body !== undefined) {
    const body = parseBody(req.body, route.body === "*" ? undefined : route.body.jsonName);
    if (route.body === "*") {
      if (body !== undefined && (typeof body !== "object" || body === null || Array.isArray(body))) {
        const kind = body === null ? "null" : Array.isArray(body) ? "an array" : `a ${typeof body}`;
        throw invalidArgument(`request body must be a JSON object, got ${kind}`);
      }
      for (const [key, value] of Object.entries((body ?? {}) as Record<string, unknown>)) {
        if (pathNames.has(key)) v.add(key, `is given by the path (${route.template}), not the body`);
        else json[key] = value; // unknown keys, "__proto__" among them, are named by the reader
      }
    } else if (body !== undefined) {
      // The body is that one field's JSON (google.api.http's `body: "field"`): the reader checks it as the field.
      json[route.body.jsonName] = body;
    }
  }

  rawPathProblems(route, req.url, v);
  for (const [key, values] of queryOf(req.url, v)) {
    const field = route.body === "*" || pathNames.has(key) ? undefined : fieldByJsonKey(input, key);
    if (field === undefined || field.fieldKind === "message" || field.fieldKind === "map") {
      const accepted = queryFields(route).join(", ");
      v.add(fieldName(key), `is not a query parameter of ${route.verb} ${route.template}${accepted === "" ? " (it takes none)" : ` (accepted: ${accepted})`}`);
      continue;
    }
    if (field.fieldKind !== "list" && values.length > 1) {
      v.add(key, "is given more than once");
      continue;
    }
    const converted = values.map((x) => queryValue(field, key, x, v));
    json[field.jsonName] = field.fieldKind === "list" ? converted : converted[0];
  }
  let missing = false;
  for (const field of route.requiredFields) {
    const value = json[field.jsonName] ?? json[field.name];
    if (value === undefined || value === null) {
      v.add(field.jsonName, "is required");
      missing = true;
    }
  }
  for (const field of route.nonEmptyFields) {
    const value = json[field.jsonName] ?? json[field.name];
    if (Array.isArray(value) && value.length === 0) v.add(field.jsonName, "must not be empty: leave it out for the default");
  }
  // The reader names unknown keys, but only once this 400 is past: with it,
  // a key such as "__proto__" where a field was meant is named too.
  if (missing && route.body === "*") {
    for (const key of Object.keys(json)) {
      if (fieldByJsonKey(input, key) === undefined) v.add(fieldName(key), unknownFieldReason(input, route.boundFields));
    }
  }
  v.throwIfAny();

  for (const field of route.pathFields) json[field.jsonName] = req.params[field.name];

  const message = r.read(json, req);
  deriveUpdateMask(input, message, route, json, pathNames);
  return message;
}

/** The body's JSON; `field` names the request field it is, when it is one field's JSON rather than the whole request. */
function parseBody(body: Buffer | string | undefined, field: string | undefined): unknown {
  if (body === undefined || body === null || body.length === 0) return undefined;
  const text = typeof body === "string" ? body : bodyText(body);
  if (text.trim() === "") return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw invalidArgument(`request body is not valid JSON: ${error instanceof SyntaxError ? cut(error.message) : "parse error"}`);
  }
  // Before anything walks it: readers, messages and JSON.stringify recurse.
  // Each level takes two characters at least, so short bodies (the check's) need no walk.
  if (text.length > 2 * LIMITS.jsonDepth && jsonDepthExceeds(value, LIMITS.jsonDepth)) {
    const reason = `is nested deeper than ${LIMITS.jsonDepth} levels`;
    // A whole-request body names the top-level field that is too deep (each test is bounded as the one above).
    const named = field ?? deepKey(value, LIMITS.jsonDepth - 1);
    if (named === undefined) throw invalidArgument(`request body ${reason}`);
    throw invalidArgument(`${named}: ${reason} (the request body)`, [{ field: named, reason }]);
  }
  return value;
}

/** The first own key of an object body whose value nests deeper than `max`, cut short as fieldName cuts it. */
function deepKey(value: unknown, max: number): string | undefined {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  const key = Object.keys(value).find((k) => jsonDepthExceeds((value as Record<string, unknown>)[k], max));
  return key === undefined ? undefined : fieldName(key);
}

/** V8's JSON.parse messages quote the text around the error; a body may be megabytes on one line. */
const cut = (message: string) => (message.length > 200 ? `${message.slice(0, 197)}...` : message);

/** A client's key as a field name in a message: cut short, as show() cuts values. */
const fieldName = (key: string) => (key.length > 80 ? `${key.slice(0, 77)}...` : key);

/**
 * The query string of a request target, decoded strictly. Fastify's parser
 * keeps a value it cannot decode as it came ("%ff" stays "%ff") and others
 * substitute U+FFFD; either way the service would act on a value the client
 * did not mean. decodeURIComponent throws on bad escapes, on bytes that are
 * not UTF-8 and on encoded surrogates (%ed%a0%80): a 400 naming the parameter.
 * A Map, so "__proto__" is a name like any other.
 */
function queryOf(url: string, v: Violations): Map<string, string[]> {
  const query = new Map<string, string[]>();
  const start = url.indexOf("?");
  if (start < 0) return query;
  for (const part of url.slice(start + 1).split("&")) {
    if (part === "") continue;
    const eq = part.indexOf("=");
    const rawKey = eq < 0 ? part : part.slice(0, eq);
    const key = decodeQueryPart(rawKey);
    if (key === undefined) {
      v.add(fieldName(rawKey), "is not a valid query parameter name: its percent-encoding is malformed or not UTF-8");
      continue;
    }
    const value = decodeQueryPart(eq < 0 ? "" : part.slice(eq + 1));
    if (value === undefined) {
      v.add(fieldName(key), "is not valid percent-encoded UTF-8 (a malformed escape, bytes that are not UTF-8, or an encoded surrogate)");
      continue;
    }
    const values = query.get(key);
    if (values === undefined) query.set(key, [value]);
    else values.push(value);
  }
  return query;
}

// A request target is ASCII (RFC 9112); HTTP/1.1's parser refuses anything
// else, but an HTTP/2 :path may carry raw bytes, which arrive here as Latin-1:
// UTF-8 "é" would become "Ã©". Percent-encoded, it means what it says.
const NOT_ASCII = /[^\x20-\x7e]/;
const RAW_BYTES = "must be percent-encoded: the request target carries bytes outside ASCII";

/** A 400 naming the path variable whose raw segment is not ASCII. */
function rawPathProblems(route: HttpBinding, url: string, v: Violations): void {
  const query = url.indexOf("?");
  const path = query < 0 ? url : url.slice(0, query);
  if (!NOT_ASCII.test(path)) return;
  const template = route.template.split("/");
  path.split("/").forEach((segment, i) => {
    if (!NOT_ASCII.test(segment)) return;
    const variable = template[i]?.match(/^\{(.+)\}$/)?.[1];
    const field = route.pathFields.find((f) => f.name === variable);
    v.add(field?.jsonName ?? "path", RAW_BYTES);
  });
}

function decodeQueryPart(raw: string): string | undefined {
  if (NOT_ASCII.test(raw)) return undefined;
  if (!raw.includes("%") && !raw.includes("+")) return raw;
  try {
    return decodeURIComponent(raw.replaceAll("+", " "));
  } catch {
    return undefined;
  }
}

/**
 * Names what is wrong with a request path the router could not decode (a
 * segment whose percent-encoding is malformed or not UTF-8): the path
 * variable of the route it would have reached (of any method), when one does.
 */
export function badPathProblem(routes: RestRoute[], url: string): { field: string; reason: string } {
  const segments = url.split("?")[0]!.split("/");
  const bad = segments.findIndex((segment) => decodePathSegment(segment) === undefined);
  const reason = "is not valid percent-encoded UTF-8 (a malformed escape, bytes that are not UTF-8, or an encoded surrogate)";
  if (bad < 0) return { field: "path", reason };
  for (const { route } of routes) {
    const template = route.template.split("/");
    const variable = template[bad]?.match(/^\{(.+)\}$/)?.[1];
    if (variable === undefined || template.length !== segments.length) continue;
    if (template.every((t, i) => i === bad || t.startsWith("{") || t === segments[i])) {
      const field = route.pathFields.find((f) => f.name === variable);
      return { field: field?.jsonName ?? variable, reason };
    }
  }
  return { field: "path", reason: `segment ${bad} (${show(segments[bad]!)}) ${reason}` };
}

function decodePathSegment(raw: string): string | undefined {
  try {
    return decodeURIComponent(raw);
  } catch {
    return undefined;
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
      v.add(key, `must be true or false, got ${show(raw)}`);
      return undefined;
    case ScalarType.STRING:
    case ScalarType.BYTES:
      return raw;
    default:
      if (/^-?\d+$/.test(raw)) return Number(raw);
      v.add(key, `must be a whole number, got ${show(raw)}`);
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
