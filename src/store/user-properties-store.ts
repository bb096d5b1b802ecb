import type { JsonObject } from "../lib/json.js";
import type { Queryable } from "./db.js";

/**
 * user_properties (migration 014): one row per user with stored properties,
 * the object as jsonb. Every statement names one application (docs/scale-out.md).
 */
export const userPropertiesStore = {
  /** Stores `properties` (JSON text of an object) for the user, replacing what was there; answers the object as stored. */
  async put(q: Queryable, appId: string, userId: string, properties: string): Promise<JsonObject> {
    const { rows } = await q.query<{ properties: JsonObject }>(
      // now() in VALUES, not in the DO UPDATE SET: Citus takes only immutable functions there, and evaluates
      // the VALUES list's once, on the coordinator.
      `INSERT INTO user_properties (app_id, user_id, properties, updated_at) VALUES ($1, $2, $3::jsonb, now())
       ON CONFLICT (app_id, user_id) DO UPDATE SET properties = excluded.properties, updated_at = excluded.updated_at
       RETURNING properties`,
      [appId, userId, properties],
    );
    return rows[0]!.properties;
  },

  /** Removes the user's properties; answers whether there were any. */
  async delete(q: Queryable, appId: string, userId: string): Promise<boolean> {
    const { rows } = await q.query("DELETE FROM user_properties WHERE app_id = $1 AND user_id = $2 RETURNING 1", [appId, userId]);
    return rows.length > 0;
  },

  /** The user's properties, or undefined when none are stored. */
  async get(q: Queryable, appId: string, userId: string): Promise<JsonObject | undefined> {
    const { rows } = await q.query<{ properties: JsonObject }>(
      "SELECT properties FROM user_properties WHERE app_id = $1 AND user_id = $2",
      [appId, userId],
    );
    return rows[0]?.properties;
  },
};
