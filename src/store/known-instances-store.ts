import type { Queryable } from "./db.js";
import { REPLAYED } from "./per-application.js";
import { LIVE_GRANT } from "./relationships-store.js";

/**
 * The instances of a resource type an application knows (API.md,
 * "Conditions and AuthZEN"): those its live grants name as their resource,
 * whoever holds them (users, subject sets, links). An AuthZEN resource
 * search answers them all where a role allows the action on every instance.
 *
 * In resource_id order after a cursor, each table read along its primary
 * key (app_id, resource, resource_id, ...): a page reads about `limit`
 * instances' entries of each, plus the expired grants among them. One
 * application per statement (docs/scale-out.md); FROM subqueries only, so
 * on Citus it is a router query to that application's shard.
 */
const knownInstancesSql = (replayed: boolean) => `
  SELECT ARRAY(
    SELECT x.resource_id FROM (
      (SELECT DISTINCT g.resource_id FROM relationships g
       WHERE g.app_id = $1 AND g.resource = $2 AND g.resource_id > $3 AND ${LIVE_GRANT("g")}
       ORDER BY g.resource_id LIMIT $4)
      UNION
      (SELECT DISTINCT s.resource_id FROM subject_relationships s
       WHERE s.app_id = $1 AND s.resource = $2 AND s.resource_id > $3 AND ${LIVE_GRANT("s")}
       ORDER BY s.resource_id LIMIT $4)
    ) x ORDER BY x.resource_id LIMIT $4) AS ids${replayed ? REPLAYED : ""}`;
const KNOWN_INSTANCES_SQL = knownInstancesSql(false);
const KNOWN_INSTANCES_REPLAYED_SQL = knownInstancesSql(true);

export const knownInstancesStore = {
  /**
   * Up to `limit` instance ids of `resource` after `after`, ascending. With
   * `replayed` (on a read replica), the standby's replay position too.
   */
  async page(
    q: Queryable,
    input: { appId: string; resource: string; after: string; limit: number },
    options: { replayed?: boolean } = {},
  ): Promise<{ ids: string[]; replayed: string | null }> {
    const { rows } = await q.query<{ ids: string[]; replayed?: string | null }>(
      options.replayed === true ? KNOWN_INSTANCES_REPLAYED_SQL : KNOWN_INSTANCES_SQL,
      [input.appId, input.resource, input.after, input.limit],
    );
    return { ids: rows[0]!.ids, replayed: rows[0]!.replayed ?? null };
  },
};
