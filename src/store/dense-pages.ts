/**
 * Lookup's second way to a page, for answers that are dense among the
 * type's instances (docs/hierarchy.md, "A page of a dense answer").
 *
 * Lookup's sources through links and subject sets are one per node the
 * walk reached (graph-store.ts): a user who views 1,000 folders has 1,000
 * sources of documents, and the page from them (PAGE_CTES) costs a probe
 * and a row of its machinery per source, about 25 µs of Postgres's time
 * each. When those sources hold most of the type's instances, reading the
 * type's edges in id order and keeping those from a reached node finds the
 * page in about a page of rows.
 *
 * So the sources of one question that share (a: the nodes' resource,
 * c: the subject relation, res, rel) and number at least `minSources`
 * are tried together first: subject_relationships read in its primary
 * key's order from the cursor (app_id, resource, resource_id), at most
 * `budget` rows, each kept when its holder is one of the group's nodes (a
 * hashed lookup in `links`, built once a statement, in the same pass). The group's page is
 * `filled` when that gives `lim` distinct ids (every id of the group up to
 * the last of them is among them: the read is in id order) or the read
 * reached the end of the type's rows (it holds every id of the group).
 * A filled group becomes one source (kind 3) whose ids are that array, and
 * PAGE_CTES merges it with the others as it merges any source: it never
 * reads more than a source's first `lim` ids, which the array holds. A
 * group that does not fill stays the sources it was, read as before.
 *
 * The budget is `rowsPerSource` rows per source and per id of the page,
 * so every read is bounded by what the walk reached. A row read costs
 * about 1 µs, a source read one by one 10 to 50 µs with its share of the
 * page's machinery: a try that does not fill added 2-30% to the pages
 * measured in docs/performance.md ("Lookup's dense pages"), and one that
 * fills cost a third of the page read source by source.
 */
import type { Probe } from "./keyset-pages.js";

export interface DenseSettings {
  /** Fewer sources than this are read one by one: a page from them costs less than a failed try. */
  minSources: number;
  /** The rows read from the type's edges at most, per source and per id asked. */
  rowsPerSource: number;
}

/** The service's settings; the tests also build the statements with others (test/graph-dense-pages.test.ts). */
export const DENSE: DenseSettings = { minSources: 32, rowsPerSource: 4 };

/**
 * The edges into instances of `resource` (an SQL expression) in id order,
 * `where` also holding, `limit` at most: the primary key's columns alone, so
 * that the read is the index's, with no row of the table visited.
 */
const edgesOf = (resource: string, where: string, limit: string) => `
        SELECT s.resource_id, s.relation, s.subject_resource, s.subject_id, s.subject_relation
        FROM subject_relationships s
        WHERE s.app_id = $1 AND s.resource = ${resource} AND ${where}
        ORDER BY s.resource_id LIMIT ${limit}`;

/**
 * Whether the edge `s` of edgesOf counts (`grants`: live, and with no
 * condition for the plain statements): one index probe for the row's
 * expiry and condition, made only for the edges kept (a page's, not the
 * rows read past). A subquery fenced with OFFSET 0, so that it stays a
 * probe per edge kept.
 */
const counts = (grants: (alias: string) => string, resource: string) => `EXISTS (
        SELECT 1 FROM subject_relationships g
        WHERE g.app_id = $1 AND g.resource = ${resource} AND g.resource_id = s.resource_id AND g.relation = s.relation
          AND g.subject_resource = s.subject_resource AND g.subject_id = s.subject_id AND g.subject_relation = s.subject_relation
          AND ${grants("g")} OFFSET 0)`;

/** The grouped sources' columns beside the question's, with or without the answer relation (`g`). */
const groupColumns = (reach: boolean) => `n, lim, after, a, c, res, rel${reach ? ", g" : ""}`;

/**
 * `links` (lookup's sources through the walk's nodes: one per node and
 * edge of `last`) and `dense` (the groups tried, with their ids and
 * whether they filled). After `walk`; `grants` says which rows count.
 * Whether the read reached the end of the type's rows is counted only for
 * a group that did not fill, in the index's order: without ORDER BY the
 * planner may count by a sequential scan, which reads the whole table to
 * find few rows of a type. The membership test is wrapped in IS TRUE so
 * that it stays a hashed subplan: pulled up into a join, the read would
 * lose its order and be sorted whole.
 */
export const denseCtes = (grants: (alias: string) => string, reach: boolean, dense: DenseSettings) => `
  links AS MATERIALIZED (
    SELECT q.n, q.lim, q.after, w.resource AS a, w.resource_id AS b, t.sr AS c, t.r AS res, t.p AS rel${reach ? ", t.g" : ""}
    FROM q CROSS JOIN LATERAL jsonb_to_recordset(q.last) AS t(fr text, fl text, sr text, r text, p text, g text)
    JOIN walk w ON w.n = q.n AND w.resource = t.fr AND w.relation = t.fl
  ),
  dense AS MATERIALIZED (
    SELECT d.n, d.a, d.c, d.res, d.rel${reach ? ", d.g" : ""}, d.lim, d.after, (row_number() OVER ())::text AS did, x.ids,
           CASE WHEN cardinality(x.ids) = d.lim THEN true
                ELSE (SELECT count(*) FROM (SELECT 1 FROM subject_relationships s
                                            WHERE s.app_id = $1 AND s.resource = d.res AND s.resource_id > d.after
                                            ORDER BY s.resource_id LIMIT d.budget) z) < d.budget
           END AS filled
    FROM (SELECT ${groupColumns(reach)}, ${dense.rowsPerSource} * (count(*) + lim) AS budget
          FROM links GROUP BY ${groupColumns(reach)} HAVING count(*) >= ${dense.minSources}) d
    CROSS JOIN LATERAL (SELECT ARRAY(
      SELECT DISTINCT s.resource_id FROM (${edgesOf("d.res", "s.resource_id > d.after", "d.budget")}) s
      WHERE s.relation = d.rel AND s.subject_resource = d.a AND s.subject_relation = d.c
        AND ((d.n, d.a, s.subject_id, d.c, d.res, d.rel${reach ? ", d.g" : ""}) IN (SELECT l.n, l.a, l.b, l.c, l.res, l.rel${reach ? ", l.g" : ""} FROM links l)) IS TRUE
        AND ${counts(grants, "d.res")}
      ORDER BY 1 LIMIT d.lim) AS ids OFFSET 0) x
  ),`;

/** `src`'s rows from `links` and `dense`: the filled groups as one source each (kind 3, b its `did`), the rest one by one (kind 1). */
export const denseSources = (reach: boolean) => `
    SELECT l.n, l.lim, l.after, 1, l.a, l.b, l.c, l.res, l.rel${reach ? ", l.g" : ""} FROM links l
    WHERE NOT EXISTS (SELECT 1 FROM dense d WHERE d.filled AND d.n = l.n AND d.a = l.a AND d.c = l.c AND d.res = l.res AND d.rel = l.rel${
      reach ? " AND d.g = l.g" : ""
    })
    UNION
    SELECT d.n, d.lim, d.after, 3, d.a, d.did, d.c, d.res, d.rel${reach ? ", d.g" : ""} FROM dense d WHERE d.filled`;

/** A filled group's source (kind 3): its ids after the cursor (and up to the bound), from the array. */
export const denseIds: Probe = (limit, bounded, gate) => `
      UNION ALL
      (SELECT y.id FROM dense d CROSS JOIN LATERAL unnest(d.ids) AS y(id)
       WHERE p.kind = 3${gate} AND d.did = p.b AND y.id > p.after${bounded ? " AND y.id <= p.upto" : ""}
       ORDER BY y.id LIMIT ${limit})`;

/**
 * A hop of lookup's walk (graphLookupSql's `lv`, level `l`): for each step
 * of the question from a pair the level holds, the instances the level's
 * nodes of that pair lead to. Read one probe a node, or, when the nodes
 * are at least `minSources` and the step's target type has at most
 * `rowsPerSource` edges a node (counted in the index alone, `budget + 1`
 * entries at most), by reading that type's edges once and keeping those
 * from a node (`held`, a jsonb object's keys): 1,000 folders whose
 * subfolders are few cost one read of the folders' edges instead of 1,000
 * probes.
 */
export const inwardHop = (grants: (alias: string) => string, dense: DenseSettings) => `
        SELECT t.r, e.resource_id, t.g
        FROM steps t
        CROSS JOIN LATERAL (SELECT array_agg(w.resource_id) AS ids, ${dense.rowsPerSource} * count(*) AS budget
                            FROM unnest(l.rs, l.ids, l.rels) AS w(resource, resource_id, relation)
                            WHERE w.resource = t.fr AND w.relation = t.fl) o
        CROSS JOIN LATERAL (
          SELECT CASE WHEN cardinality(o.ids) >= ${dense.minSources}
                       AND (SELECT count(*) FROM (SELECT 1 FROM subject_relationships c
                                                  WHERE c.app_id = $1 AND c.resource = t.r ORDER BY c.resource_id LIMIT o.budget + 1) z) <= o.budget
                      THEN (SELECT jsonb_object_agg(i, true) FROM unnest(o.ids) AS i) END AS held
          OFFSET 0) h
        CROSS JOIN LATERAL (
          SELECT x.resource_id FROM unnest(o.ids) AS w(id) CROSS JOIN LATERAL (
            SELECT s.resource_id FROM subject_relationships s
            WHERE s.app_id = $1 AND s.subject_resource = t.fr AND s.subject_id = w.id AND s.subject_relation = t.sr
              AND s.resource = t.r AND s.relation = t.p AND ${grants("s")}
            OFFSET 0) x
          WHERE h.held IS NULL
          UNION ALL
          SELECT s.resource_id FROM (${edgesOf("t.r", "h.held IS NOT NULL", "o.budget")}) s
          WHERE s.relation = t.p AND s.subject_resource = t.fr AND s.subject_relation = t.sr AND h.held ? s.subject_id
            AND ${counts(grants, "t.r")}) e
        WHERE t.n = l.n AND o.ids IS NOT NULL`;
