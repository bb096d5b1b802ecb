/**
 * The change feed's storage (migrations 011 and 012; docs/change-feed.md):
 * changes recorded in the transactions that make them, read back in commit
 * order, exactly once, by transaction id and snapshot.
 *
 * A read from position P = (S1, S2?, after) returns the changes of the
 * transactions visible in S2 and not in S1, in transaction id order, after
 * `after`; S2 is the statement's own snapshot unless P is in the middle of
 * a window. Every transaction returned committed before S2 was taken; every
 * one left for later commits after it, or was still running, and is then in
 * S2's xip: none is skipped, none comes twice. If T1 committed before T2
 * began, T1's id is the smaller (it was assigned before T1's commit, T2's
 * after T2's start), so id order within a window agrees with the commits.
 *
 * Every statement names one app_id and reads model_versions' row of the
 * application beside it, so on Citus it goes whole to the node that holds
 * the application, where pg_current_snapshot() is that node's snapshot and
 * the xids are that node's (the trigger of 011 sets them there).
 */
import type { Queryable } from "./db.js";

/** A snapshot as pg_snapshot's text: xmin:xmax:xip,... (xid8 values, decimal). */
export type SnapshotText = string;

/** Where a reader is: after the window (after undefined), or inside one. */
export interface ChangePosition {
  /** Seen: every transaction visible in this snapshot (undefined: nothing yet, from the oldest kept). */
  seen: SnapshotText | undefined;
  /** Inside a window: its upper snapshot, and the last change returned from it. */
  window?: { upTo: SnapshotText; xid: string; stmt: string; ord: number };
}

export interface StoredChange {
  xid: string;
  /** The recording statement's number (change_statement_seq), greater for each later statement of a transaction. */
  stmt: string;
  /** The change's number within its statement. */
  ord: number;
  kind: ChangeKind;
  body: unknown;
  createdAt: Date;
  /** Where a read resumes to give the changes after this one. */
  after: ChangePosition;
}

export interface ChangePage {
  changes: StoredChange[];
  /** Where the next read starts. */
  next: ChangePosition;
  /** The retention sweep deleted changes this position had not seen: the reader must start again from a fresh read. */
  expired?: true;
}

export interface NewChange {
  kind: ChangeKind;
  body: unknown;
}

/** The kinds of change (API.md, "Change feed"). */
export type ChangeKind = "grant_written" | "grant_deleted" | "assignment_added" | "assignment_removed" | "model_changed";

/**
 * A change's body from a row of the write that makes it, in the API's
 * shape (a Relationship, a RoleAssignment), built in the statement: the
 * rows never come back to the service to be sent again. `r` names a CTE
 * over the write's RETURNING of the table's plain columns. A user grant's
 * body carries the stored user_id: "" for an allUsers grant, which the
 * feed's reader turns into `allUsers` (store/all-users.ts).
 */
export const CHANGE_BODY = {
  userGrant: {
    body: (r: string) =>
      `jsonb_build_object('userId', ${r}.user_id, 'resource', ${r}.resource, 'resourceId', ${r}.resource_id, 'relation', ${r}.relation,
         'createdAt', ${r}.created_at, 'expiresAt', ${r}.expires_at, 'condition', ${r}.condition)`,
    order: "resource, resource_id, relation, user_id",
  },
  subjectGrant: {
    body: (r: string) =>
      `jsonb_build_object('resource', ${r}.resource, 'resourceId', ${r}.resource_id, 'relation', ${r}.relation,
         'subject', jsonb_build_object('resource', ${r}.subject_resource, 'resourceId', ${r}.subject_id, 'relation', ${r}.subject_relation),
         'createdAt', ${r}.created_at, 'expiresAt', ${r}.expires_at, 'condition', ${r}.condition)`,
    order: "resource, resource_id, relation, subject_resource, subject_id, subject_relation",
  },
  assignment: {
    body: (r: string) => `jsonb_build_object('roleId', ${r}.role_id, 'userId', ${r}.user_id, 'createdAt', ${r}.created_at, 'condition', ${r}.condition)`,
    order: "role_id, user_id",
  },
} as const;

/** How a kind of row becomes changes: its body, and the order a statement's changes take (its key's). */
export interface ChangeRows {
  body: (r: string) => string;
  /** The row's key columns, or "" for a statement of one row. */
  order: string;
}

/** What a user grant's write or delete returns for its change to be recorded. */
export const USER_GRANT_RETURNING = "resource, resource_id, relation, user_id, created_at, expires_at, condition";
/** What a grant to a subject's write or delete returns. */
export const SUBJECT_GRANT_RETURNING = "resource, resource_id, relation, subject_resource, subject_id, subject_relation, created_at, expires_at, condition";
/** What an assignment's write or delete returns. */
export const ASSIGNMENT_RETURNING = "role_id, user_id, created_at, condition";

/** A RETURNING list's columns of one table alias, for a DELETE ... USING (whose other relation has some of the same names). */
export const prefixed = (alias: string, list: string) =>
  list
    .split(",")
    .map((c) => `${alias}.${c.trim()}`)
    .join(", ");

/**
 * A CTE (to follow others in a WITH) recording one change of `kind` per row
 * of the CTE `from`, numbered in the order of their keys after the
 * transaction's earlier statements' (migration 012), in the same statement as the write: the change commits
 * or rolls back with it, and a write that changes no row records nothing.
 * The statement's $1 is the application. Data-modifying CTEs run to
 * completion whether or not the statement reads them.
 */
export function recordChanges(name: string, kind: ChangeKind, from: string, rows: ChangeRows, ordered = true): string {
  // A statement's rows come in whatever order the plan makes them (another on Citus than on one
  // node): they are numbered in the order of their keys, so a feed reads the same everywhere.
  // Bulk writes (`ordered` false) skip the sort, 3-4 ms of 5,000: their rows come back in the
  // order of the request's arrays.
  const order = rows.order === "" || !ordered ? "" : `ORDER BY ${rows.order}`;
  return `${name} AS (INSERT INTO changes (app_id, stmt, ord, kind, body)
    SELECT $1, (SELECT nextval('change_statement_seq')), (row_number() OVER (${order}))::int, '${kind}', ${rows.body(from)} FROM ${from}
    RETURNING 1)`;
}

const SNAPSHOT = /^(\d{1,20}):(\d{1,20}):((?:\d{1,20})(?:,\d{1,20})*)?$/;

/** Whether `text` is a snapshot Postgres would take (pg_snapshot's input rules), so that a bad one is a 400, not a cast error. */
export function isSnapshotText(text: string): boolean {
  const m = SNAPSHOT.exec(text);
  if (m === null) return false;
  const xmin = BigInt(m[1]!);
  const xmax = BigInt(m[2]!);
  const max = (1n << 63n) - 1n;
  if (xmin < 1n || xmin > xmax || xmax > max) return false;
  let last = xmin - 1n;
  for (const part of m[3] === undefined ? [] : m[3].split(",")) {
    const xip = BigInt(part);
    // In [xmin, xmax), ascending, no repeats.
    if (xip < xmin || xip >= xmax || xip <= last) return false;
    last = xip;
  }
  return true;
}

export const changesStore = {
  /**
   * Records changes given as values, in their order, after the
   * transaction's earlier ones. Call it inside the transaction that makes
   * them. No write of the service records this way (each records its
   * changes in its own statement: recordChanges); the storage's tests do, to
   * drive the reads with changes of their own making.
   */
  async record(q: Queryable, appId: string, changes: readonly NewChange[]): Promise<number> {
    if (changes.length === 0) return 0;
    const { rows } = await q.query(
      `INSERT INTO changes (app_id, stmt, ord, kind, body)
       SELECT $1, (SELECT nextval('change_statement_seq')), c.n::int, c.kind, c.body
       FROM ROWS FROM (jsonb_to_recordset($2::jsonb) AS (kind text, body jsonb)) WITH ORDINALITY AS c(kind, body, n)
       RETURNING 1`,
      [appId, JSON.stringify(changes)],
    );
    return rows.length;
  },

  /** Up to `limit` changes after `from`, in commit order, and where the next read starts. */
  async read(q: Queryable, appId: string, from: ChangePosition, limit: number): Promise<ChangePage> {
    const seen = from.seen;
    const upTo = from.window?.upTo;
    const params: unknown[] = [appId, limit, upTo ?? null, from.window?.xid ?? "0", from.window?.stmt ?? "-1", from.window?.ord ?? -1];
    let unseen = "";
    if (seen !== undefined) {
      params.push(seen);
      unseen = "AND c.xid >= pg_snapshot_xmin($7::pg_snapshot) AND NOT pg_visible_in_snapshot(c.xid, $7::pg_snapshot)";
    }
    // The window's upper snapshot: the one a page inside it was read to, else this statement's.
    const { rows } = await q.query<{ snap: string; swept: string | null; xid: string | null; stmt: string | null; ord: number | null; kind: string | null; body: unknown; created_at: Date | null }>(
      `SELECT coalesce($3::pg_snapshot, pg_current_snapshot())::text AS snap,
              (SELECT h.swept_xid::text FROM change_horizons h WHERE h.app_id = $1) AS swept,
              c.xid::text AS xid, c.stmt::text AS stmt, c.ord, c.kind, c.body, c.created_at
       FROM model_versions m
       LEFT JOIN LATERAL (
         SELECT c.xid, c.stmt, c.ord, c.kind, c.body, c.created_at
         FROM changes c
         WHERE c.app_id = $1 ${unseen}
           AND c.xid < pg_snapshot_xmax(coalesce($3::pg_snapshot, pg_current_snapshot()))
           AND pg_visible_in_snapshot(c.xid, coalesce($3::pg_snapshot, pg_current_snapshot()))
           AND (c.xid, c.stmt, c.ord) > ($4::xid8, $5::bigint, $6::int)
         ORDER BY c.xid, c.stmt, c.ord
         LIMIT $2
       ) c ON true
       WHERE m.app_id = $1`,
      params,
    );
    const window = rows[0]?.snap;
    if (window === undefined) return { changes: [], next: from }; // no such application: the service says so first
    // Every deleted change's transaction is at most `swept`; one this position has not seen is at
    // least its xmin. So below its xmin, nothing it lacks was deleted (an over-cautious "expired"
    // at the boundary is the price of one number per application).
    const swept = rows[0]!.swept;
    if (seen !== undefined && swept !== null && BigInt(swept) >= BigInt(seen.split(":")[0]!)) return { changes: [], next: from, expired: true };
    const changes: StoredChange[] = rows
      .filter((r) => r.xid !== null)
      .map((r) => ({
        xid: r.xid!,
        stmt: r.stmt!,
        ord: r.ord!,
        kind: r.kind as ChangeKind,
        body: r.body,
        createdAt: r.created_at!,
        after: { seen, window: { upTo: window, xid: r.xid!, stmt: r.stmt!, ord: r.ord! } },
      }));
    const last = changes.at(-1);
    if (changes.length === limit && last !== undefined) return { changes, next: { seen, window: { upTo: window, xid: last.xid, stmt: last.stmt, ord: last.ord } } };
    // A window finished with room left on the page: on to the changes after
    // it, so that a short page always means "nothing more yet", wherever it
    // started.
    if (upTo !== undefined) {
      const more = await changesStore.read(q, appId, { seen: upTo }, limit - changes.length);
      // Expired between the two statements: the changes of this window stand; the next read says so.
      if (more.expired === true) return { changes, next: { seen: upTo } };
      return { changes: [...changes, ...more.changes], next: more.next };
    }
    return { changes, next: { seen: window } };
  },

  /**
   * For each snapshot a reader has seen, whether a change it has not seen
   * has committed since: one statement for every reader of an application
   * that waits (domain/change-signals.ts). Each is an index range from the
   * snapshot's xmin, as a read's is. Returns the snapshots that have news.
   */
  async newer(q: Queryable, appId: string, seen: readonly SnapshotText[]): Promise<Set<SnapshotText>> {
    if (seen.length === 0) return new Set();
    const { rows } = await q.query<{ seen: string }>(
      `SELECT s.seen FROM model_versions m
       CROSS JOIN LATERAL unnest($2::text[]) AS s(seen)
       WHERE m.app_id = $1 AND EXISTS (
         SELECT 1 FROM changes c
         WHERE c.app_id = $1 AND c.xid >= pg_snapshot_xmin(s.seen::pg_snapshot)
           AND NOT pg_visible_in_snapshot(c.xid, s.seen::pg_snapshot)
           AND pg_visible_in_snapshot(c.xid, pg_current_snapshot()))`,
      [appId, [...seen]],
    );
    return new Set(rows.map((r) => r.seen));
  },

  /**
   * Deletes up to `limit` of an application's changes older than
   * `retentionMs`, oldest transactions first, and moves its horizon past
   * them; returns how many went. It looks at the `limit` oldest by
   * transaction id (the primary key's order, no index of its own) and
   * deletes those past retention: ids follow time but for long
   * transactions, so a batch that finds some too young ends the pass, and
   * the next pass takes them once they have aged. Only changes of transactions that every
   * snapshot now sees as finished: the bound is read first, on the node that
   * holds the application (its own ids), and passed to the delete as a
   * value, so no function runs inside the write.
   */
  async sweep(q: Queryable, appId: string, retentionMs: number, limit: number): Promise<number> {
    const { rows: bound } = await q.query<{ xmin: string }>(
      "SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin FROM model_versions WHERE app_id = $1",
      [appId],
    );
    const finished = bound[0]?.xmin;
    if (finished === undefined) return 0;
    const { rows } = await q.query<{ n: number }>(
      `WITH gone AS (
         DELETE FROM changes c
         USING (SELECT xid, stmt, ord, created_at FROM changes
                WHERE app_id = $1 AND xid < $2::xid8
                ORDER BY xid, stmt, ord LIMIT $4) old
         WHERE c.app_id = $1 AND c.xid = old.xid AND c.stmt = old.stmt AND c.ord = old.ord
           AND old.created_at < now() - $3::float8 * interval '1 millisecond'
         RETURNING c.xid
       ), moved AS (
         INSERT INTO change_horizons (app_id, swept_xid)
         SELECT $1, max(xid) FROM gone HAVING count(*) > 0
         ON CONFLICT (app_id) DO UPDATE SET swept_xid = greatest(change_horizons.swept_xid, excluded.swept_xid)
         RETURNING 1
       )
       SELECT count(*)::int AS n FROM gone`,
      [appId, finished, retentionMs, limit],
    );
    return rows[0]!.n;
  },
};
