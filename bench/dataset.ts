/**
 * The benchmark's data set, loaded through the public REST API: a catalog of
 * 10 resources, 200 policies, 50 roles, 10,000 users with role assignments,
 * and N grants (through the bulk endpoint). Also the check bodies the load
 * phases send: allowed through a grant, allowed through a role, denied.
 */
import { random } from "./random.js";

export const APP_ID = "bench";
export const USERS = 10_000;
export const INSTANCES_PER_RESOURCE = 50_000;

/** The resources of the bench's catalog (the models group's model starts from them too). */
export const RESOURCES: { resource: string; actions: string[] }[] = [
  { resource: "document", actions: ["create", "read", "update", "delete", "list", "comment", "share"] },
  { resource: "folder", actions: ["create", "read", "update", "delete", "list"] },
  { resource: "project", actions: ["create", "read", "update", "delete", "archive"] },
  { resource: "task", actions: ["create", "read", "update", "delete", "assign", "comment"] },
  { resource: "invoice", actions: ["create", "read", "update", "send", "approve"] },
  { resource: "report", actions: ["read", "export", "list"] },
  { resource: "team", actions: ["read", "update", "invite"] },
  { resource: "channel", actions: ["read", "publish", "comment", "archive"] },
  { resource: "file", actions: ["create", "read", "delete", "list"] },
  { resource: "dashboard", actions: ["read", "update", "share"] },
];
const RELATIONS = ["owner", "editor", "viewer", "commenter"] as const;

export interface Grant {
  userId: string;
  resource: string;
  resourceId: string;
  relation: string;
}

export interface CheckBody {
  userId: string;
  resource: string;
  resourceId: string;
  action: string;
  resourceProperties?: Record<string, string>;
}

/** The condition of the bench's conditional grants: ownership, the example. */
export const OWNER_CONDITION = "resource.properties.ownerID == subject.id";
/** How many conditional grants the bench writes (on instances of their own). */
export const CONDITIONAL_GRANTS = 1_000;

/** The i-th conditional grant: an owner grant that counts where the question says the user owns the instance. */
export function conditionalGrant(i: number): Grant & { condition: string } {
  const res = RESOURCES[i % RESOURCES.length]!;
  return { userId: userId((i * 7) % USERS), resource: res.resource, resourceId: `conditional-${i}`, relation: "owner", condition: OWNER_CONDITION };
}

/**
 * Checks allowed through one condition: the user's conditional grant on the
 * instance, asked with the resource's ownerID (the user's own id), so the
 * condition holds; no role of the user holds the action first (the role's
 * permissions would answer before any CEL).
 */
export function conditionChecks(count: number): CheckBody[] {
  const r = random(10);
  const held = rolePermissions();
  const out: CheckBody[] = [];
  while (out.length < count) {
    const i = r.int(CONDITIONAL_GRANTS);
    const g = conditionalGrant(i);
    const action = r.pick(RESOURCES[i % RESOURCES.length]!.actions);
    if (held[roleOfUser((i * 7) % USERS)]!.has(`${g.resource}:${action}`)) continue;
    out.push({ userId: g.userId, resource: g.resource, resourceId: g.resourceId, action, resourceProperties: { ownerID: g.userId } });
  }
  return out;
}

export const catalog = {
  resources: RESOURCES.map((r) => ({ resource: r.resource, description: `${r.resource} (benchmark)`, actions: r.actions })),
};

const permissions = RESOURCES.flatMap((r) => r.actions.map((a) => `${r.resource}:${a}`));

export function policies(): { name: string; permissions: string[] }[] {
  const r = random(1);
  return Array.from({ length: 200 }, (_, i) => ({ name: `policy-${i}`, permissions: r.sample(permissions, 2 + r.int(5)) }));
}

/** 50 roles, each attaching 4 of the policies (by index). */
export function roles(): { name: string; policies: number[] }[] {
  const r = random(2);
  return Array.from({ length: 50 }, (_, i) => ({ name: `role-${i}`, policies: r.sample([...Array(200).keys()], 4) }));
}

export const userId = (i: number) => `user-${i}`;
/** Every user holds one role: user i has role i mod 50. */
export const roleOfUser = (i: number) => i % 50;

/** The i-th grant: deterministic, so the load phases know which exist. */
export function grant(i: number): Grant {
  const r = random(1_000_003 + i);
  const res = RESOURCES[i % RESOURCES.length]!;
  return {
    userId: userId(r.int(USERS)),
    resource: res.resource,
    // Grants i, i+10 and i+20 of a block of 30 share a resource type and an
    // instance: about three people per instance, as in a real app.
    resourceId: `${res.resource}-${Math.floor(i / (RESOURCES.length * 3))}`,
    relation: RELATIONS[r.int(RELATIONS.length)]!,
  };
}

const implied: Record<string, (actions: string[]) => string[]> = {
  owner: (a) => a,
  editor: (a) => a.filter((x) => ["create", "read", "update"].includes(x)),
  viewer: (a) => a.filter((x) => ["read", "list"].includes(x)),
  commenter: (a) => a.filter((x) => ["read", "comment"].includes(x)),
};

/** Checks allowed through a grant among the first `grants` grants. */
export function grantChecks(grants: number, count: number): CheckBody[] {
  const r = random(7);
  const out: CheckBody[] = [];
  while (out.length < count) {
    const g = grant(r.int(grants));
    const actions = implied[g.relation]!(RESOURCES.find((x) => x.resource === g.resource)!.actions);
    if (actions.length === 0) continue;
    out.push({ userId: g.userId, resource: g.resource, resourceId: g.resourceId, action: r.pick(actions) });
  }
  return out;
}

function rolePermissions(): Set<string>[] {
  const ps = policies();
  return roles().map((role) => new Set(role.policies.flatMap((p) => ps[p]!.permissions)));
}

/**
 * Checks allowed through a role: a permission the user's role holds, on an
 * instance id no grant uses.
 */
export function roleChecks(count: number): CheckBody[] {
  const r = random(8);
  const held = rolePermissions();
  const out: CheckBody[] = [];
  while (out.length < count) {
    const u = r.int(USERS);
    const [resource, action] = r.pick([...held[roleOfUser(u)]!]).split(":") as [string, string];
    out.push({ userId: userId(u), resource, resourceId: `ungranted-${r.int(1_000_000)}`, action });
  }
  return out;
}

/** Checks denied: a permission the user's role lacks, on an instance id no grant uses. */
export function deniedChecks(count: number): CheckBody[] {
  const r = random(9);
  const held = rolePermissions();
  const out: CheckBody[] = [];
  while (out.length < count) {
    const u = r.int(USERS);
    const permission = r.pick(permissions);
    if (held[roleOfUser(u)]!.has(permission)) continue;
    const [resource, action] = permission.split(":") as [string, string];
    out.push({ userId: userId(u), resource, resourceId: `ungranted-${r.int(1_000_000)}`, action });
  }
  return out;
}
