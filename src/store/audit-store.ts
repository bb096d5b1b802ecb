import type { JsonObject } from "../lib/json.js";
import { newId } from "../lib/ids.js";
import type { Queryable } from "./db.js";

export interface AuditEventInput {
  appId: string;
  type: string;
  actorKeyId: string;
  targetType: string;
  targetId: string;
  data: JsonObject;
}

export interface AuditEventRow {
  seq: number;
  eventId: string;
  type: string;
  occurredAt: Date;
  actorKeyId: string;
  targetType: string;
  targetId: string;
  data: JsonObject;
}

/** SQL for the audit log. Events are written inside the transaction of the change they record. */
export const auditStore = {
  async append(q: Queryable, event: AuditEventInput): Promise<string> {
    const eventId = newId("evt");
    await q.query(
      `INSERT INTO audit_events (app_id, event_id, type, actor_key_id, target_type, target_id, data)
       VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)`,
      [event.appId, eventId, event.type, event.actorKeyId, event.targetType, event.targetId, JSON.stringify(event.data)],
    );
    return eventId;
  },

  /** Newest first, strictly before the `beforeSeq` cursor. */
  async list(
    q: Queryable,
    appId: string,
    filter: { type: string | undefined; targetId: string | undefined },
    beforeSeq: number | undefined,
    limit: number,
  ): Promise<AuditEventRow[]> {
    const { rows } = await q.query<AuditEventRow>(
      `SELECT seq, event_id AS "eventId", type, occurred_at AS "occurredAt", actor_key_id AS "actorKeyId",
              target_type AS "targetType", target_id AS "targetId", data
       FROM audit_events
       WHERE app_id = $1 AND ($2::text IS NULL OR type = $2) AND ($3::text IS NULL OR target_id = $3)
         AND ($4::bigint IS NULL OR seq < $4)
       ORDER BY seq DESC LIMIT $5`,
      [appId, filter.type ?? null, filter.targetId ?? null, beforeSeq ?? null, limit],
    );
    return rows;
  },
};
