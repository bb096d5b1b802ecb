/**
 * The guard's check of every string in a request (src/transport/call/text-fields.ts),
 * on message shapes the API's requests do not all have yet: nested and
 * repeated messages, maps, oneofs and a recursive type (google.protobuf.Struct),
 * and a Struct held in a field, which protobuf-es holds as plain JSON.
 */
import { create, fromJson } from "@bufbuild/protobuf";
import { ListValueSchema, StructSchema, ValueSchema } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { BatchCheckRequestSchema, CheckRequestSchema } from "../gen/authz/v1/check_pb.js";
import { SetUserPropertiesRequestSchema } from "../gen/authz/v1/users_pb.js";
import { DomainError } from "../src/domain/errors.js";
import { checkTextFields } from "../src/transport/call/text-fields.js";

function fieldsNamed(run: () => void): string[] {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(DomainError);
    return (error as DomainError).details.map((d) => String(d.field));
  }
  return [];
}

describe("checkTextFields", () => {
  it("passes well-formed text, surrogate pairs included", () => {
    const request = create(CheckRequestSchema, { userId: "ü😀", resource: "document", resourceId: "\u2028", action: "read", tenantId: "t" });
    expect(fieldsNamed(() => checkTextFields(CheckRequestSchema, request))).toEqual([]);
  });

  it.each([
    ["a NUL", "a\u0000"],
    ["an unpaired high surrogate", "a\ud800"],
    ["an unpaired low surrogate", "\udfff"],
    ["a reversed pair", "\ude00\ud83d"],
  ])("names each field with %s", (_name, bad) => {
    const request = create(CheckRequestSchema, { userId: bad, resource: "document", resourceId: "ok", action: bad, tenantId: bad });
    expect(fieldsNamed(() => checkTextFields(CheckRequestSchema, request))).toEqual(["userId", "action", "tenantId"]);
  });

  it("names items of repeated messages by index", () => {
    const item = { userId: "u", resource: "r", resourceId: "i", action: "a" };
    const request = create(BatchCheckRequestSchema, { checks: [item, { ...item, resourceId: "x\u0000" }, item, { ...item, userId: "\ud800" }] });
    expect(fieldsNamed(() => checkTextFields(BatchCheckRequestSchema, request))).toEqual(["checks[1].resourceId", "checks[3].userId"]);
  });

  it("walks maps, oneofs and recursive types (Struct)", () => {
    const good = fromJson(StructSchema, { ok: "fine", deep: { list: ["x", { inner: "y" }] } });
    expect(fieldsNamed(() => checkTextFields(StructSchema, good))).toEqual([]);
    const text = (value: string) => create(ValueSchema, { kind: { case: "stringValue", value } });
    const leaf = create(StructSchema, { fields: { inner: text("y\u0000"), "k\ud800": text("fine") } });
    const list = create(ListValueSchema, { values: [text("x"), create(ValueSchema, { kind: { case: "structValue", value: leaf } })] });
    const deep = create(StructSchema, { fields: { list: create(ValueSchema, { kind: { case: "listValue", value: list } }) } });
    const bad = create(StructSchema, { fields: { deep: create(ValueSchema, { kind: { case: "structValue", value: deep } }) } });
    expect(fieldsNamed(() => checkTextFields(StructSchema, bad))).toEqual([
      'fields["deep"].structValue.fields["list"].listValue.values[1].structValue.fields["inner"].stringValue',
      'fields["deep"].structValue.fields["list"].listValue.values[1].structValue.fields["k\\ud800"]',
    ]);
  });

  it("walks a Struct held in a field as the plain JSON protobuf-es holds it: keys and strings at any depth, in document order", () => {
    const properties = JSON.parse('{"a": "x\\u0000", "k\\ud800": 1, "fields": {"stringValue": "\\udfff"}, "list": ["ok", {"inner": "\\ud83d"}], "fine": "ü😀"}');
    const request = create(SetUserPropertiesRequestSchema, { appId: "a", userId: "u", properties });
    expect(request.properties).toEqual(properties); // no Struct message, so the plan of its descriptor would find no `fields`
    expect(fieldsNamed(() => checkTextFields(SetUserPropertiesRequestSchema, request))).toEqual([
      'properties["a"]',
      'properties["k\\ud800"]',
      'properties["fields"]["stringValue"]',
      'properties["list"][1]["inner"]',
    ]);
    const good = create(SetUserPropertiesRequestSchema, { appId: "a", userId: "u", properties: { "ü😀": ["x", { y: null, z: 1 }], "": "" } });
    expect(fieldsNamed(() => checkTextFields(SetUserPropertiesRequestSchema, good))).toEqual([]);
  });

  it("walks a Struct nested 10,000 deep without overflowing the stack", () => {
    let properties: Record<string, unknown> = { leaf: "\u0000" };
    for (let i = 0; i < 10_000; i++) properties = { d: properties };
    const request = create(SetUserPropertiesRequestSchema, { appId: "a", userId: "u" });
    request.properties = properties as never;
    const [field] = fieldsNamed(() => checkTextFields(SetUserPropertiesRequestSchema, request));
    expect(field).toBe(`properties${'["d"]'.repeat(10_000)}["leaf"]`);
  });
});
