/**
 * Paging over many sources of ids at once, for the graph's lookup and who
 * can (graph-store.ts): the algorithm, written once for both and for both
 * of their statements (the plain page's and the one through conditional
 * paths), each of which brings its own `src` and `probe`.
 */

/**
 * A page of the `lim` smallest distinct ids after a cursor over many
 * sources, each a run of ids in order in an index (lookup's: the folders a
 * user reaches; who can's: the teams that hold a relation), without reading
 * `lim` ids from every source (1,000 folders would be 100,000 rows for a
 * page of 100).
 *
 * `src` (a CTE the statement defines) has a row per question and source:
 * n (the question), lim, after, and the source (kind, a, b, c, res, rel,
 * which `probe` reads). Then:
 * 1. heads: the first id of each source after the cursor (one probe a
 *    source); if those hold fewer than `lim` distinct ids, then m - 1 more
 *    from each source that had one, m = ceil(lim / those sources) + 1:
 *    about `lim` rows more, and a probe a live source.
 * 2. bound: if the heads hold `lim` distinct ids, the `lim`-th smallest:
 *    every id of the page is at most it (there are `lim` ids up to it).
 *    Otherwise none ('': ids are never empty).
 * 3. found: each source's ids up to the bound (all of them without one)
 *    that can be on the page: those of its heads, then, only for a source
 *    whose heads were all under the bound and did not run out, a read from
 *    its last head on, up to the bound (the index range stops there), of
 *    at most `lim` less the distinct heads of the question up to that last
 *    head (`ranked`: every one of those is on the page before any id the
 *    read finds, so the page has room for no more of them). 1,000 folders
 *    whose first documents are each past the bound but for 100 cost 100
 *    probes here, not 1,000; teams whose members' ids do not interleave
 *    read 101 - 12, 101 - 24, ... ids, not 89 each (who can's bench
 *    question: 477 rows found, not 813).
 * 4. pages: each question's found ids, distinct, in order, the first `lim`;
 *    computed once for all questions with the same sources that have ids
 *    after the cursor (`sig`): the documents of a folder that hold nothing
 *    of their own have the folder's page.
 * Complete: an id x of the page held by a source past its heads is under
 * the bound, and the source's ids from its last head to x, with the
 * question's distinct heads up to that last head, are all on the page: at
 * most `lim`. So the read finds x, for every source that holds it
 * (REACHED_BY, graph-store.ts, counts on that).
 *
 * A coalesced batch reads each source once in each step however many
 * questions name it (fifty who-can questions on a folder's documents share
 * its teams): the probes are over the distinct sources (`sid`), joined back
 * by number, and found's read is as long as the question that needs most
 * of it asks (the rest is ids of the source beyond some page: harmless). The
 * ids read are put in order once for the whole batch (`rk`), and each
 * question's heads again on their own (`ranked`), for its bound and its
 * room.
 */
/**
 * Reads a source's ids after `p.after` in order, `limit` at most (an SQL
 * expression), up to `p.upto` when `bounded`; `gate` is a condition on
 * `p` added to each branch (so that only one of two branches reads).
 */
export type Probe = (limit: string, bounded: boolean, gate: string) => string;

/**
 * What a page's statement adds for questions with contextual grants
 * (contextual-pages-store.ts, graph-store.ts): q's columns (`columns`, named `names`),
 * CTEs after q, a term of the walk's start, steps of its hop, sources and
 * their probe. Each starts with its separator; the other statements add none.
 */
export interface PageExtra {
  columns: string;
  names: string;
  ctes: string;
  start: string;
  hops: string;
  sources: string;
  probe: Probe;
}

export const NO_EXTRA: PageExtra = { columns: "", names: "", ctes: "", start: "", hops: "", sources: "", probe: () => "" };

/** A probe and the extra's after it. */
export const andExtra = (probe: Probe, x: PageExtra): Probe => (limit, bounded, gate) => probe(limit, bounded, gate) + x.probe(limit, bounded, gate);

export const PAGE_CTES = (probe: Probe) => `
  sources AS MATERIALIZED (
    SELECT src.*, dense_rank() OVER (ORDER BY src.kind, src.a, src.b, src.c, src.res, src.rel, src.after, src.lim) AS sid FROM src
  ),
  firsts AS MATERIALIZED (
    SELECT p.sid, x.id
    FROM (SELECT DISTINCT sid, kind, a, b, c, res, rel, after FROM sources) p
    CROSS JOIN LATERAL (${probe("1", false, "")}) x(id)
  ),
  depth AS MATERIALIZED (
    SELECT d.n, CASE WHEN d.ids >= d.lim OR d.live = 0 THEN 1 ELSE (d.lim + d.live - 1) / d.live + 1 END AS m
    FROM (SELECT k.n, k.lim, count(f.sid) AS live, count(DISTINCT f.id) AS ids
          FROM sources k LEFT JOIN firsts f ON f.sid = k.sid GROUP BY k.n, k.lim) d
  ),
  counted AS MATERIALIZED (SELECT k.*, d.m FROM sources k JOIN depth d ON d.n = k.n),
  heads AS MATERIALIZED (
    SELECT h.sid, h.m, h.id, dense_rank() OVER (ORDER BY h.id) AS rk, count(*) OVER per AS got, max(h.id) OVER per AS last
    FROM (SELECT f.sid, p.m, f.id FROM (SELECT DISTINCT sid, m FROM counted) p JOIN firsts f ON f.sid = p.sid
          UNION ALL
          SELECT p.sid, p.m, x.id
          FROM (SELECT DISTINCT k.sid, k.kind, k.a, k.b, k.c, k.res, k.rel, f.id AS after, k.m
                FROM counted k JOIN firsts f ON f.sid = k.sid WHERE k.m > 1) p
          CROSS JOIN LATERAL (${probe("p.m - 1", false, "")}) x(id)) h
    WINDOW per AS (PARTITION BY h.sid, h.m)
  ),
  ranked AS MATERIALIZED (
    SELECT d.n, d.lim, d.id, row_number() OVER (PARTITION BY d.n ORDER BY d.rk) AS qrk
    FROM (SELECT DISTINCT k.n, k.lim, h.rk, h.id FROM counted k JOIN heads h ON h.sid = k.sid AND h.m = k.m) d
  ),
  bound AS MATERIALIZED (
    SELECT q.n, coalesce(x.upto, '') AS upto
    FROM q LEFT JOIN (SELECT r.n, r.id AS upto FROM ranked r WHERE r.qrk = r.lim) x ON x.n = q.n
  ),
  found AS MATERIALIZED (
    SELECT f.sid, f.m, f.upto, f.id, dense_rank() OVER (ORDER BY f.id) AS rk
    FROM (SELECT p.sid, p.m, p.upto, h.id
          FROM (SELECT DISTINCT k.sid, k.m, b.upto FROM counted k JOIN bound b ON b.n = k.n) p
          JOIN heads h ON h.sid = p.sid AND h.m = p.m AND (p.upto = '' OR h.id <= p.upto)
          UNION ALL
          SELECT p.sid, p.m, p.upto, x.id
          FROM (SELECT k.sid, k.kind, k.a, k.b, k.c, k.res, k.rel, k.m, h.last AS after, b.upto, max(k.lim - r.qrk) AS more
                FROM counted k JOIN bound b ON b.n = k.n
                JOIN heads h ON h.sid = k.sid AND h.m = k.m AND h.got = k.m AND h.id = h.last AND (b.upto = '' OR h.last < b.upto)
                JOIN ranked r ON r.n = k.n AND r.id = h.last
                GROUP BY k.sid, k.kind, k.a, k.b, k.c, k.res, k.rel, k.m, h.last, b.upto
                HAVING max(k.lim - r.qrk) > 0) p
          CROSS JOIN LATERAL (${probe("p.more", true, " AND p.upto <> ''")}
            UNION ALL${probe("p.more", false, " AND p.upto = ''")}) x(id)) f
  ),
  sig AS MATERIALIZED (
    SELECT k.n, k.lim, k.m, b.upto, array_agg(k.sid ORDER BY k.sid) AS sids
    FROM counted k JOIN bound b ON b.n = k.n
    WHERE k.sid IN (SELECT h.sid FROM heads h)
    GROUP BY k.n, k.lim, k.m, b.upto
  ),
  pages AS MATERIALIZED (
    SELECT g.sids, g.lim, g.m, g.upto, array_agg(d.id ORDER BY d.rk) AS ids
    FROM (SELECT DISTINCT sids, lim, m, upto FROM sig) g
    CROSS JOIN LATERAL (SELECT DISTINCT ON (f.rk) f.rk, f.id FROM found f
                        WHERE f.sid = ANY (g.sids) AND f.m = g.m AND f.upto = g.upto ORDER BY f.rk LIMIT g.lim) d
    GROUP BY g.sids, g.lim, g.m, g.upto
  )`;

/** A question's page (after PAGE_CTES). */
export const PAGE_OF_Q = `coalesce((SELECT g.ids FROM sig x JOIN pages g ON g.sids = x.sids AND g.lim = x.lim AND g.m = x.m AND g.upto = x.upto
                              WHERE x.n = q.n), '{}')`;
