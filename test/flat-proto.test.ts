/**
 * The table-driven protobuf codec for flat messages against protobuf-es:
 * every message it reads equals fromBinary's, every message it writes has
 * toBinary's bytes, and what it does not take exactly (non-ASCII strings,
 * unknown fields, a singular field twice, odd bools) it leaves to fromBinary.
 */
import { create, equals, fromBinary, toBinary, type DescMessage } from "@bufbuild/protobuf";
import { StructSchema } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import {
  BatchCheckRequestSchema,
  BatchCheckResponseSchema,
  CheckRequestSchema,
  CheckResponseSchema,
} from "../gen/authz/v1/check_pb.js";
import { DeleteRelationshipRequestSchema } from "../gen/authz/v1/relationships_pb.js";
import { flatProtoReader, flatProtoWriter } from "../src/transport/grpc/flat-proto.js";

const long = "r".repeat(300); // a length of two varint bytes
const messages: [string, DescMessage, Record<string, unknown>][] = [
  ["a delete", DeleteRelationshipRequestSchema, { userId: "alice", resource: "doc", resourceId: "d-1", relation: "viewer" }],
  ["a delete with a long id", DeleteRelationshipRequestSchema, { userId: "alice", resource: "doc", resourceId: long, relation: "viewer", subjectResource: "team" }],
  ["an empty delete", DeleteRelationshipRequestSchema, {}],
  ["allowed", CheckResponseSchema, { allowed: true }],
  ["denied", CheckResponseSchema, { allowed: false }],
  ["batch answer", BatchCheckResponseSchema, { results: [{ allowed: true }, { allowed: false }, { allowed: true }] }],
  ["empty batch answer", BatchCheckResponseSchema, { results: [] }],
];

/**
 * Questions with context and properties (message fields): read here when
 * they carry none, left to fromBinary when they do, and never written here.
 */
const questions: [string, DescMessage, Record<string, unknown>][] = [
  ["check", CheckRequestSchema, { userId: "alice", resource: "doc", resourceId: "d-1", action: "read" }],
  ["check with a tenant", CheckRequestSchema, { userId: "alice", resource: "doc", resourceId: long, action: "read", tenantId: "t1" }],
  ["check with an empty tenant (set)", CheckRequestSchema, { userId: "u", resource: "doc", resourceId: "d", action: "read", tenantId: "" }],
  ["empty check", CheckRequestSchema, {}],
  [
    "batch",
    BatchCheckRequestSchema,
    { checks: [{ userId: "a", resource: "doc", resourceId: "1", action: "read" }, {}, { userId: "b", resource: "doc", resourceId: long, action: "x", tenantId: "t" }] },
  ],
];

describe("flat protobuf", () => {
  it.each(messages)("writes %s as toBinary does and reads it back as fromBinary does", (_name, desc, init) => {
    const message = create(desc, init as never);
    const expected = Buffer.from(toBinary(desc, message));
    const write = flatProtoWriter(desc)!;
    expect(write(message, 0)).toEqual(expected);
    expect(write(init, 0)).toEqual(expected); // a service may answer with an init object
    const withRoom = write(message, 5);
    expect(withRoom.subarray(5)).toEqual(expected);
    const read = flatProtoReader(desc)!(expected);
    expect(read).toBeDefined();
    expect(equals(desc, read!, fromBinary(desc, expected))).toBe(true);
  });

  it("writes non-ASCII strings as UTF-8", () => {
    const message = create(DeleteRelationshipRequestSchema, { userId: "zoë 🦊", resource: "doc", resourceId: "d", relation: "viewer" });
    expect(flatProtoWriter(DeleteRelationshipRequestSchema)!(message, 0)).toEqual(Buffer.from(toBinary(DeleteRelationshipRequestSchema, message)));
  });

  it.each(questions)("reads %s as fromBinary does, and writes none", (_name, desc, init) => {
    const bytes = Buffer.from(toBinary(desc, create(desc, init as never)));
    const read = flatProtoReader(desc)!(bytes);
    expect(read).toBeDefined();
    expect(equals(desc, read!, fromBinary(desc, bytes))).toBe(true);
    expect(flatProtoWriter(desc)).toBeUndefined();
  });

  it.each([
    ["a check with context", CheckRequestSchema, { userId: "u", resource: "doc", resourceId: "d", action: "read", context: { ip: "10.0.0.1" } }],
    ["a check with subject properties", CheckRequestSchema, { userId: "u", subjectProperties: {} }],
    ["a batch item with resource properties", BatchCheckRequestSchema, { checks: [{ userId: "u", resourceProperties: { ownerID: "u" } }] }],
  ] as [string, DescMessage, Record<string, unknown>][])("leaves %s to fromBinary", (_name, desc, init) => {
    expect(flatProtoReader(desc)!(Buffer.from(toBinary(desc, create(desc, init as never))))).toBeUndefined();
  });

  const valid = Buffer.from(toBinary(CheckRequestSchema, create(CheckRequestSchema, { userId: "u", resource: "doc", resourceId: "d", action: "read" })));
  it.each([
    ["a non-ASCII string", Buffer.from(toBinary(CheckRequestSchema, create(CheckRequestSchema, { userId: "zoë" })))],
    ["an unknown field", Buffer.concat([valid, Buffer.from([0x30, 0x01])])],
    ["a singular field twice", Buffer.concat([valid, Buffer.from([0x0a, 0x01, 0x78])])],
    ["a string field sent as a varint", Buffer.from([0x08, 0x01])],
    ["a length past the end", Buffer.from([0x0a, 0x05, 0x61])],
    ["a truncated tag", Buffer.from([0x80])],
  ])("leaves %s to fromBinary", (_name, bytes) => {
    expect(flatProtoReader(CheckRequestSchema)!(bytes)).toBeUndefined();
  });

  it.each([
    ["a bool of 2", Buffer.from([0x08, 0x02])],
    ["a bool sent length-delimited", Buffer.from([0x0a, 0x00])],
  ])("leaves %s in a response type to fromBinary", (_name, bytes) => {
    expect(flatProtoReader(CheckResponseSchema)!(bytes)).toBeUndefined();
  });

  it("takes no message that is not flat", () => {
    expect(flatProtoReader(StructSchema)).toBeUndefined();
    expect(flatProtoWriter(StructSchema)).toBeUndefined();
  });
});
