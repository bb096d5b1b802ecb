/**
 * The hierarchy group's data set (docs/performance.md, "Groups and
 * hierarchy (issue 26)"): an application of its own, `bench-graph`, whose
 * catalog has teams (nested), folders (a tree) and documents, next to the
 * `bench` application, whose direct check is the reference measured in the
 * same run on the same service and database. Loaded through the public API,
 * bulk writes of 5,000, as the bench loads every grant.
 *
 * Five disjoint parts, each for one of the targets:
 * - hops4: a user in a team, in a parent team, viewer of a folder, parent of
 *   the document: allowed through 4 hops (100 parent teams of 10 teams of
 *   10 users; 100 folders of 10 documents).
 * - denied: a 6-level folder tree (fan-out 3, 363 folders, 4 documents per
 *   leaf: 972) whose root's viewer is a team of 1,000 users; asked by users
 *   of hops4, who are in none of it: denied after walking all 6 levels and
 *   the team.
 * - direct: 1,000 users each viewer of a document of their own in this
 *   application: the graph's statement at 0 hops.
 * - lookup: one user in team 0, in team 1, in team 2, viewer of 1,000
 *   folders of 100 documents each (100,000, ids interleaved: document i is
 *   in folder i mod 1,000).
 * - who can: 100 documents in one folder whose viewer is a team of 10
 *   teams of 1,000 users each (10,000 users).
 */
import { random } from "./random.js";

export const GRAPH_APP_ID = "bench-graph";

export const graphCatalog = {
  resources: [
    {
      resource: "team",
      description: "team (benchmark: groups)",
      actions: ["read"],
      relations: [{ name: "member", actions: ["read"], subjects: ["user", "team#member"] }],
    },
    {
      resource: "folder",
      description: "folder (benchmark: hierarchy)",
      actions: ["read", "list", "update"],
      relations: [
        { name: "parent", actions: [], subjects: ["folder"] },
        { name: "viewer", actions: ["read", "list"], subjects: ["user", "team#member"], inherits: [{ through: "parent", relation: "viewer" }] },
      ],
    },
    {
      resource: "document",
      description: "document (benchmark: hierarchy)",
      actions: ["read", "update"],
      relations: [
        { name: "parent", actions: [], subjects: ["folder"] },
        { name: "viewer", actions: ["read"], subjects: ["user", "team#member"], inherits: [{ through: "parent", relation: "viewer" }] },
      ],
    },
  ],
};

/** A grant to a user or to a subject (set or link), as the bulk endpoint takes it. */
export type GraphGrant =
  | { userId: string; resource: string; resourceId: string; relation: string }
  | { subject: { resource: string; resourceId: string; relation?: string }; resource: string; resourceId: string; relation: string };

export interface GraphCheck {
  userId: string;
  resource: string;
  resourceId: string;
  action: string;
}

const pad = (n: number, width: number) => String(n).padStart(width, "0");
const member = (team: string) => ({ resource: "team", resourceId: team, relation: "member" });
const folder = (id: string) => ({ resource: "folder", resourceId: id });

// ---------------------------------------------------------------- 4 hops

const H4_PARENTS = 100;
const H4_TEAMS = 10;
const H4_USERS = 10;
const H4_DOCS = 10;
const h4User = (p: number, t: number, u: number) => `h4-user-${pad(p, 3)}-${t}-${u}`;
const h4Team = (p: number, t: number) => `h4-team-${pad(p, 3)}-${t}`;
const h4Parent = (p: number) => `h4-parent-${pad(p, 3)}`;
const h4Folder = (p: number) => `h4-folder-${pad(p, 3)}`;
const h4Doc = (p: number, d: number) => `h4-doc-${pad(p, 3)}-${d}`;

function* hops4Grants(): Generator<GraphGrant> {
  for (let p = 0; p < H4_PARENTS; p++) {
    for (let t = 0; t < H4_TEAMS; t++) {
      for (let u = 0; u < H4_USERS; u++) yield { userId: h4User(p, t, u), resource: "team", resourceId: h4Team(p, t), relation: "member" };
      yield { subject: member(h4Team(p, t)), resource: "team", resourceId: h4Parent(p), relation: "member" };
    }
    yield { subject: member(h4Parent(p)), resource: "folder", resourceId: h4Folder(p), relation: "viewer" };
    for (let d = 0; d < H4_DOCS; d++) yield { subject: folder(h4Folder(p)), resource: "document", resourceId: h4Doc(p, d), relation: "parent" };
  }
}

/** Checks allowed only through user → team → parent team → folder → document. */
export function hops4Checks(count: number): GraphCheck[] {
  const r = random(26_04);
  return Array.from({ length: count }, () => {
    const p = r.int(H4_PARENTS);
    return { userId: h4User(p, r.int(H4_TEAMS), r.int(H4_USERS)), resource: "document", resourceId: h4Doc(p, r.int(H4_DOCS)), action: "read" };
  });
}

// ---------------------------------------------------------------- denied, 6 levels

export const DENY_LEVELS = 6;
const DENY_FANOUT = 3;
const DENY_DOCS = 4;
export const DENY_TEAM_MEMBERS = 1_000;
const DENY_TEAM = "deny-team";
/** A folder of the tree by its path from the root ("" is the root, "0.2" its first child's third child). */
const denyFolder = (path: string) => (path === "" ? "deny-folder" : `deny-folder-${path}`);
const denyDoc = (leaf: string, d: number) => `deny-doc-${leaf}-${d}`;

/** The leaves' paths (level 6: the root is level 1). */
function denyLeaves(): string[] {
  let level = [""];
  for (let l = 1; l < DENY_LEVELS; l++) level = level.flatMap((p) => Array.from({ length: DENY_FANOUT }, (_, k) => (p === "" ? `${k}` : `${p}.${k}`)));
  return level;
}

function* deniedGrants(): Generator<GraphGrant> {
  for (let m = 0; m < DENY_TEAM_MEMBERS; m++) yield { userId: `deny-member-${pad(m, 4)}`, resource: "team", resourceId: DENY_TEAM, relation: "member" };
  yield { subject: member(DENY_TEAM), resource: "folder", resourceId: denyFolder(""), relation: "viewer" };
  let level = [""];
  for (let l = 1; l < DENY_LEVELS; l++) {
    const next: string[] = [];
    for (const parent of level) {
      for (let k = 0; k < DENY_FANOUT; k++) {
        const child = parent === "" ? `${k}` : `${parent}.${k}`;
        next.push(child);
        yield { subject: folder(denyFolder(parent)), resource: "folder", resourceId: denyFolder(child), relation: "parent" };
      }
    }
    level = next;
  }
  for (const leaf of level) {
    for (let d = 0; d < DENY_DOCS; d++) yield { subject: folder(denyFolder(leaf)), resource: "document", resourceId: denyDoc(leaf, d), relation: "parent" };
  }
}

/** Checks denied: users of the 4-hop part (in teams, none of these) on documents of the tree's leaves. */
export function deniedChecks(count: number): GraphCheck[] {
  const r = random(26_06);
  const leaves = denyLeaves();
  return Array.from({ length: count }, () => ({
    userId: h4User(r.int(H4_PARENTS), r.int(H4_TEAMS), r.int(H4_USERS)),
    resource: "document",
    resourceId: denyDoc(r.pick(leaves), r.int(DENY_DOCS)),
    action: "read",
  }));
}

// ---------------------------------------------------------------- 0 hops

const DIRECT = 1_000;

function* directGrants(): Generator<GraphGrant> {
  for (let i = 0; i < DIRECT; i++) yield { userId: `g0-user-${pad(i, 4)}`, resource: "document", resourceId: `g0-doc-${pad(i, 4)}`, relation: "viewer" };
}

/** Checks allowed by a grant on the document itself, in the hierarchical application (the graph's statement). */
export function directChecks(count: number): GraphCheck[] {
  const r = random(26_00);
  return Array.from({ length: count }, () => {
    const i = r.int(DIRECT);
    return { userId: `g0-user-${pad(i, 4)}`, resource: "document", resourceId: `g0-doc-${pad(i, 4)}`, action: "read" };
  });
}

// ---------------------------------------------------------------- lookup

export const LOOKUP_USER = "lk-user";
export const LOOKUP_FOLDERS = 1_000;
export const LOOKUP_DOCS = 100_000;
export const LOOKUP_TEAMS = 3;
const lkTeam = (t: number) => `lk-team-${t}`;
const lkFolder = (f: number) => `lk-folder-${pad(f, 4)}`;
export const lookupDoc = (i: number) => `lk-doc-${pad(i, 6)}`;

function* lookupGrants(): Generator<GraphGrant> {
  yield { userId: LOOKUP_USER, resource: "team", resourceId: lkTeam(0), relation: "member" };
  for (let t = 1; t < LOOKUP_TEAMS; t++) yield { subject: member(lkTeam(t - 1)), resource: "team", resourceId: lkTeam(t), relation: "member" };
  for (let f = 0; f < LOOKUP_FOLDERS; f++) yield { subject: member(lkTeam(LOOKUP_TEAMS - 1)), resource: "folder", resourceId: lkFolder(f), relation: "viewer" };
  for (let i = 0; i < LOOKUP_DOCS; i++) yield { subject: folder(lkFolder(i % LOOKUP_FOLDERS)), resource: "document", resourceId: lookupDoc(i), relation: "parent" };
}

export const lookupQuestion = { userId: LOOKUP_USER, resource: "document", action: "read" };

// ---------------------------------------------------------------- who can

export const WHO_TEAMS = 10;
export const WHO_USERS_PER_TEAM = 1_000;
const WHO_DOCS = 100;
const whoTeam = (t: number) => `wc-team-${t}`;
export const whoUser = (t: number, u: number) => `wc-user-${t}-${pad(u, 4)}`;

function* whoCanGrants(): Generator<GraphGrant> {
  for (let t = 0; t < WHO_TEAMS; t++) {
    for (let u = 0; u < WHO_USERS_PER_TEAM; u++) yield { userId: whoUser(t, u), resource: "team", resourceId: whoTeam(t), relation: "member" };
    yield { subject: member(whoTeam(t)), resource: "team", resourceId: "wc-team", relation: "member" };
  }
  yield { subject: member("wc-team"), resource: "folder", resourceId: "wc-folder", relation: "viewer" };
  for (let d = 0; d < WHO_DOCS; d++) yield { subject: folder("wc-folder"), resource: "document", resourceId: `wc-doc-${pad(d, 2)}`, relation: "parent" };
}

/** Who-can questions: documents of the folder 10,000 users reach through teams. */
export function whoCanQuestions(count: number): { resource: string; resourceId: string; action: string; pageSize: number }[] {
  return Array.from({ length: count }, (_, k) => ({ resource: "document", resourceId: `wc-doc-${pad(k % WHO_DOCS, 2)}`, action: "read", pageSize: 100 }));
}

/** Every grant of the hierarchical application, in order. */
export function* graphGrants(): Generator<GraphGrant> {
  yield* hops4Grants();
  yield* deniedGrants();
  yield* directGrants();
  yield* whoCanGrants();
  yield* lookupGrants();
}

/** The grants in chunks of `size` (the bulk endpoint takes 5,000 at most). */
export function* chunks<T>(items: Iterable<T>, size: number): Generator<T[]> {
  let chunk: T[] = [];
  for (const item of items) {
    chunk.push(item);
    if (chunk.length === size) {
      yield chunk;
      chunk = [];
    }
  }
  if (chunk.length > 0) yield chunk;
}
