/**
 * Shared helpers for the policy, role and audit-log API tests: a REST client
 * bound to one application, strict error and status checks, audit-log reads,
 * and the gRPC error and Struct readers. Everything goes through the real
 * service over HTTP; nothing is mocked.
 */
import { expect } from "vitest";
import { expectErrorBody } from "./error-body.js";
import type { ServiceError } from "@grpc/grpc-js";
import type { GrpcCaller, GrpcService } from "../support/grpc-client.js";
import type { RestAnswer, TestService } from "../support/service.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Json = any;

export type Caller = TestService["call"];

/** The catalog every application of these tests starts with. */
export const CATALOG = {
  resources: [
    { resource: "document", description: "A text document", actions: ["create", "read", "update", "delete", "list"] },
    { resource: "invoice", description: "", actions: ["read", "send", "approve"] },
  ],
};

/** Every non-2xx answer: exactly {code, message, details, requestId}, details an array, requestId the answer's x-request-id; the message contains each fragment. */
export function expectError(res: RestAnswer, status: number, code: string, ...fragments: string[]): void {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expectErrorBody(res.body, res.headers.get("x-request-id"));
  expect(res.body.code).toBe(code);
  expect(typeof res.body.message).toBe("string");
  expect(Array.isArray(res.body.details)).toBe(true);
  for (const fragment of fragments) expect(res.body.message, JSON.stringify(res.body)).toContain(fragment);
}

/** Asserts the status and returns the body. */
export function ok(res: RestAnswer, status = 200): Json {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  return res.body;
}

/** An RFC 3339 UTC timestamp as the REST API writes them. */
export const RFC3339 = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$/;

export interface AuditEvent {
  eventId: string;
  type: string;
  occurredAt: string;
  actorKeyId: string;
  actorKeyName: string;
  targetType: string;
  targetId: string;
  data: Json;
}

type Key = string | null | undefined;

const keyed = (key: Key, body?: unknown) => ({ ...(key !== undefined ? { key } : {}), ...(body !== undefined ? { body } : {}) });

/** The REST routes of one application; `key` defaults to the operator key. */
export function appApi(call: Caller, appId: string) {
  const base = `/api/v1/applications/${appId}`;
  const seg = encodeURIComponent;
  return {
    appId,
    putCatalog: (body: unknown, key?: Key) => call("PUT", `${base}/resources`, keyed(key, body)),
    getCatalog: (key?: Key) => call("GET", `${base}/resources`, keyed(key)),

    createPolicy: (body: unknown, key?: Key) => call("POST", `${base}/policies`, keyed(key, body)),
    listPolicies: (query = "", key?: Key) => call("GET", `${base}/policies${query}`, keyed(key)),
    getPolicy: (policyId: string, key?: Key) => call("GET", `${base}/policies/${seg(policyId)}`, keyed(key)),
    policyRoles: (policyId: string, query = "", key?: Key) => call("GET", `${base}/policies/${seg(policyId)}/roles${query}`, keyed(key)),
    patchPolicy: (policyId: string, body: unknown, key?: Key) => call("PATCH", `${base}/policies/${seg(policyId)}`, keyed(key, body)),
    deletePolicy: (policyId: string, query = "", key?: Key) => call("DELETE", `${base}/policies/${seg(policyId)}${query}`, keyed(key)),

    createRole: (body: unknown, key?: Key) => call("POST", `${base}/roles`, keyed(key, body)),
    listRoles: (query = "", key?: Key) => call("GET", `${base}/roles${query}`, keyed(key)),
    getRole: (roleId: string, key?: Key) => call("GET", `${base}/roles/${seg(roleId)}`, keyed(key)),
    patchRole: (roleId: string, body: unknown, key?: Key) => call("PATCH", `${base}/roles/${seg(roleId)}`, keyed(key, body)),
    deleteRole: (roleId: string, key?: Key) => call("DELETE", `${base}/roles/${seg(roleId)}`, keyed(key)),
    assign: (roleId: string, body: unknown, key?: Key) => call("POST", `${base}/roles/${seg(roleId)}/assignments`, keyed(key, body)),
    unassign: (roleId: string, userId: string, key?: Key) =>
      call("DELETE", `${base}/roles/${seg(roleId)}/assignments/${seg(userId)}`, keyed(key)),
    assignments: (roleId: string, query = "", key?: Key) => call("GET", `${base}/roles/${seg(roleId)}/assignments${query}`, keyed(key)),
    userRoles: (userId: string, query = "", key?: Key) => call("GET", `${base}/users/${seg(userId)}/roles${query}`, keyed(key)),

    auditLog: (query = "", key?: Key) => call("GET", `${base}/audit-log${query}`, keyed(key)),

    /** The whole audit log (or the filtered part), newest first, following every page. */
    async events(filter: { type?: string; targetId?: string } = {}): Promise<AuditEvent[]> {
      const all: AuditEvent[] = [];
      let token = "";
      for (let guard = 0; guard < 100; guard++) {
        const params = new URLSearchParams({ pageSize: "1000" });
        if (filter.type !== undefined) params.set("type", filter.type);
        if (filter.targetId !== undefined) params.set("targetId", filter.targetId);
        if (token !== "") params.set("pageToken", token);
        const body = ok(await call("GET", `${base}/audit-log?${params}`));
        all.push(...(body.events as AuditEvent[]));
        token = body.nextPageToken ?? "";
        if (token === "") return all;
      }
      throw new Error("the audit log did not end");
    },

    /** Creates a policy that must be accepted; returns it. */
    async policy(body: Record<string, unknown>, key?: Key): Promise<Json> {
      return ok(await call("POST", `${base}/policies`, keyed(key, body)), 201);
    },
    /** Creates a role that must be accepted; returns it. */
    async role(body: Record<string, unknown>, key?: Key): Promise<Json> {
      return ok(await call("POST", `${base}/roles`, keyed(key, body)), 201);
    },
  };
}

export type AppApi = ReturnType<typeof appApi>;

/** Creates an application with the operator key (and its catalog, unless `catalog` is null). */
export async function newApp(call: Caller, appId: string, catalog: unknown = CATALOG): Promise<AppApi> {
  ok(await call("POST", "/api/v1/applications", { body: { appId } }), 201);
  const api = appApi(call, appId);
  if (catalog !== null) ok(await api.putCatalog(catalog));
  return api;
}

/** Creates an application key; returns its id and secret. */
export async function newKey(call: Caller, appId: string, name = "test"): Promise<{ keyId: string; key: string }> {
  const body = ok(await call("POST", `/api/v1/applications/${appId}/api-keys`, { body: { name } }), 201);
  return { keyId: body.keyId, key: body.key };
}

/** Follows every page of a list route; returns the items of `field` and the number of pages. */
export async function allPages(
  get: (query: string) => Promise<RestAnswer>,
  field: string,
  pageSize: number,
): Promise<{ items: Json[]; pages: number }> {
  const items: Json[] = [];
  let token = "";
  for (let pages = 1; pages <= 1000; pages++) {
    const body = ok(await get(`?pageSize=${pageSize}${token === "" ? "" : `&pageToken=${encodeURIComponent(token)}`}`));
    expect((body[field] as Json[]).length).toBeLessThanOrEqual(pageSize);
    items.push(...body[field]);
    token = body.nextPageToken ?? "";
    if (token === "") return { items, pages };
  }
  throw new Error("the list did not end");
}

export const sorted = (xs: readonly string[]) => [...xs].sort();

/** A policy record's exact key set (tenantId only when scoped). */
export function expectPolicyShape(policy: Json, tenant: boolean): void {
  const keys = ["createdAt", "description", "name", "permissions", "policyId", "roleCount", "updatedAt", ...(tenant ? ["tenantId"] : [])];
  expect(Object.keys(policy).sort()).toEqual(keys.sort());
  expect(policy.policyId).toMatch(/^[A-Za-z0-9_-]+$/);
  expect(policy.createdAt).toMatch(RFC3339);
  expect(policy.updatedAt).toMatch(RFC3339);
}

/** A role record's exact key set (tenantId only when scoped). */
export function expectRoleShape(role: Json, tenant: boolean): void {
  const keys = ["createdAt", "description", "name", "policyIds", "roleId", "updatedAt", ...(tenant ? ["tenantId"] : [])];
  expect(Object.keys(role).sort()).toEqual(keys.sort());
  expect(role.roleId).toMatch(/^[A-Za-z0-9_-]+$/);
  expect(role.createdAt).toMatch(RFC3339);
  expect(role.updatedAt).toMatch(RFC3339);
}

// ---------------------------------------------------------------------------
// gRPC

/** The failed call's error; fails the test when the call succeeds. */
export async function grpcFail(
  grpc: GrpcCaller,
  service: GrpcService,
  method: string,
  request: object,
  key?: string,
): Promise<ServiceError> {
  let response: unknown;
  try {
    response = await grpc.call(service, method, request, key);
  } catch (error) {
    if (error instanceof Error && typeof (error as Partial<ServiceError>).code === "number") return error as ServiceError;
    throw error;
  }
  throw new Error(`expected ${service}.${method} to fail, got ${JSON.stringify(response)}`);
}

/** Asserts a gRPC error's status code and that its (percent-decoded) message contains each fragment. */
export function expectGrpcError(error: ServiceError, code: number, ...fragments: string[]): void {
  const message = decodeURIComponent(error.details);
  expect(error.code, message).toBe(code);
  for (const fragment of fragments) expect(message).toContain(fragment);
}

/** A google.protobuf.Struct as proto-loader decodes it ({fields: {k: {kind, ...}}}) turned into plain JSON. */
export function structJson(struct: Json): Json {
  const value = (v: Json): Json => {
    switch (v.kind) {
      case "nullValue":
        return null;
      case "numberValue":
        return v.numberValue;
      case "stringValue":
        return v.stringValue;
      case "boolValue":
        return v.boolValue;
      case "structValue":
        return structJson(v.structValue);
      case "listValue":
        return (v.listValue.values ?? []).map(value);
      default:
        throw new Error(`not a google.protobuf.Value: ${JSON.stringify(v)}`);
    }
  };
  return Object.fromEntries(Object.entries(struct?.fields ?? {}).map(([k, v]) => [k, value(v)]));
}

/** A proto-loader Timestamp ({seconds: string, nanos}) as epoch milliseconds. */
export const timestampMs = (t: { seconds: string; nanos: number }) => Number(t.seconds) * 1000 + Math.floor(t.nanos / 1e6);

/**
 * Records in list order: creation time, then id. Lists are ordered that way,
 * and records created within the same millisecond fall back to their ids.
 */
export function byCreation<T extends { createdAt: string }>(items: readonly T[], id: keyof T): T[] {
  const key = (x: T) => [Date.parse(x.createdAt), String(x[id])] as const;
  return [...items].sort((x, y) => {
    const [tx, ix] = key(x);
    const [ty, iy] = key(y);
    return tx !== ty ? tx - ty : ix < iy ? -1 : ix > iy ? 1 : 0;
  });
}
