import { ALL_USERS_SQL } from "./all-users.js";
import type { Queryable } from "./db.js";
import { REPLAYED } from "./per-application.js";
import { LIVE_GRANT } from "./relationships-store.js";

/**
 * The users an application knows (API.md, "Conditions and AuthZEN"): those
 * named by its live grants, its role assignments or its stored user
 * properties. An AuthZEN subject search answers them all where an allUsers
 * grant lets every user perform the action.
 *
 * In user_id order after a cursor, each table read along an index that
 * starts with (app_id, user_id); the allUsers grants' id ('') is no user.
 * A page reads the entries of about `limit` users of each table (every
 * grant of each: a loose index scan would read one per user, but a page's
 * users are few). One application per statement (docs/scale-out.md); FROM
 * subqueries only, so on Citus it is a router query to its shard.
 */
const knownUsersSql = (replayed: boolean) => `
  SELECT ARRAY(
    SELECT x.user_id FROM (
      (SELECT DISTINCT g.user_id FROM relationships g
       WHERE g.app_id = $1 AND g.user_id > $2 AND g.user_id <> ${ALL_USERS_SQL} AND ${LIVE_GRANT("g")}
       ORDER BY g.user_id LIMIT $3)
      UNION
      (SELECT DISTINCT a.user_id FROM role_assignments a
       WHERE a.app_id = $1 AND a.user_id > $2
       ORDER BY a.user_id LIMIT $3)
      UNION
      (SELECT p.user_id FROM user_properties p
       WHERE p.app_id = $1 AND p.user_id > $2
       ORDER BY p.user_id LIMIT $3)
    ) x ORDER BY x.user_id LIMIT $3) AS ids${replayed ? REPLAYED : ""}`;
const KNOWN_USERS_SQL = knownUsersSql(false);
const KNOWN_USERS_REPLAYED_SQL = knownUsersSql(true);

export const knownUsersStore = {
  /** Up to `limit` user ids after `after`, ascending; with `replayed` (on a read replica), the standby's replay position too. */
  async page(q: Queryable, input: { appId: string; after: string; limit: number }, options: { replayed?: boolean } = {}): Promise<{ ids: string[]; replayed: string | null }> {
    const { rows } = await q.query<{ ids: string[]; replayed?: string | null }>(options.replayed === true ? KNOWN_USERS_REPLAYED_SQL : KNOWN_USERS_SQL, [
      input.appId,
      input.after,
      input.limit,
    ]);
    return { ids: rows[0]!.ids, replayed: rows[0]!.replayed ?? null };
  },
};
