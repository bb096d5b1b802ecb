/**
 * gRPC end to end: a @grpc/grpc-js client built from proto/ with
 * @grpc/proto-loader talks HTTP/2 cleartext (prior knowledge) to the real
 * port, on each engine. Covers the working RPCs, the status code of every
 * error class, REST/gRPC agreement on the same data, and many calls
 * multiplexed on one HTTP/2 connection.
 */
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { fromBinary, toJson } from "@bufbuild/protobuf";
import { StructSchema } from "@bufbuild/protobuf/wkt";
import { BinaryReader } from "@bufbuild/protobuf/wire";
import { readdirSync } from "node:fs";
import http2 from "node:http2";
import net from "node:net";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, createAppWithKey, startTestService, type TestService } from "./support/service.js";
import { sampleEffectiveResources, sampleResources } from "./support/fixtures.js";

// ---------------------------------------------------------------------------
// The client, from the .proto files (no generated code).

const PROTO_DIR = "proto";
const protoFiles = readdirSync(path.join(PROTO_DIR, "authz/v1"))
  .filter((f) => f.endsWith(".proto"))
  .map((f) => `authz/v1/${f}`);

const packageDefinition = protoLoader.loadSync(protoFiles, {
  includeDirs: [PROTO_DIR],
  keepCase: false,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
const loaded = grpc.loadPackageDefinition(packageDefinition);
const authzV1 = (loaded.authz as grpc.GrpcObject).v1 as grpc.GrpcObject;

type ServiceName =
  | "ApplicationService"
  | "CatalogService"
  | "CheckService"
  | "PolicyService"
  | "RoleService"
  | "RelationshipService"
  | "AuditService";

function serviceCtor(name: ServiceName): grpc.ServiceClientConstructor {
  const ctor = authzV1[name] as grpc.ServiceClientConstructor | undefined;
  if (ctor === undefined) throw new Error(`proto-loader did not load authz.v1.${name}`);
  return ctor;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

/** All services of authz.v1 on one target; grpc-js puts them on one channel/connection per target. */
class GrpcApi {
  private readonly clients = new Map<ServiceName, grpc.Client>();

  constructor(
    private readonly target: string,
    private readonly options: grpc.ChannelOptions = {},
  ) {}

  private client(service: ServiceName): grpc.Client {
    let client = this.clients.get(service);
    if (client === undefined) {
      const Ctor = serviceCtor(service);
      client = new Ctor(this.target, grpc.credentials.createInsecure(), this.options);
      this.clients.set(service, client);
    }
    return client;
  }

  /** One unary call; `key` is sent as x-api-key metadata (the operator key unless given, null: none). */
  call(service: ServiceName, method: string, request: object, key: string | null = ADMIN_KEY): Promise<Json> {
    const definition = serviceCtor(service).service[method];
    if (definition === undefined) throw new Error(`authz.v1.${service} has no method ${method}`);
    const metadata = new grpc.Metadata();
    if (key !== null) metadata.set("x-api-key", key);
    return new Promise((resolve, reject) => {
      this.client(service).makeUnaryRequest(
        definition.path,
        definition.requestSerialize,
        definition.responseDeserialize,
        request,
        metadata,
        { deadline: Date.now() + 20_000 },
        (error: grpc.ServiceError | null, response?: unknown) => (error ? reject(error) : resolve(response)),
      );
    });
  }

  /** The call's error; fails the test when the call succeeds. */
  async fail(service: ServiceName, method: string, request: object, key: string | null = ADMIN_KEY): Promise<grpc.ServiceError> {
    try {
      const response = await this.call(service, method, request, key);
      throw new Error(`expected ${service}.${method} to fail, got ${JSON.stringify(response)}`);
    } catch (error) {
      if (isServiceError(error)) return error;
      throw error;
    }
  }

  close(): void {
    for (const client of this.clients.values()) client.close();
    this.clients.clear();
  }
}

function isServiceError(error: unknown): error is grpc.ServiceError {
  return error instanceof Error && typeof (error as Partial<grpc.ServiceError>).code === "number" && "metadata" in error;
}

/**
 * The error details the server put in `grpc-status-details-bin` (a
 * google.rpc.Status whose details are google.protobuf.Any), with every
 * google.protobuf.Struct detail as plain JSON.
 */
function statusDetails(error: grpc.ServiceError): { code: number; message: string; structs: unknown[] } {
  const [bin] = error.metadata.get("grpc-status-details-bin");
  if (!(bin instanceof Uint8Array)) throw new Error("the error carries no grpc-status-details-bin trailer");
  const status = { code: 0, message: "", structs: [] as unknown[] };
  const reader = new BinaryReader(bin);
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    if (field === 1) status.code = reader.int32();
    else if (field === 2) status.message = reader.string();
    else if (field === 3) {
      const any = new BinaryReader(reader.bytes());
      let typeUrl = "";
      let value: Uint8Array = new Uint8Array();
      while (any.pos < any.len) {
        const [f, w] = any.tag();
        if (f === 1) typeUrl = any.string();
        else if (f === 2) value = any.bytes();
        else any.skip(w);
      }
      if (typeUrl.endsWith("/google.protobuf.Struct")) status.structs.push(toJson(StructSchema, fromBinary(StructSchema, value)));
    } else reader.skip(wireType);
  }
  return status;
}

/**
 * The status message of a failed call, fully percent-decoded. grpc-js itself
 * only applies decodeURI to grpc-message, which leaves %3A, %2C, %24 (":", ",",
 * "$") as they are; the test of that is "error messages arrive readable" below.
 * Every other test reads the message through this, so each checks its own
 * status and text independently of that one defect.
 */
function messageOf(error: grpc.ServiceError): string {
  return decodeURIComponent(error.details);
}

/**
 * One unary gRPC call over a bare node:http2 session, returning the raw
 * response trailers (or trailers-only headers), to see grpc-message on the wire.
 */
async function rawGrpcTrailers(
  port: number,
  service: ServiceName,
  method: string,
  request: object,
  key: string,
): Promise<http2.IncomingHttpHeaders> {
  const definition = serviceCtor(service).service[method]!;
  const message = definition.requestSerialize(request);
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  message.copy(frame, 5);
  const session = http2.connect(`http://127.0.0.1:${port}`);
  try {
    return await new Promise((resolve, reject) => {
      const stream = session.request({
        ":method": "POST",
        ":path": definition.path,
        "content-type": "application/grpc+proto",
        te: "trailers",
        "x-api-key": key,
      });
      let headers: http2.IncomingHttpHeaders = {};
      stream.on("response", (h) => (headers = h));
      stream.on("trailers", (t) => resolve(t));
      stream.on("data", () => undefined);
      stream.on("end", () => resolve(headers)); // trailers-only: the status is in the headers
      stream.on("error", reject);
      stream.end(frame);
    });
  } finally {
    session.close();
  }
}

/** google.protobuf.Timestamp (longs as String) from an RFC 3339 string as the REST API writes it. */
function timestampOf(rfc3339: string): { seconds: string; nanos: number } {
  const match = /^(.*?)(?:\.(\d{1,9}))?Z$/.exec(rfc3339);
  if (match === null) throw new Error(`not an RFC 3339 UTC timestamp: ${rfc3339}`);
  const seconds = Date.parse(`${match[1]}Z`) / 1000;
  return { seconds: String(seconds), nanos: Number((match[2] ?? "").padEnd(9, "0")) };
}

/** A TCP relay in front of the service that counts the connections it carries. */
async function countingRelay(port: number): Promise<{ target: string; connections: () => number; close: () => Promise<void> }> {
  let connections = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((inbound) => {
    connections++;
    const outbound = net.connect(port, "127.0.0.1");
    for (const s of [inbound, outbound]) {
      sockets.add(s);
      s.once("close", () => sockets.delete(s));
      s.on("error", () => {
        inbound.destroy();
        outbound.destroy();
      });
    }
    inbound.pipe(outbound);
    outbound.pipe(inbound);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port: relayPort } = server.address() as net.AddressInfo;
  return {
    target: `127.0.0.1:${relayPort}`,
    connections: () => connections,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

// ---------------------------------------------------------------------------

const catalog = sampleResources;
const effectiveCatalog = sampleEffectiveResources;

describe.each(oneEngine(import.meta.url))("gRPC (grpc-js over h2c) on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let api: GrpcApi;
  /** A key of application "other", made over REST. */
  let otherKey: string;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    api = new GrpcApi(`127.0.0.1:${service.port}`);
    otherKey = await createAppWithKey(service, "other");
  });
  afterAll(async () => {
    api?.close();
    await service?.close();
    await database?.dispose();
  });

  it("creates and reads an application, and creates an API key that then works", async () => {
    const created = await api.call("ApplicationService", "CreateApplication", { appId: "grpc-app", name: "gRPC app" });
    expect(created.application).toMatchObject({ appId: "grpc-app", name: "gRPC app" });
    expect(Number(created.application.createdAt.seconds)).toBeGreaterThan(Date.now() / 1000 - 300);

    const got = await api.call("ApplicationService", "GetApplication", { appId: "grpc-app" });
    expect(got.application).toEqual(created.application);

    const key = await api.call("ApplicationService", "CreateApiKey", { appId: "grpc-app", name: "ci" });
    expect(key).toMatchObject({ name: "ci" });
    expect(key.keyId).toMatch(/^\S+$/);
    expect(key.key).toMatch(/^\S{20,}$/);

    // The new key reaches its own application.
    const own = await api.call("ApplicationService", "GetApplication", { appId: "grpc-app" }, key.key);
    expect(own.application.appId).toBe("grpc-app");
    const listed = await api.call("ApplicationService", "ListApiKeys", { appId: "grpc-app" }, key.key);
    expect(listed.apiKeys.map((k: Json) => k.keyId)).toContain(key.keyId);
    expect(JSON.stringify(listed)).not.toContain(key.key);

    // Revoked over gRPC: fails on its very next call.
    const deleted = await api.call("ApplicationService", "DeleteApiKey", { appId: "grpc-app", keyId: key.keyId });
    expect(deleted).toEqual({ keyId: key.keyId, deleted: true });
    const revoked = await api.fail("ApplicationService", "GetApplication", { appId: "grpc-app" }, key.key);
    expect(revoked.code).toBe(grpc.status.UNAUTHENTICATED);
    expect(messageOf(revoked)).toBe("the API key is not valid: it is unknown or revoked");
  });

  it("puts and gets a catalog with its effective relations", async () => {
    await api.call("ApplicationService", "CreateApplication", { appId: "grpc-catalog" });
    const key = await api.call("ApplicationService", "CreateApiKey", { appId: "grpc-catalog", name: "k" });

    const put = await api.call("CatalogService", "PutCatalog", { appId: "grpc-catalog", resources: catalog }, key.key);
    expect(put.resources).toEqual(effectiveCatalog);
    const get = await api.call("CatalogService", "GetCatalog", { appId: "grpc-catalog" }, key.key);
    expect(get.resources).toEqual(effectiveCatalog);

    // A catalog read back (built-ins included) can be written back unchanged.
    const again = await api.call("CatalogService", "PutCatalog", { appId: "grpc-catalog", resources: get.resources }, key.key);
    expect(again.resources).toEqual(effectiveCatalog);
  });

  describe("maps each error to its gRPC status", () => {
    it("no key → UNAUTHENTICATED", async () => {
      const error = await api.fail("CatalogService", "GetCatalog", { appId: "other" }, null);
      expect(error.code).toBe(grpc.status.UNAUTHENTICATED);
      expect(error.code).toBe(16);
      expect(messageOf(error)).toBe("the X-API-Key header is missing");
    });

    it("unknown key → UNAUTHENTICATED", async () => {
      const error = await api.fail("CatalogService", "GetCatalog", { appId: "other" }, "pcl_not_a_real_key");
      expect(error.code).toBe(grpc.status.UNAUTHENTICATED);
      expect(messageOf(error)).toBe("the API key is not valid: it is unknown or revoked");
    });

    it("an application key on another application → PERMISSION_DENIED", async () => {
      await api.call("ApplicationService", "CreateApplication", { appId: "victim" });
      const error = await api.fail("CatalogService", "GetCatalog", { appId: "victim" }, otherKey);
      expect(error.code).toBe(grpc.status.PERMISSION_DENIED);
      expect(error.code).toBe(7);
      expect(messageOf(error)).toBe('this API key belongs to application "other" and cannot act on application "victim"');
    });

    it("an application key on an operator route → PERMISSION_DENIED", async () => {
      const error = await api.fail("ApplicationService", "ListApplications", {}, otherKey);
      expect(error.code).toBe(grpc.status.PERMISSION_DENIED);
      expect(messageOf(error)).toMatch(/operator key/);
    });

    it("unknown application → NOT_FOUND", async () => {
      const error = await api.fail("ApplicationService", "GetApplication", { appId: "no-such-app" });
      expect(error.code).toBe(grpc.status.NOT_FOUND);
      expect(error.code).toBe(5);
      expect(messageOf(error)).toBe('application "no-such-app" does not exist');

      const catalogError = await api.fail("CatalogService", "GetCatalog", { appId: "no-such-app" });
      expect(catalogError.code).toBe(grpc.status.NOT_FOUND);
    });

    it("invalid catalog → INVALID_ARGUMENT naming the field, with the field in the details", async () => {
      const error = await api.fail("CatalogService", "PutCatalog", {
        appId: "other",
        resources: [{ resource: "document", actions: ["read", "Bad Action"] }],
      });
      expect(error.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(error.code).toBe(3);
      expect(messageOf(error)).toBe('resources[0].actions[1]: "Bad Action" must start with a lowercase letter and use only lowercase letters, digits and "_", at most 64 characters');

      const status = statusDetails(error);
      expect(status.code).toBe(3);
      expect(status.message).toBe(messageOf(error));
      expect(status.structs).toEqual([
        { field: "resources[0].actions[1]", reason: '"Bad Action" must start with a lowercase letter and use only lowercase letters, digits and "_", at most 64 characters' },
      ]);

      // Nothing was stored.
      const get = await api.call("CatalogService", "GetCatalog", { appId: "other" });
      expect(get.resources).toEqual([]);
    });

    it("a custom relation implying an action the resource lacks → INVALID_ARGUMENT naming it", async () => {
      const error = await api.fail("CatalogService", "PutCatalog", {
        appId: "other",
        resources: [{ resource: "document", actions: ["read"], relations: [{ name: "reviewer", actions: ["read", "comment"] }] }],
      });
      expect(error.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(messageOf(error)).toBe('resources[0].relations[0].actions[1]: "comment" is not an action of resource "document"');
    });

    it("invalid appId → INVALID_ARGUMENT", async () => {
      const error = await api.fail("ApplicationService", "CreateApplication", { appId: "Bad App" });
      expect(error.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(messageOf(error)).toBe('appId: "Bad App" must start with a lowercase letter or digit and use only lowercase letters, digits, "_" and "-", at most 64 characters');
    });

    it("error messages arrive readable in grpc-js (grpc-message percent-encodes only what the gRPC spec requires)", async () => {
      const expected = 'appId: "Bad App" must start with a lowercase letter or digit and use only lowercase letters, digits, "_" and "-", at most 64 characters';
      // On the wire: PROTOCOL-HTTP2.md leaves %x20-%x24 and %x26-%x7E unencoded,
      // and every character of this message is in that range.
      const trailers = await rawGrpcTrailers(service.port, "ApplicationService", "CreateApplication", { appId: "Bad App" }, ADMIN_KEY);
      expect(trailers["grpc-status"]).toBe("3");
      expect(trailers["grpc-message"]).toBe(expected);
      // What a grpc-js user reads.
      const error = await api.fail("ApplicationService", "CreateApplication", { appId: "Bad App" });
      expect(error.details).toBe(expected);
    });

    it("duplicate application → ALREADY_EXISTS", async () => {
      await api.call("ApplicationService", "CreateApplication", { appId: "twice" });
      const error = await api.fail("ApplicationService", "CreateApplication", { appId: "twice" });
      expect(error.code).toBe(grpc.status.ALREADY_EXISTS);
      expect(error.code).toBe(6);
      expect(messageOf(error)).toBe('application "twice" already exists');
    });

    it("the check is built: a resource outside the key's catalog → INVALID_ARGUMENT naming it (not UNIMPLEMENTED)", async () => {
      // "other" has no catalog at this point, so no resource is known.
      const error = await api.fail(
        "CheckService",
        "Check",
        { userId: "u1", resource: "document", resourceId: "d1", action: "read" },
        otherKey,
      );
      expect(error.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(messageOf(error)).toBe('resource: "document" is not a resource of the catalog');
    });

    it("policies and roles are built: an unknown policy or role → NOT_FOUND naming it", async () => {
      const policy = await api.fail("PolicyService", "GetPolicy", { appId: "other", policyId: "pol_nope" });
      expect(policy.code).toBe(grpc.status.NOT_FOUND);
      expect(messageOf(policy)).toBe('policy "pol_nope" does not exist in application "other"');
      const role = await api.fail("RoleService", "GetRole", { appId: "other", roleId: "rol_nope" }, otherKey);
      expect(role.code).toBe(grpc.status.NOT_FOUND);
      expect(messageOf(role)).toBe('role "rol_nope" does not exist in application "other"');
    });

    it("a method the server does not have → UNIMPLEMENTED", async () => {
      const error = await new Promise<grpc.ServiceError>((resolve, reject) => {
        const client = new grpc.Client(`127.0.0.1:${service.port}`, grpc.credentials.createInsecure());
        client.makeUnaryRequest(
          "/authz.v1.CatalogService/NoSuchMethod",
          (b: Buffer) => b,
          (b: Buffer) => b,
          Buffer.alloc(0),
          new grpc.Metadata(),
          (error: grpc.ServiceError | null) => {
            client.close();
            if (error) resolve(error);
            else reject(new Error("an unknown method answered OK"));
          },
        );
      });
      expect(error.code).toBe(grpc.status.UNIMPLEMENTED);
    });
  });

  it("REST and gRPC see the same data", async () => {
    // Written over gRPC, read over REST.
    const created = await api.call("ApplicationService", "CreateApplication", { appId: "both-ways", name: "Both" });
    const key = await api.call("ApplicationService", "CreateApiKey", { appId: "both-ways", name: "k" });
    const restApp = await service.call("GET", "/api/v1/applications/both-ways", { key: key.key });
    expect(restApp.status).toBe(200);
    expect(restApp.body).toMatchObject({ appId: "both-ways", name: "Both" });
    expect(timestampOf(restApp.body.createdAt)).toEqual(created.application.createdAt);

    const restKeys = await service.call("GET", "/api/v1/applications/both-ways/api-keys");
    expect(restKeys.body.apiKeys.map((k: Json) => k.keyId)).toEqual([key.keyId]);

    await api.call("CatalogService", "PutCatalog", { appId: "both-ways", resources: catalog }, key.key);
    const restCatalog = await service.call("GET", "/api/v1/applications/both-ways/resources", { key: key.key });
    expect(restCatalog.status).toBe(200);
    expect(restCatalog.body).toEqual({ resources: effectiveCatalog });

    // Written over REST, read over gRPC.
    const restPut = await service.call("PUT", "/api/v1/applications/both-ways/resources", {
      key: key.key,
      body: { resources: [{ resource: "folder", description: "A folder", actions: ["list", "read"] }] },
    });
    expect(restPut.status).toBe(200);
    const grpcCatalog = await api.call("CatalogService", "GetCatalog", { appId: "both-ways" }, key.key);
    expect(grpcCatalog).toEqual(restPut.body);
    expect(grpcCatalog.resources[0].relations).toEqual([
      { name: "owner", actions: ["list", "read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      { name: "editor", actions: ["read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      { name: "viewer", actions: ["list", "read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      { name: "commenter", actions: ["read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
    ]);

    const restCreated = await service.call("POST", "/api/v1/applications", { body: { appId: "from-rest" } });
    expect(restCreated.status).toBe(201);
    const grpcApp = await api.call("ApplicationService", "GetApplication", { appId: "from-rest" });
    expect(grpcApp.application).toEqual({
      appId: "from-rest",
      name: "from-rest",
      createdAt: timestampOf(restCreated.body.createdAt),
    });

    // The audit log written by both protocols is one log.
    const audit = await api.call("AuditService", "ListAuditEvents", { appId: "both-ways" });
    const types = audit.events.map((e: Json) => e.type);
    expect(types).toContain("application.created");
    expect(types).toContain("api_key.created");
    expect(types.filter((t: string) => t.startsWith("catalog"))).toHaveLength(2);
  });

  it("serves 50 concurrent calls multiplexed on one HTTP/2 connection", async () => {
    await api.call("ApplicationService", "CreateApplication", { appId: "busy" });
    await api.call("CatalogService", "PutCatalog", { appId: "busy", resources: catalog });

    const relay = await countingRelay(service.port);
    const busy = new GrpcApi(relay.target, { "grpc.use_local_subchannel_pool": 1 });
    try {
      const answers = await Promise.all(
        Array.from({ length: 50 }, () => busy.call("CatalogService", "GetCatalog", { appId: "busy" })),
      );
      expect(answers).toHaveLength(50);
      for (const answer of answers) expect(answer.resources).toEqual(effectiveCatalog);
      expect(relay.connections()).toBe(1);

      // Errors and successes interleaved on the same connection keep to their own streams.
      const mixed = await Promise.allSettled(
        Array.from({ length: 20 }, (_, i) =>
          busy.call("CatalogService", "GetCatalog", { appId: i % 2 === 0 ? "busy" : "missing-app" }),
        ),
      );
      mixed.forEach((result, i) => {
        if (i % 2 === 0) expect(result.status).toBe("fulfilled");
        else expect(result.status === "rejected" && (result.reason as grpc.ServiceError).code).toBe(grpc.status.NOT_FOUND);
      });
      expect(relay.connections()).toBe(1);
    } finally {
      busy.close();
      await relay.close();
    }
  });
});
