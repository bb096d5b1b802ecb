import type { JsonObject } from "../lib/json.js";
import { newId } from "../lib/ids.js";
import { recordChanges, sealed } from "./changes-store.js";
import { lastStatement, type Queryable } from "./db.js";

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

/**
 * The audit events that are changes to the model (catalog, policies, roles,
 * or all at once): the change feed's model_changed. Assignments have
 * changes of their own (assignment_added, assignment_removed), and API keys
 * and applications are not part of an application's model.
 */
export const MODEL_EVENT_TYPES: ReadonlySet<string> = new Set([
  "catalog.replaced",
  "model.applied",
  "policy.created",
  "policy.updated",
  "policy.deleted",
  "role.created",
  "role.updated",
  "role.deleted",
]);

/**
 * The other events written exactly when their transaction recorded changes
 * (assignments made or removed), as its last write: their statement seals
 * those changes, as a model event's does its own.
 */
const AFTER_CHANGES: ReadonlySet<string> = new Set(["role.assigned", "role.unassigned", "user.roles_removed"]);

/** A model_changed change's body: the audit event, as the audit log lists it (the actor's name is looked up when read). */
const MODEL_EVENT_BODY = {
  body: (r: string) =>
    `jsonb_build_object('eventId', ${r}.event_id, 'type', ${r}.type, 'occurredAt', ${r}.occurred_at, 'actorKeyId', ${r}.actor_key_id,
       'targetType', ${r}.target_type, 'targetId', ${r}.target_id, 'data', ${r}.data)`,
  order: "", // one event
};

/** SQL for the audit log. Events are written inside the transaction of the change they record. */
export const auditStore = {
  /**
   * Writes the event; a change to the model (MODEL_EVENT_TYPES) also goes to
   * the change feed as model_changed, carrying the event, in the same
   * statement. A model event, or one of AFTER_CHANGES, must be its
   * transaction's last write: it seals the transaction's changes. One of
   * AFTER_CHANGES must be its last statement: in a Transaction it runs at
   * COMMIT, and nothing may run after it.
   */
  async append(q: Queryable, event: AuditEventInput): Promise<string> {
    const eventId = newId("evt");
    const insert = `INSERT INTO audit_events (app_id, event_id, type, actor_key_id, target_type, target_id, data)
       VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)`;
    // Every transaction that records changes writes one of these events as its last write
    // (domain/roles.ts, policies.ts, catalog.ts, models.ts): its statement gives the transaction
    // its place in the change feed's order (changes-store.ts, sealed). An assignment's event
    // (AFTER_CHANGES) is its transaction's last statement, and goes with its COMMIT
    // (lastStatement), so the clock is held only while Postgres commits; a model event may be
    // followed by reads of what the transaction wrote.
    const params = [event.appId, eventId, event.type, event.actorKeyId, event.targetType, event.targetId, JSON.stringify(event.data)];
    if (MODEL_EVENT_TYPES.has(event.type)) {
      await q.query(
        `WITH e AS (${insert} RETURNING event_id, type, occurred_at, actor_key_id, target_type, target_id, data),
              ${recordChanges("c", "model_changed", "e", MODEL_EVENT_BODY)}, ${sealed(["c"])}
         SELECT 1`,
        params,
      );
    } else if (AFTER_CHANGES.has(event.type)) {
      await lastStatement(q, `WITH e AS (${insert} RETURNING 1), ${sealed(["e"])} SELECT 1`, params);
    } else {
      await q.query(insert, params);
    }
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
