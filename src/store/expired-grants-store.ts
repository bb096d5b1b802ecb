/**
 * The expiry sweep's statements (domain/expiry-sweep.ts): expired grants
 * deleted in batches, each delete recorded in the change feed in the same
 * statement, as every other delete of grants is.
 */
import { CHANGE_BODY, prefixed, recordChanges, sealed, SUBJECT_GRANT_RETURNING, USER_GRANT_RETURNING } from "./changes-store.js";
import type { Queryable } from "./db.js";

export const expiredGrantsStore = {
  /**
   * Deletes up to `limit` of the application's grants whose expiry has
   * passed, the longest expired first; returns how many went. A grant whose
   * expiry a writer pushed forward meanwhile stays (the condition is checked
   * again on the row's new version).
   */
  async sweep(q: Queryable, appId: string, limit: number): Promise<number> {
    const users = await sweepUsers(q, appId, limit);
    if (users >= limit) return users;
    const { rows } = await q.query<{ n: number }>(
      `WITH d AS (
         DELETE FROM subject_relationships g
         USING (SELECT resource, resource_id, relation, subject_resource, subject_id, subject_relation FROM subject_relationships
                WHERE app_id = $1 AND expires_at <= now() ORDER BY expires_at LIMIT $2) e
         WHERE g.app_id = $1 AND g.resource = e.resource AND g.resource_id = e.resource_id AND g.relation = e.relation
           AND g.subject_resource = e.subject_resource AND g.subject_id = e.subject_id AND g.subject_relation = e.subject_relation
           AND g.expires_at <= now()
         RETURNING ${prefixed("g", SUBJECT_GRANT_RETURNING)}
       ), ${recordChanges("c", "grant_deleted", "d", CHANGE_BODY.subjectGrant)}, ${sealed(["c"])}
       SELECT count(*)::int AS n FROM d`,
      [appId, limit - users],
    );
    return users + rows[0]!.n;
  },

};

/** Deletes up to `limit` expired user grants of the application, the longest expired first. */
async function sweepUsers(q: Queryable, appId: string, limit: number): Promise<number> {
  const { rows } = await q.query<{ n: number }>(
    `WITH d AS (
       DELETE FROM relationships g
       USING (SELECT resource, resource_id, relation, user_id FROM relationships
              WHERE app_id = $1 AND expires_at <= now() ORDER BY expires_at LIMIT $2) e
       WHERE g.app_id = $1 AND g.resource = e.resource AND g.resource_id = e.resource_id
         AND g.relation = e.relation AND g.user_id = e.user_id AND g.expires_at <= now()
       RETURNING ${prefixed("g", USER_GRANT_RETURNING)}
     ), ${recordChanges("c", "grant_deleted", "d", CHANGE_BODY.userGrant)}, ${sealed(["c"])}
     SELECT count(*)::int AS n FROM d`,
    [appId, limit],
  );
  return rows[0]!.n;
}
