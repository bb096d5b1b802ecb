import type { Queryable } from "./db.js";

export interface Tuple {
  userId: string;
  resource: string;
  resourceId: string;
  relation: string;
}

/** A grant to write: the tuple, and when it stops counting (null: never). */
export interface GrantWrite extends Tuple {
  expiresAt: Date | null;
}

export interface RelationshipRow extends Tuple {
  createdAt: Date;
  expiresAt: Date | null;
}

/** Which grants a delete by filter removes: every given field must match. */
export interface GrantFilter {
  userId?: string;
  resource?: string;
  resourceId?: string;
  relation?: string;
}

const COLUMNS = `user_id AS "userId", resource, resource_id AS "resourceId", relation, created_at AS "createdAt", expires_at AS "expiresAt"`;

/**
 * The grants that count at this instant: an expiry, when there is one, still
 * ahead of the database's clock. now() is the statement's (or its
 * transaction's) start, read on the server that runs it, so every statement
 * on every replica draws the line at the same instant.
 */
export const LIVE_GRANT = (g: string) => `(${g}.expires_at IS NULL OR ${g}.expires_at > now())`;

/** Column arrays for unnest: one round trip whatever the number of tuples. */
const columns = (tuples: Tuple[]) => [
  tuples.map((t) => t.resource),
  tuples.map((t) => t.resourceId),
  tuples.map((t) => t.relation),
  tuples.map((t) => t.userId),
];

const iso = (d: Date | null) => (d === null ? null : d.toISOString());

/** The columns of a delete by filter, in a fixed order (so a few statement texts cover every filter). */
const FILTER_COLUMNS = [
  ["userId", "user_id"],
  ["resource", "resource"],
  ["resourceId", "resource_id"],
  ["relation", "relation"],
] as const;

/** SQL for direct grants. */
export const relationshipsStore = {
  /**
   * Writes one grant. When it exists, its expiry becomes the one given (a
   * write, or nothing when it is the same) and `created` is false; either
   * way the stored grant is returned. Inside a transaction: a grant deleted
   * between the statements is inserted again on the next turn.
   */
  async write(q: Queryable, appId: string, t: GrantWrite): Promise<{ row: RelationshipRow; created: boolean }> {
    const params = [appId, t.resource, t.resourceId, t.relation, t.userId, iso(t.expiresAt)];
    for (let turn = 1; ; turn++) {
      if (turn > 10) throw new Error("a grant kept vanishing between its insert and its read");
      const inserted = await q.query<RelationshipRow>(
        `INSERT INTO relationships (app_id, resource, resource_id, relation, user_id, expires_at) VALUES ($1, $2, $3, $4, $5, $6::timestamptz)
         ON CONFLICT DO NOTHING RETURNING ${COLUMNS}`,
        params,
      );
      if (inserted.rows[0] !== undefined) return { row: inserted.rows[0], created: true };
      const replaced = await q.query<RelationshipRow>(
        `UPDATE relationships SET expires_at = $6::timestamptz
         WHERE app_id = $1 AND resource = $2 AND resource_id = $3 AND relation = $4 AND user_id = $5
           AND expires_at IS DISTINCT FROM $6::timestamptz
         RETURNING ${COLUMNS}`,
        params,
      );
      if (replaced.rows[0] !== undefined) return { row: replaced.rows[0], created: false };
      // The same expiry: nothing to write (a re-sync writing every grant again stays read-only).
      const existing = await q.query<RelationshipRow>(
        `SELECT ${COLUMNS} FROM relationships
         WHERE app_id = $1 AND resource = $2 AND resource_id = $3 AND relation = $4 AND user_id = $5`,
        params.slice(0, 5),
      );
      if (existing.rows[0] !== undefined) return { row: existing.rows[0], created: false };
    }
  },

  async delete(q: Queryable, appId: string, t: Tuple): Promise<boolean> {
    const { rows } = await q.query(
      `DELETE FROM relationships WHERE app_id = $1 AND resource = $2 AND resource_id = $3 AND relation = $4 AND user_id = $5
       RETURNING 1`,
      [appId, t.resource, t.resourceId, t.relation, t.userId],
    );
    return rows.length > 0;
  },

  /**
   * Inserts the grants that are new and gives the existing ones whose expiry
   * differs the new one, set-based; returns how many rows it wrote, counted
   * from RETURNING (Citus reports the rows sent as the count). The tuples
   * must be distinct: one statement cannot update a row twice.
   */
  async writeMany(q: Queryable, appId: string, grants: GrantWrite[]): Promise<number> {
    if (grants.length === 0) return 0;
    const { rows } = await q.query(
      `INSERT INTO relationships (app_id, resource, resource_id, relation, user_id, expires_at)
       SELECT $1, t.resource, t.resource_id, t.relation, t.user_id, t.expires_at
       FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[]) AS t(resource, resource_id, relation, user_id, expires_at)
       ON CONFLICT (app_id, resource, resource_id, relation, user_id)
         DO UPDATE SET expires_at = EXCLUDED.expires_at WHERE relationships.expires_at IS DISTINCT FROM EXCLUDED.expires_at
       RETURNING 1`,
      [appId, ...columns(grants), grants.map((g) => iso(g.expiresAt))],
    );
    return rows.length;
  },

  /**
   * Deletes every grant matching all the filter's fields (at least one), in
   * one statement: it removes what its snapshot holds, so every grant
   * committed before it began; a row a concurrent writer changes meanwhile
   * is deleted in its new version. Returns how many went, by RETURNING.
   */
  async deleteMatching(q: Queryable, appId: string, filter: GrantFilter): Promise<number> {
    const params: unknown[] = [appId];
    const conditions = ["app_id = $1"];
    for (const [field, column] of FILTER_COLUMNS) {
      const value = filter[field];
      if (value === undefined) continue;
      params.push(value);
      conditions.push(`${column} = $${params.length}`);
    }
    if (params.length === 1) throw new Error("deleteMatching needs a filter"); // the domain never sends none
    const { rows } = await q.query(`DELETE FROM relationships WHERE ${conditions.join(" AND ")} RETURNING 1`, params);
    return rows.length;
  },

  /**
   * Deletes up to `limit` of the application's grants whose expiry has
   * passed, the longest expired first; returns how many went. A grant whose
   * expiry a writer pushed forward meanwhile stays (the condition is checked
   * again on the row's new version).
   */
  async sweepExpired(q: Queryable, appId: string, limit: number): Promise<number> {
    const { rows } = await q.query(
      `DELETE FROM relationships g
       USING (SELECT resource, resource_id, relation, user_id FROM relationships
              WHERE app_id = $1 AND expires_at <= now() ORDER BY expires_at LIMIT $2) e
       WHERE g.app_id = $1 AND g.resource = e.resource AND g.resource_id = e.resource_id
         AND g.relation = e.relation AND g.user_id = e.user_id AND g.expires_at <= now()
       RETURNING 1`,
      [appId, limit],
    );
    return rows.length;
  },

  /** The database's clock, in milliseconds since the epoch: what expiries are measured against. */
  async clock(q: Queryable): Promise<number> {
    const { rows } = await q.query<{ ms: string | number }>("SELECT (extract(epoch FROM statement_timestamp()) * 1000)::float8 AS ms");
    return Number(rows[0]!.ms);
  },

  /** Deletes the tuples that exist, set-based; returns how many did. */
  async deleteMany(q: Queryable, appId: string, tuples: Tuple[]): Promise<number> {
    if (tuples.length === 0) return 0;
    const { rows } = await q.query(
      `DELETE FROM relationships r
       USING unnest($2::text[], $3::text[], $4::text[], $5::text[]) AS t(resource, resource_id, relation, user_id)
       WHERE r.app_id = $1 AND r.resource = t.resource AND r.resource_id = t.resource_id
         AND r.relation = t.relation AND r.user_id = t.user_id
       RETURNING 1`,
      [appId, ...columns(tuples)],
    );
    return rows.length;
  },

  /** Everyone with a relation on one instance, in (relation, userId) order; with the resource's relations in the catalog. */
  async listByInstance(
    q: Queryable,
    appId: string,
    filter: { resource: string; resourceId: string; relation: string | undefined; includeExpired: boolean },
    after: { relation: string; userId: string } | undefined,
    limit: number,
  ): Promise<ListedPage> {
    return listWithCatalog(
      q,
      `SELECT ${COLUMNS} FROM relationships
       WHERE app_id = $1 AND resource = $2 AND resource_id = $3 AND ($4::text IS NULL OR relation = $4)
         AND ($5::text IS NULL OR (relation, user_id) > ($5, $6))
         AND ($8::boolean OR ${LIVE_GRANT("relationships")})
       ORDER BY relation, user_id LIMIT $7`,
      `page.relation, page."userId"`,
      [appId, filter.resource, filter.resourceId, filter.relation ?? null, after?.relation ?? null, after?.userId ?? "", limit, filter.includeExpired],
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
   * Every grant on instances of a type, in (resourceId, relation, userId)
   * order, the primary key's: an export pages through a whole type on the
   * index. With the resource's relations.
   */
  async listByResource(
    q: Queryable,
    appId: string,
    filter: { resource: string; relation: string | undefined; includeExpired: boolean },
    after: { resourceId: string; relation: string; userId: string } | undefined,
    limit: number,
  ): Promise<ListedPage> {
    return listWithCatalog(
      q,
      `SELECT ${COLUMNS} FROM relationships
       WHERE app_id = $1 AND resource = $2 AND ($3::text IS NULL OR relation = $3)
         AND ($4::text IS NULL OR (resource_id, relation, user_id) > ($4, $5, $6))
         AND ($8::boolean OR ${LIVE_GRANT("relationships")})
       ORDER BY resource_id, relation, user_id LIMIT $7`,
      `page."resourceId", page.relation, page."userId"`,
      [appId, filter.resource, filter.relation ?? null, after?.resourceId ?? null, after?.relation ?? "", after?.userId ?? "", limit, filter.includeExpired],
    );
  },

  /** The application's effective relations: resource → relation → implied actions. */
  async relationsOf(q: Queryable, appId: string): Promise<Map<string, Map<string, string[]>>> {
    const { rows } = await q.query<{ resource: string; relation: string; actions: string[] }>(
      "SELECT resource, relation, actions FROM catalog_relations WHERE app_id = $1",
      [appId],
    );
    const map = new Map<string, Map<string, string[]>>();
    for (const r of rows) {
      let relations = map.get(r.resource);
      if (relations === undefined) map.set(r.resource, (relations = new Map()));
      relations.set(r.relation, r.actions);
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
async function listWithCatalog(q: Queryable, pageSql: string, orderBy: string, params: unknown[]): Promise<ListedPage> {
  const { rows } = await q.query<RelationshipRow & { catalogRelations: string[] | null }>(
    `WITH catalog AS (SELECT array_agg(relation) AS names FROM catalog_relations WHERE app_id = $1 AND resource = $2)
     SELECT catalog.names AS "catalogRelations", page.*
     FROM catalog LEFT JOIN LATERAL (${pageSql}) page ON true
     ORDER BY ${orderBy}`,
    params,
  );
  return {
    catalogRelations: rows[0]?.catalogRelations ?? null,
    rows: rows.filter((r) => r.userId !== null).map(({ catalogRelations: _, ...row }) => row),
  };
}
