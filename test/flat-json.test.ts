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
import { flatReader, flatWriter } from "../src/transport/rest/flat-json.js";

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
});
