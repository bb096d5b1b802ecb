/**
 * Differential test of groups and hierarchy: random worlds (nested teams
 * with cycles, folder forests with cycles and several parents, documents
 * with direct grants, grants to teams, roles, memberships and links that
 * expire during the test; in some worlds, conditions on any of them; in
 * some, relations that inherit others on the same instance) asked every
 * question through the REST API, on every engine, with several contexts,
 * and each answer compared with an independent model of API.md's rules
 * written here from the text: a breadth-first walk from the instance over
 * the grants that count (live, and with no condition or one that holds in
 * the question's context) and the catalog's inherits, at most 16 hops (a
 * subject set or a link is one, an inherit within the instance none),
 * sharing no code with the service.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";
import { admin, createApp, expectStatus } from "./helpers/authz.js";
import { ALL_USERS_CATALOG, everyone, GRAPH_CATALOG, OPEN_GROUPS_CATALOG, set, text, user, type AnyGrant, type EveryoneGrant } from "./support/graph.js";
import { random } from "../bench/random.js";

const HOPS = 16;

// ------------------------------------------------------------ the model

/** A catalog as the worlds write it: `inherits` entries without `through` are asked on the same instance. */
interface CatalogRelation {
  name: string;
  actions: string[];
  subjects?: string[] | undefined;
  inherits?: { through?: string | undefined; relation: string }[] | undefined;
}
interface CatalogEntry {
  resource: string;
  description: string;
  actions: string[];
  relations: CatalogRelation[];
}

/**
 * A catalog's rules, as the model reads them: which relations imply which
 * actions, and each relation's inherits (`through` "" for the same instance).
 */
interface Rules {
  actions: Record<string, Record<string, string[]>>;
  inherits: Record<string, Record<string, { through: string; relation: string }[]>>;
}
function rulesOf(catalog: readonly CatalogEntry[]): Rules {
  const rules: Rules = { actions: {}, inherits: {} };
  for (const entry of catalog) {
    // The built-ins the catalog does not redefine: owner implies every action, commenter read and comment.
    const actions: Record<string, string[]> = { owner: entry.actions, commenter: entry.actions.filter((a) => a === "read" || a === "comment") };
    const inherits: Record<string, { through: string; relation: string }[]> = {};
    for (const r of entry.relations) {
      actions[r.name] = r.actions;
      inherits[r.name] = (r.inherits ?? []).map((rule) => ({ through: rule.through ?? "", relation: rule.relation }));
    }
    rules.actions[entry.resource] = actions;
    rules.inherits[entry.resource] = inherits;
  }
  return rules;
}

/**
 * A catalog with relations that inherit others on the same instance, each
 * on a kind of path: at the instance asked (a document's editor updates, and
 * reads as its viewer), after a link (a folder's viewer inherits its editor,
 * which inherits its owner: a folder's owner reads and updates the
 * documents below), and inside a subject set (a team's member inherits its
 * admin, which inherits its owner: `team#member` holds them all; an admin
 * may be a team's members, and every user where members may be).
 */
function withSameInstance(catalog: readonly CatalogEntry[]): CatalogEntry[] {
  const change = (relations: CatalogRelation[], name: string, to: (r: CatalogRelation) => CatalogRelation) => relations.map((r) => (r.name === name ? to(r) : r));
  const inheriting = (relation: string) => (r: CatalogRelation) => ({ ...r, inherits: [...(r.inherits ?? []), { relation }] });
  return catalog.map((entry) => {
    if (entry.resource === "team") {
      const member = entry.relations.find((r) => r.name === "member")!;
      const admin = { name: "admin", actions: ["read"], subjects: ["user", "team#member", ...(member.subjects?.includes("user:*") ? ["user:*"] : [])], inherits: [{ relation: "owner" }] };
      return { ...entry, relations: [...change(entry.relations, "member", inheriting("admin")), admin] };
    }
    if (entry.resource === "folder" || entry.resource === "document") {
      // Editors update only: they read (and list folders) as viewers.
      const editor = (r: CatalogRelation) => ({ ...(entry.resource === "folder" ? inheriting("owner")(r) : r), actions: ["update"] });
      return { ...entry, relations: change(change(entry.relations, "viewer", inheriting("editor")), "editor", editor) };
    }
    return entry;
  });
}

/** The holder an allUsers grant gives a node to, in the model: every user at once. */
const EVERYONE = "*";

/**
 * The conditions the worlds use, each `context.<key> == true`: a grant
 * carrying one counts for a question exactly when its context has the key
 * set to true.
 */
const CONDITION_KEYS = ["a", "b"] as const;
type Context = Partial<Record<(typeof CONDITION_KEYS)[number], boolean>>;
const conditionOf = (key: string) => `context.${key} == true`;

interface World {
  grants: ((AnyGrant | EveryoneGrant) & { expiresMs?: number; condition?: string })[];
  /** userId → role permissions "resource:action" held application-wide */
  roles: Map<string, Set<string>>;
  /** The rules of the world's catalog. */
  rules: Rules;
  /** The hops an inherit within an instance adds: none (API.md); one only to show that the hop bound counts none. */
  sameInstanceHops: number;
}

/** A grant counts: live, and with no condition or one that holds in the context. */
const live = (g: { expiresMs?: number; condition?: string }, now: number, context: Context) =>
  (g.expiresMs === undefined || g.expiresMs > now) &&
  (g.condition === undefined || CONDITION_KEYS.some((k) => g.condition === conditionOf(k) && context[k] === true));
const nodeOf = (resource: string, id: string, relation: string) => `${resource}:${id}#${relation}`;

/**
 * Every user holding `relation` on resource:id, with the fewest hops each:
 * breadth first from the instance; a subject set Y#r granted the relation
 * makes (Y, r) a node one hop further; a rule "inherits R' through L" and a
 * link grant to Y make (Y, R') a node one hop further; a rule "inherits R'"
 * (no `through`) makes (this instance, R') a node at the same depth; users
 * granted a node's relation hold it, at that node's depth, and every user
 * (EVERYONE) where an allUsers grant gives it.
 */
function holders(w: World, now: number, resource: string, id: string, relation: string, context: Context = {}): Map<string, number> {
  // The walk depends on nothing else, and the world's grants change only through `forget`.
  const key = `${now}|${nodeOf(resource, id, relation)}|${CONDITION_KEYS.map((k) => context[k] === true).join()}`;
  const known = walks.get(w) ?? new Map<string, Map<string, number>>();
  walks.set(w, known);
  let h = known.get(key);
  if (h === undefined) known.set(key, (h = walk(w, now, resource, id, relation, context)));
  return h;
}

/** Each world's walks, by their arguments: the answers are asked of the same walks many times over. */
const walks = new WeakMap<World, Map<string, Map<string, number>>>();
/** Forgets a world's walks, once its grants changed. */
const forget = (w: World) => walks.delete(w);

function walk(w: World, now: number, resource: string, id: string, relation: string, context: Context): Map<string, number> {
  const out = new Map<string, number>();
  // Each node is walked once, at its fewest hops: levels by depth, each read as it grows (an inherit within the instance joins the level it is found on).
  const done = new Set<string>();
  const levels: [string, string, string][][] = [[[resource, id, relation]]];
  for (let depth = 0; depth <= HOPS && levels[depth] !== undefined; depth++) {
    const level = levels[depth]!;
    const visit = (hops: number, r: string, i: string, rel: string) => {
      if (!done.has(nodeOf(r, i, rel))) (levels[depth + hops] ??= []).push([r, i, rel]);
    };
    for (let k = 0; k < level.length; k++) {
      const [r, i, rel] = level[k]!;
      if (done.has(nodeOf(r, i, rel))) continue;
      done.add(nodeOf(r, i, rel));
      const rules = w.rules.inherits[r]?.[rel] ?? [];
      for (const rule of rules) if (rule.through === "") visit(w.sameInstanceHops, r, i, rule.relation);
      for (const g of w.grants) {
        if (!live(g, now, context) || g.resource !== r || g.resourceId !== i) continue;
        if ("allUsers" in g) {
          if (g.relation === rel && !out.has(EVERYONE)) out.set(EVERYONE, depth);
          continue;
        }
        if (g.relation === rel) {
          if (g.userId !== undefined) {
            if (!out.has(g.userId)) out.set(g.userId, depth);
          } else if (g.subject!.relation !== undefined) visit(1, g.subject!.resource, g.subject!.resourceId, g.subject!.relation);
        }
        for (const rule of rules) {
          if (rule.through !== "" && g.relation === rule.through && g.subject !== undefined && g.subject.relation === undefined) {
            visit(1, g.subject.resource, g.subject.resourceId, rule.relation);
          }
        }
      }
    }
  }
  return out;
}

const relationsImplying = (w: World, resource: string, action: string) =>
  Object.entries(w.rules.actions[resource]!).filter(([, actions]) => actions.includes(action)).map(([r]) => r);

/** Whether the user holds the relation there: by their own paths, or by an allUsers grant's. */
const holds = (h: Map<string, number>, userId: string) => h.has(userId) || h.has(EVERYONE);

function modelAllows(w: World, now: number, userId: string, resource: string, id: string, action: string, context: Context = {}): boolean {
  if (w.roles.get(userId)?.has(`${resource}:${action}`)) return true;
  return relationsImplying(w, resource, action).some((rel) => holds(holders(w, now, resource, id, rel, context), userId));
}

/** Who can's flag: an allUsers grant gives a relation implying the action, on the instance or a path to it. */
const modelAllUsers = (w: World, now: number, resource: string, id: string, action: string) =>
  relationsImplying(w, resource, action).some((rel) => holders(w, now, resource, id, rel).has(EVERYONE));

/** Who can's ids: the users who may by their own paths or a role (an allUsers grant lists none). */
function modelListed(w: World, now: number, userId: string, resource: string, id: string, action: string): boolean {
  if (w.roles.get(userId)?.has(`${resource}:${action}`)) return true;
  return relationsImplying(w, resource, action).some((rel) => holders(w, now, resource, id, rel).has(userId));
}

/** The context in which every condition of a world holds: a grant with a condition then counts as one without. */
const EVERY_CONDITION: Context = { a: true, b: true };

/**
 * Whether some path could give the user the action on the instance where
 * conditions hold (every live grant counting, conditional or not): their own
 * paths, or for lookup (`everyone`) also an allUsers grant's; who can lists
 * no user for an allUsers grant. Such an answer the check allows outright
 * (with no condition holding: by a plain path, an allUsers grant or a role)
 * is listed plainly by lookup and who can; any other apart, never plainly
 * (API.md: conditional results apart).
 */
function reachable(w: World, now: number, userId: string, resource: string, id: string, action: string, everyone: boolean): boolean {
  return relationsImplying(w, resource, action).some((rel) => {
    const h = holders(w, now, resource, id, rel, EVERY_CONDITION);
    return h.has(userId) || (everyone && h.has(EVERYONE));
  });
}

/** Whether a conditional answer's conditions (any one; each `context.k == true` or those joined by `&&`) hold in the context. */
const anyHolds = (conditions: readonly string[], context: Context) =>
  conditions.some((way) =>
    way.split(" && ").every((part) => {
      const key = /context\.(\w+) == true/.exec(part)?.[1];
      expect(key, `a condition of the world: ${part}`).toBeDefined();
      return context[key as keyof Context] === true;
    }),
  );

/**
 * The fewest hops of any relation implying the action (the user's own paths or an allUsers grant's), or undefined:
 * for each relation, among the paths with no condition when there is one, else among those whose conditions hold.
 */
function modelHops(w: World, now: number, userId: string, resource: string, id: string, action: string, context: Context = {}): number | undefined {
  const hops = relationsImplying(w, resource, action)
    .flatMap((rel) => {
      // A relation held with no condition is explained by such a path (no condition evaluated), else by one whose conditions hold.
      const plain = holders(w, now, resource, id, rel);
      const h = holds(plain, userId) ? plain : holders(w, now, resource, id, rel, context);
      return [h.get(userId), h.get(EVERYONE)];
    })
    .filter((h) => h !== undefined);
  return hops.length === 0 ? undefined : Math.min(...hops);
}

// ------------------------------------------------------------ worlds

const USERS = Array.from({ length: 14 }, (_, i) => `u${String(i).padStart(2, "0")}`);
const TEAMS = Array.from({ length: 7 }, (_, i) => `t${i}`);
const GROUPS = Array.from({ length: 4 }, (_, i) => `g${i}`);
const FOLDERS = Array.from({ length: 12 }, (_, i) => `f${String(i).padStart(2, "0")}`);
const DOCS = Array.from({ length: 16 }, (_, i) => `d${String(i).padStart(2, "0")}`);
/** The folders of a path at the hop bound (worlds with inherits within an instance): met by lookups, asked of no other question. */
const DEEP_FOLDERS = Array.from({ length: 4 }, (_, i) => `deepf${i}`);

/** A world's seed and features: OPEN_GROUPS_CATALOG's groups, allUsers grants, conditions, inherits within an instance. */
interface WorldOptions {
  seed: number;
  groups: boolean;
  public: boolean;
  conditional: boolean;
  sameInstance: boolean;
}

function makeWorld({ seed, groups, public: public_, conditional, sameInstance }: WorldOptions, expiresMs: number): World {
  const r = random(seed);
  const rules = rulesOf(catalogOf({ groups, public: public_, sameInstance }));
  const grants = new Map<string, World["grants"][number]>();
  const add = (g: AnyGrant | EveryoneGrant, expiring = false) => {
    const withExpiry = expiring && r.next() < 0.5 ? { ...g, expiresMs, expiresAt: new Date(expiresMs).toISOString() } : g;
    // In a conditional world, any grant (membership, subject set, link, a user's or everyone's) may carry a condition.
    const withCondition = conditional && r.next() < 0.3 ? { ...withExpiry, condition: conditionOf(r.pick([...CONDITION_KEYS])) } : withExpiry;
    grants.set(text(g), withCondition);
  };
  for (const u of USERS) for (let k = r.int(3); k > 0; k--) add(user(u, "team", r.pick(TEAMS), "member"), true);
  for (let k = 0; k < 9; k++) add(set(`team:${r.pick(TEAMS)}#member`, "team", r.pick(TEAMS), "member"), true); // cycles welcome
  // A long chain of folders (deeper than the hop bound with the teams), plus random links (cycles, two parents).
  for (let i = 1; i < FOLDERS.length; i++) add(set(`folder:${FOLDERS[i - 1]}`, "folder", FOLDERS[i]!, "parent"), true);
  for (let k = 0; k < 5; k++) add(set(`folder:${r.pick(FOLDERS)}`, "folder", r.pick(FOLDERS), "parent"), true);
  for (const d of DOCS) if (r.next() < 0.8) add(set(`folder:${r.pick(FOLDERS)}`, "document", d, "parent"), true);
  for (let k = 0; k < 6; k++) add(set(`team:${r.pick(TEAMS)}#member`, "folder", r.pick(FOLDERS), r.pick(["viewer", "editor"])), true);
  for (let k = 0; k < 4; k++) add(set(`team:${r.pick(TEAMS)}#member`, "document", r.pick(DOCS), r.pick(["viewer", "editor"])), true);
  for (let k = 0; k < 8; k++) add(user(r.pick(USERS), "folder", r.pick(FOLDERS), r.pick(["viewer", "editor"])), true);
  for (let k = 0; k < 10; k++) add(user(r.pick(USERS), "document", r.pick(DOCS), r.pick(["viewer", "editor", "owner"])), true);
  if (groups) {
    for (let k = 0; k < 4; k++) add(user(r.pick(USERS), "group", r.pick(GROUPS), "member"), true);
    for (let k = 0; k < 4; k++) add(set(`team:${r.pick(TEAMS)}#member`, "group", r.pick(GROUPS), "member"), true);
    for (let k = 0; k < 4; k++) add(set(`folder:${r.pick(FOLDERS)}#viewer`, "group", r.pick(GROUPS), "member"), true);
    for (let k = 0; k < 2; k++) add(set(`group:${r.pick(GROUPS)}#member`, "group", r.pick(GROUPS), "member"), true);
    for (let k = 0; k < 8; k++) add(set(`group:${r.pick(GROUPS)}#member`, "document", r.pick(DOCS), "viewer"), true);
  }
  if (public_) {
    // Every user at once (ALL_USERS_CATALOG): a team everyone is in (or everyone administers,
    // withSameInstance), public folders (their documents inherit), public documents; some
    // expire, as memberships and links do.
    add(everyone("team", r.pick(TEAMS), sameInstance ? "admin" : "member"), true);
    for (let k = 0; k < 2; k++) add(everyone("folder", r.pick(FOLDERS.slice(4)), "viewer"), true);
    for (let k = 0; k < 2; k++) add(everyone("document", r.pick(DOCS), "viewer"), true);
    // A group everyone is in: walked down from the instance (groups are open), not met from the user's side.
    if (groups) add(everyone("group", r.pick(GROUPS), "member"), true);
  }
  if (sameInstance) {
    // Members by withSameInstance's rules: teams' admins and owners (an admin may be a team's members, or every user), and folders' owners.
    for (let k = 0; k < 6; k++) add(user(r.pick(USERS), "team", r.pick(TEAMS), "admin"), true);
    for (let k = 0; k < 3; k++) add(set(`team:${r.pick(TEAMS)}#member`, "team", r.pick(TEAMS), "admin"), true);
    for (let k = 0; k < 3; k++) add(user(r.pick(USERS), "team", r.pick(TEAMS), "owner"), true);
    for (let k = 0; k < 4; k++) add(user(r.pick(USERS), "folder", r.pick(FOLDERS), "owner"), true);
    // Paths at the hop bound, between users and a document no other path lets them update: the
    // document below a chain of folders of its own ("deepf0" to "deepf3"), whose last one's
    // editors are a team's members; each of a chain of teams of their own ("deep0" to "deep12")
    // administers or is a member of the one before. A user owns "deep11": 16 hops (document → 4
    // folders → 12 teams), within the bound only because the inherits within an instance (a
    // folder's viewer its editor, a team's member its admin, an admin its owner) add none.
    // Another owns "deep12": 17 hops, beyond it. A third owns "deepf1", so updates and reads the
    // document as the folder's editor and viewer; a fourth edits a folder they may not list
    // otherwise, and a fifth a document they may not read otherwise: they list and read as
    // viewers. Plain grants: the paths hold in every context.
    const plant = (g: AnyGrant) => grants.set(text(g), g);
    const sofar: World = { grants: [...grants.values()], roles: new Map(), rules, sameInstanceHops: 0 };
    const apart = (d: string) => USERS.filter((u) => !modelAllows(sofar, expiresMs - 1, u, "document", d, "update", EVERY_CONDITION));
    const d = r.pick(DOCS.filter((x) => apart(x).length >= 3));
    const [near, far, owner] = r.sample(apart(d), 3) as [string, string, string];
    const denied = (resource: string, ids: readonly string[], action: string) =>
      USERS.flatMap((u) => ids.filter((x) => !modelAllows(sofar, expiresMs - 1, u, resource, x, action, EVERY_CONDITION)).map((x) => [u, x] as const));
    const [lister, f] = r.pick(denied("folder", FOLDERS, "list"));
    const [reader, e] = r.pick(denied("document", DOCS, "read"));
    plant(set(`folder:${DEEP_FOLDERS[0]}`, "document", d, "parent"));
    for (let i = 1; i < DEEP_FOLDERS.length; i++) plant(set(`folder:${DEEP_FOLDERS[i]}`, "folder", DEEP_FOLDERS[i - 1]!, "parent"));
    plant(set("team:deep0#member", "folder", DEEP_FOLDERS[DEEP_FOLDERS.length - 1]!, "editor"));
    for (let i = 1; i <= 12; i++) plant(set(`team:deep${i}#member`, "team", `deep${i - 1}`, i % 2 === 1 ? "admin" : "member"));
    plant(user(near, "team", "deep11", "owner"));
    plant(user(far, "team", "deep12", "owner"));
    plant(user(owner, "folder", DEEP_FOLDERS[1]!, "owner"));
    plant(user(lister, "folder", f, "editor"));
    plant(user(reader, "document", e, "editor"));
  }
  const roles = new Map<string, Set<string>>([[r.pick(USERS), new Set(["document:read"])]]);
  return { grants: [...grants.values()], roles, rules, sameInstanceHops: 0 };
}

/**
 * Seeds, whether the world has OPEN_GROUPS_CATALOG's groups, whether it has
 * allUsers grants (ALL_USERS_CATALOG), whether its grants may carry
 * conditions (asked then with every context of CONTEXTS), and whether its
 * catalog has inherits within an instance (withSameInstance).
 */
const WORLDS: WorldOptions[] = [
  { seed: 11, groups: false, public: false, conditional: false, sameInstance: false },
  { seed: 2024, groups: false, public: false, conditional: false, sameInstance: false },
  { seed: 77, groups: false, public: false, conditional: false, sameInstance: false },
  { seed: 7, groups: true, public: false, conditional: false, sameInstance: false },
  { seed: 31, groups: false, public: true, conditional: false, sameInstance: false },
  { seed: 4242, groups: false, public: true, conditional: false, sameInstance: false },
  { seed: 99, groups: true, public: true, conditional: false, sameInstance: false },
  { seed: 5, groups: false, public: false, conditional: true, sameInstance: false },
  { seed: 2718, groups: true, public: true, conditional: true, sameInstance: false },
  { seed: 13, groups: false, public: false, conditional: false, sameInstance: true },
  { seed: 404, groups: true, public: true, conditional: true, sameInstance: true },
];

/**
 * The worlds run on PGlite: one of each combination of features. PGlite
 * runs the same statements as Postgres, one at a time on its one
 * connection, so a world there takes about three times its time on
 * Postgres; the further seeds of a combination (2024, 77, 4242) run on
 * Postgres and Citus, where the worlds' statements run side by side.
 */
const worldsOn = (engine: string): WorldOptions[] => {
  if (engine !== "pglite") return WORLDS;
  const combinations = new Set<string>();
  return WORLDS.filter(({ seed: _, ...features }) => {
    const combination = JSON.stringify(features);
    if (combinations.has(combination)) return false;
    combinations.add(combination);
    return true;
  });
};

/** The contexts a conditional world is asked with: no condition holds, each one alone, both. */
const CONTEXTS: Context[] = [{}, { a: true }, { b: true }, { a: true, b: true }];

/** OPEN_GROUPS_CATALOG where every member or viewer relation may also be given to every user ("user:*"). */
const ALL_USERS_OPEN_GROUPS = OPEN_GROUPS_CATALOG.map((entry) => ({
  ...entry,
  relations: entry.relations.map((rel) => (rel.name === "member" || rel.name === "viewer" ? { ...rel, subjects: [...rel.subjects, "user:*"] } : rel)),
}));

/** The catalog of a world with these features. */
function catalogOf({ groups, public: public_, sameInstance }: Pick<WorldOptions, "groups" | "public" | "sameInstance">): CatalogEntry[] {
  const catalog = groups ? (public_ ? ALL_USERS_OPEN_GROUPS : OPEN_GROUPS_CATALOG) : public_ ? ALL_USERS_CATALOG : GRAPH_CATALOG;
  return sameInstance ? withSameInstance(catalog) : catalog;
}

/** The checks every world is asked (in one batch per context): reading and updating each document, listing each folder. */
const CHECKS = [
  ...USERS.flatMap((u) => DOCS.flatMap((d) => ["read", "update"].map((action) => ({ userId: u, resource: "document", resourceId: d, action })))),
  ...USERS.flatMap((u) => FOLDERS.map((f) => ({ userId: u, resource: "folder", resourceId: f, action: "list" }))),
];

/**
 * The inherits within an instance are on paths that matter, each one: the
 * model without it answers some check otherwise (with no condition holding,
 * or every one). And so does their adding no hop: were each one hop, the
 * hop bound would deny some check.
 */
function expectSameInstanceMatters(world: World, now: number): void {
  const answers = (w: World) => [{}, EVERY_CONDITION].flatMap((context) => CHECKS.map((q) => modelAllows(w, now, q.userId, q.resource, q.resourceId, q.action, context)));
  const expected = answers(world);
  const differs = (w: World) => answers(w).some((allowed, i) => allowed !== expected[i]);
  let rules = 0;
  for (const [resource, relations] of Object.entries(world.rules.inherits)) {
    for (const [relation, inherits] of Object.entries(relations)) {
      for (const rule of inherits.filter((x) => x.through === "")) {
        rules++;
        const without = { ...world.rules.inherits, [resource]: { ...relations, [relation]: inherits.filter((x) => x !== rule) } };
        expect(differs({ ...world, rules: { ...world.rules, inherits: without } }), `${resource}#${relation} inheriting ${rule.relation} decides some check`).toBe(true);
      }
    }
  }
  expect(rules, "withSameInstance's five inherits within an instance").toBe(5);
  expect(differs({ ...world, sameInstanceHops: 1 }), "some check is allowed only because an inherit within an instance adds no hop").toBe(true);
}

/**
 * Runs `ask` on every item, `width` at a time, each item's calls in order;
 * the first failure stops new items from starting and is thrown once those
 * running ended. Many at once, as a busy application asks: the service
 * coalesces the pages and checks in flight into shared statements, far
 * cheaper than a statement a call, most of all on Citus, where each
 * statement is planned on the coordinator and again on its worker.
 */
async function inLanes<T>(items: readonly T[], ask: (item: T, n: number) => Promise<void>, width = 32): Promise<void> {
  let next = 0;
  let failed = false;
  const lane = async () => {
    while (!failed && next < items.length) {
      const n = next++;
      try {
        await ask(items[n]!, n);
      } catch (e) {
        failed = true;
        throw e;
      }
    }
  };
  const ended = await Promise.allSettled(Array.from({ length: width }, lane));
  const failure = ended.find((e) => e.status === "rejected");
  if (failure !== undefined) throw failure.reason;
}

describe.each(engines)("groups and hierarchy against a model on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    service = await startTestService(database.db);
  }, 60_000);
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  // The worlds side by side, each an application of its own: one's wait for its grants to expire is another's work.
  it.concurrent.each(worldsOn(engine))("world $seed (groups: $groups, allUsers: $public, conditions: $conditional, inherits within an instance: $sameInstance): every question agrees with the model, before and after memberships and links expire", { timeout: 600_000 }, async (options) => {
    const { seed, public: public_, conditional, sameInstance } = options;
    const appId = `world-${seed}`;
    const key = await createApp(service, appId, catalogOf(options));
    const call = async (path: string, body: unknown) => {
      const res = await service.call("POST", path, { key, body });
      expectStatus(res, 200);
      return res.body;
    };
    // Expiring grants are written to expire in an hour: the first pass sees them all.
    const world = makeWorld(options, Date.now() + 3_600_000);
    if (sameInstance) expectSameInstanceMatters(world, Date.now());
    const contexts = conditional ? CONTEXTS : [{}];
    await call("/api/v1/authorization/relationships/bulk", { writes: world.grants.map(({ expiresMs: _, ...g }) => g) });
    const a = admin(service, appId);
    const policy = await a.createPolicy("readers", ["document:read"]);
    const role = await a.createRole("readers", [policy]);
    for (const u of world.roles.keys()) await a.assign(role, u);
    const r = random(seed + 1);
    /** The page sizes of the n-th listing: a generator of its own, so listings asked at once draw the same sizes in any order. */
    const sizesOf = (n: number) => random((seed + 1) * 1000 + n);

    /** Every id of every page, plain and conditional apart; `flags`: each page's allUsers (who can). */
    const pages = async (path: string, body: Record<string, unknown>, field: string, sizes: ReturnType<typeof random>, flags: boolean[] = []) => {
      const ids: string[] = [];
      const conditional: { id: string; conditions: string[] }[] = [];
      let pageToken = "";
      do {
        const page = await call(path, { ...body, pageSize: 1 + sizes.int(6), pageToken });
        ids.push(...(page[field] as string[]));
        for (const c of page.conditional as { resourceId?: string; userId?: string; conditions: string[] }[]) conditional.push({ id: c.resourceId ?? c.userId!, conditions: c.conditions });
        flags.push(page.allUsers === true);
        pageToken = page.nextPageToken as string;
      } while (pageToken !== "");
      return { ids, conditional };
    };

    /** Answers lookup and who can listed apart: in all, and with a way of two conditions (a path through both). */
    const listedApart = { all: 0, joined: 0 };
    /**
     * Lookup's or who can's answers against the model: plainly those the check allows with no condition holding,
     * apart the others some path could give; each apart with conditions that hold in exactly the contexts the check allows.
     */
    const expectAnswers = (
      what: string,
      got: { ids: string[]; conditional: { id: string; conditions: string[] }[] },
      candidates: readonly string[],
      allows: (id: string, context: Context) => boolean,
      listed: (id: string) => boolean,
    ) => {
      expect(got.ids, `${what}: plain`).toEqual(candidates.filter((id) => listed(id) || allows(id, {})));
      expect(
        got.conditional.map((c) => c.id),
        `${what}: conditional`,
      ).toEqual(candidates.filter((id) => !listed(id) && !allows(id, {})));
      listedApart.all += got.conditional.length;
      listedApart.joined += got.conditional.filter((c) => c.conditions.some((way) => way.includes(" && "))).length;
      for (const c of got.conditional) {
        for (const context of contexts) expect(anyHolds(c.conditions, context), `${what}: ${c.id} ${JSON.stringify(c.conditions)} in ${JSON.stringify(context)}`).toBe(allows(c.id, context));
      }
    };

    const compare = async (now: number) => {
      const all = CHECKS;
      const requests = (context: Context) => USERS.flatMap((u) => DOCS.map((d) => ({ userId: u, resource: "document", resourceId: d, context })));
      // Every context's batches asked at once, then compared in turn.
      const batches = await Promise.all(
        contexts.map((context) =>
          Promise.all([call("/api/v1/authorization/check/batch", { checks: all.map((q) => ({ ...q, context })) }), call("/api/v1/authorization/permissions/batch", { requests: requests(context) })]),
        ),
      );
      for (const [k, context] of contexts.entries()) {
        const answers = batches[k]![0].results as { allowed: boolean }[];
        all.forEach((q, i) => {
          expect(answers[i]!.allowed, `${JSON.stringify(q)} in ${JSON.stringify(context)} (seed ${seed})`).toBe(
            modelAllows(world, now, q.userId, q.resource, q.resourceId, q.action, context),
          );
        });
        const perms = batches[k]![1].results as { actions: string[] }[];
        USERS.flatMap((u) => DOCS.map((d) => [u, d] as const)).forEach(([u, d], i) => {
          const expected = ["read", "update", "delete"].filter((action) => modelAllows(world, now, u, "document", d, action, context));
          expect(perms[i]!.actions, `permissions of ${u} on ${d} in ${JSON.stringify(context)}`).toEqual(expected);
        });
      }
      // The listings and explanations below are asked 32 at a time (each its own calls, in order), and each answer compared as it comes.
      const lookups = USERS.flatMap((u) =>
        ([["document", "read", DOCS], ["folder", "list", sameInstance ? [...DEEP_FOLDERS, ...FOLDERS].sort() : FOLDERS], ["document", "update", DOCS]] as const).map(([resource, action, ids]) => ({ u, resource, action, ids })),
      );
      await inLanes(lookups, async ({ u, resource, action, ids }, n) => {
        const roleHeld = world.roles.get(u)?.has(`${resource}:${action}`) === true;
        expectAnswers(
          `lookup ${u} ${resource}:${action}`,
          await pages("/api/v1/authorization/lookup", { userId: u, resource, action }, "resourceIds", sizesOf(n)),
          ids.filter((id) => reachable(world, now, u, resource, id, action, true)),
          (id, context) => modelAllows(world, now, u, resource, id, action, context),
          () => false,
        );
        if (roleHeld) expect((await call("/api/v1/authorization/lookup", { userId: u, resource, action })).allInstances).toBe(true);
      });
      const whoCans = ([["document", DOCS, "read"], ["document", DOCS, "update"], ["folder", FOLDERS, "read"]] as const).flatMap(([resource, ids, action]) =>
        ids.map((id) => ({ resource, id, action })),
      );
      await inLanes(whoCans, async ({ resource, id, action }, n) => {
        const flags: boolean[] = [];
        expectAnswers(
          `who can ${action} ${resource}:${id}`,
          await pages("/api/v1/authorization/subjects", { resource, resourceId: id, action }, "userIds", sizesOf(lookups.length + n), flags),
          USERS.filter((u) => modelListed(world, now, u, resource, id, action) || reachable(world, now, u, resource, id, action, false)).sort(),
          (u, context) => modelAllows(world, now, u, resource, id, action, context),
          (u) => modelListed(world, now, u, resource, id, action),
        );
        const all = modelAllUsers(world, now, resource, id, action);
        expect(flags.every((f) => f === all), `who can ${action} ${resource}:${id}: allUsers ${all}`).toBe(true);
      });
      // Explain: allowed equals the check, and the path has the fewest hops, from the user's grant to the instance's.
      const explains = Array.from({ length: 40 * contexts.length }, () => {
        const context = r.pick(contexts);
        return { context, q: { userId: r.pick(USERS), resource: "document", resourceId: r.pick(DOCS), action: r.pick(["read", "update"]) } };
      });
      await inLanes(explains, async ({ context, q }) => {
        const explained = await call("/api/v1/authorization/check/explain", { ...q, context });
        expect(explained.allowed, `explain ${JSON.stringify(q)} in ${JSON.stringify(context)}`).toBe(modelAllows(world, now, q.userId, q.resource, q.resourceId, q.action, context));
        const hops = modelHops(world, now, q.userId, q.resource, q.resourceId, q.action, context);
        const relationReasons = (explained.reasons as { kind: string; path: AnyGrant[] }[]).filter((x) => x.kind === "relation");
        if (hops === undefined) expect(relationReasons).toEqual([]);
        else {
          expect(Math.min(...relationReasons.map((x) => x.path.length - 1))).toBe(hops);
          for (const reason of relationReasons) {
            // The user's own grant, or an allUsers one (userId "").
            const first = reason.path[0]! as AnyGrant & { allUsers?: boolean };
            if (first.allUsers === true) expect(first.userId).toBe("");
            else expect(first.userId).toBe(q.userId);
            const last = reason.path[reason.path.length - 1]!;
            expect([last.resource, last.resourceId]).toEqual([q.resource, q.resourceId]);
          }
        }
      });
    };

    await compare(Date.now());
    // The conditions are on paths that matter: some check is allowed only where they hold.
    if (conditional) {
      const now = Date.now();
      const decided = USERS.flatMap((u) => DOCS.map((d) => [u, d] as const));
      expect(decided.some(([u, d]) => modelAllows(world, now, u, "document", d, "read", { a: true, b: true }) !== modelAllows(world, now, u, "document", d, "read"))).toBe(true);
      // And lookup and who can listed answers apart, some through a path with both conditions on it.
      expect(listedApart.all).toBeGreaterThan(0);
      expect(listedApart.joined).toBeGreaterThan(0);
    }
    // The allUsers grants are on paths that count: some instance is one every user may read.
    if (public_ && !conditional) expect(DOCS.some((d) => modelAllUsers(world, Date.now(), "document", d, "read"))).toBe(true);
    // Then their expiry is brought forward to seconds from now (the write may wait behind the other worlds' questions:
    // on PGlite, one connection, a loaded two-core machine once made it wait past 3 s), and once it passed, every question again.
    const expiresMs = Date.now() + 10_000;
    const expiring = world.grants.filter((g) => g.expiresMs !== undefined);
    for (const g of expiring) g.expiresMs = expiresMs;
    forget(world);
    await call("/api/v1/authorization/relationships/bulk", { writes: expiring.map(({ expiresMs: _, ...g }) => ({ ...g, expiresAt: new Date(expiresMs).toISOString() })) });
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, expiresMs - Date.now() + 100)));
    expect(expiring.length).toBeGreaterThan(10);
    await compare(Date.now());
  });
});
