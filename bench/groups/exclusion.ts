/**
 * The exclusion group, `requires` and `unless` (docs/exclusion.md): an
 * application of its own whose documents' viewers are taken away by a
 * blocked list held by a team of 1,000 (none of them the users asked about),
 * and whose readers must be members of the document's org; its checks
 * against the direct check of the bench application, alternated, as ratios
 * (the issue's targets: 0.5 or more each); then lookup's first page of 100
 * over 100,000 viewable documents, each with the blocked list in the way,
 * at 10 in flight, each call another of ten users who view them through a
 * team (target: p99 under 100 ms on Postgres). Ten users, so that the
 * calls in flight share nothing: the same question asked ten times at once
 * is read once (check-store.ts, distinctQuestions).
 */
import * as data from "../dataset.js";
import { ADMIN_KEY, api } from "../harness/api.js";
import { mark, type Bench } from "../harness/bench.js";
import { drive, loadOnce, row, type Measured } from "../harness/drive.js";
import { HIERARCHY_ROUNDS, SECONDS } from "../harness/options.js";
import { ms, progress, say } from "../harness/output.js";

const APP = "bench-exclusion";
const USERS = 1_000;
const BLOCKED_TEAM = 1_000;
/** Documents of the lookup users, each viewable and each behind the blocked list. */
const LOOKUP_DOCUMENTS = 100_000;
const LOOKUP_IN_FLIGHT = 10;
/** The lookup users, each a member of the team `readers`, which views every lookup document. */
const LOOKUP_USERS = 10;
const reader = (i: number) => `reader${i}`;

const CATALOG = {
  resources: [
    { resource: "team", description: "", actions: ["read"], relations: [{ name: "member", actions: ["read"], subjects: ["user", "team#member"] }] },
    { resource: "org", description: "", actions: ["read"], relations: [{ name: "member", actions: ["read"], subjects: ["user", "team#member"] }] },
    {
      resource: "document",
      description: "",
      actions: ["read", "review"],
      relations: [
        { name: "org", actions: [], subjects: ["org"] },
        { name: "blocked", actions: [], subjects: ["user", "team#member"] },
        { name: "viewer", actions: ["read"], subjects: ["user", "team#member"], unless: [{ relation: "blocked" }] },
        { name: "reviewer", actions: ["review"], subjects: ["user"], requires: [{ through: "org", relation: "member" }] },
      ],
    },
  ],
};

const user = (i: number) => `xu${i}`;
const doc = (i: number) => `xd${String(i).padStart(6, "0")}`;

/** The grants: the blocked team, then per user a document it views and reviews (blocked list and org on it), then the lookup users' documents. */
function* grants(): Generator<Record<string, unknown>> {
  for (let i = 0; i < BLOCKED_TEAM; i++) yield { userId: `blocked${i}`, resource: "team", resourceId: "blocked", relation: "member" };
  const blockedSet = { resource: "team", resourceId: "blocked", relation: "member" };
  for (let i = 0; i < USERS; i++) {
    yield { userId: user(i), resource: "document", resourceId: doc(i), relation: "viewer" };
    yield { userId: user(i), resource: "document", resourceId: doc(i), relation: "reviewer" };
    yield { subject: blockedSet, resource: "document", resourceId: doc(i), relation: "blocked" };
    yield { subject: { resource: "org", resourceId: "acme" }, resource: "document", resourceId: doc(i), relation: "org" };
    yield { userId: user(i), resource: "org", resourceId: "acme", relation: "member" };
  }
  const readers = { resource: "team", resourceId: "readers", relation: "member" };
  for (let i = 0; i < LOOKUP_USERS; i++) yield { userId: reader(i), resource: "team", resourceId: "readers", relation: "member" };
  for (let i = 0; i < LOOKUP_DOCUMENTS; i++) {
    yield { subject: readers, resource: "document", resourceId: `l${String(i).padStart(6, "0")}`, relation: "viewer" };
    yield { subject: blockedSet, resource: "document", resourceId: `l${String(i).padStart(6, "0")}`, relation: "blocked" };
  }
}

interface ExclusionFigures {
  grants: number;
  rounds: number;
  direct: Measured[];
  unless: Measured[];
  requires: Measured[];
  unlessRatio: number;
  requiresRatio: number;
  lookup: Measured;
}

export async function exclusion(b: Bench): Promise<void> {
  const base = `/api/v1/applications/${APP}`;
  await api(b.url, "POST", "/api/v1/applications", { appId: APP }, ADMIN_KEY);
  const { key } = (await api(b.url, "POST", `${base}/api-keys`, { name: "bench" }, ADMIN_KEY)) as { key: string };
  await api(b.url, "PUT", `${base}/resources`, CATALOG, ADMIN_KEY);
  let loaded = 0;
  let chunk: Record<string, unknown>[] = [];
  const flush = async () => {
    await api(b.url, "POST", "/api/v1/authorization/relationships/bulk", { writes: chunk }, key);
    loaded += chunk.length;
    chunk = [];
    progress(`loading: the exclusion application's grants ${loaded}`);
  };
  for (const g of grants()) {
    chunk.push(g);
    if (chunk.length === 5000) await flush();
  }
  if (chunk.length > 0) await flush();
  say(`loaded the exclusion application, ${loaded} grants`);

  const direct = data.grantChecks(b.grants, 1000);
  const unless = Array.from({ length: USERS }, (_, i) => ({ userId: user(i), resource: "document", resourceId: doc(i), action: "read" }));
  const requires = Array.from({ length: USERS }, (_, i) => ({ userId: user(i), resource: "document", resourceId: doc(i), action: "review" }));
  // The answers first: every one allowed (none of the users is on the blocked team; each is in the org).
  for (const [name, checks] of [["unless", unless], ["requires", requires]] as const) {
    const { results } = (await api(b.url, "POST", "/api/v1/authorization/check/batch", { checks }, key)) as { results: { allowed: boolean }[] };
    const wrong = results.filter((r) => !r.allowed).length;
    if (wrong > 0) throw new Error(`exclusion: ${wrong} of ${results.length} ${name} checks were denied`);
  }
  const restAs = (k: string) => (bodies: unknown[], label: string) =>
    drive({ kind: "rest", url: b.url, method: "POST", path: "/api/v1/authorization/check", key: k, bodies }, label, b.service.pid, b.postgresCpu);
  const runs = { direct: [] as Measured[], unless: [] as Measured[], requires: [] as Measured[] };
  for (let round = 1; round <= HIERARCHY_ROUNDS; round++) {
    runs.direct.push(await restAs(b.key)(direct, `exclusion: REST check, direct, allowed by a grant (${round})`));
    runs.unless.push(await restAs(key)(unless, `exclusion: REST check, viewer unless blocked (a team of 1,000) (${round})`));
    runs.requires.push(await restAs(key)(requires, `exclusion: REST check, reviewer requires member through org (${round})`));
  }
  const mean = (rs: Measured[]) => rs.reduce((n, r) => n + r.rps, 0) / rs.length;

  // Lookup's first page of 100 of 100,000, the blocked list on each, at 10 in flight, ten users in turn.
  const lookupBodies = Array.from({ length: LOOKUP_USERS }, (_, i) => ({ userId: reader(i), resource: "document", action: "read", pageSize: 100 }));
  for (const body of lookupBodies) {
    const page = (await api(b.url, "POST", "/api/v1/authorization/lookup", body, key)) as { resourceIds: string[] };
    if (page.resourceIds.length !== 100) throw new Error(`exclusion: ${body.userId}'s first page held ${page.resourceIds.length} ids, not 100`);
  }
  progress(`running: exclusion: lookup, first page of 100 of 100,000 (${LOOKUP_IN_FLIGHT} in flight, ${LOOKUP_USERS} users)`);
  const spec = { kind: "rest" as const, url: b.url, method: "POST", path: "/api/v1/authorization/lookup", key, bodies: lookupBodies };
  await loadOnce(spec, 2, LOOKUP_IN_FLIGHT, b.service.pid, b.postgresCpu);
  const lookup = await loadOnce(spec, SECONDS, LOOKUP_IN_FLIGHT, b.service.pid, b.postgresCpu);

  const figures: ExclusionFigures = {
    grants: loaded,
    rounds: HIERARCHY_ROUNDS,
    ...runs,
    unlessRatio: mean(runs.unless) / mean(runs.direct),
    requiresRatio: mean(runs.requires) / mean(runs.direct),
    lookup,
  };
  mark(b, "exclusion");
  b.sections.set("exclusion", {
    figures: () => figures,
    lines: () => [
      "",
      `requires and unless (${figures.grants} grants; ${figures.rounds} rounds alternated with the direct check; target 0.5 or more):`,
      `| figure | req/s | ratio to direct | p99 ms | server CPU µs | Postgres CPU µs |`,
      `|---|---:|---:|---:|---:|---:|`,
      ...(["direct", "unless", "requires"] as const).map((k) => {
        const rs = runs[k];
        const r = row(k, rs[rs.length - 1]!);
        return `| ${k} | ${Math.round(mean(rs))} | ${(mean(rs) / mean(runs.direct)).toFixed(2)} | ${ms(r.p99)} | ${r.serverUs?.toFixed(0) ?? "n/a"} | ${r.databaseUs?.toFixed(0) ?? "n/a"} |`;
      }),
      `lookup through the exclusion, first page of 100 of 100,000 at ${LOOKUP_IN_FLIGHT} in flight, ${LOOKUP_USERS} users: ${Math.round(lookup.rps)} req/s, p50 ${ms(lookup.p50)} ms, p99 ${ms(lookup.p99)} ms (target p99 < 100 ms on Postgres)`,
    ],
  });
}
