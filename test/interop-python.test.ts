/**
 * Interop with gRPC C-core: Python's grpcio (Debian's python3-grpcio, for
 * /usr/bin/python3) calls the service's unary RPCs through
 * test/interop/python_client.py, on raw bytes: the requests are encoded here
 * with @bufbuild/protobuf and the answers decoded here. The check, a batch
 * check, a bad request (INVALID_ARGUMENT with its message), no key and an
 * unknown key (UNAUTHENTICATED), an unknown method (UNIMPLEMENTED), gzip
 * compressed requests, and deadlines (one generous, one already past).
 *
 * In CI (CI=true) the test runs or fails: .ci/run installs python3-grpcio.
 * Elsewhere it is skipped when /usr/bin/python3 cannot import grpc.
 */
import { create, fromBinary, toBinary, type DescMessage, type MessageInitShape } from "@bufbuild/protobuf";
import { execFile, spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  BatchCheckRequestSchema,
  BatchCheckResponseSchema,
  CheckRequestSchema,
  CheckResponseSchema,
} from "../gen/authz/v1/check_pb.js";
import { createTestDatabase, type TestDatabase } from "./support/engines.js";
import { createAppWithKey, startTestService, type TestService } from "./support/service.js";

const PYTHON = "/usr/bin/python3";
const CLIENT = fileURLToPath(new URL("./interop/python_client.py", import.meta.url));
const IN_CI = process.env.CI === "true";
const hasGrpcio = spawnSync(PYTHON, ["-c", "import grpc"], { stdio: "ignore", timeout: 10_000 }).status === 0;

const CHECK = "/authz.v1.CheckService/Check";
const BATCH = "/authz.v1.CheckService/BatchCheck";

interface PythonCall {
  name: string;
  path: string;
  request: string;
  metadata: [string, string][];
  timeout: number;
  compression: "gzip" | null;
}
interface PythonResult {
  name: string;
  code: string;
  details: string;
  response: string | null;
  /** Seconds the call took, as the client measured it. */
  elapsed: number;
}

/** Runs the Python client once for all calls; a fixed bound on the whole run. */
function runPython(target: string, calls: PythonCall[]): Promise<PythonResult[]> {
  return new Promise((resolve, reject) => {
    const child = execFile(PYTHON, [CLIENT], { timeout: 60_000, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error) return reject(new Error(`python client failed: ${error.message}\n${stderr}`));
      resolve(stdout.trim().split("\n").map((line) => JSON.parse(line) as PythonResult));
    });
    child.stdin!.end(JSON.stringify({ target, calls }));
  });
}

const hex = <T extends DescMessage>(schema: T, init: MessageInitShape<T>) => Buffer.from(toBinary(schema, create(schema, init))).toString("hex");
const decode = <T extends DescMessage>(schema: T, result: PythonResult) => fromBinary(schema, Buffer.from(result.response ?? "", "hex"));

describe("gRPC interop: Python grpcio (C-core)", () => {
  it("python3-grpcio is installed where the test must run", () => {
    if (IN_CI) expect(hasGrpcio, `${PYTHON} cannot import grpc: apt-get install python3-grpcio`).toBe(true);
  });

  describe.skipIf(!hasGrpcio && !IN_CI)("unary calls", () => {
    let database: TestDatabase;
    let service: TestService;
    let results: Map<string, PythonResult>;

    beforeAll(async () => {
      database = await createTestDatabase("pglite");
      service = await startTestService(database.db);
      const key = await createAppWithKey(service, "py");
      const catalog = { resources: [{ resource: "doc", description: "", actions: ["read", "update"] }] };
      expect((await service.call("PUT", "/api/v1/applications/py/resources", { key, body: catalog })).status).toBe(200);
      const grant = { userId: "ann", resource: "doc", resourceId: "d1", relation: "viewer" };
      expect((await service.call("POST", "/api/v1/authorization/relationships", { key, body: grant })).status).toBe(201);

      const withKey: [string, string][] = [["x-api-key", key]];
      const ask = (userId: string, action: string) => ({ userId, resource: "doc", resourceId: "d1", action });
      const many = Array.from({ length: 200 }, (_, i) => ask(i % 2 === 0 ? "ann" : `user-${i}`, "read"));
      const calls: PythonCall[] = [
        { name: "allowed", path: CHECK, request: hex(CheckRequestSchema, ask("ann", "read")), metadata: withKey, timeout: 10, compression: null },
        { name: "denied", path: CHECK, request: hex(CheckRequestSchema, ask("ann", "update")), metadata: withKey, timeout: 10, compression: null },
        { name: "batch", path: BATCH, request: hex(BatchCheckRequestSchema, { checks: [ask("ann", "read"), ask("bob", "read")] }), metadata: withKey, timeout: 10, compression: null },
        { name: "gzip check", path: CHECK, request: hex(CheckRequestSchema, ask("ann", "read")), metadata: withKey, timeout: 10, compression: "gzip" },
        { name: "gzip batch of 200", path: BATCH, request: hex(BatchCheckRequestSchema, { checks: many }), metadata: withKey, timeout: 10, compression: "gzip" },
        { name: "bad request", path: CHECK, request: hex(CheckRequestSchema, ask("", "read")), metadata: withKey, timeout: 10, compression: null },
        { name: "bad request, gzip", path: CHECK, request: hex(CheckRequestSchema, ask("ann", "Read!")), metadata: withKey, timeout: 10, compression: "gzip" },
        { name: "no key", path: CHECK, request: hex(CheckRequestSchema, ask("ann", "read")), metadata: [], timeout: 10, compression: null },
        { name: "unknown key", path: CHECK, request: hex(CheckRequestSchema, ask("ann", "read")), metadata: [["x-api-key", "pcl_unknown"]], timeout: 10, compression: null },
        { name: "unknown method", path: "/authz.v1.CheckService/Nothing", request: "", metadata: withKey, timeout: 10, compression: null },
        // A deadline already past when the call starts: the client gives up, whatever the server.
        // A second in the past: C-core rounds a deadline microseconds away up
        // to grpc-timeout "1m", and an answer from memory inside that
        // millisecond is a timely OK (the server's side of sub-millisecond
        // deadlines is tested in grpc-unary.test.ts).
        { name: "past deadline", path: CHECK, request: hex(CheckRequestSchema, ask("ann", "read")), metadata: withKey, timeout: -1, compression: null },
        // Metadata over the 64 KiB header list: nghttp2 ends the connection
        // (COMPRESSION_ERROR), and the server closes it at once, so the C
        // core gives up in seconds rather than at its 20 s deadline.
        { name: "metadata over 64 KiB", path: CHECK, request: hex(CheckRequestSchema, ask("ann", "read")), metadata: [...withKey, ["x-large", "a".repeat(70_000)]], timeout: 20, compression: null },
        // And the channel still serves calls after all of the above.
        { name: "allowed again", path: CHECK, request: hex(CheckRequestSchema, ask("ann", "read")), metadata: withKey, timeout: 10, compression: "gzip" },
      ];
      const answers = await runPython(new URL(service.url).host, calls);
      expect(answers.map((a) => a.name)).toEqual(calls.map((c) => c.name));
      results = new Map(answers.map((a) => [a.name, a]));
    }, 90_000);
    afterAll(async () => {
      await service?.close();
      await database?.dispose();
    });

    const result = (name: string) => results.get(name)!;

    it.each([
      ["allowed", true],
      ["denied", false],
      ["gzip check", true],
      ["allowed again", true],
    ])("the check: %s → allowed=%s", (name, allowed) => {
      expect(result(name)).toMatchObject({ code: "OK" });
      expect(decode(CheckResponseSchema, result(name)).allowed).toBe(allowed);
    });

    it("metadata over 64 KiB fails within seconds (the connection is closed), not at the deadline", () => {
      expect(result("metadata over 64 KiB").code).not.toBe("OK");
      expect(result("metadata over 64 KiB").code).not.toBe("DEADLINE_EXCEEDED");
      expect(result("metadata over 64 KiB").elapsed).toBeLessThan(5);
    });

    it("the batch check answers in order", () => {
      expect(result("batch").code).toBe("OK");
      expect(decode(BatchCheckResponseSchema, result("batch")).results.map((r) => r.allowed)).toEqual([true, false]);
    });

    it("a gzip-compressed batch of 200", () => {
      expect(result("gzip batch of 200").code).toBe("OK");
      const allowed = decode(BatchCheckResponseSchema, result("gzip batch of 200")).results.map((r) => r.allowed);
      expect(allowed).toEqual(Array.from({ length: 200 }, (_, i) => i % 2 === 0));
    });

    it.each([
      ["bad request", "INVALID_ARGUMENT", "userId: is required"],
      ["bad request, gzip", "INVALID_ARGUMENT", "action"],
      ["no key", "UNAUTHENTICATED", "X-API-Key header is missing"],
      ["unknown key", "UNAUTHENTICATED", "not valid"],
      ["unknown method", "UNIMPLEMENTED", "/authz.v1.CheckService/Nothing"],
      ["past deadline", "DEADLINE_EXCEEDED", ""],
    ])("%s → %s, its message naming %j", (name, code, fragment) => {
      expect(result(name)).toMatchObject({ code, response: null });
      expect(result(name).details).toContain(fragment);
    });
  });
});
