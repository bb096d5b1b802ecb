/**
 * The write of one grant (store/relationships-store.ts has the rest of the
 * grants' SQL): the common case in one statement (insertAllowed), and the
 * write that finds out what is there (write). Apart for the size of the
 * module, not for another rule.
 */
import { CHANGE_BODY, recordChanges, sealed, SUBJECT_GRANT_RETURNING, USER_GRANT_RETURNING } from "./changes-store.js";
import { fromStored, storedUserId } from "./all-users.js";
import type { Queryable } from "./db.js";
import type { GrantWrite, RelationshipRow, Subject } from "./grant-types.js";

/** A user grant's columns as the API names them. */
export const COLUMNS = `user_id AS "userId", resource, resource_id AS "resourceId", relation, created_at AS "createdAt", expires_at AS "expiresAt", condition`;

export const iso = (d: Date | null) => (d === null ? null : d.toISOString());

export const grantWrites = {
  /**
   * Writes one grant. When it exists, its expiry and condition become the
   * ones given (a write, or nothing when they are the same) and `created` is false; either
   * way the stored grant is returned. Inside a transaction: a grant deleted
   * between the statements is inserted again on the next turn.
   */
  async write(q: Queryable, appId: string, t: GrantWrite): Promise<{ row: RelationshipRow; created: boolean }> {
    if (t.subject !== undefined) return writeSubject(q, appId, { ...t, subject: t.subject });
    const params = [appId, t.resource, t.resourceId, t.relation, storedUserId(t), iso(t.expiresAt), t.condition ?? null];
    for (let turn = 1; ; turn++) {
      if (turn > 10) throw new Error("a grant kept vanishing between its insert and its read");
      const inserted = await q.query<RelationshipRow>(
        `WITH w AS (
           INSERT INTO relationships (app_id, resource, resource_id, relation, user_id, expires_at, condition)
           VALUES ($1, $2, $3, $4, $5, $6::timestamptz, $7::text)
           ON CONFLICT DO NOTHING RETURNING ${USER_GRANT_RETURNING}
         ), ${recordChanges("c", "grant_written", "w", CHANGE_BODY.userGrant)}, ${sealed(["c"])}
         SELECT ${COLUMNS} FROM w`,
        params,
      );
      if (inserted.rows[0] !== undefined) return { row: fromStored(inserted.rows[0]), created: true };
      const replaced = await q.query<RelationshipRow>(
        `WITH w AS (
           UPDATE relationships SET expires_at = $6::timestamptz, condition = $7::text
           WHERE app_id = $1 AND resource = $2 AND resource_id = $3 AND relation = $4 AND user_id = $5
             AND (expires_at, condition) IS DISTINCT FROM ($6::timestamptz, $7::text)
           RETURNING ${USER_GRANT_RETURNING}
         ), ${recordChanges("c", "grant_written", "w", CHANGE_BODY.userGrant)}, ${sealed(["c"])}
         SELECT ${COLUMNS} FROM w`,
        params,
      );
      if (replaced.rows[0] !== undefined) return { row: fromStored(replaced.rows[0]), created: false };
      // The same expiry and condition: nothing to write (a re-sync writing every grant again stays read-only).
      const existing = await q.query<RelationshipRow>(
        `SELECT ${COLUMNS} FROM relationships
         WHERE app_id = $1 AND resource = $2 AND resource_id = $3 AND relation = $4 AND user_id = $5`,
        params.slice(0, 5),
      );
      if (existing.rows[0] !== undefined) return { row: fromStored(existing.rows[0]), created: false };
    }
  },

  /**
   * The common write in one statement: inserts a grant that is not there
   * yet, if the catalog's relation takes its holder (`holderType`, as the
   * catalog's subjects name it: "user:*" for an allUsers grant) and its expiry, if any, is ahead of the
   * statement's clock; undefined when it inserted nothing, for whatever
   * reason (write() then finds out which, and writes). The application's
   * lock, taken before this statement's snapshot, keeps the catalog read
   * here the catalog at commit. The inserted app_id is catalog_relations'
   * own, which lets Citus push the statement whole to the node of both.
   */
  async insertAllowed(q: Queryable, appId: string, t: GrantWrite, holderType: string): Promise<RelationshipRow | undefined> {
    const allowed = `FROM catalog_relations cr
       WHERE cr.app_id = $1 AND cr.resource = $2 AND cr.relation = $4 AND $5::text = ANY(cr.subjects)
         AND ($6::timestamptz IS NULL OR $6::timestamptz > statement_timestamp())`;
    if (t.subject === undefined) {
      const { rows } = await q.query<RelationshipRow>(
        `WITH w AS (
           INSERT INTO relationships (app_id, resource, resource_id, relation, user_id, expires_at, condition)
           SELECT cr.app_id, $2, $3, $4, $7, $6::timestamptz, $8::text ${allowed}
           ON CONFLICT DO NOTHING RETURNING ${USER_GRANT_RETURNING}
         ), ${recordChanges("c", "grant_written", "w", CHANGE_BODY.userGrant)}, ${sealed(["c"])}
         SELECT ${COLUMNS} FROM w`,
        [appId, t.resource, t.resourceId, t.relation, holderType, iso(t.expiresAt), storedUserId(t), t.condition ?? null],
      );
      return rows[0] === undefined ? undefined : fromStored(rows[0]);
    }
    const { rows } = await q.query<SubjectReturned>(
      `WITH w AS (
         INSERT INTO subject_relationships (app_id, resource, resource_id, relation, subject_resource, subject_id, subject_relation, expires_at, condition)
         SELECT cr.app_id, $2, $3, $4, $7, $8, $9, $6::timestamptz, $10::text ${allowed}
         ON CONFLICT DO NOTHING RETURNING ${SUBJECT_GRANT_RETURNING}
       ), ${recordChanges("c", "grant_written", "w", CHANGE_BODY.subjectGrant)}, ${sealed(["c"])}
       SELECT * FROM w`,
      [appId, t.resource, t.resourceId, t.relation, holderType, iso(t.expiresAt), t.subject.resource, t.subject.resourceId, t.subject.relation, t.condition ?? null],
    );
    return rows[0] === undefined ? undefined : subjectRow(rows[0]);
  },
};

/**
 * A row of subject_relationships as a write returns it: plain columns only.
 * Citus refuses a function that is not immutable (json_build_object is
 * stable) in a RETURNING, so the subject is put together here.
 */
interface SubjectReturned {
  resource: string;
  resource_id: string;
  relation: string;
  subject_resource: string;
  subject_id: string;
  subject_relation: string;
  created_at: Date;
  expires_at: Date | null;
  condition: string | null;
}

const subjectRow = (r: SubjectReturned): RelationshipRow => ({
  userId: "",
  resource: r.resource,
  resourceId: r.resource_id,
  relation: r.relation,
  subject: { resource: r.subject_resource, resourceId: r.subject_id, relation: r.subject_relation },
  createdAt: r.created_at,
  expiresAt: r.expires_at,
  condition: r.condition,
});

/** relationshipsStore.write for a grant to a subject: the same turns, on subject_relationships. */
async function writeSubject(q: Queryable, appId: string, t: GrantWrite & { subject: Subject }): Promise<{ row: RelationshipRow; created: boolean }> {
  const params = [appId, t.resource, t.resourceId, t.relation, t.subject.resource, t.subject.resourceId, t.subject.relation, iso(t.expiresAt), t.condition ?? null];
  const key = `app_id = $1 AND resource = $2 AND resource_id = $3 AND relation = $4
               AND subject_resource = $5 AND subject_id = $6 AND subject_relation = $7`;
  for (let turn = 1; ; turn++) {
    if (turn > 10) throw new Error("a grant kept vanishing between its insert and its read");
    const inserted = await q.query<SubjectReturned>(
      `WITH w AS (
         INSERT INTO subject_relationships (app_id, resource, resource_id, relation, subject_resource, subject_id, subject_relation, expires_at, condition)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8::timestamptz, $9::text)
         ON CONFLICT DO NOTHING RETURNING ${SUBJECT_GRANT_RETURNING}
       ), ${recordChanges("c", "grant_written", "w", CHANGE_BODY.subjectGrant)}, ${sealed(["c"])}
       SELECT * FROM w`,
      params,
    );
    if (inserted.rows[0] !== undefined) return { row: subjectRow(inserted.rows[0]), created: true };
    const replaced = await q.query<SubjectReturned>(
      `WITH w AS (
         UPDATE subject_relationships SET expires_at = $8::timestamptz, condition = $9::text
         WHERE ${key} AND (expires_at, condition) IS DISTINCT FROM ($8::timestamptz, $9::text)
         RETURNING ${SUBJECT_GRANT_RETURNING}
       ), ${recordChanges("c", "grant_written", "w", CHANGE_BODY.subjectGrant)}, ${sealed(["c"])}
       SELECT * FROM w`,
      params,
    );
    if (replaced.rows[0] !== undefined) return { row: subjectRow(replaced.rows[0]), created: false };
    const existing = await q.query<SubjectReturned>(`SELECT ${SUBJECT_GRANT_RETURNING} FROM subject_relationships WHERE ${key}`, params.slice(0, 7));
    if (existing.rows[0] !== undefined) return { row: subjectRow(existing.rows[0]), created: false };
  }
}
