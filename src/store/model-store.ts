import type { Queryable } from "./db.js";

/** One application's access model as stored: what the check needs besides grants and assignments. */
export interface ModelRows {
  version: string;
  /** [resource, actions] */
  resources: [string, string[]][];
  /** [resource, relation, implied actions, subjects] (built-in relations with their effective actions) */
  relations: [string, string, string[], string[]][];
  /** [resource, relation, through, inherited], in each relation's order */
  inherits: [string, string, string, string][];
  /** [resource, relation, "requires" | "unless", through, target], in each relation's order */
  operators: [string, string, "requires" | "unless", string, string][];
  /**
   * [roleId, tenantId, resource, action, conditions]: what each role holds
   * through its policies; conditions null when it holds outright, else the
   * policies' conditions, any of which must hold
   */
  permissions: [string, string | null, string, string, string[] | null][];
}

/**
 * The model version (see migration 002). Every transaction that changes an
 * application's catalog or what its roles hold calls bump(), after the
 * locks that serialize those changes, so the new version commits with them.
 */
export const modelStore = {
  async create(q: Queryable, appId: string): Promise<void> {
    await q.query("INSERT INTO model_versions (app_id) VALUES ($1)", [appId]);
  },

  async bump(q: Queryable, appId: string): Promise<void> {
    // A subquery, not a bare nextval(): Citus refuses volatile functions in
    // an UPDATE of a distributed table, but evaluates this one once, on the
    // coordinator, and sends the value.
    await q.query("UPDATE model_versions SET version = (SELECT nextval('model_version_seq')) WHERE app_id = $1", [appId]);
  },

  /**
   * The whole model and its version, read in one statement, so from one
   * snapshot. Undefined for an unknown application. Each subquery names $1
   * itself rather than `v.app_id`: Citus prunes a scalar subquery by its own
   * filters, not through its correlation, and would run it on every shard.
   */
  async load(q: Queryable, appId: string): Promise<ModelRows | undefined> {
    const { rows } = await q.query<ModelRows>(
      `SELECT v.version::text AS version,
         (SELECT coalesce(json_agg(json_build_array(c.resource, c.actions)), '[]')
          FROM catalog_resources c WHERE c.app_id = $1) AS resources,
         (SELECT coalesce(json_agg(json_build_array(r.resource, r.relation, r.actions, r.subjects)), '[]')
          FROM catalog_relations r WHERE r.app_id = $1) AS relations,
         (SELECT coalesce(json_agg(json_build_array(i.resource, i.relation, i.through, i.inherited) ORDER BY i.resource, i.relation, i.position), '[]')
          FROM catalog_inherits i WHERE i.app_id = $1) AS inherits,
         (SELECT coalesce(json_agg(json_build_array(o.resource, o.relation, o.operator, o.through, o.target) ORDER BY o.resource, o.relation, o.operator, o.position), '[]')
          FROM catalog_operators o WHERE o.app_id = $1) AS operators,
         (SELECT coalesce(json_agg(json_build_array(p.role_id, p.tenant_id, p.resource, p.action, p.conditions)), '[]')
          FROM role_permissions p WHERE p.app_id = $1) AS permissions
       FROM model_versions v WHERE v.app_id = $1`,
      [appId],
    );
    return rows[0];
  },
};
