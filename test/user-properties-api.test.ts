/**
 * Stored user properties (PUT and GET /api/v1/applications/{appId}/users/{userId}/properties)
 * on each engine, through a real port: over REST (the body is the object
 * itself), gRPC (@grpc/grpc-js) and Connect. Every kind of JSON value round
 * trips; a PUT replaces the whole object and {} clears it; the bounds
 * (16 KiB of JSON, 32 levels) hold at their edges; bad input of every kind
 * is a 4xx naming the field, on every protocol, and changes nothing; keys
 * reach only their own application, within their scopes.
 */
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create, toBinary } from "@bufbuild/protobuf";
import { SetUserPropertiesRequestSchema, UserService } from "../gen/authz/v1/users_pb.js";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { grpc, grpcCaller, grpcServiceClient, type GrpcCaller } from "./support/grpc-client.js";
import { ADMIN_KEY, startTestService, type RestAnswer, type TestService } from "./support/service.js";
import { expectError, expectGrpcError, grpcFail, newApp, ok, structJson, type Json } from "./helpers/authz-api.js";

const path = (appId: string, userId: string) => `/api/v1/applications/${appId}/users/${encodeURIComponent(userId)}/properties`;

/** An object nested `depth` levels, itself the first: objects, every third level an array. */
function nested(depth: number): Json {
  let value: Json = {};
  for (let level = depth - 1; level >= 1; level--) value = level > 1 && level % 3 === 0 ? [value] : { d: value };
  return value;
}

/** Levels of objects and arrays in a JSON value. */
const depthOf = (value: unknown): number =>
  typeof value !== "object" || value === null ? 0 : 1 + Math.max(0, ...Object.values(value).map(depthOf));

/** An object whose compact JSON is exactly `bytes` bytes. */
const ofBytes = (bytes: number) => ({ s: "x".repeat(bytes - '{"s":""}'.length) });

/** Plain JSON as proto-loader's google.protobuf.Struct. */
function toStruct(object: Record<string, unknown>): Json {
  const value = (v: unknown): Json => {
    if (v === null) return { nullValue: "NULL_VALUE" };
    if (typeof v === "number") return { numberValue: v };
    if (typeof v === "string") return { stringValue: v };
    if (typeof v === "boolean") return { boolValue: v };
    if (Array.isArray(v)) return { listValue: { values: v.map(value) } };
    return { structValue: toStruct(v as Record<string, unknown>) };
  };
  return { fields: Object.fromEntries(Object.entries(object).map(([k, v]) => [k, value(v)])) };
}

/**
 * Every kind of JSON value. Parsed from text, so that "__proto__" is an own
 * key as a client's JSON makes it, not an object literal's prototype.
 */
const EVERY_KIND = JSON.parse(`{
  "plan": "pro", "empty": "", "unicode": "ü 日本 😀 e\\u0301 \\u2028 \\"quoted\\" back\\\\slash\\n\\ttab \\u0001",
  "zero": 0, "negative": -17, "fraction": 0.1, "sum": 0.30000000000000004, "big": 1e21, "huge": 1.7976931348623157e308,
  "tiny": 5e-324, "small": -1.5e-7, "beyond2to53": 9007199254740993,
  "yes": true, "no": false, "nothing": null,
  "object": {"nested": {"deeper": {"list": [1, "two", false, null, {"three": [3]}]}}, "emptyObject": {}},
  "emptyList": [], "mixed": [0, "", [], {}, [[["deep"]]]],
  "": "an empty key", "__proto__": {"polluted": true}, "constructor": "c", "toString": 1, "😀 key": "emoji key",
  "${"k".repeat(300)}": "a long key"
}`);

describe.each(oneEngine(import.meta.url))("user properties API on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let rpc: GrpcCaller;
  let sessions: Http2SessionManager[];
  let counter = 0;
  const keys: Record<"app" | "other" | "read" | "write" | "check", string> = { app: "", other: "", read: "", write: "", check: "" };
  const APP = "props";

  const put = (userId: string, body: unknown, key?: string | null, appId = APP) =>
    service.call("PUT", path(appId, userId), { key, body });
  const putRaw = (userId: string, rawBody: string, key?: string | null, appId = APP) =>
    service.call("PUT", path(appId, userId), { key, rawBody });
  const get = (userId: string, key?: string | null, appId = APP) => service.call("GET", path(appId, userId), { key });
  const fresh = () => `user-${++counter}`;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    rpc = grpcCaller(service.url);
    sessions = [];
    await newApp(service.call, APP, null);
    await newApp(service.call, "props-other", null);
    const key = async (appId: string, scopes?: string[]) =>
      ok(await service.call("POST", `/api/v1/applications/${appId}/api-keys`, { body: { name: "k", ...(scopes ? { scopes } : {}) } }), 201).key as string;
    keys.app = await key(APP);
    keys.other = await key("props-other");
    keys.read = await key(APP, ["read"]);
    keys.write = await key(APP, ["write"]);
    keys.check = await key(APP, ["check"]);
  });
  afterAll(async () => {
    rpc?.close();
    for (const s of sessions ?? []) s.abort();
    await service?.close();
    await database?.dispose();
  });

  describe("over REST", () => {
    it("GET of a user never written answers {}", async () => {
      expect(ok(await get("nobody"))).toEqual({});
      expect(ok(await get("nobody", keys.app))).toEqual({});
    });

    it("PUT answers 200 with the object as stored, and GET reads it back: every kind of JSON value", async () => {
      const userId = fresh();
      const stored = ok(await put(userId, EVERY_KIND, keys.app));
      expect(stored).toEqual(EVERY_KIND);
      expect(Object.prototype.hasOwnProperty.call(stored, "__proto__")).toBe(true);
      expect(stored.__proto__).toEqual({ polluted: true });
      expect(ok(await get(userId, keys.app))).toEqual(EVERY_KIND);
      expect(ok(await get(userId, keys.read))).toEqual(EVERY_KIND);
    });

    it("user ids are any identifier: unicode, spaces, slashes and ?#% percent-encoded in the path", async () => {
      for (const userId of ["ünï cödé 😀", "a/b", "a.b", "x".repeat(256), "user@example.com", "?#%"]) {
        ok(await put(userId, { id: userId }, keys.app));
        expect(ok(await get(userId, keys.app)), userId).toEqual({ id: userId });
      }
    });

    it("PUT replaces the whole object: keys it leaves out are gone (no merge)", async () => {
      const userId = fresh();
      ok(await put(userId, { a: 1, b: { c: 2, d: 3 } }, keys.app));
      expect(ok(await put(userId, { b: { c: 4 }, e: [5] }, keys.app))).toEqual({ b: { c: 4 }, e: [5] });
      expect(ok(await get(userId, keys.app))).toEqual({ b: { c: 4 }, e: [5] });
    });

    it("PUT {} clears them: 200 {}, then GET answers {}; again on nothing, the same", async () => {
      const userId = fresh();
      ok(await put(userId, { a: 1 }, keys.app));
      expect(ok(await put(userId, {}, keys.app))).toEqual({});
      expect(ok(await get(userId, keys.app))).toEqual({});
      expect(ok(await put(userId, {}, keys.app))).toEqual({});
      expect(ok(await get(userId, keys.app))).toEqual({});
    });

    it("the body is the object itself: a body {properties: {...}} stores a key named properties", async () => {
      const userId = fresh();
      expect(ok(await put(userId, { properties: { plan: "pro" } }, keys.app))).toEqual({ properties: { plan: "pro" } });
      expect(ok(await put(userId, { appId: "elsewhere", userId: "someone" }, keys.app))).toEqual({ appId: "elsewhere", userId: "someone" });
      expect(ok(await get(userId, keys.app))).toEqual({ appId: "elsewhere", userId: "someone" });
    });

    it("each user and each application has its own", async () => {
      ok(await put("shared", { app: APP }, keys.app));
      ok(await put("shared", { app: "props-other" }, keys.other, "props-other"));
      ok(await put("shared-2", { n: 2 }, keys.app));
      expect(ok(await get("shared", keys.app))).toEqual({ app: APP });
      expect(ok(await get("shared", keys.other, "props-other"))).toEqual({ app: "props-other" });
      expect(ok(await get("shared-2", keys.app))).toEqual({ n: 2 });
    });

    it("the bounds hold at their edges: 16,384 bytes of JSON and 32 levels pass, one more does not", async () => {
      const userId = fresh();
      expect(Buffer.byteLength(JSON.stringify(ofBytes(16_384)))).toBe(16_384);
      expect(ok(await put(userId, ofBytes(16_384), keys.app))).toEqual(ofBytes(16_384));
      // Multi-byte characters count as their UTF-8 bytes: 4 for the emoji.
      const emoji = { s: "😀".repeat(4094) }; // 8 + 16,376 bytes
      expect(ok(await put(userId, emoji, keys.app))).toEqual(emoji);
      expect(depthOf(nested(32))).toBe(32);
      expect(ok(await put(userId, nested(32), keys.app))).toEqual(nested(32));
      expectError(await put(userId, ofBytes(16_385), keys.app), 400, "invalid_argument", "properties", "16,385 bytes", "at most 16,384");
      expectError(await put(userId, { s: "😀".repeat(4095) }, keys.app), 400, "invalid_argument", "properties", "16,388 bytes");
      expectError(await put(userId, nested(33), keys.app), 400, "invalid_argument", "properties", "deeper than 32 levels");
      expect(ok(await get(userId, keys.app))).toEqual(nested(32));
    });

    const body = (text: string) => ({ raw: text });
    const bad: { name: string; body: unknown; field: string | undefined; fragments: string[] }[] = [
      { name: "an array", body: [1, 2], field: "properties", fragments: ["must be a JSON object, got array"] },
      { name: "a string", body: "pro", field: "properties", fragments: ["must be a JSON object, got string"] },
      { name: "a number", body: 7, field: "properties", fragments: ["must be a JSON object, got number"] },
      { name: "a boolean", body: true, field: "properties", fragments: ["must be a JSON object, got boolean"] },
      { name: "null", body: null, field: "properties", fragments: ["is required"] },
      { name: "no body", body: body(""), field: "properties", fragments: ["is required"] },
      { name: "malformed JSON", body: body('{"a": '), field: undefined, fragments: ["not valid JSON"] },
      { name: "a number JSON cannot hold (1e400)", body: body('{"n": 1e400}'), field: 'properties["n"]', fragments: ["finite number", "Infinity"] },
      { name: "over 16 KiB", body: ofBytes(20_000), field: "properties", fragments: ["20,000 bytes", "at most 16,384"] },
      { name: "33 levels", body: nested(33), field: "properties", fragments: ["deeper than 32 levels"] },
      { name: "10,000 levels (past the gateway's own bound)", body: body(`${'{"d":'.repeat(9_999)}{}${"}".repeat(9_999)}`), field: "properties", fragments: ["deeper than 64 levels"] },
      { name: "a NUL in a value", body: { a: { b: ["ok", "x\u0000"] } }, field: 'properties["a"]["b"][1]', fragments: ["NUL"] },
      { name: "a lone surrogate in a key", body: body('{"k\\ud800": 1}'), field: 'properties["k\\ud800"]', fragments: ["well-formed Unicode"] },
      { name: "a lone surrogate in a deep value", body: body('{"a": [{"b": "\\udfff"}]}'), field: 'properties["a"][0]["b"]', fragments: ["well-formed Unicode"] },
    ];

    it.each(bad)("$name: 400 naming the field, nothing changed", async ({ body: sent, field, fragments }) => {
      const userId = fresh();
      ok(await put(userId, { kept: true }, keys.app));
      const raw = typeof sent === "object" && sent !== null && "raw" in sent ? (sent as { raw: string }).raw : undefined;
      const res = raw === undefined ? await put(userId, sent, keys.app) : await putRaw(userId, raw, keys.app);
      expectError(res, 400, "invalid_argument", ...(field === undefined ? [] : [field]), ...fragments);
      if (field !== undefined) expect(res.body.details.map((d: { field: string }) => d.field)).toContain(field);
      expect(ok(await get(userId, keys.app))).toEqual({ kept: true });
    });

    it("bad ids, an unknown application and a query parameter: 400 or 404 naming what is wrong", async () => {
      const cases: [RestAnswer, number, string, string[]][] = [
        [await service.call("PUT", path(APP, "a\u0001b"), { body: { a: 1 } }), 400, "invalid_argument", ["userId", "control characters"]],
        [await service.call("GET", path(APP, "a\u0001b")), 400, "invalid_argument", ["userId", "control characters"]],
        [await service.call("PUT", path(APP, "x".repeat(257)), { body: { a: 1 } }), 400, "invalid_argument", ["userId", "at most 256"]],
        [await service.call("PUT", `${path(APP, "u")}`.replace("/u/", "/%ff/"), { body: { a: 1 } }), 400, "invalid_argument", ["userId"]],
        [await service.call("PUT", path("Bad_App", "u"), { body: { a: 1 } }), 400, "invalid_argument", ["appId"]],
        [await service.call("PUT", path("missing", "u"), { body: { a: 1 } }), 404, "not_found", ['application "missing" does not exist']],
        [await service.call("GET", path("missing", "u")), 404, "not_found", ['application "missing" does not exist']],
        [await service.call("PUT", `${path(APP, "u")}?merge=true`, { body: { a: 1 } }), 400, "invalid_argument", ["merge", "takes none"]],
        [await service.call("GET", `${path(APP, "u")}?userId=v`), 400, "invalid_argument", ["userId", "not a query parameter"]],
      ];
      for (const [res, status, code, fragments] of cases) expectError(res, status, code, ...fragments);
      expect(ok(await get("u", keys.app))).toEqual({});
      expect((await service.call("GET", "/api/v1/applications/missing")).status).toBe(404);
    });

    it("keys: another application's 403, none or an unknown one 401, a missing scope 403 naming it; nothing changed", async () => {
      const userId = fresh();
      ok(await put(userId, { kept: true }, keys.app));
      expectError(await put(userId, { a: 1 }, keys.other), 403, "permission_denied", '"props-other"', `"${APP}"`);
      expectError(await get(userId, keys.other), 403, "permission_denied", '"props-other"');
      expectError(await put(userId, { a: 1 }, null), 401, "unauthenticated");
      expectError(await get(userId, null), 401, "unauthenticated");
      expectError(await put(userId, { a: 1 }, "pcl_not-a-key"), 401, "unauthenticated");
      expectError(await put(userId, { a: 1 }, keys.read), 403, "permission_denied", '"write"');
      expectError(await put(userId, { a: 1 }, keys.check), 403, "permission_denied", '"write"');
      expectError(await get(userId, keys.write), 403, "permission_denied", '"read"');
      expectError(await get(userId, keys.check), 403, "permission_denied", '"read"');
      // Credentials before content: a bad body from a key without the scope is still a 403.
      expectError(await put(userId, [1], keys.read), 403, "permission_denied");
      expect(ok(await put(`${userId}-w`, { a: 1 }, keys.write))).toEqual({ a: 1 });
      expect(ok(await get(userId, keys.read))).toEqual({ kept: true });
      expect(ok(await get(userId))).toEqual({ kept: true });
    });
  });

  describe("over gRPC (@grpc/grpc-js)", () => {
    const S = "UserService";

    it("set, get, replace and clear; every kind of value reads back as REST wrote it", async () => {
      const userId = fresh();
      const set = await rpc.call(S, "SetUserProperties", { appId: APP, userId, properties: toStruct({ plan: "pro", n: 1.5, tags: ["a", null, true], o: {} }) }, keys.app);
      expect(structJson(set.properties)).toEqual({ plan: "pro", n: 1.5, tags: ["a", null, true], o: {} });
      expect(ok(await get(userId, keys.app))).toEqual({ plan: "pro", n: 1.5, tags: ["a", null, true], o: {} });
      ok(await put(userId, EVERY_KIND, keys.app));
      const got = await rpc.call(S, "GetUserProperties", { appId: APP, userId }, keys.app);
      expect(structJson(got.properties)).toEqual(EVERY_KIND);
      await rpc.call(S, "SetUserProperties", { appId: APP, userId, properties: toStruct({ only: "this" }) }, keys.app);
      expect(ok(await get(userId, keys.app))).toEqual({ only: "this" });
      expect(structJson((await rpc.call(S, "SetUserProperties", { appId: APP, userId, properties: { fields: {} } }, keys.app)).properties)).toEqual({});
      expect(structJson((await rpc.call(S, "GetUserProperties", { appId: APP, userId }, keys.app)).properties)).toEqual({});
    });

    it("maps each error to its status, naming the field; nothing changed", async () => {
      const userId = fresh();
      ok(await put(userId, { kept: true }, keys.app));
      const set = (request: object, key = keys.app) => grpcFail(rpc, S, "SetUserProperties", { appId: APP, userId, ...request }, key);
      const INVALID = grpc.status.INVALID_ARGUMENT;
      expectGrpcError(await set({ properties: undefined }), INVALID, "properties", "is required");
      expectGrpcError(await set({ properties: toStruct(ofBytes(16_385)) }), INVALID, "properties", "16,385 bytes");
      expectGrpcError(await set({ properties: toStruct(nested(33)) }), INVALID, "properties", "deeper than 32 levels");
      expectGrpcError(await set({ properties: toStruct({ a: { b: [Number.NaN] } }) }), INVALID, 'properties["a"]["b"][0]', "finite number, got NaN");
      expectGrpcError(await set({ properties: toStruct({ a: Number.POSITIVE_INFINITY }) }), INVALID, 'properties["a"]', "Infinity");
      expectGrpcError(await set({ properties: toStruct({ "k\u0000": "v" }) }), INVALID, 'properties["k\\u0000"]', "NUL");
      expectGrpcError(await set({ properties: toStruct({ a: 1 }), userId: "" }), INVALID, "userId", "is required");
      expectGrpcError(await set({ properties: toStruct({ a: 1 }), appId: "missing" }, ADMIN_KEY), grpc.status.NOT_FOUND, '"missing"');
      expectGrpcError(await set({ properties: toStruct({ a: 1 }) }, keys.read), grpc.status.PERMISSION_DENIED, '"write"');
      expectGrpcError(await set({ properties: toStruct({ a: 1 }) }, keys.other), grpc.status.PERMISSION_DENIED, '"props-other"');
      expectGrpcError(await grpcFail(rpc, S, "GetUserProperties", { appId: APP, userId }, keys.write), grpc.status.PERMISSION_DENIED, '"read"');
      expect(ok(await get(userId, keys.app))).toEqual({ kept: true });
    });

    it("bytes that are not UTF-8 in a string or a key (binary protobuf): INVALID_ARGUMENT naming it; nested past the decoder's bound: INVALID_ARGUMENT", async () => {
      const userId = fresh();
      ok(await put(userId, { kept: true }, keys.app));
      /** The request's bytes, each "~" of its properties' text made 0xff (no UTF-8 has it). */
      const bytesOf = (properties: Json) => {
        const bytes = Buffer.from(toBinary(SetUserPropertiesRequestSchema, create(SetUserPropertiesRequestSchema, { appId: APP, userId, properties })));
        for (let i = bytes.indexOf("~"); i >= 0; i = bytes.indexOf("~", i + 1)) bytes[i] = 0xff;
        return bytes;
      };
      const client = grpcServiceClient(service.url, "UserService");
      const send = (bytes: Buffer) =>
        new Promise<grpc.ServiceError>((resolve, reject) => {
          const metadata = new grpc.Metadata();
          metadata.set("x-api-key", keys.app);
          client.makeUnaryRequest("/authz.v1.UserService/SetUserProperties", (b: Buffer) => b, (b: Buffer) => b, bytes, metadata, (error) =>
            error === null ? reject(new Error("the call succeeded")) : resolve(error),
          );
        });
      try {
        expectGrpcError(await send(bytesOf({ a: ["ok", "v~v"] })), grpc.status.INVALID_ARGUMENT, 'properties["a"][1]', "not well-formed Unicode");
        expectGrpcError(await send(bytesOf({ "k~": 1 })), grpc.status.INVALID_ARGUMENT, "properties[", "key is not well-formed Unicode");
        // protobuf-es stops decoding at 100 messages deep (a JSON level is two: a Struct or ListValue, and its Value).
        expectGrpcError(await send(bytesOf(nested(200))), grpc.status.INVALID_ARGUMENT, "maximum recursion depth");
      } finally {
        client.close();
      }
      expect(ok(await get(userId, keys.app))).toEqual({ kept: true });
    });
  });

  describe("over Connect", () => {
    const clients = (): [string, Client<typeof UserService>][] => [
      ["Connect JSON over HTTP/1.1", createClient(UserService, createConnectTransport({ baseUrl: service.url, httpVersion: "1.1" }))],
      ["Connect binary over HTTP/1.1", createClient(UserService, createConnectTransport({ baseUrl: service.url, httpVersion: "1.1", useBinaryFormat: true }))],
      [
        "gRPC over HTTP/2",
        createClient(UserService, createGrpcTransport({ baseUrl: service.url, sessionManager: ((s) => (sessions.push(s), s))(new Http2SessionManager(service.url)) })),
      ],
    ];
    const withKey = (key: string) => ({ headers: { "x-api-key": key } });

    it("round trips every kind of value as the plain JSON object, on each transport", async () => {
      for (const [name, users] of clients()) {
        const userId = fresh();
        const set = await users.setUserProperties({ appId: APP, userId, properties: EVERY_KIND }, withKey(keys.app));
        expect(set.properties, name).toEqual(EVERY_KIND);
        expect((await users.getUserProperties({ appId: APP, userId }, withKey(keys.app))).properties, name).toEqual(EVERY_KIND);
        expect(ok(await get(userId, keys.app)), name).toEqual(EVERY_KIND);
        expect((await users.setUserProperties({ appId: APP, userId, properties: {} }, withKey(keys.app))).properties, name).toEqual({});
        expect((await users.getUserProperties({ appId: APP, userId: fresh() }, withKey(keys.app))).properties, name).toEqual({});
      }
    });

    it("refuses bad values with INVALID_ARGUMENT naming the field, on each transport; nothing changed", async () => {
      for (const [name, users] of clients()) {
        const userId = fresh();
        ok(await put(userId, { kept: true }, keys.app));
        const refused = async (properties: Json, ...fragments: string[]) => {
          const error = await users.setUserProperties({ appId: APP, userId, properties }, withKey(keys.app)).then(
            () => undefined,
            (e: unknown) => ConnectError.from(e),
          );
          expect(error?.code, `${name}: ${fragments.join(" ")}: ${error?.rawMessage}`).toBe(Code.InvalidArgument);
          for (const fragment of fragments) expect(error?.rawMessage, name).toContain(fragment);
        };
        await refused(undefined, "properties", "is required");
        await refused(ofBytes(16_385), "properties", "16,385 bytes");
        await refused(nested(33), "properties", "deeper than 32 levels");
        expect(ok(await get(userId, keys.app)), name).toEqual({ kept: true });
      }
    });

    it("raw Connect JSON: a lone surrogate is a 400 naming the field (connect-node's client writes one as U+FFFD), 10,000 levels a 400", async () => {
      const userId = fresh();
      const res = await fetch(`${service.url}/authz.v1.UserService/SetUserProperties`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": keys.app },
        body: `{"appId": "${APP}", "userId": "${userId}", "properties": {"a": {"b": "\\ud800"}}}`,
      });
      const error = (await res.json()) as { code: string; message: string };
      expect(res.status).toBe(400);
      expect(error.code).toBe("invalid_argument");
      expect(error.message).toContain('properties["a"]["b"]: is not well-formed Unicode');
      // Nested 10,000 deep: refused by the decoder (protobuf-es stops at 100 messages), a 400 and no 5xx.
      const deep = await fetch(`${service.url}/authz.v1.UserService/SetUserProperties`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": keys.app },
        body: `{"appId": "${APP}", "userId": "${userId}", "properties": ${'{"d":'.repeat(9_999)}{}${"}".repeat(9_999)}}`,
      });
      expect(deep.status, await deep.text()).toBe(400);
      expect(ok(await get(userId, keys.app))).toEqual({});
    });
  });

  it("over the operator key as over the application's own", async () => {
    const userId = fresh();
    expect(ok(await put(userId, { by: "operator" }, ADMIN_KEY))).toEqual({ by: "operator" });
    expect(ok(await get(userId, keys.app))).toEqual({ by: "operator" });
  });
});
