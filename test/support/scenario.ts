/**
 * Scenario files (test/scenarios/*.json): a catalog, policies, roles,
 * assignments and grants, and the expected answer of each check. Set up
 * through the public REST API, then asked through any protocol.
 */
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { RestAnswer } from "./service.js";

export interface ScenarioCheck {
  userId: string;
  resource: string;
  resourceId: string;
  action: string;
  tenantId?: string;
  /** Grants counted for this check alone (API.md, "Contextual grants"). */
  contextualGrants?: unknown[];
}

export interface Scenario {
  name: string;
  catalog: { resources: unknown[] };
  policies: { ref: string; name: string; permissions: string[]; tenantId?: string }[];
  roles: { ref: string; name: string; policies: string[]; tenantId?: string }[];
  assignments: { role: string; userId: string }[];
  grants: { userId: string; resource: string; resourceId: string; relation: string }[];
  checks: (ScenarioCheck & { allowed: boolean; why?: string })[];
  invalid: { check: ScenarioCheck; field: string }[];
}

const DIR = fileURLToPath(new URL("../scenarios/", import.meta.url));

export function loadScenarios(): { file: string; scenario: Scenario }[] {
  return readdirSync(DIR)
    .filter((f) => f.endsWith(".json"))
    .sort()
    .map((file) => ({ file, scenario: JSON.parse(readFileSync(DIR + file, "utf8")) as Scenario }));
}

type Call = (method: string, path: string, options?: { key?: string | null; body?: unknown }) => Promise<RestAnswer>;

/** Creates application `appId` with the scenario's data; returns an application key. */
export async function applyScenario(call: Call, appId: string, s: Scenario): Promise<string> {
  const ok = (what: string, answer: RestAnswer, status = [200, 201]) => {
    if (!status.includes(answer.status)) throw new Error(`${what}: ${answer.status} ${JSON.stringify(answer.body)}`);
    return answer.body;
  };
  const base = `/api/v1/applications/${appId}`;
  ok("create application", await call("POST", "/api/v1/applications", { body: { appId } }));
  const key = ok("create key", await call("POST", `${base}/api-keys`, { body: { name: "scenario" } })).key as string;
  ok("catalog", await call("PUT", `${base}/resources`, { body: s.catalog }));
  const policyIds = new Map<string, string>();
  for (const p of s.policies) {
    const body = { name: p.name, permissions: p.permissions, ...(p.tenantId ? { tenantId: p.tenantId } : {}) };
    policyIds.set(p.ref, ok(`policy ${p.ref}`, await call("POST", `${base}/policies`, { body })).policyId);
  }
  const roleIds = new Map<string, string>();
  for (const r of s.roles) {
    const body = {
      name: r.name,
      policyIds: r.policies.map((ref) => policyIds.get(ref)!),
      ...(r.tenantId ? { tenantId: r.tenantId } : {}),
    };
    roleIds.set(r.ref, ok(`role ${r.ref}`, await call("POST", `${base}/roles`, { body })).roleId);
  }
  for (const a of s.assignments) {
    ok(`assign ${a.role}`, await call("POST", `${base}/roles/${roleIds.get(a.role)}/assignments`, { body: { userId: a.userId } }));
  }
  if (s.grants.length > 0) {
    ok("grants", await call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes: s.grants } }));
  }
  return key;
}

export const checkOf = (c: ScenarioCheck): ScenarioCheck => ({
  userId: c.userId,
  resource: c.resource,
  resourceId: c.resourceId,
  action: c.action,
  ...(c.tenantId === undefined ? {} : { tenantId: c.tenantId }),
  ...(c.contextualGrants === undefined ? {} : { contextualGrants: c.contextualGrants }),
});
