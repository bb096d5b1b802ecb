/**
 * Lookup's and who can's candidate pages for a question with contextual
 * grants (docs/contextual-grants.md): the statements through conditional
 * paths (graph-store.ts, LIVE_GRANT), each with what the question's grants
 * add, so that the page is a superset of what the check allows with them
 * (the domain asks the check for each id). Merged with the plain page
 * (`prior`) in SQL, as the paths' pages are: the order is the database's,
 * the one the cursor was read in.
 *
 * - Lookup: a path that uses a contextual grant is, above its last one, a
 *   path of stored rows from that grant's node upward. So each question
 *   carries its seeds (the nodes its grants give: resource, id, relation),
 *   which start the walk beside the user's own grants, and each seed that
 *   is an instance of the asked type under an answer relation is a source
 *   of one id (kind 2).
 * - Who can: the outward walk also steps along the question's contextual
 *   subject sets and links (`edges`, each one hop, below the bound as the
 *   stored ones), and a contextual grant to a user on a node walked makes
 *   that user a source of one id (kind 2).
 *
 * Separate statements, so the ones for questions without contextual grants
 * stay as they are. Every table is named with app_id = $1
 * (docs/scale-out.md); the seeds and edges are the question's JSON.
 */
import { contextHop } from "./outward-hop.js";
import { readThroughPaths, type ThroughPaths } from "./conditional-candidates.js";
import { graphLookupSql, lookupQuestion, whoCanQuestion, whoCanSql, type GraphLookupInput, type WhoCanInput } from "./graph-store.js";
import type { PageExtra, Probe } from "./keyset-pages.js";
import type { Queryable } from "./db.js";
import { perApplication } from "./per-application.js";
import { LIVE_GRANT } from "./relationships-store.js";
import type { ContextEdge } from "./decision-store.js";

/** A node a contextual grant gives its holders: lookup's walk starts there too. */
export interface Seed {
  r: string;
  i: string;
  l: string;
}

/** A contextual subject set (sl its relation) or link (sl ''): r:i#l held by sr:si#sl. */
export type SeedEdge = ContextEdge;

/** A contextual grant to one user (u) of r:i#l. */
export interface UserSeed {
  r: string;
  i: string;
  l: string;
  u: string;
}

export type ContextualLookupInput = GraphLookupInput & ThroughPaths & { seeds: Seed[] };
export type ContextualWhoCanInput = WhoCanInput & ThroughPaths & { edges: SeedEdge[]; users: UserSeed[] };

/** A source of one id (kind 2, the id in b): the id when it is after the cursor (and up to the bound). */
const oneId: Probe = (limit, bounded, gate) => `
      UNION ALL
      (SELECT p.b WHERE p.kind = 2${gate} AND p.b > p.after${bounded ? " AND p.b <= p.upto" : ""} LIMIT ${limit})`;

const SEEDS = `jsonb_to_recordset(q.seeds) AS s(r text, i text, l text)`;

const LOOKUP_EXTRA: PageExtra = {
  columns: ", x jsonb",
  names: ", seeds",
  ctes: "",
  start: `
    UNION
    SELECT q.n, s.r, s.i, s.l, 0 FROM q CROSS JOIN LATERAL ${SEEDS}`,
  hops: "",
  sources: `
    UNION
    SELECT q.n, q.lim, q.after, 2, '', s.i, '', '', ''
    FROM q CROSS JOIN LATERAL ${SEEDS}
    WHERE s.r = q.resource AND s.l = ANY (q.answers)`,
  probe: oneId,
};

const WHO_CAN_EXTRA: PageExtra = {
  columns: ", x jsonb, xu jsonb",
  names: ", edges, users",
  start: "",
  ctes: `
  ctx AS (SELECT q.n, c.* FROM q CROSS JOIN LATERAL jsonb_to_recordset(q.edges) AS c(r text, i text, l text, sr text, si text, sl text)),`,
  hops: contextHop("", " AND c.n = w.n"),
  sources: `
    UNION
    SELECT q.n, q.lim, q.after, 2, '', u.u, '', '', ''
    FROM q CROSS JOIN LATERAL jsonb_to_recordset(q.users) AS u(r text, i text, l text, u text)
    WHERE u.u <> '' AND EXISTS (SELECT 1 FROM walk w WHERE w.n = q.n AND w.resource = u.r AND w.resource_id = u.i AND w.relation = u.l)`,
  probe: oneId,
};

const LOOKUP = { plain: graphLookupSql(false, LIVE_GRANT, LOOKUP_EXTRA), replayed: graphLookupSql(true, LIVE_GRANT, LOOKUP_EXTRA) };
const WHO_CAN = { plain: whoCanSql(false, LIVE_GRANT, WHO_CAN_EXTRA), replayed: whoCanSql(true, LIVE_GRANT, WHO_CAN_EXTRA) };

/** The statements, for the SQL rules' check. */
export const CONTEXTUAL_PAGES_SQL = { lookup: LOOKUP.plain, whoCan: WHO_CAN.plain };

export const contextualPagesStore = {
  /** Lookup's candidate pages with contextual grants, each merged with its plain page (`prior`): in input order, a statement per application. */
  lookup(q: Queryable, inputs: readonly ContextualLookupInput[], options: { replayed?: boolean } = {}) {
    const sql = options.replayed === true ? LOOKUP.replayed : LOOKUP.plain;
    return perApplication(inputs, (appId, ofApp) =>
      readThroughPaths(q, sql, appId, ofApp, ofApp.map((i) => ({ ...lookupQuestion(i), p: i.prior, x: i.seeds }))),
    );
  },

  /** Who can's candidate pages with contextual grants, each merged with its plain page (`prior`): in input order, a statement per application. */
  whoCan(q: Queryable, inputs: readonly ContextualWhoCanInput[], options: { replayed?: boolean } = {}) {
    const sql = options.replayed === true ? WHO_CAN.replayed : WHO_CAN.plain;
    return perApplication(inputs, (appId, ofApp) =>
      readThroughPaths(q, sql, appId, ofApp, ofApp.map((i) => ({ ...whoCanQuestion(i), p: i.prior, x: i.edges, xu: i.users }))),
    );
  },
};
