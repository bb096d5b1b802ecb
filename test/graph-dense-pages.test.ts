/**
 * Lookup's page of a dense answer (src/store/dense-pages.ts), differential,
 * on every engine: random worlds on ALL_USERS_CATALOG with 40 to 100
 * folders (some nested, some public), teams inside teams, documents in one
 * or two folders, and links that have lapsed. Each user's `read` lookup is
 * read page by page at two page sizes with four settings of the dense
 * try: never made (every source read one by one, the page as it was before
 * the try existed), made for every group with a budget that fills it, made
 * for every group with a budget of one row per source (most tries fall
 * back), and the service's. Every page equals the others', and the ids
 * equal a model of the world computed here; the relations that reach each
 * id (the statement for `requires` and `unless`) and the pages through
 * conditional paths (the statement that reads rows with a condition too)
 * agree across the settings as well.
 */
import { describe, expect, it } from "vitest";
import { engines } from "./support/engines.js";
import { useService } from "./support/use-service.js";
import { createApp } from "./helpers/authz.js";
import { ALL_USERS_CATALOG, everyone, set, user, type AnyGrant, type EveryoneGrant } from "./support/graph.js";
import { random } from "../bench/random.js";
import { AccessModel } from "../src/domain/access-model.js";
import { graphLookupOf } from "../src/domain/contextual-pages.js";
import { modelStore } from "../src/store/model-store.js";
import { graphStore } from "../src/store/graph-store.js";
import { splitPage } from "../src/store/conditional-candidates.js";
import { DENSE, type DenseSettings } from "../src/store/dense-pages.js";
import { hashKey } from "../src/lib/ids.js";
import type { Queryable } from "../src/store/db.js";

const SETTINGS: Record<string, DenseSettings> = {
  "never tried": { minSources: 1_000_000_000, rowsPerSource: 8 },
  "always tried, filled": { minSources: 1, rowsPerSource: 1_000 },
  "always tried, one row a source": { minSources: 1, rowsPerSource: 1 },
  "the service's": DENSE,
};
const PAGE_SIZES = [9, 1000];
const USERS = ["u0", "u1", "u2"];
const WORLDS = [11, 12, 13];
/** Fewer on Citus, where each statement costs more. */
const CITUS_WORLDS = 1;
/** Lapsing links are written to lapse this long after; the questions start after. */
const LAPSE_MS = 1_500;

interface World {
  grants: (AnyGrant | EveryoneGrant)[];
  /** u's readable documents, from the model below. */
  readable: Map<string, string[]>;
}

const pad = (n: number, w = 3) => String(n).padStart(w, "0");

/** A random world and, by a model of GRAPH_CATALOG's rules, what each user may read. */
function world(seed: number): World {
  const r = random(seed);
  const grants: (AnyGrant | EveryoneGrant)[] = [];
  const teams = Array.from({ length: 6 }, (_, i) => `t${i}`);
  const folders = Array.from({ length: 40 + r.int(61) }, (_, i) => `f${pad(i)}`);
  const documents = [...new Set(Array.from({ length: 150 + r.int(200) }, () => `d${pad(r.int(5000), 4)}`))];
  // Teams: users in 0-2, a team inside a later one, everyone in one team now and then.
  // Who holds a team's membership or a node: users, everyone, teams' members.
  type Holders = { users: Set<string>; everyone: boolean; teams: Set<string> };
  const noHolders = (): Holders => ({ users: new Set(), everyone: false, teams: new Set() });
  const membersOf = new Map<string, Holders>(teams.map((t) => [t, noHolders()]));
  for (const u of USERS) for (const t of r.sample(teams, r.int(3))) (membersOf.get(t)!.users.add(u), grants.push(user(u, "team", t, "member")));
  for (let i = 0; i + 1 < teams.length; i++) {
    if (r.next() < 0.4) {
      const outer = teams[i + 1 + r.int(teams.length - i - 1)]!;
      membersOf.get(outer)!.teams.add(teams[i]!);
      grants.push(set(`team:${teams[i]}#member`, "team", outer, "member"));
    }
  }
  if (r.next() < 0.5) (membersOf.get(teams[5]!)!.everyone = true, grants.push(everyone("team", teams[5]!, "member")));
  const inTeam = (u: string, t: string, seen = new Set<string>()): boolean => {
    if (seen.has(t)) return false;
    seen.add(t);
    const m = membersOf.get(t)!;
    return m.everyone || m.users.has(u) || [...m.teams].some((inner) => inTeam(u, inner, seen));
  };
  const holders = new Map<string, Holders>();
  const holdersOf = (node: string) => holders.get(node) ?? (holders.set(node, noHolders()), holders.get(node)!);
  const give = (resource: string, id: string, relation: string) => {
    const h = holdersOf(`${resource}:${id}#${relation}`);
    const roll = r.next();
    if (roll < 0.75) {
      const t = r.pick(teams);
      h.teams.add(t);
      grants.push(set(`team:${t}#member`, resource, id, relation));
      // Only viewer (and member) may be held by every user in ALL_USERS_CATALOG.
    } else if (roll < 0.95 || relation !== "viewer") {
      const u = r.pick(USERS);
      h.users.add(u);
      grants.push(user(u, resource, id, relation));
    } else {
      h.everyone = true;
      grants.push(everyone(resource, id, relation));
    }
  };
  const parents = new Map<string, string[]>();
  const link = (from: string, resource: string, id: string) => {
    // A lapsed link between folders hides a subtree: more of those, so that every walk meets some.
    const lapses = r.next() < (resource === "folder" ? 0.25 : 0.06);
    grants.push({ ...set(`folder:${from}`, resource, id, "parent"), ...(lapses ? { expiresAt: "lapse" } : {}) });
    if (!lapses) parents.set(`${resource}:${id}`, [...(parents.get(`${resource}:${id}`) ?? []), from]);
  };
  folders.forEach((f, i) => {
    if (i > 0 && r.next() < 0.3) link(folders[r.int(i)]!, "folder", f);
    if (r.next() < 0.6) give("folder", f, "viewer");
    if (r.next() < 0.15) give("folder", f, "editor");
  });
  for (const d of documents) {
    if (r.next() < 0.9) link(r.pick(folders), "document", d);
    if (r.next() < 0.15) link(r.pick(folders), "document", d);
    if (r.next() < 0.08) give("document", d, r.pick(["viewer", "editor"]));
  }
  const holds = (u: string, node: string) => {
    const h = holders.get(node);
    return h !== undefined && (h.everyone || h.users.has(u) || [...h.teams].some((t) => inTeam(u, t)));
  };
  // viewer and editor each inherit through parent; both imply read on documents.
  const has = (u: string, resource: string, id: string, relation: string, depth = 0): boolean =>
    depth <= 16 && (holds(u, `${resource}:${id}#${relation}`) || (parents.get(`${resource}:${id}`) ?? []).some((p) => has(u, "folder", p, relation, depth + 1)));
  const readable = new Map(USERS.map((u) => [u, documents.filter((d) => has(u, "document", d, "viewer") || has(u, "document", d, "editor")).sort()]));
  return { grants, readable };
}

/** Each page's ids (the page size plus one read, as the service reads), and what else each page says, until the last. */
async function pages(size: number, read: (after: string, limit: number) => Promise<{ ids: string[]; extra?: unknown }>) {
  const all: { ids: string[]; extra?: unknown }[] = [];
  let after = "";
  for (;;) {
    const page = await read(after, size + 1);
    all.push(page);
    if (page.ids.length <= size) return all;
    after = page.ids[size - 1]!;
  }
}

describe.each(engines)("lookup's dense pages on %s", (engine) => {
  const used = useService(engine);

  it.each(WORLDS.slice(0, engine === "citus" ? CITUS_WORLDS : WORLDS.length))("world %i: every setting gives every page the same, and the model's ids", async (seed) => {
    const w = world(seed);
    const appId = `dense-${seed}`;
    const key = await createApp(used.service, appId, ALL_USERS_CATALOG);
    const lapse = new Date(Date.now() + LAPSE_MS).toISOString();
    const writes = w.grants.map((g) => (g.expiresAt === "lapse" ? { ...g, expiresAt: lapse } : g));
    const res = await used.service.call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes } });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    await new Promise((done) => setTimeout(done, Date.parse(lapse) + 50 - Date.now()));
    const db: Queryable = used.database.db;
    const model = AccessModel.from((await modelStore.load(db, appId))!);
    const input = (userId: string, after: string, limit: number) =>
      graphLookupOf(model, { appId, keyHash: hashKey(key), userId, resource: "document", action: "read", tenantId: undefined, after, limit });

    const seen = { tried: 0 };
    for (const userId of USERS) {
      for (const size of PAGE_SIZES) {
        const byName = new Map<string, unknown>();
        for (const [name, dense] of Object.entries(SETTINGS)) {
          const plain = await pages(size, async (after, limit) => {
            const row = (await graphStore.lookup(db, [input(userId, after, limit)], { dense })).rows[0]!;
            return { ids: row.resourceIds };
          });
          const reach = await pages(size, async (after, limit) => {
            const row = (await graphStore.lookup(db, [{ ...input(userId, after, limit), reach: true }], { dense })).rows[0]!;
            return { ids: row.resourceIds, extra: row.reachedBy };
          });
          const throughPaths = await pages(size, async (after, limit) => {
            const row = (await graphStore.lookupThroughPaths(db, [{ ...input(userId, after, limit), prior: [] }], { dense })).rows[0]!;
            return { ids: splitPage(row.ids).map((e) => e.id), extra: row.ids };
          });
          expect(plain.flatMap((p) => p.ids.slice(0, size)), `${userId}, pages of ${size}, ${name}`).toEqual(w.readable.get(userId));
          byName.set(name, { plain, reach, throughPaths });
          seen.tried++;
        }
        const [first, ...rest] = [...byName.values()];
        for (const [i, other] of rest.entries()) expect(other, `${userId}, pages of ${size}: ${Object.keys(SETTINGS)[i + 1]} against never tried`).toEqual(first);
      }
    }
    expect(seen.tried).toBe(USERS.length * PAGE_SIZES.length * Object.keys(SETTINGS).length);
  }, 240_000);
});
