import { describe, it, expect } from "vitest";
import { createFileRegistry, fromBinary, getOption } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema, type FileDescriptorProto } from "@bufbuild/protobuf/wkt";
import { createClient, createRouterTransport, type Transport } from "@connectrpc/connect";
import { CatalogService } from "../gen/authz/v1/catalog_pb.js";
import { CheckService } from "../gen/authz/v1/check_pb.js";
import { http } from "../gen/google/api/annotations_pb.js";
import * as v1 from "../gen/grpc/reflection/v1/reflection_pb.js";
import * as v1alpha from "../gen/grpc/reflection/v1alpha/reflection_pb.js";
import {
  createReflectionIndex,
  registerReflection,
  type ReflectionAnswer,
  type ReflectionQuery,
} from "../src/services/reflection-service.js";

const HTTP_RULE_EXTENSION = 72295728;

/** A request both protocol versions accept as init. */
interface RequestInit {
  host?: string;
  messageRequest: ReflectionQuery;
}
type Response = v1.ServerReflectionResponse | v1alpha.ServerReflectionResponse;

/** Each version opens the same bidi stream; the tests run against both. */
const versions: {
  name: string;
  open: (transport: Transport, requests: AsyncIterable<RequestInit>) => AsyncIterable<Response>;
}[] = [
  {
    name: "v1",
    open: (t, requests) => createClient(v1.ServerReflection, t).serverReflectionInfo(requests),
  },
  {
    name: "v1alpha",
    open: (t, requests) => createClient(v1alpha.ServerReflection, t).serverReflectionInfo(requests),
  },
];

function transport(): Transport {
  return createRouterTransport((router) => registerReflection(router, [CatalogService, CheckService]));
}

/** Sends all requests on one stream and collects every response. */
async function exchange(
  open: (typeof versions)[number]["open"],
  requests: RequestInit[],
): Promise<Response[]> {
  async function* source(): AsyncIterable<RequestInit> {
    yield* requests;
  }
  const responses: Response[] = [];
  for await (const response of open(transport(), source())) responses.push(response);
  return responses;
}

/** A request stream the test feeds one message at a time, to prove turn-taking. */
function pushable<T>(): { push(value: T): void; end(): void; stream: AsyncIterable<T> } {
  const queue: T[] = [];
  let ended = false;
  let wake: (() => void) | undefined;
  return {
    push(value) {
      queue.push(value);
      wake?.();
    },
    end() {
      ended = true;
      wake?.();
    },
    stream: {
      async *[Symbol.asyncIterator]() {
        for (;;) {
          if (queue.length > 0) {
            yield queue.shift() as T;
          } else if (ended) {
            return;
          } else {
            await new Promise<void>((resolve) => (wake = resolve));
            wake = undefined;
          }
        }
      },
    },
  };
}

function symbol(value: string): RequestInit {
  return { host: "localhost:8080", messageRequest: { case: "fileContainingSymbol", value } };
}

/** Decodes a file_descriptor_response, failing the test on any other answer. */
function decodeFiles(response: Response | undefined): FileDescriptorProto[] {
  const answer = response?.messageResponse;
  if (answer?.case !== "fileDescriptorResponse") {
    throw new Error(`expected file descriptors, got ${JSON.stringify(answer)}`);
  }
  return answer.value.fileDescriptorProto.map((bytes) => fromBinary(FileDescriptorProtoSchema, bytes));
}

/** Every import named by a returned file is itself returned, and no file twice. */
function expectSelfContained(files: FileDescriptorProto[]): void {
  const names = files.map((f) => f.name);
  expect(new Set(names).size).toBe(names.length);
  for (const file of files) {
    for (const dep of file.dependency) expect(names, `${file.name} imports ${dep}`).toContain(dep);
  }
}

function errorOf(response: Response | undefined): { errorCode: number; errorMessage: string } {
  const answer = response?.messageResponse;
  if (answer?.case !== "errorResponse") {
    throw new Error(`expected an error response, got ${JSON.stringify(answer)}`);
  }
  return answer.value;
}

describe.each(versions)("ServerReflection $name", ({ open }) => {
  it("lists the registered services and both reflection services", async () => {
    const [response] = await exchange(open, [{ messageRequest: { case: "listServices", value: "" } }]);
    const answer = response?.messageResponse;
    expect(answer?.case).toBe("listServicesResponse");
    const names = answer?.case === "listServicesResponse" ? answer.value.service.map((s) => s.name) : [];
    expect(names.sort()).toEqual([
      "authz.v1.CatalogService",
      "authz.v1.CheckService",
      "grpc.reflection.v1.ServerReflection",
      "grpc.reflection.v1alpha.ServerReflection",
    ]);
  });

  it.each([
    { what: "service", symbol: "authz.v1.CatalogService", file: "authz/v1/catalog.proto" },
    { what: "method", symbol: "authz.v1.CatalogService.GetCatalog", file: "authz/v1/catalog.proto" },
    { what: "message", symbol: "authz.v1.CheckRequest", file: "authz/v1/check.proto" },
    { what: "field", symbol: "authz.v1.CatalogResource.relations", file: "authz/v1/catalog.proto" },
    { what: "leading-dot name", symbol: ".authz.v1.CheckResponse", file: "authz/v1/check.proto" },
    { what: "oneof", symbol: "google.api.HttpRule.pattern", file: "google/api/http.proto" },
    { what: "extension", symbol: "google.api.http", file: "google/api/annotations.proto" },
    {
      what: "nested message",
      symbol: "google.protobuf.DescriptorProto.ExtensionRange",
      file: "google/protobuf/descriptor.proto",
    },
    { what: "nested enum", symbol: "google.protobuf.FieldDescriptorProto.Type", file: "google/protobuf/descriptor.proto" },
    {
      what: "enum value (protobuf scope)",
      symbol: "google.protobuf.FieldDescriptorProto.TYPE_STRING",
      file: "google/protobuf/descriptor.proto",
    },
    {
      what: "enum value (under its enum)",
      symbol: "google.protobuf.FieldDescriptorProto.Type.TYPE_STRING",
      file: "google/protobuf/descriptor.proto",
    },
    {
      what: "reflection service",
      symbol: "grpc.reflection.v1alpha.ServerReflection",
      file: "grpc/reflection/v1alpha/reflection.proto",
    },
  ])("file_containing_symbol resolves a $what", async ({ symbol: name, file }) => {
    const [response] = await exchange(open, [symbol(name)]);
    const files = decodeFiles(response);
    expect(files[0]?.name).toBe(file);
    expectSelfContained(files);
  });

  it("serves a service's file with all transitive imports, defining file first", async () => {
    const [response] = await exchange(open, [symbol("authz.v1.CatalogService")]);
    const files = decodeFiles(response);
    expect(files.map((f) => f.name).sort()).toEqual([
      "authz/v1/catalog.proto",
      "google/api/annotations.proto",
      "google/api/field_behavior.proto",
      "google/api/http.proto",
      "google/protobuf/descriptor.proto",
    ]);
    expect(files[0]?.service.map((s) => s.name)).toEqual(["CatalogService"]);
  });

  it("serves files a client can build a schema from, options included", async () => {
    const [response] = await exchange(open, [symbol("authz.v1.CatalogService.GetCatalog")]);
    const files = decodeFiles(response);
    const [root] = files;
    if (!root) throw new Error("no files");
    // Resolving imports only from the answer is what grpcurl and buf curl do.
    const registry = createFileRegistry(root, (name) => files.find((f) => f.name === name));
    const method = registry.getService("authz.v1.CatalogService")?.methods.find((m) => m.name === "GetCatalog");
    expect(method?.input.typeName).toBe("authz.v1.GetCatalogRequest");
    expect(method && getOption(method, http).pattern).toEqual({
      case: "get",
      value: "/api/v1/applications/{app_id}/resources",
    });
  });

  it.each([
    "authz.v1.NoSuchThing",
    "authz.v1.CatalogService.NoSuchMethod",
    // Defined in gen/, but no registered service reaches it.
    "authz.v1.Role",
  ])("file_containing_symbol %s is NOT_FOUND", async (name) => {
    const [response] = await exchange(open, [symbol(name)]);
    const error = errorOf(response);
    expect(error.errorCode).toBe(5);
    expect(error.errorMessage).toContain(name);
  });

  it("keeps the stream open after an error and answers in turn", async () => {
    const requests = pushable<RequestInit>();
    const responses = open(transport(), requests.stream)[Symbol.asyncIterator]();

    requests.push(symbol("authz.v1.Missing"));
    const first = await responses.next();
    expect(errorOf(first.done ? undefined : first.value).errorCode).toBe(5);

    requests.push(symbol("authz.v1.CheckService"));
    const second = await responses.next();
    expect(decodeFiles(second.done ? undefined : second.value)[0]?.name).toBe("authz/v1/check.proto");

    requests.end();
    expect((await responses.next()).done).toBe(true);
  });

  it("echoes the original request and host on every response, in order", async () => {
    const requests: RequestInit[] = [
      { host: "a.example", messageRequest: { case: "listServices", value: "*" } },
      { host: "b.example", messageRequest: { case: "fileContainingSymbol", value: "nope" } },
      { host: "c.example", messageRequest: { case: "fileByFilename", value: "authz/v1/check.proto" } },
    ];
    const responses = await exchange(open, requests);
    expect(responses.map((r) => r.validHost)).toEqual(["a.example", "b.example", "c.example"]);
    expect(responses.map((r) => r.originalRequest?.messageRequest)).toEqual(
      requests.map((r) => r.messageRequest),
    );
    expect(responses.map((r) => r.messageResponse.case)).toEqual([
      "listServicesResponse",
      "errorResponse",
      "fileDescriptorResponse",
    ]);
  });

  it.each([
    { file: "authz/v1/check.proto", count: 7 }, // + relationships, google/api/{annotations,http}, descriptor, struct, timestamp
    { file: "google/protobuf/descriptor.proto", count: 1 },
    { file: "google/api/annotations.proto", count: 3 },
    { file: "grpc/reflection/v1/reflection.proto", count: 1 },
  ])("file_by_filename $file", async ({ file, count }) => {
    const [response] = await exchange(open, [
      { messageRequest: { case: "fileByFilename", value: file } },
    ]);
    const files = decodeFiles(response);
    expect(files[0]?.name).toBe(file);
    expect(files).toHaveLength(count);
    expectSelfContained(files);
  });

  it.each(["authz/v1/nope.proto", "authz/v1/catalog", "google/protobuf/duration.proto"])(
    "file_by_filename %s is NOT_FOUND",
    async (file) => {
      const [response] = await exchange(open, [{ messageRequest: { case: "fileByFilename", value: file } }]);
      expect(errorOf(response).errorCode).toBe(5);
    },
  );

  it.each([
    { containingType: "google.protobuf.MethodOptions", extensionNumber: HTTP_RULE_EXTENSION, found: true },
    { containingType: ".google.protobuf.MethodOptions", extensionNumber: HTTP_RULE_EXTENSION, found: true },
    { containingType: "google.protobuf.MethodOptions", extensionNumber: 1234, found: false },
    { containingType: "google.protobuf.FieldOptions", extensionNumber: HTTP_RULE_EXTENSION, found: false },
  ])(
    "file_containing_extension $containingType/$extensionNumber (found: $found)",
    async ({ containingType, extensionNumber, found }) => {
      const [response] = await exchange(open, [
        { messageRequest: { case: "fileContainingExtension", value: { containingType, extensionNumber } } },
      ]);
      if (found) {
        const files = decodeFiles(response);
        expect(files[0]?.name).toBe("google/api/annotations.proto");
        expectSelfContained(files);
      } else {
        expect(errorOf(response).errorCode).toBe(5);
      }
    },
  );

  it.each([
    { type: "google.protobuf.MethodOptions", numbers: [HTTP_RULE_EXTENSION] },
    { type: "authz.v1.CheckRequest", numbers: [] },
  ])("all_extension_numbers_of_type $type", async ({ type, numbers }) => {
    const [response] = await exchange(open, [
      { messageRequest: { case: "allExtensionNumbersOfType", value: type } },
    ]);
    expect(response?.messageResponse).toMatchObject({
      case: "allExtensionNumbersResponse",
      value: { baseTypeName: type, extensionNumber: numbers },
    });
  });

  it("all_extension_numbers_of_type for an unknown type is NOT_FOUND", async () => {
    const [response] = await exchange(open, [
      { messageRequest: { case: "allExtensionNumbersOfType", value: "authz.v1.Nope" } },
    ]);
    expect(errorOf(response).errorCode).toBe(5);
  });
});

describe("createReflectionIndex", () => {
  const index = createReflectionIndex([CheckService]);

  it("describes only the services it is given", () => {
    expect(index.serviceNames).toEqual(["authz.v1.CheckService"]);
    expect(index.answer({ case: "fileContainingSymbol", value: "authz.v1.CatalogService" })).toMatchObject({
      case: "errorResponse",
      value: { errorCode: 5 },
    });
  });

  it("answers an empty request with INVALID_ARGUMENT instead of throwing", () => {
    const answer: ReflectionAnswer = index.answer({ case: undefined });
    expect(answer).toMatchObject({ case: "errorResponse", value: { errorCode: 3 } });
  });

  it("rejects a service type given as a message type", () => {
    expect(index.answer({ case: "allExtensionNumbersOfType", value: "authz.v1.CheckService" })).toMatchObject({
      case: "errorResponse",
      value: { errorCode: 5 },
    });
  });
});
