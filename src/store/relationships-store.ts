import type { Queryable } from "./db.js";

export interface Tuple {
  userId: string;
  resource: string;
  resourceId: string;
  relation: string;
}

export interface RelationshipRow extends Tuple {
  createdAt: Date;
}

const COLUMNS = `user_id AS "userId", resource, resource_id AS "resourceId", relation, created_at AS "createdAt"`;

/** Column arrays for unnest: one round trip whatever the number of tuples. */
const columns = (tuples: Tuple[]) => [
  tuples.map((t) => t.resource),
  tuples.map((t) => t.resourceId),
  tuples.map((t) => t.relation),
  tuples.map((t) => t.userId),
];

/** SQL for direct grants. */
export const relationshipsStore = {
  /** Writes one grant; `created` is false when it existed (the stored one is returned). */
  async write(q: Queryable, appId: string, t: Tuple): Promise<{ row: RelationshipRow; created: boolean }> {
    const inserted = await q.query<RelationshipRow>(
      `INSERT INTO relationships (app_id, resource, resource_id, relation, user_id) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT DO NOTHING RETURNING ${COLUMNS}`,
      [appId, t.resource, t.resourceId, t.relation, t.userId],
    );
    if (inserted.rows[0] !== undefined) return { row: inserted.rows[0], created: true };
    const existing = await q.query<RelationshipRow>(
      `SELECT ${COLUMNS} FROM relationships
       WHERE app_id = $1 AND resource = $2 AND resource_id = $3 AND relation = $4 AND user_id = $5`,
      [appId, t.resource, t.resourceId, t.relation, t.userId],
    );
    return { row: existing.rows[0]!, created: false };
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
   * Inserts the tuples that are new, set-based; returns how many were,
   * counted from RETURNING (Citus reports the rows sent as the count).
   */
  async writeMany(q: Queryable, appId: string, tuples: Tuple[]): Promise<number> {
    if (tuples.length === 0) return 0;
    const { rows } = await q.query(
      `INSERT INTO relationships (app_id, resource, resource_id, relation, user_id)
       SELECT $1, t.resource, t.resource_id, t.relation, t.user_id
       FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) AS t(resource, resource_id, relation, user_id)
       ON CONFLICT DO NOTHING
       RETURNING 1`,
      [appId, ...columns(tuples)],
    );
    return rows.length;
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
    filter: { resource: string; resourceId: string; relation: string | undefined },
    after: { relation: string; userId: string } | undefined,
    limit: number,
  ): Promise<ListedPage> {
    return listWithCatalog(
      q,
      `SELECT ${COLUMNS} FROM relationships
       WHERE app_id = $1 AND resource = $2 AND resource_id = $3 AND ($4::text IS NULL OR relation = $4)
         AND ($5::text IS NULL OR (relation, user_id) > ($5, $6))
       ORDER BY relation, user_id LIMIT $7`,
      `page.relation, page."userId"`,
      [appId, filter.resource, filter.resourceId, filter.relation ?? null, after?.relation ?? null, after?.userId ?? "", limit],
    );
  },

  /** Every instance of a type the user has a relation on, in (resourceId, relation) order; with the resource's relations. */
  async listByUser(
    q: Queryable,
    appId: string,
    filter: { userId: string; resource: string; relation: string | undefined },
    after: { resourceId: string; relation: string } | undefined,
    limit: number,
  ): Promise<ListedPage> {
    return listWithCatalog(
      q,
      `SELECT ${COLUMNS} FROM relationships
       WHERE app_id = $1 AND resource = $2 AND user_id = $3 AND ($4::text IS NULL OR relation = $4)
         AND ($5::text IS NULL OR (resource_id, relation) > ($5, $6))
       ORDER BY resource_id, relation LIMIT $7`,
      `page."resourceId", page.relation`,
      [appId, filter.resource, filter.userId, filter.relation ?? null, after?.resourceId ?? null, after?.relation ?? "", limit],
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
