/**
 * Typed-enough @grpc/grpc-js clients built at run time from proto/ with
 * @grpc/proto-loader, as an internal service in another language would.
 */
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { fileURLToPath } from "node:url";

const PROTO_DIR = fileURLToPath(new URL("../../proto/", import.meta.url));

let cached: grpc.GrpcObject | undefined;

function loadAuthz(): grpc.GrpcObject {
  if (cached === undefined) {
    const definition = protoLoader.loadSync(
      ["authz/v1/applications.proto", "authz/v1/catalog.proto", "authz/v1/policies.proto", "authz/v1/roles.proto",
        "authz/v1/relationships.proto", "authz/v1/check.proto", "authz/v1/audit.proto", "authz/v1/changes.proto", "authz/v1/users.proto"],
      { includeDirs: [PROTO_DIR], keepCase: false, longs: String, enums: String, defaults: true, oneofs: true },
    );
    cached = grpc.loadPackageDefinition(definition);
  }
  return cached;
}

export type GrpcService =
  | "ApplicationService"
  | "CatalogService"
  | "PolicyService"
  | "RoleService"
  | "RelationshipService"
  | "CheckService"
  | "AuditService"
  | "ChangeService"
  | "UserService";

export interface GrpcCaller {
  /** Calls `service.method` with the key as x-api-key metadata; rejects with the grpc ServiceError. */
  call<T = any>(service: GrpcService, method: string, request: object, key?: string): Promise<T>;
  close(): void;
}

/** One channel (HTTP/2 cleartext) to `url` for every service. */
export function grpcCaller(url: string): GrpcCaller {
  const address = new URL(url).host;
  const pkg = (loadAuthz().authz as grpc.GrpcObject).v1 as grpc.GrpcObject;
  const clients = new Map<string, grpc.Client>();
  const clientFor = (service: GrpcService) => {
    let client = clients.get(service);
    if (client === undefined) {
      const Ctor = pkg[service] as grpc.ServiceClientConstructor;
      const first = clients.values().next().value as grpc.Client | undefined;
      client = new Ctor(address, grpc.credentials.createInsecure(), first ? { channelOverride: first.getChannel() } : {});
      clients.set(service, client);
    }
    return client;
  };
  return {
    call(service, method, request, key) {
      const client = clientFor(service) as unknown as Record<
        string,
        (req: object, md: grpc.Metadata, cb: (err: grpc.ServiceError | null, res: unknown) => void) => void
      >;
      const fn = client[method.charAt(0).toLowerCase() + method.slice(1)];
      if (fn === undefined) throw new Error(`no method ${service}.${method}`);
      const metadata = new grpc.Metadata();
      if (key !== undefined) metadata.set("x-api-key", key);
      return new Promise((resolve, reject) => {
        fn.call(client, request, metadata, (err, res) => (err ? reject(err) : resolve(res as never)));
      });
    },
    close() {
      for (const client of clients.values()) client.close();
    },
  };
}

export { grpc };

/** A grpc-js client of one service on its own channel, for calls a test drives itself (a cancel, a deadline). */
export function grpcServiceClient(url: string, service: GrpcService): grpc.Client {
  const Ctor = ((loadAuthz().authz as grpc.GrpcObject).v1 as grpc.GrpcObject)[service] as grpc.ServiceClientConstructor;
  return new Ctor(new URL(url).host, grpc.credentials.createInsecure());
}
