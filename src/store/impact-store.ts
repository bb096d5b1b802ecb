import type { Queryable } from "./db.js";

export interface ImpactRole {
  roleId: string;
  name: string;
  tenantId: string | null;
  assignmentCount: number;
}

/** Users the policy reaches who hold exactly the same roles: their access changes alike. */
export interface RoleSetGroup {
  /** The roles each of them holds (all of them, not only the policy's), sorted. */
  roleIds: string[];
  users: number;
  /** The first user ids of the group, in id order. */
  sample: string[];
}

/** A role of the application: its scope, and which of the permissions asked about it holds through policies other than the one previewed. */
export interface RoleSource {
  roleId: string;
  tenantId: string | null;
  /**
   * "resource:action", among those asked about, when held outright; that, a
   * newline and the condition when held under one (models.ts's conditionalKey).
   */
  otherPermissions: string[];
}

/** How many user ids a sample holds. */
export const SAMPLE_SIZE = 20;

/**
 * The users the policy reaches (assigned a role it is attached to), grouped
 * by the whole set of roles each holds: the outcome of a change depends on
 * nothing else, and a few hundred role sets stand for any number of users.
 * Every step is an index lookup per row (the policy's roles, their
 * assignments, each reached user's roles by role_assignments_user_idx), so
 * the statement stays linear in the users reached whatever the planner
 * knows of the tables (a join planned on the estimates of tables never
 * analyzed went quadratic: 1.8 s for 10,000 users).
 */
const GROUPS_SQL = `
  WITH reached AS MATERIALIZED (
    SELECT DISTINCT a.user_id
    FROM role_policies rp
    JOIN role_assignments a ON a.app_id = rp.app_id AND a.role_id = rp.role_id
    WHERE rp.app_id = $1 AND rp.policy_id = $2
  ),
  holding AS (
    SELECT u.user_id,
           ARRAY(SELECT a.role_id FROM role_assignments a WHERE a.app_id = $1 AND a.user_id = u.user_id ORDER BY a.role_id) AS role_ids
    FROM reached u
  )
  SELECT role_ids AS "roleIds", count(*)::int AS users, (array_agg(user_id ORDER BY user_id COLLATE "C"))[1:${SAMPLE_SIZE}] AS sample
  FROM holding
  GROUP BY role_ids`;

/**
 * Every role of the application with its scope and, of the permissions
 * asked about, those it holds through a policy other than $2.
 */
const SOURCES_SQL = `
  SELECT o.role_id AS "roleId", o.tenant_id AS "tenantId",
         ARRAY(SELECT DISTINCT pp.resource || ':' || pp.action || coalesce(chr(10) || p.condition, '')
               FROM role_policies rp
               JOIN policy_permissions pp ON pp.app_id = rp.app_id AND pp.policy_id = rp.policy_id
               JOIN policies p ON p.app_id = rp.app_id AND p.policy_id = rp.policy_id
               JOIN unnest($3::text[], $4::text[]) AS c(resource, action) ON c.resource = pp.resource AND c.action = pp.action
               WHERE rp.app_id = $1 AND rp.role_id = o.role_id AND rp.policy_id <> $2) AS "otherPermissions"
  FROM roles o
  WHERE o.app_id = $1`;

const splitPermission = (p: string) => {
  const at = p.indexOf(":");
  return [p.slice(0, at), p.slice(at + 1)] as const;
};

/** SQL for the impact preview of a policy change. */
export const impactStore = {
  /** The roles the policy is attached to, in creation order, with how many users each is assigned to. */
  async roles(q: Queryable, appId: string, policyId: string): Promise<ImpactRole[]> {
    const { rows } = await q.query<ImpactRole>(
      `SELECT o.role_id AS "roleId", o.name, o.tenant_id AS "tenantId",
              (SELECT count(*) FROM role_assignments a WHERE a.app_id = $1 AND a.role_id = o.role_id)::int AS "assignmentCount"
       FROM role_policies rp
       JOIN roles o ON o.app_id = rp.app_id AND o.role_id = rp.role_id
       WHERE rp.app_id = $1 AND rp.policy_id = $2
       ORDER BY o.created_at, o.role_id`,
      [appId, policyId],
    );
    return rows;
  },

  /** The users the policy reaches, grouped by the set of roles they hold. */
  async roleSets(q: Queryable, appId: string, policyId: string): Promise<RoleSetGroup[]> {
    const { rows } = await q.query<RoleSetGroup>(GROUPS_SQL, [appId, policyId]);
    return rows;
  },

  /** Every role of the application, with those of `permissions` it holds through other policies than `policyId`. */
  async sources(q: Queryable, appId: string, policyId: string, permissions: string[]): Promise<RoleSource[]> {
    const split = permissions.map(splitPermission);
    const { rows } = await q.query<RoleSource>(SOURCES_SQL, [appId, policyId, split.map((p) => p[0]), split.map((p) => p[1])]);
    return rows;
  },
};
