/**
 * Helpers shared by the grant, bulk, check and freshness tests: one
 * application set up through the public REST API, typed shortcuts for the
 * /api/v1/authorization/* calls, the error-shape assertion, and a counting
 * wrapper around a real Db (no mock: every statement still runs).
 */
import { expect } from "vitest";
import type { Db, QueryResult, Queryable } from "../../src/store/db.js";
import type { GrpcCaller } from "../support/grpc-client.js";
import type { RestAnswer, TestService } from "../support/service.js";

export interface Grant {
  userId: string;
  resource: string;
  resourceId: string;
  relation: string;
}

export interface CheckQuestion {
  userId: string;
  resource: string;
  resourceId: string;
  action: string;
  tenantId?: string;
}

export const grant = (userId: string, resource: string, resourceId: string, relation: string): Grant => ({
  userId,
  resource,
  resourceId,
  relation,
});

export const question = (
  userId: string,
  resource: string,
  resourceId: string,
  action: string,
  tenantId?: string,
): CheckQuestion => ({ userId, resource, resourceId, action, ...(tenantId === undefined ? {} : { tenantId }) });

/** Every non-2xx REST answer: exactly {code, message, details}, the message holding each fragment. */
export { expectError } from "./authz-api.js";

export function expectStatus(res: RestAnswer, status: number): void {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
}

/** A gRPC call that must fail with `code`, its message holding each fragment. */
export async function expectGrpcError(promise: Promise<unknown>, code: number, ...fragments: string[]): Promise<void> {
  const error = await promise.then(
    (value) => {
      throw new Error(`expected gRPC code ${code}, got a success: ${JSON.stringify(value)}`);
    },
    (e: unknown) => e as { code: number; details: string },
  );
  expect(error.code, error.details).toBe(code);
  for (const fragment of fragments) expect(error.details).toContain(fragment);
}

export const GRPC = { INVALID_ARGUMENT: 3, NOT_FOUND: 5, PERMISSION_DENIED: 7, FAILED_PRECONDITION: 9, UNAUTHENTICATED: 16 } as const;

const REL = "/api/v1/authorization/relationships";

/**
 * An instant as the API writes it (proto3 JSON's Timestamp): milliseconds
 * when there are any, none for a whole second ("…:14Z", not "…:14.000Z").
 */
export const apiTime = (ms: number): string => new Date(ms).toISOString().replace(".000Z", "Z");

export const queryString = (params: Record<string, string | number | undefined>): string => {
  const search = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined) search.set(k, String(v));
  const s = search.toString();
  return s === "" ? "" : `?${s}`;
};

/** REST shortcuts acting with one application key. */
export function authz(service: TestService, key: string) {
  const call = (method: string, path: string, body?: unknown) =>
    service.call(method, path, { key, ...(body === undefined ? {} : { body }) });
  return {
    key,
    write: (g: Grant) => call("POST", REL, g),
    delete: (g: Grant) => call("DELETE", REL + queryString({ ...g })),
    list: (params: Record<string, string | number | undefined>) => call("GET", REL + queryString(params)),
    bulk: (writes: Grant[], deletes?: Grant[]) => call("POST", `${REL}/bulk`, { writes, ...(deletes ? { deletes } : {}) }),
    /** Delete by filter: POST .../relationships/delete. */
    deleteMatching: (filter: Partial<Grant>) => call("POST", `${REL}/delete`, filter),
    check: (q: CheckQuestion) => call("POST", "/api/v1/authorization/check", q),
    batch: (checks: CheckQuestion[]) => call("POST", "/api/v1/authorization/check/batch", { checks }),
    /** The check's answer, which must be a 200 of exactly {allowed}. */
    async allowed(q: CheckQuestion): Promise<boolean> {
      const res = await call("POST", "/api/v1/authorization/check", q);
      expectStatus(res, 200);
      expect(Object.keys(res.body)).toEqual(["allowed"]);
      return res.body.allowed as boolean;
    },
    /** Every grant a full walk of a list returns, page by page. */
    async listAll(params: Record<string, string | number | undefined>): Promise<Grant[]> {
      const all: Grant[] = [];
      let pageToken: string | undefined;
      for (let pages = 0; pages < 10_000; pages++) {
        const res = await call("GET", REL + queryString({ ...params, pageToken }));
        expectStatus(res, 200);
        all.push(...(res.body.relationships as Grant[]).map(({ userId, resource, resourceId, relation }) => ({ userId, resource, resourceId, relation })));
        pageToken = res.body.nextPageToken || undefined;
        if (pageToken === undefined) return all;
      }
      throw new Error("list never ended");
    },
  };
}
export type Authz = ReturnType<typeof authz>;

/** Operator-side shortcuts (catalog, policies, roles, assignments) of one application. */
export function admin(service: Pick<TestService, "call">, appId: string) {
  const base = `/api/v1/applications/${appId}`;
  const ok = async (res: Promise<RestAnswer>, status: number[] = [200, 201]) => {
    const answer = await res;
    expect(status, `${answer.status} ${JSON.stringify(answer.body)}`).toContain(answer.status);
    return answer.body;
  };
  return {
    putCatalog: (resources: unknown[]) => service.call("PUT", `${base}/resources`, { body: { resources } }),
    setCatalog: (resources: unknown[]) => ok(service.call("PUT", `${base}/resources`, { body: { resources } }), [200]),
    getCatalog: async () => (await ok(service.call("GET", `${base}/resources`), [200])).resources as unknown[],
    createPolicy: async (name: string, permissions: string[], tenantId?: string): Promise<string> =>
      (await ok(service.call("POST", `${base}/policies`, { body: { name, permissions, ...(tenantId ? { tenantId } : {}) } }))).policyId,
    setPermissions: (policyId: string, permissions: string[]) =>
      ok(service.call("PATCH", `${base}/policies/${policyId}`, { body: { permissions } }), [200]),
    deletePolicy: (policyId: string, force: boolean) =>
      ok(service.call("DELETE", `${base}/policies/${policyId}?force=${force}`), [200]),
    createRole: async (name: string, policyIds: string[], tenantId?: string): Promise<string> =>
      (await ok(service.call("POST", `${base}/roles`, { body: { name, policyIds, ...(tenantId ? { tenantId } : {}) } }))).roleId,
    setRolePolicies: (roleId: string, policyIds: string[]) =>
      ok(service.call("PATCH", `${base}/roles/${roleId}`, { body: { policyIds } }), [200]),
    deleteRole: (roleId: string) => ok(service.call("DELETE", `${base}/roles/${roleId}`), [200]),
    assign: (roleId: string, userId: string) =>
      ok(service.call("POST", `${base}/roles/${roleId}/assignments`, { body: { userId } })),
    /** Every role assignment of the user removed (offboarding). */
    offboard: (userId: string) => ok(service.call("DELETE", `${base}/users/${encodeURIComponent(userId)}/roles`), [200]),
    unassign: (roleId: string, userId: string) =>
      ok(service.call("DELETE", `${base}/roles/${roleId}/assignments/${encodeURIComponent(userId)}`), [200]),
  };
}
export type Admin = ReturnType<typeof admin>;

/** Creates `appId` with an application key and `catalog`; returns the key. */
export async function createApp(service: Pick<TestService, "call">, appId: string, catalog: unknown[]): Promise<string> {
  const app = await service.call("POST", "/api/v1/applications", { body: { appId } });
  expectStatus(app, 201);
  const key = await service.call("POST", `/api/v1/applications/${appId}/api-keys`, { body: { name: "test" } });
  expectStatus(key, 201);
  if (catalog.length > 0) await admin(service, appId).setCatalog(catalog);
  return key.body.key as string;
}

/** The check over gRPC, with the calling application key. */
export async function grpcAllowed(grpc: GrpcCaller, key: string, q: CheckQuestion): Promise<boolean> {
  const answer = await grpc.call("CheckService", "Check", q, key);
  return answer.allowed as boolean;
}

/** Grants read straight from the table (what is stored, whatever the API says). */
export async function storedGrants(db: Queryable, appId: string): Promise<number> {
  const { rows } = await db.query<{ n: number | string }>("SELECT count(*)::int AS n FROM relationships WHERE app_id = $1", [appId]);
  return Number(rows[0]!.n);
}

/**
 * A real Db that counts the statements sent through it, inside transactions
 * too. Everything runs on the wrapped database; every other member of the
 * Db (engine, pool settings, close) is the wrapped one's, through the
 * prototype chain.
 */
export function countingDb(inner: Db): { db: Db; statements: string[] } {
  const statements: string[] = [];
  const counting = (q: Queryable): Queryable => ({
    query<R = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<QueryResult<R>> {
      statements.push(sql);
      return q.query<R>(sql, params);
    },
  });
  const db = Object.create(inner, {
    query: { value: counting(inner).query },
    transaction: { value: <T>(fn: (tx: Queryable) => Promise<T>): Promise<T> => inner.transaction((tx) => fn(counting(tx))) },
    exec: {
      value: (sql: string): Promise<void> => {
        statements.push(sql);
        return inner.exec(sql);
      },
    },
    close: { value: () => inner.close() },
  }) as Db;
  return { db, statements };
}
