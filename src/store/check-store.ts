import type { Queryable } from "./db.js";

export interface CheckInput {
  appId: string;
  /** The SHA-256 of the calling key, verified live in the same statement. */
  keyHash: string;
  userId: string;
  resource: string;
  resourceId: string;
  action: string;
  tenantId: string | undefined;
}

export interface CheckRow {
  /** The calling key is live and belongs to the application. */
  keyValid: boolean;
  /** The application's model version (see model-store); null when the application is gone. */
  version: string | null;
  /** The user's relations on the instance. */
  relations: string[];
  /** The user's roles in the application. */
  roles: string[];
}

/**
 * The per-user half of any number of checks (of any applications and keys),
 * in one statement, so one round trip answers them all from one snapshot:
 * whether each calling key still holds and the version of its application's
 * model (once per distinct key: a batch, or the checks coalesced from one
 * client, share it), and for each question the user's relations on the very
 * instance and the user's roles, against which the domain evaluates the rest
 * from memory (see domain/access-model). Each part is an index lookup
 * whatever the planner knows of the tables, so the plan stays good on tables
 * never analyzed.
 */
const CHECK_SQL = `
  SELECT
    (SELECT json_agg(json_build_array(
        EXISTS (SELECT 1 FROM api_keys k
                WHERE k.secret_hash = c.key_hash AND k.app_id = c.app_id AND k.revoked_at IS NULL),
        (SELECT v.version::text FROM model_versions v WHERE v.app_id = c.app_id)
      ) ORDER BY c.n)
     FROM ROWS FROM (jsonb_to_recordset($1::jsonb) AS (a text, k text))
          WITH ORDINALITY AS c(app_id, key_hash, n)) AS keys,
    (SELECT json_agg(json_build_array(
        ARRAY(SELECT g.relation FROM relationships g
              WHERE g.app_id = q.app_id AND g.user_id = q.user_id AND g.resource = q.resource
                AND g.resource_id = q.resource_id),
        ARRAY(SELECT a.role_id FROM role_assignments a
              WHERE a.app_id = q.app_id AND a.user_id = q.user_id)
      ) ORDER BY q.n)
     FROM ROWS FROM (jsonb_to_recordset($2::jsonb) AS (a text, u text, r text, i text))
          WITH ORDINALITY AS q(app_id, user_id, resource, resource_id, n)) AS rows`;

type KeyRow = [keyValid: boolean, version: string | null];
type QuestionRow = [relations: string[], roles: string[]];

/**
 * The questions go as JSON parameters and the answers come back as JSON
 * values: for a batch of dozens, encoding and decoding that is a fraction of
 * what text arrays in and a row per question out cost the driver.
 */
export const checkStore = {
  async check(q: Queryable, checks: readonly CheckInput[]): Promise<CheckRow[]> {
    const keys: { a: string; k: string }[] = [];
    const keyOf: number[] = [];
    const seen = new Map<string, number>();
    for (const c of checks) {
      const id = `${c.appId}\n${c.keyHash}`;
      let at = seen.get(id);
      if (at === undefined) {
        at = keys.push({ a: c.appId, k: c.keyHash }) - 1;
        seen.set(id, at);
      }
      keyOf.push(at);
    }
    const questions = checks.map((c) => ({ a: c.appId, u: c.userId, r: c.resource, i: c.resourceId }));
    const { rows } = await q.query<{ keys: KeyRow[] | null; rows: QuestionRow[] | null }>(CHECK_SQL, [
      JSON.stringify(keys),
      JSON.stringify(questions),
    ]);
    const keyRows = rows[0]?.keys ?? [];
    return (rows[0]?.rows ?? []).map(([relations, roles], i) => {
      const [keyValid, version] = keyRows[keyOf[i]!]!;
      return { keyValid, version, relations, roles };
    });
  },
};
