/**
 * The service's API as the bench loads it: one call, calls in parallel, and
 * the bench application's data set (bench/dataset.ts).
 */
import { randomBytes } from "node:crypto";
import * as data from "../dataset.js";
import { progress } from "./output.js";

/** The administrator key of every service the bench starts. */
export const ADMIN_KEY = `bench-${randomBytes(16).toString("hex")}`;


export async function api(url: string, method: string, path: string, body: unknown, key: string): Promise<any> {
  const res = await fetch(url + path, {
    method,
    headers: { "content-type": "application/json", "x-api-key": key },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text.slice(0, 300)}`);
  return text === "" ? undefined : JSON.parse(text);
}

export async function inParallel<T>(items: T[], width: number, fn: (item: T, i: number) => Promise<void>, label: string) {
  let next = 0;
  let done = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < items.length) {
        const i = next++;
        await fn(items[i]!, i);
        if (++done % 200 === 0 || done === items.length) progress(`loading: ${label} ${done}/${items.length}`);
      }
    }),
  );
}

export async function loadBase(url: string): Promise<string> {
  const base = `/api/v1/applications/${data.APP_ID}`;
  await api(url, "POST", "/api/v1/applications", { appId: data.APP_ID }, ADMIN_KEY);
  const { key } = await api(url, "POST", `${base}/api-keys`, { name: "bench" }, ADMIN_KEY);
  await api(url, "PUT", `${base}/resources`, data.catalog, ADMIN_KEY);
  const policyIds: string[] = [];
  await inParallel(data.policies(), 8, async (p, i) => {
    policyIds[i] = (await api(url, "POST", `${base}/policies`, p, ADMIN_KEY)).policyId;
  }, "policies");
  const roleIds: string[] = [];
  await inParallel(data.roles(), 8, async (r, i) => {
    roleIds[i] = (await api(url, "POST", `${base}/roles`, { name: r.name, policyIds: r.policies.map((p) => policyIds[p]) }, ADMIN_KEY)).roleId;
  }, "roles");
  await inParallel([...Array(data.USERS).keys()], 32, async (u) => {
    await api(url, "POST", `${base}/roles/${roleIds[data.roleOfUser(u)]}/assignments`, { userId: data.userId(u) }, ADMIN_KEY);
  }, "role assignments");
  return key as string;
}

export async function loadGrants(url: string, key: string, from: number, to: number): Promise<void> {
  for (let start = from; start < to; start += 5000) {
    const writes = Array.from({ length: Math.min(5000, to - start) }, (_, k) => data.grant(start + k));
    await api(url, "POST", "/api/v1/authorization/relationships/bulk", { writes }, key);
    progress(`loading: grants ${Math.min(to, start + 5000)}/${to}`);
  }
}
