import { HOLDERS_OF } from "./all-users.js";
import type { Queryable } from "./db.js";
import { distinctKeys, distinctQuestions, KEYS_VALID, perApplication, REPLAYED } from "./per-application.js";
import { PLAIN_GRANT } from "./relationships-store.js";
import { CONDITIONAL_ROLE, lookupPage } from "./conditional-candidates.js";

export interface LookupInput {
  appId: string;
  /** The SHA-256 of the calling key, verified live in the same statement. */
  keyHash: string;
  userId: string;
  resource: string;
  action: string;
  tenantId: string | undefined;
  /** The page starts after this resource id ("" for the first page). */
  after: string;
  /** How many ids to read: the page size plus one, to know whether more follow. */
  limit: number;
}

export interface LookupRow {
  keyValid: boolean;
  /** The application's model version the statement read (null: the application is gone). */
  version: string | null;
  /** The resource's actions; null when the catalog has no such resource. */
  actions: string[] | null;
  allInstances: boolean;
  /** The page, plain answers and conditional candidates merged in order (conditional-candidates.ts). */
  resourceIds: string[];
  /** Whether a role could give the action on every instance under a condition. */
  conditionalRole: boolean;
  /**
   * Whether a conditional row could lie on a path to an instance the walk
   * did not follow (the graph's statement: ask lookupThroughPaths); false
   * for the direct one, which has no paths.
   */
  pathsPossible: boolean;
}

export interface LookupRows {
  rows: LookupRow[];

  /** With `replayed`: the standby's replay position the statements read, the lowest; null on a primary. */
  replayed: string | null;
}

type StatementRow = {
  keys: boolean[] | null;
  version: string | null;
  rows: [actions: string[] | null, allInstances: boolean, resourceIds: string[], conditionalRole: boolean][] | null;
  replayed?: string | null;
};

/**
 * A lookup question's first two answers, for the direct statement and the
 * graph's (graph-store.ts): the resource's actions (null: no such resource),
 * and whether a role of the user in scope holds resource:action, read from
 * role_permissions as the check reads it.
 */
export const ACTIONS_AND_ROLE = `(SELECT r.actions FROM catalog_resources r WHERE r.app_id = $1 AND r.resource = q.resource),
        EXISTS (SELECT 1 FROM role_assignments a
                JOIN role_permissions p ON p.app_id = a.app_id AND p.role_id = a.role_id
                WHERE a.app_id = $1 AND a.user_id = q.user_id AND p.resource = q.resource AND p.action = q.action
                  AND a.condition IS NULL AND p.conditions IS NULL
                  AND (p.tenant_id IS NULL OR p.tenant_id = q.tenant_id))`;

/**
 * Pages of lookups of one application (any number, of any of its keys), in
 * one statement, so from one snapshot: each key's validity, and for each
 * lookup the resource's actions, whether a role of the user in scope holds
 * resource:action (role_permissions, as the check reads it), and the next
 * `limit` instances where a grant of the user implies the action.
 *
 * The instances where a grant of the user, or an allUsers grant (every
 * user holds those: all-users.ts), implies the action; each of the two
 * holders (HOLDERS) read on its own, in order, and the two merged. Two ways,
 * both reading a bounded number of index entries however many grants the
 * user holds:
 * - when every relation of the resource implies the action (every grant of
 *   the user on that type then does: the catalog refuses to drop a relation
 *   a grant uses), each holder's grants after the cursor in resource_id order
 *   from relationships_user_idx, distinct: `limit` instances' entries each;
 * - otherwise, for each relation that implies it (catalog_relations) and
 *   each holder, its next `limit` grants after the cursor, in order from
 *   relationships_user_relation_idx (one short range per relation); the
 *   union of those, distinct and in order, cut to `limit`: (relations that
 *   imply the action) × 2 × `limit` entries at most. A page never skips an id:
 *   any id below the page's last is in some relation's and holder's first `limit`.
 *
 * Every table is named with `app_id = $1` (docs/scale-out.md), as the check's.
 */
/** The two holders whose grants a user's lookup reads, as `h(user_id)`: the user, and the allUsers grants' id. */
const HOLDERS = HOLDERS_OF("q.user_id");

const lookupSql = (replayed: boolean) => `
  SELECT
    ${KEYS_VALID} AS keys,
    (SELECT v.version::text FROM model_versions v WHERE v.app_id = $1) AS version,
    (SELECT json_agg(json_build_array(
        ${ACTIONS_AND_ROLE},
        ${lookupPage(`(CASE WHEN NOT EXISTS (SELECT 1 FROM catalog_relations cr
                              WHERE cr.app_id = $1 AND cr.resource = q.resource AND NOT q.action = ANY (cr.actions))
        THEN ARRAY(SELECT DISTINCT x.resource_id
                   FROM ${HOLDERS} CROSS JOIN LATERAL (
                     SELECT DISTINCT g.resource_id FROM relationships g
                     WHERE g.app_id = $1 AND g.user_id = h.user_id AND g.resource = q.resource AND g.resource_id > q.after
                       AND ${PLAIN_GRANT("g")}
                     ORDER BY g.resource_id LIMIT q.lim) x
                   ORDER BY x.resource_id LIMIT q.lim)
        ELSE ARRAY(SELECT DISTINCT x.resource_id
                   FROM catalog_relations cr
                   CROSS JOIN ${HOLDERS}
                   CROSS JOIN LATERAL (
                     SELECT g.resource_id FROM relationships g
                     WHERE g.app_id = $1 AND g.user_id = h.user_id AND g.resource = q.resource AND g.relation = cr.relation
                       AND g.resource_id > q.after AND ${PLAIN_GRANT("g")}
                     ORDER BY g.resource_id LIMIT q.lim) x
                   WHERE cr.app_id = $1 AND cr.resource = q.resource AND q.action = ANY (cr.actions)
                   ORDER BY x.resource_id LIMIT q.lim) END)`)},
        ${CONDITIONAL_ROLE}
      ) ORDER BY q.n)
     FROM ROWS FROM (jsonb_to_recordset($3::jsonb) AS (u text, r text, a text, t text, c text, l int))
          WITH ORDINALITY AS q(user_id, resource, action, tenant_id, after, lim, n)) AS rows${
            replayed ? REPLAYED : ""
          }`;
const LOOKUP_SQL = lookupSql(false);
const LOOKUP_REPLAYED_SQL = lookupSql(true);

export const lookupStore = {
  /**
   * Answers in input order: a statement per application, run side by side.
   * With `replayed`, each also reads the standby's replay position (see
   * read-replicas.ts).
   */
  async lookup(q: Queryable, inputs: readonly LookupInput[], options: { replayed?: boolean } = {}): Promise<LookupRows> {
    return perApplication(inputs, (appId, ofApp) => lookupApplication(q, appId, ofApp, options.replayed === true));
  },
};

async function lookupApplication(q: Queryable, appId: string, inputs: readonly LookupInput[], replayed: boolean): Promise<LookupRows> {
  const { keys, keyOf } = distinctKeys(inputs);
  const { json, at } = distinctQuestions(inputs.map((i) => ({ u: i.userId, r: i.resource, a: i.action, t: i.tenantId ?? null, c: i.after, l: i.limit })));
  const { rows } = await q.query<StatementRow>(replayed ? LOOKUP_REPLAYED_SQL : LOOKUP_SQL, [appId, keys, json]);
  const row = rows[0]!;
  const keyRows = row.keys ?? [];
  const answers = row.rows ?? [];
  return {
    rows: inputs.map((_, i) => {
      const [actions, allInstances, resourceIds, conditionalRole] = answers[at[i]!]!;
      return { keyValid: keyRows[keyOf[i]!] === true, actions, allInstances, resourceIds, conditionalRole, pathsPossible: false, version: row.version };
    }),
    replayed: row.replayed ?? null,
  };
}
