/**
 * The hierarchy group, groups and hierarchy: an application of its own whose
 * catalog has teams, folders and documents (its data set: bench/hierarchy.ts)
 * and the check through the graph (4 hops allowed, 6 levels denied) against
 * the direct check of the bench application, alternated, and lookup and who
 * can through it, with a pass through every page of each (exactly once).
 */
import * as data from "../dataset.js";
import * as graph from "../hierarchy.js";
import { ADMIN_KEY, api } from "../harness/api.js";
import { mark, type Bench } from "../harness/bench.js";
import { drive, row, type Measured, type Row } from "../harness/drive.js";
import { CONNECTIONS, HIERARCHY_LOOKUP_PAGES, HIERARCHY_ROUNDS, SECONDS } from "../harness/options.js";
import { micros, ms, progress, say } from "../harness/output.js";

export async function hierarchy(b: Bench): Promise<void> {
  const restAs = (k: string) => (bodies: unknown[], label: string, path = "/api/v1/authorization/check") =>
    drive({ kind: "rest", url: b.url, method: "POST", path, key: k, bodies }, label, b.service.pid, b.postgresCpu);
  const figures = await measureHierarchy(b, restAs, b.postgresCpu !== undefined);
  mark(b, "hierarchy");
  b.sections.set("hierarchy", { figures: () => figures, lines: () => hierarchyLines(figures, b.rows) });
}

/** A pass through every page of lookup or who can, and whether each id came exactly once. */
interface Paging {
  pageSize: number;
  pages: number;
  /** Ids returned, over all pages. */
  ids: number;
  expected: number;
  /** Every expected id once, none other, in ascending order across pages. */
  exact: boolean;
  /** Wall time of the whole pass, one page at a time, and of its slowest page. */
  ms: number;
  slowestPageMs: number;
}

/** Latencies of calls made one at a time (no other load). */
interface Serial {
  calls: number;
  p50: number;
  p99: number;
}

/** Groups and hierarchy (issue 26), one run: the checks as ratios to the direct check alternated with them. */
interface HierarchyFigures {
  /** Grants of the hierarchical application, and the time their load took. */
  grants: number;
  loadSeconds: number;
  rounds: number;
  /** By round: the direct check of the bench application (allowed by a grant), the graph's statement at 0 hops, 4 hops allowed, 6 levels denied. */
  direct: Measured[];
  zeroHops: Measured[];
  hops4: Measured[];
  denied: Measured[];
  /** req/s over the direct check's, mean of the rounds. */
  zeroHopsRatio: number;
  hops4Ratio: number;
  deniedRatio: number;
  /** At CONNECTIONS in flight; undefined when one call alone was too slow for any to be answered within a run (see measureHierarchy). */
  lookup: Measured | undefined;
  whoCan: Measured | undefined;
  lookupSerial: Serial;
  whoCanSerial: Serial;
  lookupPaging: Paging[];
  whoCanPaging: Paging;
  /** Whether Postgres's CPU per request was measured (its server on this machine). */
  databaseCpu: boolean;
}

/**
 * Groups and hierarchy: an application of its own (bench/hierarchy.ts),
 * loaded through the bulk endpoint, its answers verified (batch checks: the
 * 4-hop questions all allowed, the 6-level ones all denied), then:
 * - alternated, HIERARCHY_ROUNDS times: the direct check of the bench
 *   application (allowed by a grant, the same bodies as the rest group's),
 *   the hierarchical application's check allowed by a grant on the document
 *   itself (its statement at 0 hops), allowed through 4 hops, denied after
 *   6 levels and a team of 1,000: each at CONNECTIONS in flight, with the
 *   service's and Postgres's CPU per request;
 * - lookup (the first page of 100 of a user's 100,000 documents through
 *   1,000 folders and 3 nested teams) and who can (the first page of 100 of
 *   a document's 10,000 users through teams) at CONNECTIONS in flight, then
 *   one at a time;
 * - a pass through every page of each, one page at a time: each id exactly
 *   once, in order (a failure is reported and fails the run's exit code).
 */
async function measureHierarchy(
  { url, key, grants, rows }: Bench,
  restAs: (key: string) => (bodies: unknown[], label: string, path?: string) => Promise<Measured>,
  databaseCpu: boolean,
): Promise<HierarchyFigures> {
  const t0 = Date.now();
  const base = `/api/v1/applications/${graph.GRAPH_APP_ID}`;
  await api(url, "POST", "/api/v1/applications", { appId: graph.GRAPH_APP_ID }, ADMIN_KEY);
  const { key: graphKey } = (await api(url, "POST", `${base}/api-keys`, { name: "bench" }, ADMIN_KEY)) as { key: string };
  await api(url, "PUT", `${base}/resources`, graph.graphCatalog, ADMIN_KEY);
  let loaded = 0;
  for (const writes of graph.chunks(graph.graphGrants(), 5000)) {
    await api(url, "POST", "/api/v1/authorization/relationships/bulk", { writes }, graphKey);
    loaded += writes.length;
    progress(`loading: the hierarchy's grants ${loaded}`);
  }
  const loadSeconds = (Date.now() - t0) / 1000;
  say(`loaded the hierarchy's application, ${loaded} grants (teams, folders, documents) in ${loadSeconds.toFixed(1)} s`);

  const directRest = restAs(key);
  const graphRest = restAs(graphKey);
  const direct = data.grantChecks(grants, 1000);
  const zero = graph.directChecks(1000);
  const hops4 = graph.hops4Checks(1000);
  const denied = graph.deniedChecks(1000);
  // The answers first: a figure of wrong answers would measure nothing.
  const expectAnswers = async (name: string, checks: unknown[], callKey: string, allowed: boolean) => {
    const { results } = (await api(url, "POST", "/api/v1/authorization/check/batch", { checks }, callKey)) as { results: { allowed: boolean }[] };
    const wrong = results.filter((r) => r.allowed !== allowed).length;
    if (wrong > 0) throw new Error(`hierarchy: ${wrong} of ${results.length} ${name} checks were answered ${!allowed}`);
  };
  await expectAnswers("direct", direct, key, true);
  await expectAnswers("0-hop", zero, graphKey, true);
  await expectAnswers("4-hop", hops4, graphKey, true);
  await expectAnswers("6-level", denied, graphKey, false);

  const runs = { direct: [] as Measured[], zeroHops: [] as Measured[], hops4: [] as Measured[], denied: [] as Measured[] };
  for (let round = 1; round <= HIERARCHY_ROUNDS; round++) {
    runs.direct.push(await directRest(direct, `hierarchy: REST check, direct, allowed by a grant (${round})`));
    runs.zeroHops.push(await graphRest(zero, `hierarchy: REST check, graph, 0 hops (${round})`));
    runs.hops4.push(await graphRest(hops4, `hierarchy: REST check, graph, 4 hops (${round})`));
    runs.denied.push(await graphRest(denied, `hierarchy: REST check, graph, denied after 6 levels (${round})`));
  }
  const mean = (rs: Measured[]) => rs.reduce((n, r) => n + r.rps, 0) / rs.length;

  const LOOKUP = "/api/v1/authorization/lookup";
  const WHO_CAN = "/api/v1/authorization/subjects";
  const lookupBody = { ...graph.lookupQuestion, pageSize: 100 };
  const whoCanBodies = graph.whoCanQuestions(100);

  // One at a time first: 3 calls to warm, then up to 200 measured, for 30 s at most (10 at least).
  const serial = async (label: string, path: string, bodies: unknown[]): Promise<Serial> => {
    const times: number[] = [];
    const until = performance.now() + 30_000;
    for (let k = 0; times.length < 200 && (times.length < 10 || performance.now() < until); k++) {
      const t = performance.now();
      await api(url, "POST", path, bodies[k % bodies.length], graphKey);
      if (k >= 3) times.push(performance.now() - t);
      progress(`running: ${label}, one at a time (${k + 1})`);
    }
    times.sort((a, b) => a - b);
    return { calls: times.length, p50: times[Math.floor(times.length / 2)]!, p99: times[Math.min(times.length - 1, Math.floor(times.length * 0.99))]! };
  };
  const lookupSerial = await serial("hierarchy: lookup", LOOKUP, [lookupBody]);
  const whoCanSerial = await serial("hierarchy: who can", WHO_CAN, whoCanBodies);

  // Then CONNECTIONS in flight, unless one call alone is so slow that none
  // would be answered within the run: pages asked together share a
  // statement, each page as dear in it as alone, so CONNECTIONS in flight
  // need about CONNECTIONS times one page's time per round, and p99 can
  // only be above the one-at-a-time figure. The service is let finish what
  // the load left queued before anything else is measured.
  const loaded50 = async (label: string, path: string, bodies: unknown[], alone: Serial): Promise<Measured | undefined> => {
    if (alone.p50 * CONNECTIONS > SECONDS * 1000) {
      say(`${label}: not driven at ${CONNECTIONS} in flight: one call alone takes ${alone.p50.toFixed(0)} ms (p50), ${CONNECTIONS} of them about ${((alone.p50 * CONNECTIONS) / 1000).toFixed(0)} s, over the ${SECONDS} s of a run`);
      return undefined;
    }
    const result = await graphRest(bodies, label, path);
    for (let attempt = 1; ; attempt++) {
      try {
        await api(url, "POST", path, bodies[0], graphKey);
        break;
      } catch (error) {
        if (attempt >= 20) throw error;
        await new Promise((r) => setTimeout(r, 5_000));
      }
    }
    return result;
  };
  const lookup = await loaded50("hierarchy: lookup, first page of 100 of 100,000", LOOKUP, [lookupBody], lookupSerial);
  const whoCan = await loaded50("hierarchy: who can, first page of 100 of 10,000", WHO_CAN, whoCanBodies, whoCanSerial);

  // Every page, one at a time: each id exactly once, ascending across pages.
  const pageThrough = async (label: string, path: string, body: Record<string, unknown>, field: string, expected: Set<string>, pageSize: number): Promise<Paging> => {
    let pageToken = "";
    let pages = 0;
    let ids = 0;
    let last = "";
    let ordered = true;
    let slowest = 0;
    const seen = new Set<string>();
    const t = performance.now();
    do {
      const tp = performance.now();
      const page = (await api(url, "POST", path, { ...body, pageSize, pageToken }, graphKey)) as Record<string, unknown>;
      slowest = Math.max(slowest, performance.now() - tp);
      pages++;
      for (const id of page[field] as string[]) {
        if (!(id > last)) ordered = false;
        last = id;
        ids++;
        seen.add(id);
      }
      pageToken = page.nextPageToken as string;
      progress(`running: ${label}, every page of ${pageSize} (${ids} ids)`);
    } while (pageToken !== "" && pages <= expected.size + 1);
    const ms = performance.now() - t;
    const exact = ordered && ids === expected.size && seen.size === expected.size && [...expected].every((id) => seen.has(id));
    if (!exact) {
      say(`FAILED: ${label}: ${ids} ids in ${pages} pages (${seen.size} distinct, ${ordered ? "in order" : "out of order"}), expected each of ${expected.size} once`);
      process.exitCode = 1;
    }
    return { pageSize, pages, ids, expected: expected.size, exact, ms, slowestPageMs: slowest };
  };
  const documents = new Set(Array.from({ length: graph.LOOKUP_DOCS }, (_, i) => graph.lookupDoc(i)));
  const lookupPaging: Paging[] = [];
  for (const pageSize of HIERARCHY_LOOKUP_PAGES) {
    lookupPaging.push(await pageThrough("hierarchy: lookup", LOOKUP, graph.lookupQuestion, "resourceIds", documents, pageSize));
  }
  const users = new Set(Array.from({ length: graph.WHO_TEAMS * graph.WHO_USERS_PER_TEAM }, (_, i) => graph.whoUser(Math.floor(i / graph.WHO_USERS_PER_TEAM), i % graph.WHO_USERS_PER_TEAM)));
  const whoCanPaging = await pageThrough("hierarchy: who can", WHO_CAN, { resource: "document", resourceId: "wc-doc-00", action: "read" }, "userIds", users, 100);

  rows.push(row("hierarchy: REST check, direct, allowed by a grant (reference, 1st round)", runs.direct[0]!, "req/s", 1, true));
  rows.push(row("hierarchy: REST check, graph's statement, allowed by a grant on the document (0 hops, 1st round)", runs.zeroHops[0]!, "req/s", 1, true));
  rows.push(row("hierarchy: REST check, allowed through 4 hops (1st round)", runs.hops4[0]!, "req/s", 1, true));
  rows.push(row("hierarchy: REST check, denied after 6 levels and a team of 1,000 (1st round)", runs.denied[0]!, "req/s", 1, true));
  if (lookup !== undefined) rows.push(row("hierarchy: lookup, first page of 100 of 100,000 documents", lookup));
  if (whoCan !== undefined) rows.push(row("hierarchy: who can, first page of 100 of 10,000 users", whoCan));
  return {
    grants: loaded,
    loadSeconds,
    rounds: HIERARCHY_ROUNDS,
    ...runs,
    zeroHopsRatio: mean(runs.zeroHops) / mean(runs.direct),
    hops4Ratio: mean(runs.hops4) / mean(runs.direct),
    deniedRatio: mean(runs.denied) / mean(runs.direct),
    lookup,
    whoCan,
    lookupSerial,
    whoCanSerial,
    lookupPaging,
    whoCanPaging,
    databaseCpu,
  };
}

/** The hierarchy group's tables: every run of the alternated checks, then the issue's targets, each met or not. */
function hierarchyLines(h: HierarchyFigures, rows: Row[]): string[] {
  const rate = (r: Measured) => Math.round(r.rps).toLocaleString("en-US");
  const db = (r: Measured) => (h.databaseCpu ? micros(r.othersCpuUs?.postgres) : "n/a");
  const met = (ok: boolean) => (ok ? "met" : "**not met**");
  const worstP99 = Math.max(...h.hops4.map((r) => r.p99));
  const share = (figure: string) => {
    const r = rows.find((x) => x.figure === figure);
    return r?.ofCeiling === undefined ? "n/a" : `${Math.round(r.ofCeiling * 100)}%`;
  };
  const lines = [
    "",
    `| groups and hierarchy: REST checks, alternated (${h.rounds} rounds), ${CONNECTIONS} in flight | req/s | p50 ms | p99 ms | service CPU µs | Postgres CPU µs |`,
    "|---|---:|---:|---:|---:|---:|",
  ];
  for (let k = 0; k < h.rounds; k++) {
    for (const [name, r] of [
      ["direct check, allowed by a grant (bench application)", h.direct[k]!],
      ["graph's statement, allowed by a grant on the document (0 hops)", h.zeroHops[k]!],
      ["allowed through 4 hops (user → team → parent team → folder → document)", h.hops4[k]!],
      ["denied after a 6-level folder tree and a team of 1,000", h.denied[k]!],
    ] as const) {
      lines.push(`| ${name} (${k + 1}) | ${rate(r)} | ${ms(r.p50)} | ${ms(r.p99)} | ${micros(r.serverCpuUs)} | ${db(r)} |`);
    }
  }
  const loadedRow = (name: string, r: Measured | undefined) =>
    r === undefined
      ? `| ${name} | not driven: one call alone was too slow (below) | | | | |`
      : `| ${name} | ${rate(r)}${r.errors > 0 ? ` (${r.errors} failed)` : ""} | ${ms(r.p50)} | ${ms(r.p99)} | ${micros(r.serverCpuUs)} | ${db(r)} |`;
  lines.push(
    loadedRow("lookup, first page of 100 of 100,000 documents (1,000 folders, 3 nested teams)", h.lookup),
    loadedRow("who can, first page of 100 of 10,000 users (through teams)", h.whoCan),
  );
  // At CONNECTIONS in flight; when not driven, the one-at-a-time p50 is already above what p99 could be.
  const p99Line = (name: string, r: Measured | undefined, alone: Serial) =>
    r === undefined
      ? `| ${name}, ${CONNECTIONS} in flight: p99 | not driven (one alone: p50 ${ms(alone.p50)} ms) | < 50 ms | ${met(false)} |`
      : `| ${name}, ${CONNECTIONS} in flight: p99${r.errors > 0 ? ` (${r.errors} failed)` : ""} | ${ms(r.p99)} ms | < 50 ms | ${met(r.p99 < 50 && r.errors === 0)} |`;
  const paging = (p: Paging) =>
    `${p.ids.toLocaleString("en-US")} ids in ${p.pages} pages of ${p.pageSize}, ${p.exact ? "each exactly once, in order" : "NOT each exactly once"}; ${(p.ms / 1000).toFixed(1)} s, slowest page ${p.slowestPageMs.toFixed(1)} ms`;
  lines.push(
    "",
    `| groups and hierarchy: the targets (${h.grants.toLocaleString("en-US")} grants of its own, loaded in ${h.loadSeconds.toFixed(1)} s) | figure | target | |`,
    "|---|---:|---|---|",
    `| check allowed through 4 hops ÷ direct check, req/s (mean of ${h.rounds} rounds) | ${h.hops4Ratio.toFixed(2)} | ≥ 0.5 | ${met(h.hops4Ratio >= 0.5)} |`,
    `| check allowed through 4 hops: p99, worst round (${h.hops4.map((r) => ms(r.p99)).join(" / ")}; the direct check's in the same rounds: ${h.direct.map((r) => ms(r.p99)).join(" / ")}) | ${ms(worstP99)} ms | < 15 ms | ${met(worstP99 < 15)} |`,
    `| check denied after 6 levels and a team of 1,000 ÷ direct check, req/s | ${h.deniedRatio.toFixed(2)} | ≥ 0.3 | ${met(h.deniedRatio >= 0.3)} |`,
    `| (for reading) the graph's statement at 0 hops ÷ direct check, req/s | ${h.zeroHopsRatio.toFixed(2)} | | |`,
    p99Line("lookup, first page of 100 of 100,000", h.lookup, h.lookupSerial),
    `| lookup, one at a time: p50 / p99 (${h.lookupSerial.calls} calls) | ${ms(h.lookupSerial.p50)} / ${ms(h.lookupSerial.p99)} ms | | |`,
    ...h.lookupPaging.map((p) => `| lookup, every page: ${paging(p)} | ${p.exact ? "exact" : "FAILED"} | each exactly once | ${met(p.exact)} |`),
    p99Line("who can, first page of 100 of 10,000", h.whoCan, h.whoCanSerial),
    `| who can, one at a time: p50 / p99 (${h.whoCanSerial.calls} calls) | ${ms(h.whoCanSerial.p50)} / ${ms(h.whoCanSerial.p99)} ms | | |`,
    `| who can, every page: ${paging(h.whoCanPaging)} | ${h.whoCanPaging.exact ? "exact" : "FAILED"} | each exactly once | ${met(h.whoCanPaging.exact)} |`,
    `| direct check's share of the ceiling: rest group / the hierarchy's reference (1st round) | ${share("REST check, allowed by a grant")} / ${share("hierarchy: REST check, direct, allowed by a grant (reference, 1st round)")} | not lower than before (--compare-tree) | |`,
  );
  return lines;
}
