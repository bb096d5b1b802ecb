/**
 * The direct JSON reader and writer for flat messages must agree exactly with
 * protobuf-es's own fromJson / toJson, and hand everything unusual to the
 * strict reader (answer undefined) rather than guess.
 */
import { equals, fromJson, toJson, type JsonObject } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  BatchCheckRequestSchema,
  BatchCheckResponseSchema,
  BatchPermissionsResponseSchema,
  CheckRequestSchema,
  CheckResponseSchema,
  PermissionsResponseSchema,
} from "../gen/authz/v1/check_pb.js";
import { CreateApiKeyRequestSchema } from "../gen/authz/v1/applications_pb.js";
import { PutCatalogRequestSchema } from "../gen/authz/v1/catalog_pb.js";
import { BulkWriteRelationshipsRequestSchema, WriteRelationshipRequestSchema } from "../gen/authz/v1/relationships_pb.js";
import { EvaluationRequestSchema, EvaluationsRequestSchema, SearchResourceRequestSchema } from "../gen/authzen/v1/access_pb.js";
import { StringValueSchema, StructSchema } from "@bufbuild/protobuf/wkt";
import { flatReader, flatWriter } from "../src/transport/rest/flat-json.js";
import { messageFromJson } from "../src/transport/rest/json-input.js";

const read = flatReader(CheckRequestSchema)!;
const write = flatWriter(CheckResponseSchema)!;

describe("flat JSON", () => {
  it("applies to flat messages only", () => {
    expect(read).toBeTypeOf("function");
    expect(write).toBeTypeOf("function");
    expect(flatReader(BatchCheckRequestSchema)).toBeTypeOf("function"); // a list of flat messages
    expect(flatWriter(BatchCheckResponseSchema)).toBeTypeOf("function");
    expect(flatReader(PutCatalogRequestSchema)).toBeUndefined(); // lists of strings inside lists
    expect(flatWriter(CheckRequestSchema)).toBeUndefined(); // tenant_id has explicit presence
  });

  it.each<[string, JsonObject]>([
    ["every field, JSON names", { userId: "u", resource: "document", resourceId: "d1", action: "read", tenantId: "t1" }],
    ["proto names", { user_id: "u", resource: "document", resource_id: "d1", action: "read", tenant_id: "t1" }],
    ["no tenant", { userId: "u", resource: "document", resourceId: "d1", action: "read" }],
    ["empty strings", { userId: "", resource: "", resourceId: "", action: "", tenantId: "" }],
    ["nothing", {}],
    ["unicode", { userId: "ü😀", resource: "r", resourceId: "\u2028", action: "a" }],
  ])("reads %s exactly as fromJson does", (_name, json) => {
    const fast = read(json);
    const slow = fromJson(CheckRequestSchema, json);
    expect(fast).toBeDefined();
    expect(equals(CheckRequestSchema, fast as never, slow)).toBe(true);
    expect(fast).toStrictEqual(slow);
  });

  it.each<[string, Record<string, unknown>]>([
    ["an unknown field", { userId: "u", colour: "red" }],
    ["a null", { userId: null }],
    ["a number for a string", { userId: 7 }],
    ["a bool for a string", { resource: true }],
    ["an object for a string", { action: { x: 1 } }],
    ["the same field under both names", { userId: "u", user_id: "v" }],
    ["__proto__", JSON.parse('{"__proto__": "x"}') as Record<string, unknown>],
    ["a __proto__ object that would fill a field", JSON.parse('{"__proto__": {"userId": "x"}, "resource": "r"}') as Record<string, unknown>],
    ["constructor", { constructor: "x" }],
    ["toString", { toString: "x" }],
    // Text the strict reader refuses, naming the field as it would in any other body.
    ["a NUL", { userId: "a\u0000" }],
    ["an unpaired surrogate", { resourceId: "d\ud800" }],
  ])("leaves %s to the strict reader", (_name, json) => {
    expect(read(json)).toBeUndefined();
  });

  it.each([true, false])("writes allowed=%s exactly as toJson with alwaysEmitImplicit does", (allowed) => {
    expect(write({ allowed })).toStrictEqual(toJson(CheckResponseSchema, { $typeName: "authz.v1.CheckResponse", allowed }, { alwaysEmitImplicit: true }));
  });

  const readBatch = flatReader(BatchCheckRequestSchema)!;
  const writeBatch = flatWriter(BatchCheckResponseSchema)!;

  it("leaves a __proto__ key inside a list element to the strict reader", () => {
    expect(readBatch(JSON.parse('{"checks": [{"userId": "u"}, {"__proto__": {"userId": "x"}}]}'))).toBeUndefined();
  });

  it.each<[string, JsonObject]>([
    ["two checks", { checks: [{ userId: "u", resource: "r", resourceId: "i", action: "a" }, { user_id: "v", tenantId: "t" }] }],
    ["no checks", { checks: [] }],
    ["nothing", {}],
  ])("reads a batch with %s exactly as fromJson does", (_name, json) => {
    expect(readBatch(json)).toStrictEqual(fromJson(BatchCheckRequestSchema, json));
  });

  it.each<[string, unknown]>([
    ["a check with an unknown field", { checks: [{ userId: "u" }, { colour: "red" }] }],
    ["a null check", { checks: [null] }],
    ["checks not a list", { checks: { userId: "u" } }],
    ["a check that is a string", { checks: ["u"] }],
    ["a body that is a list", [{ userId: "u" }]],
  ])("leaves a batch with %s to the strict reader", (_name, json) => {
    expect(readBatch(json)).toBeUndefined();
  });

  it("writes a batch answer exactly as toJson does", () => {
    const results = [true, false, true].map((allowed) => ({ $typeName: "authz.v1.BatchCheckResult" as const, allowed }));
    const expected = toJson(BatchCheckResponseSchema, { $typeName: "authz.v1.BatchCheckResponse", results }, { alwaysEmitImplicit: true });
    expect(writeBatch({ results: results.map(({ allowed }) => ({ allowed })) })).toStrictEqual(expected);
    expect(writeBatch({})).toStrictEqual({ results: [] });
  });

  it("writes defaults for fields a service left out, as create() then toJson would", () => {
    expect(write({})).toStrictEqual({ allowed: false });
  });

  describe("lists of strings", () => {
    const readKey = flatReader(CreateApiKeyRequestSchema)!;

    it("are read at the top level, and written anywhere", () => {
      expect(readKey).toBeTypeOf("function");
      expect(flatWriter(PermissionsResponseSchema)).toBeTypeOf("function");
      expect(flatWriter(BatchPermissionsResponseSchema)).toBeTypeOf("function");
    });

    it.each<[string, JsonObject]>([
      ["scopes", { appId: "a", name: "k", scopes: ["check", "read"] }],
      ["no scopes", { appId: "a", name: "k", scopes: [] }],
      ["strings of any content", { scopes: ["", "ü😀", "\u2028"] }],
    ])("reads %s exactly as fromJson does", (_name, json) => {
      expect(readKey(json)).toStrictEqual(fromJson(CreateApiKeyRequestSchema, json));
    });

    it.each<[string, unknown]>([
      ["a number in the list", { scopes: ["check", 1] }],
      ["a NUL in the list", { scopes: ["check", "re\u0000ad"] }],
      ["a null in the list", { scopes: [null] }],
      ["a string for the list", { scopes: "check" }],
      ["an object for the list", { scopes: { 0: "check" } }],
    ])("leaves %s to the strict reader", (_name, json) => {
      expect(readKey(json)).toBeUndefined();
    });

    it("the reader's list is a copy: changing the message leaves the JSON be", () => {
      const json = { scopes: ["check"] };
      const message = readKey(json) as unknown as { scopes: string[] };
      message.scopes.push("write");
      expect(json.scopes).toEqual(["check"]);
    });

    it.each<[string, string[][]]>([
      ["some actions", [["read", "update"], [], ["ü😀"]]],
      ["no results", []],
    ])("writes permissions answers with %s exactly as toJson does", (_name, lists) => {
      const results = lists.map((actions) => ({ $typeName: "authz.v1.PermissionsResult" as const, actions }));
      const expected = toJson(BatchPermissionsResponseSchema, { $typeName: "authz.v1.BatchPermissionsResponse", results }, { alwaysEmitImplicit: true });
      expect(flatWriter(BatchPermissionsResponseSchema)!({ results: lists.map((actions) => ({ actions })) })).toStrictEqual(expected);
      const one = lists[0] ?? [];
      expect(flatWriter(PermissionsResponseSchema)!({ actions: one })).toStrictEqual(
        toJson(PermissionsResponseSchema, { $typeName: "authz.v1.PermissionsResponse", actions: one }, { alwaysEmitImplicit: true }),
      );
      expect(flatWriter(PermissionsResponseSchema)!({})).toStrictEqual({ actions: [] });
    });
  });

  describe("singular messages", () => {
    const readWrite = flatReader(WriteRelationshipRequestSchema)!;

    it.each<[string, JsonObject]>([
      ["a subject", { resource: "doc", resourceId: "d1", relation: "viewer", subject: { resource: "team", resourceId: "t1", relation: "member" } }],
      ["an empty subject", { resource: "doc", subject: {} }],
      ["proto names inside", { resource: "doc", subject: { resource_id: "t1" } }],
    ])("reads a write with %s exactly as fromJson does", (_name, json) => {
      expect(readWrite(json)).toStrictEqual(fromJson(WriteRelationshipRequestSchema, json));
    });

    it("reads them inside list items too", () => {
      const json: JsonObject = { writes: [{ userId: "u", resource: "doc", resourceId: "d1", relation: "viewer" }, { resource: "doc", resourceId: "d1", relation: "viewer", subject: { resource: "team", resourceId: "t" } }] };
      expect(flatReader(BulkWriteRelationshipsRequestSchema)!(json)).toStrictEqual(fromJson(BulkWriteRelationshipsRequestSchema, json));
    });

    it.each<[string, unknown]>([
      ["a null subject", { resource: "doc", subject: null }],
      ["a subject that is a string", { resource: "doc", subject: "team:t1" }],
      ["a subject that is a list", { resource: "doc", subject: [] }],
      ["an unknown field inside", { resource: "doc", subject: { resource: "team", colour: "red" } }],
      ["a __proto__ key inside", JSON.parse('{"resource": "doc", "subject": {"__proto__": {"resource": "x"}}}')],
      ["a NUL inside", { resource: "doc", subject: { resource: "te\u0000am" } }],
      ["a field of a well-known type (a Timestamp)", { resource: "doc", expiresAt: "2030-01-01T00:00:00Z" }],
    ])("leaves a write with %s to the strict reader", (_name, json) => {
      expect(readWrite(json)).toBeUndefined();
    });

    it("never takes a well-known type for flat: its JSON form is its own (a wrapper is a bare value)", () => {
      expect(flatReader(StringValueSchema)).toBeUndefined();
      expect(flatReader(StructSchema)).toBeUndefined();
    });
  });

  describe("AuthZEN's reading: a key that is no field is skipped, at any depth", () => {
    const reading = { ignoreUnknownFields: true };
    const readEvaluation = flatReader(EvaluationRequestSchema, reading)!;
    const plain = { subject: { type: "user", id: "alice" }, resource: { type: "document", id: "d1" }, action: { name: "read" } };
    /** What the strict reader (json-input, on protobuf-es) makes of the same JSON. */
    const strict = (json: Record<string, unknown>) => messageFromJson(EvaluationRequestSchema, json, new Set(), reading);

    it.each<[string, Record<string, unknown>]>([
      ["the plain shape", plain],
      ["parts in another order, one left out", { action: { name: "read" }, subject: { id: "alice", type: "user" } }],
      ["unknown keys at the top and inside each part", { ...plain, request_id: 7, subject: { ...plain.subject, email: ["a@b"] }, action: { name: "read", extra: null }, resource: { ...plain.resource, owner: {} } }],
      ["__proto__, constructor and toString keys", JSON.parse('{"__proto__": {"subject": 1}, "constructor": 2, "subject": {"toString": "x", "type": "user", "id": "a"}}')],
      ["empty parts", { subject: {}, resource: {}, action: {} }],
      ["nothing", {}],
      ["non-ASCII text", { subject: { type: "user", id: "zoë-名前-😀" }, resource: { type: "document", id: "\u2028" }, action: { name: "read" } }],
      // Properties and context (Structs) are taken as the JSON objects they are: the same as the strict reader's.
      ["context", { ...plain, context: { ip: "10.0.0.1" } }],
      ["an empty context", { ...plain, context: {} }],
      ["subject.properties", { ...plain, subject: { ...plain.subject, properties: { department: "Sales" } } }],
      ["resource.properties", { ...plain, resource: { ...plain.resource, properties: {} } }],
      ["action.properties", { ...plain, action: { name: "read", properties: { method: "GET" } } }],
      ["a context of every kind of value", { ...plain, context: { n: 1.5, big: 1e300, s: "x\u0000\ud800", b: false, z: null, l: [1, [null, { a: [] }]], o: { p: { q: "r" } } } }],
      ["__proto__ keys in a context", { ...plain, context: JSON.parse('{"__proto__": {"polluted": true}, "l": [{"__proto__": 1}]}') }],
    ])("reads %s exactly as the strict reader does", (_name, json) => {
      const fast = readEvaluation(json);
      expect(fast).toBeDefined();
      expect(fast).toStrictEqual(strict(json));
      expect(equals(EvaluationRequestSchema, fast as never, fromJson(EvaluationRequestSchema, json as JsonObject, { ignoreUnknownFields: true }))).toBe(true);
    });

    it("reads a context with a constructor key as the strict reader does", () => {
      // toStrictEqual compares constructors, which here are the client's own objects: compared as JSON and as protobuf messages.
      const json = { ...plain, context: JSON.parse('{"constructor": {"name": "Object"}, "toString": 1}') as JsonObject };
      const fast = readEvaluation(json) as unknown as { context: object };
      expect(Object.getPrototypeOf(fast.context)).toBe(Object.prototype);
      expect(JSON.stringify(fast.context)).toBe(JSON.stringify((strict(json) as unknown as { context: object }).context));
      expect(equals(EvaluationRequestSchema, fast as never, strict(json))).toBe(true);
    });

    it.each<[string, unknown]>([
      // A context or properties that are not a JSON object: the strict reader names them.
      ["a context that is a list", { ...plain, context: [1] }],
      ["a context that is a string", { ...plain, context: "x" }],
      ["null properties", { ...plain, subject: { ...plain.subject, properties: null } }],
      ["a null part", { ...plain, subject: null }],
      ["a null id", { ...plain, resource: { type: "document", id: null } }],
      ["a part that is a string", { ...plain, subject: "alice" }],
      ["a number for a string", { ...plain, resource: { type: "document", id: 7 } }],
      ["a NUL in a type", { ...plain, resource: { type: "doc\u0000", id: "d1" } }],
      ["an unpaired surrogate in an id", { ...plain, subject: { type: "user", id: "a\ud800" } }],
      ["a body that is a list", [plain]],
    ])("leaves a request with %s to the strict reader", (_name, json) => {
      expect(readEvaluation(json)).toBeUndefined();
    });

    it("this API's reading refuses what AuthZEN's skips", () => {
      expect(flatReader(EvaluationRequestSchema)!(plain)).toBeDefined();
      expect(flatReader(EvaluationRequestSchema)!({ ...plain, extra: 1 })).toBeUndefined();
      expect(flatReader(EvaluationRequestSchema)!({ ...plain, subject: { ...plain.subject, extra: 1 } })).toBeUndefined();
    });

    it("reads Access Evaluations' items and options; a search's page is read the full way", () => {
      const json = { ...plain, evaluations: [{ action: { name: "update" }, extra: 1 }, {}], options: { evaluations_semantic: "deny_on_first_deny", other: true } };
      expect(flatReader(EvaluationsRequestSchema, reading)!(json)).toStrictEqual(messageFromJson(EvaluationsRequestSchema, json, new Set(), reading));
      const search = flatReader(SearchResourceRequestSchema, reading)!;
      expect(search({ ...plain, resource: { type: "document" } })).toBeDefined();
      expect(search({ ...plain, page: { limit: 10 } })).toBeUndefined();
    });
  });
});
