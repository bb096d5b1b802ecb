/**
 * The direct JSON reader and writer for flat messages must agree exactly with
 * protobuf-es's own fromJson / toJson, and hand everything unusual to the
 * strict reader (answer undefined) rather than guess.
 */
import { equals, fromJson, toJson, type JsonObject } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { BatchCheckRequestSchema, CheckRequestSchema, CheckResponseSchema } from "../gen/authz/v1/check_pb.js";
import { flatReader, flatWriter } from "../src/transport/flat-json.js";

const read = flatReader(CheckRequestSchema)!;
const write = flatWriter(CheckResponseSchema)!;

describe("flat JSON", () => {
  it("applies to flat messages only", () => {
    expect(read).toBeTypeOf("function");
    expect(write).toBeTypeOf("function");
    expect(flatReader(BatchCheckRequestSchema)).toBeUndefined(); // a repeated message field
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
  ])("leaves %s to the strict reader", (_name, json) => {
    expect(read(json)).toBeUndefined();
  });

  it.each([true, false])("writes allowed=%s exactly as toJson with alwaysEmitImplicit does", (allowed) => {
    expect(write({ allowed })).toStrictEqual(toJson(CheckResponseSchema, { $typeName: "authz.v1.CheckResponse", allowed }, { alwaysEmitImplicit: true }));
  });

  it("writes defaults for fields a service left out, as create() then toJson would", () => {
    expect(write({})).toStrictEqual({ allowed: false });
  });
});
