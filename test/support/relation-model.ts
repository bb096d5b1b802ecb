/**
 * An independent model of API.md's rules for requires and unless ("Relations within an instance,
 * intersection and exclusion"), written from the text and sharing no code with the service,
 * and the random worlds the differential tests draw: catalogs built from a
 * pool of rules over teams in teams, orgs, folders in folders and
 * documents; grants to users, every user, subject sets and links, each
 * whose condition holds (T), fails (F) or cannot be decided (U). The
 * model gives the truth of (node, hops left) for every node of the world
 * and every budget from 0 to 16, raised from false by rounds until nothing
 * changes, stratum by stratum (strata by relaxation).
 */
import { random } from "../../bench/random.js";

export type Truth = 0 | 1 | 2;
export const F: Truth = 0;
export const U: Truth = 1;
export const T: Truth = 2;
export const HOPS = 16;

export interface Ref {
  through: string;
  relation: string;
}
export interface Rel {
  subjects: string[];
  inherits: Ref[];
  requires: Ref[];
  unless: Ref[];
}
export type Catalog = Record<string, Record<string, Rel>>;

export const rel = (subjects: string[], inherits: Ref[] = []): Rel => ({ subjects, inherits, requires: [], unless: [] });
export const here = (relation: string): Ref => ({ through: "", relation });
export const via = (through: string, relation: string): Ref => ({ through, relation });

/** The base catalog: teams in teams, orgs of teams, folders in folders, documents in folders and orgs. */
export function baseCatalog(): Catalog {
  return {
    team: { member: rel(["user", "team#member"]), admin: rel(["user"]), banned: rel(["user"]) },
    org: { member: rel(["user", "team#member"]), auditor: rel(["user"]) },
    folder: {
      parent: rel(["folder"]),
      org: rel(["org"]),
      viewer: rel(["user", "user:*", "team#member"], [via("parent", "viewer")]),
      blocked: rel(["user", "team#member"], [via("parent", "blocked")]),
    },
    document: {
      parent: rel(["folder"]),
      org: rel(["org"]),
      viewer: rel(["user", "user:*", "team#member", "org#member"], [via("parent", "viewer")]),
      editor: rel(["user", "team#member"]),
      blocked: rel(["user", "team#member"], [via("parent", "blocked")]),
    },
  };
}

/** Rules the catalogs draw from: each adds one entry to one relation. */
export const POOL: { resource: string; relation: string; list: "inherits" | "requires" | "unless"; ref: Ref }[] = [
  { resource: "team", relation: "member", list: "unless", ref: here("banned") },
  { resource: "team", relation: "member", list: "inherits", ref: here("admin") },
  { resource: "folder", relation: "viewer", list: "unless", ref: here("blocked") },
  { resource: "folder", relation: "viewer", list: "requires", ref: via("org", "member") },
  { resource: "document", relation: "viewer", list: "unless", ref: here("blocked") },
  { resource: "document", relation: "viewer", list: "requires", ref: via("org", "member") },
  { resource: "document", relation: "viewer", list: "requires", ref: via("parent", "viewer") },
  { resource: "document", relation: "viewer", list: "unless", ref: via("org", "auditor") },
  { resource: "document", relation: "viewer", list: "inherits", ref: here("editor") },
  { resource: "document", relation: "editor", list: "requires", ref: here("viewer") },
  { resource: "document", relation: "editor", list: "unless", ref: via("parent", "blocked") },
  { resource: "document", relation: "blocked", list: "unless", ref: here("editor") },
];

export const IDS = ["1", "2", "3", "4"];
export const USERS = ["ann", "bob", "cy"];

export interface World {
  catalog: Catalog;
  ids: string[];
  /** "resource\0id\0relation" → the grants to users ("" for every user), each with its truth. */
  held: Map<string, { user: string; truth: Truth }[]>;
  sets: Map<string, { resource: string; id: string; relation: string; truth: Truth }[]>;
  /** "resource\0id\0link" → the instances linked. */
  links: Map<string, { resource: string; id: string; truth: Truth }[]>;
}

export const nodeKey = (resource: string, id: string, relation: string) => `${resource}\0${id}\0${relation}`;
export const push = <V>(map: Map<string, V[]>, k: string, v: V) => {
  const list = map.get(k);
  if (list === undefined) map.set(k, [v]);
  else list.push(v);
};

export function randomWorld(seed: number): World | undefined {
  const r = random(seed);
  const catalog = baseCatalog();
  for (const rule of r.subset(POOL, 0.35)) catalog[rule.resource]![rule.relation]![rule.list].push(rule.ref);
  if (modelStrata(catalog) === undefined) return undefined;
  const truth = (): Truth => (r.next() < 0.75 ? T : r.next() < 0.5 ? F : U);
  const world: World = { catalog, ids: IDS, held: new Map(), sets: new Map(), links: new Map() };
  for (const [resource, relations] of Object.entries(catalog)) {
    for (const [relation, shape] of Object.entries(relations)) {
      for (const id of IDS) {
        for (const subject of shape.subjects) {
          if (subject === "user") for (const user of USERS) if (r.next() < 0.15) push(world.held, nodeKey(resource, id, relation), { user, truth: truth() });
          if (subject === "user:*" && r.next() < 0.06) push(world.held, nodeKey(resource, id, relation), { user: "", truth: truth() });
          const hash = subject.indexOf("#");
          if (hash > 0) {
            for (const other of IDS) if (r.next() < 0.12) push(world.sets, nodeKey(resource, id, relation), { resource: subject.slice(0, hash), id: other, relation: subject.slice(hash + 1), truth: truth() });
          } else if (subject !== "user" && subject !== "user:*") {
            for (const other of IDS) if (r.next() < 0.3) push(world.links, nodeKey(resource, id, relation), { resource: subject, id: other, truth: truth() });
          }
        }
      }
    }
  }
  return world;
}


// ------------------------------------------------------------ the model

export const isLink = (rel: Rel) => rel.subjects.every((s) => !s.includes("#") && !s.startsWith("user"));

/**
 * Each pair's stratum by relaxation: at least each positive dependency's,
 * above each negative one's. Undefined when a stratum passes the number of
 * pairs: only a cycle through an `unless` keeps raising them.
 */
export function modelStrata(catalog: Catalog): Map<string, number> | undefined {
  const deps: { from: string; to: string; neg: boolean }[] = [];
  const targets = (resource: string, ref: Ref) =>
    ref.through === "" ? [`${resource}#${ref.relation}`] : catalog[resource]![ref.through]!.subjects.map((t) => `${t}#${ref.relation}`);
  for (const [resource, relations] of Object.entries(catalog)) {
    for (const [name, rel] of Object.entries(relations)) {
      const from = `${resource}#${name}`;
      for (const s of rel.subjects) if (s.includes("#")) deps.push({ from, to: s, neg: false });
      for (const ref of [...rel.inherits, ...rel.requires]) for (const to of targets(resource, ref)) deps.push({ from, to, neg: false });
      for (const ref of rel.unless) for (const to of targets(resource, ref)) deps.push({ from, to, neg: true });
    }
  }
  const stratum = new Map<string, number>();
  for (let changed = true; changed; ) {
    changed = false;
    for (const d of deps) {
      const want = (stratum.get(d.to) ?? 0) + (d.neg ? 1 : 0);
      if ((stratum.get(d.from) ?? 0) < want) {
        if (want > deps.length) return undefined;
        stratum.set(d.from, want);
        changed = true;
      }
    }
  }
  return stratum;
}

/** The truth of every node for one user, with the full bound. */
export function model(world: World, user: string): (resource: string, id: string, relation: string) => Truth {
  const { catalog } = world;
  const strata = modelStrata(catalog)!;
  const value = new Map<string, Truth>(); // node + "\0" + hops left
  const get = (resource: string, id: string, relation: string, b: number): Truth => (b < 0 ? F : (value.get(`${nodeKey(resource, id, relation)}\0${b}`) ?? F));
  const or = (xs: Truth[]): Truth => xs.reduce<Truth>((a, x) => (x > a ? x : a), F);
  const and = (xs: Truth[]): Truth => xs.reduce<Truth>((a, x) => (x < a ? x : a), T);
  const linked = (resource: string, id: string, link: string) => world.links.get(nodeKey(resource, id, link)) ?? [];
  const entry = (resource: string, id: string, ref: Ref): Truth =>
    ref.through === ""
      ? get(resource, id, ref.relation, HOPS)
      : or(linked(resource, id, ref.through).map((l) => and([l.truth, get(l.resource, l.id, ref.relation, HOPS)])));
  const nodes: { resource: string; id: string; relation: string; rel: Rel; stratum: number }[] = [];
  for (const [resource, relations] of Object.entries(catalog)) {
    for (const [relation, rel] of Object.entries(relations)) {
      if (isLink(rel)) continue;
      for (const id of world.ids) nodes.push({ resource, id, relation, rel, stratum: strata.get(`${resource}#${relation}`) ?? 0 });
    }
  }
  const top = Math.max(0, ...nodes.map((n) => n.stratum));
  for (let s = 0; s <= top; s++) {
    for (let changed = true; changed; ) {
      changed = false;
      for (const n of nodes.filter((x) => x.stratum === s)) {
        const guard = and([...n.rel.requires.map((ref) => entry(n.resource, n.id, ref)), ...n.rel.unless.map((ref) => (2 - entry(n.resource, n.id, ref)) as Truth)]);
        for (let b = 0; b <= HOPS; b++) {
          const ways: Truth[] = [];
          for (const g of world.held.get(nodeKey(n.resource, n.id, n.relation)) ?? []) if (g.user === user || g.user === "") ways.push(g.truth);
          for (const g of world.sets.get(nodeKey(n.resource, n.id, n.relation)) ?? []) ways.push(and([g.truth, get(g.resource, g.id, g.relation, b - 1)]));
          for (const ref of n.rel.inherits) {
            if (ref.through === "") ways.push(get(n.resource, n.id, ref.relation, b));
            else for (const l of linked(n.resource, n.id, ref.through)) ways.push(and([l.truth, get(l.resource, l.id, ref.relation, b - 1)]));
          }
          const v = and([or(ways), guard]);
          const k = `${nodeKey(n.resource, n.id, n.relation)}\0${b}`;
          if (v > (value.get(k) ?? F)) {
            value.set(k, v);
            changed = true;
          }
        }
      }
    }
  }
  return (resource, id, relation) => get(resource, id, relation, HOPS);
}

/**
 * Long chains, where the bound decides: teams nested 20 deep, the
 * document's viewers and its blocked list each a team of the chain, its
 * org's members another; each `requires` and `unless` entry is decided
 * with a fresh 16 hops, not what the path to it left.
 */
export function chainWorld(viewerTeam: number, blockedTeam: number | undefined, orgTeam: number): World {
  const catalog = baseCatalog();
  catalog.document!.viewer!.unless.push(here("blocked"));
  catalog.document!.viewer!.requires.push(via("org", "member"));
  const ids = Array.from({ length: 21 }, (_, i) => String(i));
  const world: World = { catalog, ids, held: new Map(), sets: new Map(), links: new Map() };
  push(world.held, nodeKey("team", "0", "member"), { user: "ann", truth: T });
  for (let i = 1; i <= 20; i++) push(world.sets, nodeKey("team", String(i), "member"), { resource: "team", id: String(i - 1), relation: "member", truth: T });
  push(world.sets, nodeKey("document", "1", "viewer"), { resource: "team", id: String(viewerTeam), relation: "member", truth: T });
  if (blockedTeam !== undefined) push(world.sets, nodeKey("document", "1", "blocked"), { resource: "team", id: String(blockedTeam), relation: "member", truth: T });
  push(world.links, nodeKey("document", "1", "org"), { resource: "org", id: "7", truth: T });
  push(world.sets, nodeKey("org", "7", "member"), { resource: "team", id: String(orgTeam), relation: "member", truth: T });
  return world;
}

/** The chains' cases: where the teams hold the viewer, the blocked list and the org's members, and whether ann then views. */
export const CHAIN_CASES: { viewerTeam: number; blockedTeam: number | undefined; orgTeam: number; held: Truth; why: string }[] = [
  { viewerTeam: 15, blockedTeam: undefined, orgTeam: 15, held: T, why: "16 hops to the viewer, 16 from the org" },
  { viewerTeam: 16, blockedTeam: undefined, orgTeam: 15, held: F, why: "17 hops to the viewer" },
  { viewerTeam: 15, blockedTeam: undefined, orgTeam: 16, held: F, why: "17 hops from the org: the requires fails" },
  { viewerTeam: 15, blockedTeam: 15, orgTeam: 15, held: F, why: "blocked 16 hops away: the unless blocks" },
  { viewerTeam: 15, blockedTeam: 16, orgTeam: 15, held: T, why: "blocked 17 hops away: too far to block" },
];
