import { CHANGE_BODY, prefixed, recordChanges, sealed, SUBJECT_GRANT_RETURNING, USER_GRANT_RETURNING } from "./changes-store.js";
import type { Queryable } from "./db.js";
import { ALL_USERS_ID, fromStored, storedUserId } from "./all-users.js";
import { COLUMNS, grantWrites, iso } from "./grant-write-store.js";
import type { GrantWrite, RelationshipRow, Subject, Tuple } from "./grant-types.js";

export type { GrantWrite, RelationshipRow, Subject, Tuple } from "./grant-types.js";

/**
 * A list's order of holders within one relation: users first (by id), then
 * subjects (by resource, id and relation). `kind` 0 for a user, whose id is
 * `a`; 1 for a subject (a, b, c its resource, id and relation).
 */
export interface HolderPosition {
  kind: number;
  a: string;
  b: string;
  c: string;
}

export const holderPosition = (row: Tuple): HolderPosition =>
  row.subject === undefined
    ? { kind: 0, a: row.userId, b: "", c: "" }
    : { kind: 1, a: row.subject.resource, b: row.subject.resourceId, c: row.subject.relation };

/**
 * Which grants a delete by filter removes: every given field must match.
 * `subject` ({resource, resourceId}) stands alone: every grant whose holder
 * is that instance, as a set or a link.
 */
export interface GrantFilter {
  /** A user's id, or ALL_USERS_ID for the allUsers grants. */
  userId?: string;
  resource?: string;
  resourceId?: string;
  relation?: string;
  subject?: { resource: string; resourceId: string };
}

const SUBJECT_COLUMNS = `'' AS "userId", resource, resource_id AS "resourceId", relation, created_at AS "createdAt", expires_at AS "expiresAt", condition,
  json_build_object('resource', subject_resource, 'resourceId', subject_id, 'relation', subject_relation) AS subject`;

/** Grants of users, and grants of subjects: each kind goes to its own table. */
export function byHolder<T extends Tuple>(tuples: readonly T[]): { users: T[]; subjects: (T & { subject: Subject })[] } {
  const users: T[] = [];
  const subjects: (T & { subject: Subject })[] = [];
  for (const t of tuples) {
    if (t.subject === undefined) users.push(t);
    else subjects.push(t as T & { subject: Subject });
  }
  return { users, subjects };
}

const subjectColumns = (tuples: (Tuple & { subject: Subject })[]) => [
  tuples.map((t) => t.resource),
  tuples.map((t) => t.resourceId),
  tuples.map((t) => t.relation),
  tuples.map((t) => t.subject.resource),
  tuples.map((t) => t.subject.resourceId),
  tuples.map((t) => t.subject.relation),
];

/**
 * The grants that count at this instant: an expiry, when there is one, still
 * ahead of the database's clock. now() is the statement's (or its
 * transaction's) start, read on the server that runs it, so every statement
 * on every replica draws the line at the same instant.
 */
export const LIVE_GRANT = (g: string) => `(${g}.expires_at IS NULL OR ${g}.expires_at > now())`;

/**
 * A grant that counts for every question as it stands: live, and with no
 * condition (docs/conditions.md). The plain walks (the check's, lookup's, who can's)
 * read only these, so a conditional grant never allows through them. The
 * check reads the conditional grants on the instance beside them, and asks
 * the conditional paths apart when one could lie on a path
 * (conditional-paths-store.ts); explain walks them and evaluates them.
 */
export const PLAIN_GRANT = (g: string) => `(${LIVE_GRANT(g)} AND ${g}.condition IS NULL)`;

/**
 * The statement's clock in ms since the epoch, a condition's `now`: once a
 * statement, a column of its own, not in each question's row, where its
 * numeric arithmetic and its float's text cost about 0.5 µs of Postgres's
 * time a question (pgbench, docs/performance.md).
 */
export const NOW_MS = "(extract(epoch FROM now()) * 1000)::float8";

/** Column arrays for unnest: one round trip whatever the number of tuples. */
const columns = (tuples: Tuple[]) => [
  tuples.map((t) => t.resource),
  tuples.map((t) => t.resourceId),
  tuples.map((t) => t.relation),
  tuples.map(storedUserId),
];

/** The columns of a delete by filter, in a fixed order (so a few statement texts cover every filter). */
const FILTER_COLUMNS = [
  ["userId", "user_id"],
  ["resource", "resource"],
  ["resourceId", "resource_id"],
  ["relation", "relation"],
] as const;

/** SQL for direct grants. */
export const relationshipsStore = {
  write: grantWrites.write,
  insertAllowed: grantWrites.insertAllowed,

  async delete(q: Queryable, appId: string, t: Tuple): Promise<boolean> {
    if (t.subject !== undefined) {
      const { rows } = await q.query<{ n: number }>(
        `WITH d AS (
           DELETE FROM subject_relationships
           WHERE app_id = $1 AND resource = $2 AND resource_id = $3 AND relation = $4
             AND subject_resource = $5 AND subject_id = $6 AND subject_relation = $7
           RETURNING ${SUBJECT_GRANT_RETURNING}
         ), ${recordChanges("c", "grant_deleted", "d", CHANGE_BODY.subjectGrant)}, ${sealed(["c"])}
         SELECT count(*)::int AS n FROM d`,
        [appId, t.resource, t.resourceId, t.relation, t.subject.resource, t.subject.resourceId, t.subject.relation],
      );
      return rows[0]!.n > 0;
    }
    const { rows } = await q.query<{ n: number }>(
      `WITH d AS (
         DELETE FROM relationships WHERE app_id = $1 AND resource = $2 AND resource_id = $3 AND relation = $4 AND user_id = $5
         RETURNING ${USER_GRANT_RETURNING}
       ), ${recordChanges("c", "grant_deleted", "d", CHANGE_BODY.userGrant)}, ${sealed(["c"])}
       SELECT count(*)::int AS n FROM d`,
      [appId, t.resource, t.resourceId, t.relation, storedUserId(t)],
    );
    return rows[0]!.n > 0;
  },

  /**
   * Inserts the grants that are new and gives the existing ones whose expiry
   * or condition differs the new ones, set-based; returns how many rows it wrote, counted
   * from RETURNING (Citus reports the rows sent as the count). The tuples
   * must be distinct: one statement cannot update a row twice. Its changes
   * are not sealed: the caller's transaction seals them (changesStore.seal).
   */
  async writeMany(q: Queryable, appId: string, all: GrantWrite[]): Promise<number> {
    const { users: grants, subjects } = byHolder(all);
    let written = 0;
    if (subjects.length > 0) {
      const { rows } = await q.query<{ n: number }>(
        `WITH w AS (
           INSERT INTO subject_relationships (app_id, resource, resource_id, relation, subject_resource, subject_id, subject_relation, expires_at, condition)
           SELECT $1, t.resource, t.resource_id, t.relation, t.subject_resource, t.subject_id, t.subject_relation, t.expires_at, t.condition
           FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[], $9::text[])
                AS t(resource, resource_id, relation, subject_resource, subject_id, subject_relation, expires_at, condition)
           ON CONFLICT (app_id, resource, resource_id, relation, subject_resource, subject_id, subject_relation)
             DO UPDATE SET expires_at = EXCLUDED.expires_at, condition = EXCLUDED.condition
             WHERE (subject_relationships.expires_at, subject_relationships.condition) IS DISTINCT FROM (EXCLUDED.expires_at, EXCLUDED.condition)
           RETURNING ${SUBJECT_GRANT_RETURNING}
         ), ${recordChanges("c", "grant_written", "w", CHANGE_BODY.subjectGrant, false)}
         SELECT count(*)::int AS n FROM w`,
        [appId, ...subjectColumns(subjects), subjects.map((g) => iso(g.expiresAt)), subjects.map((g) => g.condition ?? null)],
      );
      written += rows[0]!.n;
    }
    if (grants.length === 0) return written;
    const { rows } = await q.query<{ n: number }>(
      `WITH w AS (
         INSERT INTO relationships (app_id, resource, resource_id, relation, user_id, expires_at, condition)
         SELECT $1, t.resource, t.resource_id, t.relation, t.user_id, t.expires_at, t.condition
         FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::text[])
              AS t(resource, resource_id, relation, user_id, expires_at, condition)
         ON CONFLICT (app_id, resource, resource_id, relation, user_id)
           DO UPDATE SET expires_at = EXCLUDED.expires_at, condition = EXCLUDED.condition
           WHERE (relationships.expires_at, relationships.condition) IS DISTINCT FROM (EXCLUDED.expires_at, EXCLUDED.condition)
         RETURNING ${USER_GRANT_RETURNING}
       ), ${recordChanges("c", "grant_written", "w", CHANGE_BODY.userGrant, false)}
       SELECT count(*)::int AS n FROM w`,
      [appId, ...columns(grants), grants.map((g) => iso(g.expiresAt)), grants.map((g) => g.condition ?? null)],
    );
    return written + rows[0]!.n;
  },

  /**
   * Deletes every grant matching all the filter's fields (at least one), in
   * one statement: it removes what its snapshot holds, so every grant
   * committed before it began; a row a concurrent writer changes meanwhile
   * is deleted in its new version. Returns how many went, by RETURNING.
   */
  async deleteMatching(q: Queryable, appId: string, filter: GrantFilter): Promise<number> {
    if (filter.subject !== undefined) {
      const { rows } = await q.query<{ n: number }>(
        `WITH d AS (
           DELETE FROM subject_relationships WHERE app_id = $1 AND subject_resource = $2 AND subject_id = $3
           RETURNING ${SUBJECT_GRANT_RETURNING}
         ), ${recordChanges("c", "grant_deleted", "d", CHANGE_BODY.subjectGrant)}, ${sealed(["c"])}
         SELECT count(*)::int AS n FROM d`,
        [appId, filter.subject.resource, filter.subject.resourceId],
      );
      return rows[0]!.n;
    }
    const params: unknown[] = [appId];
    const conditions = ["app_id = $1"];
    for (const [field, column] of FILTER_COLUMNS) {
      const value = filter[field];
      if (value === undefined) continue;
      params.push(value);
      conditions.push(`${column} = $${params.length}`);
    }
    if (params.length === 1) throw new Error("deleteMatching needs a filter"); // the domain never sends none
    if (filter.userId !== undefined) {
      const { rows } = await q.query<{ n: number }>(
        `WITH d AS (DELETE FROM relationships WHERE ${conditions.join(" AND ")} RETURNING ${USER_GRANT_RETURNING}),
              ${recordChanges("c", "grant_deleted", "d", CHANGE_BODY.userGrant)}, ${sealed(["c"])}
         SELECT count(*)::int AS n FROM d`,
        params,
      );
      return rows[0]!.n;
    }
    // By instance: its grants to users and to subjects, in one statement
    // (one snapshot, and one transaction without a transaction block).
    const { rows } = await q.query<{ n: number }>(
      `WITH users AS (DELETE FROM relationships WHERE ${conditions.join(" AND ")} RETURNING ${USER_GRANT_RETURNING}),
            subjects AS (DELETE FROM subject_relationships WHERE ${conditions.join(" AND ")} RETURNING ${SUBJECT_GRANT_RETURNING}),
            ${recordChanges("cu", "grant_deleted", "users", CHANGE_BODY.userGrant)},
            ${recordChanges("cs", "grant_deleted", "subjects", CHANGE_BODY.subjectGrant)},
            ${sealed(["cu", "cs"])}
       SELECT (SELECT count(*) FROM users)::int + (SELECT count(*) FROM subjects)::int AS n`,
      params,
    );
    return rows[0]!.n;
  },

  /** The database's clock, in milliseconds since the epoch: what expiries are measured against. */
  async clock(q: Queryable): Promise<number> {
    const { rows } = await q.query<{ ms: string | number }>("SELECT (extract(epoch FROM statement_timestamp()) * 1000)::float8 AS ms");
    return Number(rows[0]!.ms);
  },

  /** Deletes the tuples that exist, set-based; returns how many did. The caller's transaction seals its changes, as writeMany's. */
  async deleteMany(q: Queryable, appId: string, all: Tuple[]): Promise<number> {
    const { users: tuples, subjects } = byHolder(all);
    let deleted = 0;
    if (subjects.length > 0) {
      const { rows } = await q.query<{ n: number }>(
        `WITH d AS (
           DELETE FROM subject_relationships r
           USING unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
                 AS t(resource, resource_id, relation, subject_resource, subject_id, subject_relation)
           WHERE r.app_id = $1 AND r.resource = t.resource AND r.resource_id = t.resource_id AND r.relation = t.relation
             AND r.subject_resource = t.subject_resource AND r.subject_id = t.subject_id AND r.subject_relation = t.subject_relation
           RETURNING ${prefixed("r", SUBJECT_GRANT_RETURNING)}
         ), ${recordChanges("c", "grant_deleted", "d", CHANGE_BODY.subjectGrant)}
         SELECT count(*)::int AS n FROM d`,
        [appId, ...subjectColumns(subjects)],
      );
      deleted += rows[0]!.n;
    }
    if (tuples.length === 0) return deleted;
    const { rows } = await q.query<{ n: number }>(
      `WITH d AS (
         DELETE FROM relationships r
         USING unnest($2::text[], $3::text[], $4::text[], $5::text[]) AS t(resource, resource_id, relation, user_id)
         WHERE r.app_id = $1 AND r.resource = t.resource AND r.resource_id = t.resource_id
           AND r.relation = t.relation AND r.user_id = t.user_id
         RETURNING ${prefixed("r", USER_GRANT_RETURNING)}
       ), ${recordChanges("c", "grant_deleted", "d", CHANGE_BODY.userGrant)}
       SELECT count(*)::int AS n FROM d`,
      [appId, ...columns(tuples)],
    );
    return deleted + rows[0]!.n;
  },

  /**
   * Every holder of a relation on one instance, in (relation, holder) order
   * (users, then subjects: see HolderPosition); with the resource's
   * relations in the catalog. Each table gives its next `limit` in order,
   * and the merge keeps the first `limit`.
   */
  async listByInstance(
    q: Queryable,
    appId: string,
    filter: { resource: string; resourceId: string; relation: string | undefined; includeExpired: boolean },
    after: ({ relation: string } & HolderPosition) | undefined,
    limit: number,
  ): Promise<ListedPage> {
    const params: unknown[] = [appId, filter.resource, filter.resourceId, filter.relation ?? null, limit, filter.includeExpired];
    const p = (value: unknown) => `$${params.push(value)}`;
    // Past the cursor: within its relation, the users after it (or none,
    // when it is a subject's), then the subjects (all, or those after it).
    let users = "true";
    let subjects = "true";
    if (after !== undefined) {
      const relation = p(after.relation);
      if (after.kind === 0) {
        users = `(relation, user_id) > (${relation}, ${p(after.a)})`;
        subjects = `relation >= ${relation}`;
      } else {
        users = `relation > ${relation}`;
        subjects = `(relation, subject_resource, subject_id, subject_relation) > (${relation}, ${p(after.a)}, ${p(after.b)}, ${p(after.c)})`;
      }
    }
    return listWithCatalog(
      q,
      `(SELECT ${COLUMNS}, NULL::json AS subject, relation AS o1, 0 AS o2, user_id AS o3, '' AS o4, '' AS o5 FROM relationships
        WHERE app_id = $1 AND resource = $2 AND resource_id = $3 AND ($4::text IS NULL OR relation = $4) AND ${users}
          AND ($6::boolean OR ${LIVE_GRANT("relationships")})
        ORDER BY relation, user_id LIMIT $5)
       UNION ALL
       (SELECT ${SUBJECT_COLUMNS}, relation, 1, subject_resource, subject_id, subject_relation FROM subject_relationships
        WHERE app_id = $1 AND resource = $2 AND resource_id = $3 AND ($4::text IS NULL OR relation = $4) AND ${subjects}
          AND ($6::boolean OR ${LIVE_GRANT("subject_relationships")})
        ORDER BY relation, subject_resource, subject_id, subject_relation LIMIT $5)`,
      `page.o1, page.o2, page.o3, page.o4, page.o5`,
      params,
      limit,
    );
  },

  /**
   * Every grant a subject holds on instances of a type (subject.relation ""
   * for a link), in (resourceId, relation) order; with the resource's relations.
   */
  async listBySubject(
    q: Queryable,
    appId: string,
    filter: { subject: Subject; resource: string; relation: string | undefined; includeExpired: boolean },
    after: { resourceId: string; relation: string } | undefined,
    limit: number,
  ): Promise<ListedPage> {
    return listWithCatalog(
      q,
      `SELECT ${SUBJECT_COLUMNS} FROM subject_relationships
       WHERE app_id = $1 AND resource = $2 AND subject_resource = $3 AND subject_id = $4 AND subject_relation = $5
         AND ($6::text IS NULL OR relation = $6)
         AND ($7::text IS NULL OR (resource_id, relation) > ($7, $8))
         AND ($10::boolean OR ${LIVE_GRANT("subject_relationships")})
       ORDER BY resource_id, relation LIMIT $9`,
      `page."resourceId", page.relation`,
      [
        appId,
        filter.resource,
        filter.subject.resource,
        filter.subject.resourceId,
        filter.subject.relation,
        filter.relation ?? null,
        after?.resourceId ?? null,
        after?.relation ?? "",
        limit,
        filter.includeExpired,
      ],
    );
  },

  /** Every instance of a type the user has a relation on, in (resourceId, relation) order; with the resource's relations. */
  async listByUser(
    q: Queryable,
    appId: string,
    filter: { userId: string; resource: string; relation: string | undefined; includeExpired: boolean },
    after: { resourceId: string; relation: string } | undefined,
    limit: number,
  ): Promise<ListedPage> {
    return listWithCatalog(
      q,
      `SELECT ${COLUMNS} FROM relationships
       WHERE app_id = $1 AND resource = $2 AND user_id = $3 AND ($4::text IS NULL OR relation = $4)
         AND ($5::text IS NULL OR (resource_id, relation) > ($5, $6))
         AND ($8::boolean OR ${LIVE_GRANT("relationships")})
       ORDER BY resource_id, relation LIMIT $7`,
      `page."resourceId", page.relation`,
      [appId, filter.resource, filter.userId, filter.relation ?? null, after?.resourceId ?? null, after?.relation ?? "", limit, filter.includeExpired],
    );
  },

  /**
   * Every grant on instances of a type, in (resourceId, relation, holder)
   * order (users, then subjects), each table on its primary key: an export
   * pages through a whole type on the index. With the resource's relations.
   */
  async listByResource(
    q: Queryable,
    appId: string,
    filter: { resource: string; relation: string | undefined; includeExpired: boolean },
    after: ({ resourceId: string; relation: string } & HolderPosition) | undefined,
    limit: number,
  ): Promise<ListedPage> {
    const params: unknown[] = [appId, filter.resource, filter.relation ?? null, limit, filter.includeExpired];
    const p = (value: unknown) => `$${params.push(value)}`;
    let users = "true";
    let subjects = "true";
    if (after !== undefined) {
      const [id, relation] = [p(after.resourceId), p(after.relation)];
      if (after.kind === 0) {
        users = `(resource_id, relation, user_id) > (${id}, ${relation}, ${p(after.a)})`;
        subjects = `(resource_id, relation) >= (${id}, ${relation})`;
      } else {
        users = `(resource_id, relation) > (${id}, ${relation})`;
        subjects = `(resource_id, relation, subject_resource, subject_id, subject_relation) > (${id}, ${relation}, ${p(after.a)}, ${p(after.b)}, ${p(after.c)})`;
      }
    }
    return listWithCatalog(
      q,
      `(SELECT ${COLUMNS}, NULL::json AS subject, resource_id AS o0, relation AS o1, 0 AS o2, user_id AS o3, '' AS o4, '' AS o5 FROM relationships
        WHERE app_id = $1 AND resource = $2 AND ($3::text IS NULL OR relation = $3) AND ${users}
          AND ($5::boolean OR ${LIVE_GRANT("relationships")})
        ORDER BY resource_id, relation, user_id LIMIT $4)
       UNION ALL
       (SELECT ${SUBJECT_COLUMNS}, resource_id, relation, 1, subject_resource, subject_id, subject_relation FROM subject_relationships
        WHERE app_id = $1 AND resource = $2 AND ($3::text IS NULL OR relation = $3) AND ${subjects}
          AND ($5::boolean OR ${LIVE_GRANT("subject_relationships")})
        ORDER BY resource_id, relation, subject_resource, subject_id, subject_relation LIMIT $4)`,
      `page.o0, page.o1, page.o2, page.o3, page.o4, page.o5`,
      params,
      limit,
    );
  },

  /** The application's effective relations: resource → relation → what its grants may name as holder. */
  async relationsOf(q: Queryable, appId: string): Promise<Map<string, Map<string, string[]>>> {
    const { rows } = await q.query<{ resource: string; relation: string; subjects: string[] }>(
      "SELECT resource, relation, subjects FROM catalog_relations WHERE app_id = $1",
      [appId],
    );
    const map = new Map<string, Map<string, string[]>>();
    for (const r of rows) {
      let relations = map.get(r.resource);
      if (relations === undefined) map.set(r.resource, (relations = new Map()));
      relations.set(r.relation, r.subjects);
    }
    return map;
  },
};

/** A page of grants, and the resource's relations in the catalog (null: the resource is not in the catalog). */
export interface ListedPage {
  catalogRelations: string[] | null;
  rows: RelationshipRow[];
}

/**
 * Runs a page query ($1 the application, $2 the resource) together with the
 * catalog's relations of that resource, in one statement: a list is then
 * one round trip, and both come from one snapshot.
 */
async function listWithCatalog(q: Queryable, pageSql: string, orderBy: string, params: unknown[], limit?: number): Promise<ListedPage> {
  const { rows } = await q.query<ListedRow>(
    `WITH catalog AS (SELECT array_agg(relation) AS names FROM catalog_relations WHERE app_id = $1 AND resource = $2)
     SELECT catalog.names AS "catalogRelations", page.*
     FROM catalog LEFT JOIN LATERAL (${pageSql}) page ON true
     ORDER BY ${orderBy}${limit === undefined ? "" : ` LIMIT ${Number(limit)}`}`,
    params,
  );
  return {
    catalogRelations: rows[0]?.catalogRelations ?? null,
    rows: rows.filter((r) => r.userId !== null).map(rowOf),
  };
}

type ListedRow = RelationshipRow & { catalogRelations: string[] | null; subject?: Subject | null } & Record<`o${number}`, unknown>;

/** A listed row as the domain takes it: no catalog or ordering columns, `subject` only where set. */
function rowOf(r: ListedRow): RelationshipRow {
  const row: RelationshipRow = {
    userId: r.userId,
    resource: r.resource,
    resourceId: r.resourceId,
    relation: r.relation,
    createdAt: r.createdAt,
    expiresAt: r.expiresAt,
    condition: r.condition,
  };
  if (r.subject !== undefined && r.subject !== null) row.subject = r.subject;
  return fromStored(row);
}
