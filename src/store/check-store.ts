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
 * whether the calling key still holds, the user's relations on the very
 * instance, the user's roles, and the version of the application's model,
 * against which the domain evaluates the rest from memory (see
 * domain/access-model). Each part is an index lookup whatever the planner
 * knows of the tables, so the plan stays good on tables never analyzed.
 */
const CHECK_SQL = `
  SELECT
    EXISTS (SELECT 1 FROM api_keys k
            WHERE k.secret_hash = q.key_hash AND k.app_id = q.app_id AND k.revoked_at IS NULL) AS "keyValid",
    (SELECT v.version::text FROM model_versions v WHERE v.app_id = q.app_id) AS version,
    ARRAY(SELECT g.relation FROM relationships g
          WHERE g.app_id = q.app_id AND g.user_id = q.user_id AND g.resource = q.resource
            AND g.resource_id = q.resource_id) AS relations,
    ARRAY(SELECT a.role_id FROM role_assignments a
          WHERE a.app_id = q.app_id AND a.user_id = q.user_id) AS roles
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
       WITH ORDINALITY AS q(app_id, key_hash, user_id, resource, resource_id, n)
  ORDER BY q.n`;

export const checkStore = {
  async check(q: Queryable, checks: readonly CheckInput[]): Promise<CheckRow[]> {
    const { rows } = await q.query<CheckRow>(CHECK_SQL, [
      checks.map((c) => c.appId),
      checks.map((c) => c.keyHash),
      checks.map((c) => c.userId),
      checks.map((c) => c.resource),
      checks.map((c) => c.resourceId),
    ]);
    return rows;
  },
};
