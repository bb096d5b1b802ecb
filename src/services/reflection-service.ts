// gRPC server reflection (grpc.reflection.v1 and v1alpha) for connect-es.
//
// connect-es ships no reflection package, so this module answers the
// reflection protocol from the descriptors protobuf-es already embeds in the
// generated code. Clients such as `grpcurl` and `buf curl` use it to discover
// services and build a schema without local .proto files.
//
// The work is split in two: createReflectionIndex() is a pure, version-neutral
// lookup (easy to unit-test), and registerReflection() wires it to both
// protocol versions, whose messages differ only in their package name.

import { create, toBinary } from "@bufbuild/protobuf";
import type {
  DescEnum,
  DescExtension,
  DescFile,
  DescMessage,
  DescService,
} from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code, type ConnectRouter } from "@connectrpc/connect";
import * as v1 from "../../gen/grpc/reflection/v1/reflection_pb.js";
import * as v1alpha from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";

/**
 * The request oneof `message_request`, without the package-specific type
 * names, so one implementation serves v1 and v1alpha.
 */
export type ReflectionQuery =
  | {
      case:
        | "fileByFilename"
        | "fileContainingSymbol"
        | "allExtensionNumbersOfType"
        | "listServices";
      value: string;
    }
  | {
      case: "fileContainingExtension";
      value: { containingType: string; extensionNumber: number };
    }
  | { case: undefined; value?: undefined };

/** The response oneof `message_response`, version-neutral like ReflectionQuery. */
export type ReflectionAnswer =
  | { case: "fileDescriptorResponse"; value: { fileDescriptorProto: Uint8Array[] } }
  | {
      case: "allExtensionNumbersResponse";
      value: { baseTypeName: string; extensionNumber: number[] };
    }
  | { case: "listServicesResponse"; value: { service: { name: string }[] } }
  | { case: "errorResponse"; value: { errorCode: number; errorMessage: string } };

export interface ReflectionIndex {
  /** Fully-qualified names of the services the index describes. */
  readonly serviceNames: readonly string[];
  /** Answers one reflection request. Never throws: failures are error answers. */
  answer(query: ReflectionQuery): ReflectionAnswer;
}

/**
 * Builds the lookup tables for `services` and every file they transitively
 * import. Only that closure is described: a type that no listed service can
 * reach is NOT_FOUND, as it would be on a server that never loaded it.
 */
export function createReflectionIndex(services: readonly DescService[]): ReflectionIndex {
  const serviceNames = [...new Set(services.map((s) => s.typeName))];
  // Keyed by FileDescriptorProto.name ("authz/v1/catalog.proto"). Not
  // DescFile.name: protobuf-es drops the ".proto" suffix there.
  const filesByName = new Map<string, DescFile>();
  const fileBySymbol = new Map<string, DescFile>();
  const messageTypes = new Set<string>();
  const extensionsByType = new Map<string, Map<number, DescExtension>>();
  const bytesByFile = new Map<DescFile, Uint8Array>();

  const addSymbol = (name: string, file: DescFile): void => {
    // First definition wins, so an accidental duplicate cannot redirect a
    // symbol to a different file halfway through.
    if (!fileBySymbol.has(name)) fileBySymbol.set(name, file);
  };

  const addExtension = (ext: DescExtension): void => {
    addSymbol(ext.typeName, ext.file);
    const byNumber = extensionsByType.get(ext.extendee.typeName) ?? new Map<number, DescExtension>();
    if (!byNumber.has(ext.number)) byNumber.set(ext.number, ext);
    extensionsByType.set(ext.extendee.typeName, byNumber);
  };

  const addEnum = (desc: DescEnum): void => {
    addSymbol(desc.typeName, desc.file);
    // Protobuf scopes enum values as siblings of their enum ("pkg.VALUE"),
    // which is what protoc-based servers resolve; "pkg.Enum.VALUE" is also
    // accepted because people naturally type it, and nothing else can own it.
    const scope = desc.parent?.typeName ?? desc.file.proto.package;
    for (const value of desc.values) {
      addSymbol(scope === "" ? value.name : `${scope}.${value.name}`, desc.file);
      addSymbol(`${desc.typeName}.${value.name}`, desc.file);
    }
  };

  const addMessage = (desc: DescMessage): void => {
    addSymbol(desc.typeName, desc.file);
    messageTypes.add(desc.typeName);
    for (const field of desc.fields) addSymbol(`${desc.typeName}.${field.name}`, desc.file);
    for (const oneof of desc.oneofs) addSymbol(`${desc.typeName}.${oneof.name}`, desc.file);
    desc.nestedMessages.forEach(addMessage);
    desc.nestedEnums.forEach(addEnum);
    desc.nestedExtensions.forEach(addExtension);
  };

  const addFile = (file: DescFile): void => {
    if (filesByName.has(file.proto.name)) return;
    filesByName.set(file.proto.name, file);
    // Serialize once up front: a descriptor that cannot be encoded should
    // fail at startup, not on some client's first request.
    bytesByFile.set(file, toBinary(FileDescriptorProtoSchema, file.proto));
    file.dependencies.forEach(addFile);
    file.messages.forEach(addMessage);
    file.enums.forEach(addEnum);
    file.extensions.forEach(addExtension);
    for (const service of file.services) {
      addSymbol(service.typeName, file);
      for (const method of service.methods) addSymbol(`${service.typeName}.${method.name}`, file);
    }
  };

  for (const service of services) addFile(service.file);

  /**
   * The file and its transitive imports, the file first and each once.
   * Clients build a descriptor pool from the answer alone, so every import
   * (descriptor.proto included) has to be in it; protobuf-es rebuilds
   * FileDescriptorProto.dependency from the generated imports, so
   * `dependencies` and `proto.dependency` list the same files.
   */
  const withDependencies = (root: DescFile): ReflectionAnswer => {
    const ordered: DescFile[] = [];
    const seen = new Set<DescFile>();
    const visit = (file: DescFile): void => {
      if (seen.has(file)) return;
      seen.add(file);
      ordered.push(file);
      file.dependencies.forEach(visit);
    };
    visit(root);
    const fileDescriptorProto: Uint8Array[] = [];
    for (const file of ordered) {
      const bytes = bytesByFile.get(file);
      if (bytes !== undefined) fileDescriptorProto.push(bytes);
    }
    return { case: "fileDescriptorResponse", value: { fileDescriptorProto } };
  };

  return {
    serviceNames,
    answer(query) {
      switch (query.case) {
        case "listServices":
          // The request's value is documented as ignored.
          return {
            case: "listServicesResponse",
            value: { service: serviceNames.map((name) => ({ name })) },
          };
        case "fileByFilename": {
          const file = filesByName.get(query.value);
          return file ? withDependencies(file) : notFound(`file "${query.value}" not found`);
        }
        case "fileContainingSymbol": {
          const symbol = stripLeadingDot(query.value);
          const file = fileBySymbol.get(symbol);
          return file ? withDependencies(file) : notFound(`symbol "${symbol}" not found`);
        }
        case "fileContainingExtension": {
          const typeName = stripLeadingDot(query.value.containingType);
          const ext = extensionsByType.get(typeName)?.get(query.value.extensionNumber);
          return ext
            ? withDependencies(ext.file)
            : notFound(`extension ${query.value.extensionNumber} of "${typeName}" not found`);
        }
        case "allExtensionNumbersOfType": {
          const typeName = stripLeadingDot(query.value);
          if (!messageTypes.has(typeName)) return notFound(`type "${typeName}" not found`);
          const numbers = [...(extensionsByType.get(typeName)?.keys() ?? [])].sort((a, b) => a - b);
          return {
            case: "allExtensionNumbersResponse",
            value: { baseTypeName: typeName, extensionNumber: numbers },
          };
        }
        case undefined:
          // Answered in-stream rather than by failing the call, so one bad
          // request does not cost the client its other answers.
          return errorAnswer(Code.InvalidArgument, "message_request is not set");
      }
    },
  };
}

/**
 * Registers grpc.reflection.v1 and grpc.reflection.v1alpha ServerReflection on
 * the router, describing `services` (plus the reflection services themselves).
 * v1alpha is still what many deployed clients try first, so both are served.
 */
export function registerReflection(router: ConnectRouter, services: DescService[]): void {
  const index = createReflectionIndex([...services, v1.ServerReflection, v1alpha.ServerReflection]);
  // The two registrations differ only in the generated types; a shared
  // generic would need casts, so the few lines are repeated instead.
  router.service(v1.ServerReflection, {
    async *serverReflectionInfo(requests) {
      for await (const request of requests) {
        yield create(v1.ServerReflectionResponseSchema, {
          validHost: request.host,
          originalRequest: request,
          messageResponse: index.answer(request.messageRequest),
        });
      }
    },
  });
  router.service(v1alpha.ServerReflection, {
    async *serverReflectionInfo(requests) {
      for await (const request of requests) {
        yield create(v1alpha.ServerReflectionResponseSchema, {
          validHost: request.host,
          originalRequest: request,
          messageResponse: index.answer(request.messageRequest),
        });
      }
    },
  });
}

function stripLeadingDot(name: string): string {
  // Descriptors write references fully-qualified with a leading dot
  // (".google.protobuf.MethodOptions"); accept that form as well.
  return name.startsWith(".") ? name.slice(1) : name;
}

function notFound(message: string): ReflectionAnswer {
  return errorAnswer(Code.NotFound, message);
}

function errorAnswer(code: Code, message: string): ReflectionAnswer {
  // connect's Code enum uses the gRPC numeric codes the protocol expects.
  return { case: "errorResponse", value: { errorCode: code, errorMessage: message } };
}
