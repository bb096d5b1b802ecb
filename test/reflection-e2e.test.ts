/**
 * gRPC server reflection end to end: the real `buf curl` binary, run as a
 * child process from a directory with no .proto files, discovers the services
 * and calls them with nothing but what the server tells it. About transport,
 * not storage, so it runs on PGlite only.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, createAppWithKey, startTestService, type TestService } from "./support/service.js";
import { sampleEffectiveResources, sampleResources } from "./support/fixtures.js";

const REPO = process.cwd();
const BUF = path.join(REPO, "node_modules", ".bin", "buf");
const BUF_TIMEOUT_MS = 60_000;

/** Every service of package authz.v1, as reflection must list them. */
const AUTHZ_SERVICES = [
  "authz.v1.ApplicationService",
  "authz.v1.AuditService",
  "authz.v1.CatalogService",
  "authz.v1.ChangeService",
  "authz.v1.CheckService",
  "authz.v1.ModelService",
  "authz.v1.PolicyService",
  "authz.v1.RelationshipService",
  "authz.v1.RoleService",
  "authz.v1.UserService",
];

interface BufResult {
  /** Exit status; buf curl exits with 8 × the RPC's error code. */
  exitCode: number;
  stdout: string;
  stderr: string;
}

/** Runs `buf curl ARGS` in `cwd` (by default an empty directory: no local schema). */
function bufCurl(args: string[], options: { cwd: string; cacheDir: string }): Promise<BufResult> {
  return new Promise((resolve, reject) => {
    execFile(
      BUF,
      ["curl", ...args],
      {
        cwd: options.cwd,
        timeout: BUF_TIMEOUT_MS,
        env: { ...process.env, BUF_CACHE_DIR: options.cacheDir, NO_COLOR: "1" },
      },
      (error, stdout, stderr) => {
        if (error !== null && typeof error.code !== "number") {
          reject(new Error(`buf curl ${args.join(" ")} did not run: ${error.message}\n${stderr}`));
          return;
        }
        resolve({ exitCode: error === null ? 0 : (error.code as number), stdout, stderr });
      },
    );
  });
}

const lines = (text: string) =>
  text
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "");

/** The HTTP response status lines buf curl -v printed, e.g. "HTTP/2.0 200 OK". */
const responseLines = (stderr: string) => [...stderr.matchAll(/< \(#\d+\) (HTTP\/[\d.]+ \d+[^\n]*)/g)].map((m) => m[1]!.trim());

const catalog = { resources: sampleResources };
const effectiveCatalog = { resources: sampleEffectiveResources };

describe("buf curl with server reflection (pglite)", () => {
  let database: TestDatabase;
  let service: TestService;
  let appKey: string;
  /** An empty working directory: buf finds no buf.yaml and no .proto files there. */
  let emptyDir: string;
  let cacheDir: string;
  const buf = (args: string[], cwd?: string) => bufCurl(args, { cwd: cwd ?? emptyDir, cacheDir });
  const h2c = ["--protocol", "grpc", "--http2-prior-knowledge"];

  beforeAll(async () => {
    emptyDir = mkdtempSync(path.join(os.tmpdir(), "portcullis-bufcurl-"));
    cacheDir = mkdtempSync(path.join(os.tmpdir(), "portcullis-bufcache-"));
    database = await createTestDatabase("pglite");
    service = await startTestService(database.db);
    appKey = await createAppWithKey(service, "shop");
    const put = await service.call("PUT", "/api/v1/applications/shop/resources", { key: appKey, body: catalog });
    expect(put.status).toBe(200);
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
    for (const dir of [emptyDir, cacheDir]) if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it("--list-services lists the ten authz.v1 services and reflection", async () => {
    const result = await buf([...h2c, "--list-services", service.url]);
    expect(result.stderr).toBe("");
    expect(result.exitCode).toBe(0);
    const services = lines(result.stdout);
    expect(services.filter((s) => s.startsWith("authz.v1.")).sort()).toEqual(AUTHZ_SERVICES);
    expect(services).toContain("grpc.reflection.v1.ServerReflection");
  }, 90_000);

  it("answers the older grpc.reflection.v1alpha protocol too", async () => {
    const result = await buf([...h2c, "--reflect-protocol", "grpc-v1alpha", "--list-services", service.url]);
    expect(result.exitCode).toBe(0);
    expect(lines(result.stdout).filter((s) => s.startsWith("authz.v1.")).sort()).toEqual(AUTHZ_SERVICES);
  }, 90_000);

  it("--list-methods lists each service's methods", async () => {
    const result = await buf([...h2c, "--list-methods", service.url]);
    expect(result.exitCode).toBe(0);
    const methods = lines(result.stdout);
    expect(methods.filter((m) => m.startsWith("authz.v1.ChangeService/"))).toEqual(["authz.v1.ChangeService/ListChanges", "authz.v1.ChangeService/Watch"]);
    expect(methods.filter((m) => m.startsWith("authz.v1.CatalogService/"))).toEqual([
      "authz.v1.CatalogService/GetCatalog",
      "authz.v1.CatalogService/PutCatalog",
    ]);
    expect(methods.filter((m) => m.startsWith("authz.v1.ApplicationService/"))).toEqual([
      "authz.v1.ApplicationService/CreateApiKey",
      "authz.v1.ApplicationService/CreateApplication",
      "authz.v1.ApplicationService/DeleteApiKey",
      "authz.v1.ApplicationService/GetApplication",
      "authz.v1.ApplicationService/GetCurrentKey",
      "authz.v1.ApplicationService/ListApiKeys",
      "authz.v1.ApplicationService/ListApplications",
    ]);
    expect(methods.filter((m) => m.startsWith("authz.v1.CheckService/"))).toEqual([
      "authz.v1.CheckService/BatchCheck",
      "authz.v1.CheckService/BatchPermissions",
      "authz.v1.CheckService/Check",
      "authz.v1.CheckService/Explain",
      "authz.v1.CheckService/Lookup",
      "authz.v1.CheckService/Permissions",
      "authz.v1.CheckService/WhoCan",
    ]);
    expect(methods.filter((m) => m.startsWith("authz.v1.UserService/"))).toEqual([
      "authz.v1.UserService/GetUserProperties",
      "authz.v1.UserService/SetUserProperties",
    ]);
    // Ten services: 7 + 1 + 2 + 2 + 7 + 3 + 7 + 5 + 10 + 2 methods (applications, audit, catalog, changes, check, model, policies, relationships, roles, users).
    expect(methods.filter((m) => m.startsWith("authz.v1."))).toHaveLength(46);
  }, 90_000);

  it("calls GetCatalog over gRPC with the schema from reflection only", async () => {
    const result = await buf([
      ...h2c,
      "-v",
      "--emit-defaults",
      "-H",
      `x-api-key: ${appKey}`,
      "-d",
      '{"appId":"shop"}',
      `${service.url}/authz.v1.CatalogService/GetCatalog`,
    ]);
    expect(result.exitCode).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual(effectiveCatalog);
    // The schema came from the server.
    expect(result.stderr).toContain("POST /grpc.reflection.v1.ServerReflection/ServerReflectionInfo");
    expect(result.stderr).toContain('Server reflection has resolved file "authz/v1/catalog.proto"');
    expect([...new Set(responseLines(result.stderr))]).toEqual(["HTTP/2.0 200 OK"]);
  }, 90_000);

  it("writes through reflection too: PutCatalog, then REST reads it", async () => {
    const next = { appId: "shop", resources: [...catalog.resources, { resource: "folder", actions: ["list"] }] };
    const result = await buf([
      ...h2c,
      "-H",
      `x-api-key: ${appKey}`,
      "-d",
      JSON.stringify(next),
      `${service.url}/authz.v1.CatalogService/PutCatalog`,
    ]);
    expect(result.exitCode).toBe(0);
    const rest = await service.call("GET", "/api/v1/applications/shop/resources", { key: appKey });
    expect(rest.body.resources.map((r: { resource: string }) => r.resource)).toEqual(["document", "invoice", "folder"]);
    expect(JSON.parse(result.stdout).resources).toHaveLength(3);

    // Back to the catalog the other tests expect.
    const restore = await service.call("PUT", "/api/v1/applications/shop/resources", { key: appKey, body: catalog });
    expect(restore.status).toBe(200);
  }, 90_000);

  it("sets user properties through reflection (google.protobuf.Struct resolved from the server too), then REST reads them", async () => {
    const properties = { plan: "pro", seats: 5, tags: ["beta", null, true], address: { country: "NZ" } };
    const result = await buf([
      ...h2c,
      "-v",
      "-H",
      `x-api-key: ${appKey}`,
      "-d",
      JSON.stringify({ appId: "shop", userId: "ann", properties }),
      `${service.url}/authz.v1.UserService/SetUserProperties`,
    ]);
    expect(result.exitCode, result.stderr).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual({ properties });
    expect(result.stderr).toContain('Server reflection has resolved file "authz/v1/users.proto"');
    expect(result.stderr).toContain('Server reflection has resolved file "google/protobuf/struct.proto"');
    expect((await service.call("GET", "/api/v1/applications/shop/users/ann/properties", { key: appKey })).body).toEqual(properties);
  }, 90_000);

  it("calls GetCatalog over the Connect protocol with the schema from reflection (buf then speaks HTTP/2)", async () => {
    const result = await buf([
      "--protocol",
      "connect",
      "-v",
      "--emit-defaults",
      "-H",
      `x-api-key: ${appKey}`,
      "-d",
      '{"appId":"shop"}',
      `${service.url}/authz.v1.CatalogService/GetCatalog`,
    ]);
    expect(result.exitCode).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual(effectiveCatalog);
    expect(result.stderr).toContain("Content-Type: application/proto");
    // buf curl implies h2c for an http:// URL whenever reflection is used.
    expect([...new Set(responseLines(result.stderr))]).toEqual(["HTTP/2.0 200 OK"]);
  }, 90_000);

  // Reflection forces HTTP/2 in buf curl, so an HTTP/1.1 call needs the local
  // schema (the repository's buf module) instead.
  it.each([
    ["connect", "application/proto"],
    ["grpcweb", "application/grpc-web+proto"],
  ])("calls GetCatalog over --protocol %s on HTTP/1.1 (local schema)", async (protocol, contentType) => {
    const result = await buf(
      [
        "--schema",
        "proto",
        "--protocol",
        protocol,
        "-v",
        "--emit-defaults",
        "-H",
        `x-api-key: ${appKey}`,
        "-d",
        '{"appId":"shop"}',
        `${service.url}/authz.v1.CatalogService/GetCatalog`,
      ],
      REPO,
    );
    expect(result.exitCode).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual(effectiveCatalog);
    expect(responseLines(result.stderr)).toEqual(["HTTP/1.1 200 OK"]);
    expect(result.stderr).toContain(`Content-Type: ${contentType}`);
  }, 90_000);

  it.each([
    ["grpc", h2c],
    ["connect", ["--protocol", "connect"]],
  ])("reports errors with their codes over %s (exit status 8 × code)", async (_name, protocol) => {
    const noKey = await buf([...protocol, "-d", '{"appId":"shop"}', `${service.url}/authz.v1.CatalogService/GetCatalog`]);
    expect(noKey.exitCode).toBe(16 * 8);
    expect(JSON.parse(noKey.stderr)).toEqual({ code: "unauthenticated", message: "the X-API-Key header is missing" });

    const invalid = await buf([
      ...protocol,
      "-H",
      `x-api-key: ${ADMIN_KEY}`,
      "-d",
      '{"appId":"shop","resources":[{"resource":"Bad"}]}',
      `${service.url}/authz.v1.CatalogService/PutCatalog`,
    ]);
    expect(invalid.exitCode).toBe(3 * 8);
    const error = JSON.parse(invalid.stderr);
    expect(error.code).toBe("invalid_argument");
    expect(error.message).toBe('resources[0].resource: "Bad" must start with a lowercase letter and use only lowercase letters, digits and "_", at most 64 characters');
    expect(error.details).toEqual([
      {
        type: "google.protobuf.Struct",
        value: expect.any(String),
        debug: { field: "resources[0].resource", reason: '"Bad" must start with a lowercase letter and use only lowercase letters, digits and "_", at most 64 characters' },
      },
    ]);

    // The check is built (it was UNIMPLEMENTED before): an action the catalog
    // lacks is INVALID_ARGUMENT naming it.
    const unknownAction = await buf([
      ...protocol,
      "-H",
      `x-api-key: ${appKey}`,
      "-d",
      '{"userId":"u1","resource":"document","resourceId":"d1","action":"delete"}',
      `${service.url}/authz.v1.CheckService/Check`,
    ]);
    expect(unknownAction.exitCode).toBe(3 * 8);
    const checkError = JSON.parse(unknownAction.stderr);
    expect(checkError.code).toBe("invalid_argument");
    expect(checkError.message).toBe('action: "delete" is not an action of resource "document"');
    expect(checkError.details).toEqual([
      { type: "google.protobuf.Struct", value: expect.any(String), debug: { field: "action", reason: '"delete" is not an action of resource "document"' } },
    ]);

    // And an unknown policy is NOT_FOUND naming it.
    const missingPolicy = await buf([
      ...protocol,
      "-H",
      `x-api-key: ${appKey}`,
      "-d",
      '{"appId":"shop","policyId":"pol_nope"}',
      `${service.url}/authz.v1.PolicyService/GetPolicy`,
    ]);
    expect(missingPolicy.exitCode).toBe(5 * 8);
    expect(JSON.parse(missingPolicy.stderr)).toEqual({ code: "not_found", message: 'policy "pol_nope" does not exist in application "shop"' });
  }, 120_000);
});
