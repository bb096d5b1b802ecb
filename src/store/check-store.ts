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
  /** The resource is in the catalog. */
  resourceKnown: boolean;
  /** The resource has the action. */
  actionKnown: boolean;
  allowed: boolean;
}

/**
 * The check, for any number of questions (of any applications and keys) in
 * one statement, so one round trip answers them all, the key's validity
 * included (a key revoked before the statement began is seen as revoked):
 * allowed when the user holds, on that very instance, a relation implying the
 * action, or holds a role (application-wide, or of the asked tenant) with a
 * policy holding resource:action.
 */
const CHECK_SQL = `
  SELECT
    EXISTS (SELECT 1 FROM api_keys k
            WHERE k.secret_hash = q.key_hash AND k.app_id = q.app_id AND k.revoked_at IS NULL) AS "keyValid",
    (c.actions IS NOT NULL) AS "resourceKnown",
    COALESCE(q.action = ANY(c.actions), false) AS "actionKnown",
    (EXISTS (
       SELECT 1 FROM relationships g
       JOIN catalog_relations cr
         ON cr.app_id = g.app_id AND cr.resource = g.resource AND cr.relation = g.relation
       WHERE g.app_id = q.app_id AND g.user_id = q.user_id AND g.resource = q.resource
         AND g.resource_id = q.resource_id AND q.action = ANY(cr.actions))
     OR EXISTS (
       SELECT 1 FROM role_assignments a
       JOIN role_permissions p
         ON p.app_id = a.app_id AND p.role_id = a.role_id AND p.resource = q.resource AND p.action = q.action
       WHERE a.app_id = q.app_id AND a.user_id = q.user_id
         AND (p.tenant_id IS NULL OR p.tenant_id = q.tenant_id))
    ) AS allowed
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
       WITH ORDINALITY AS q(app_id, key_hash, user_id, resource, resource_id, action, tenant_id, n)
  LEFT JOIN catalog_resources c ON c.app_id = q.app_id AND c.resource = q.resource
  ORDER BY q.n`;

export const checkStore = {
  async check(q: Queryable, checks: CheckInput[]): Promise<CheckRow[]> {
    const { rows } = await q.query<CheckRow>(CHECK_SQL, [
      checks.map((c) => c.appId),
      checks.map((c) => c.keyHash),
      checks.map((c) => c.userId),
      checks.map((c) => c.resource),
      checks.map((c) => c.resourceId),
      checks.map((c) => c.action),
      checks.map((c) => c.tenantId ?? null),
    ]);
    return rows;
  },
};
