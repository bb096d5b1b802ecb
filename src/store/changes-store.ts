/**
 * The change feed's storage (migrations 011, 012 and 021; docs/change-feed.md):
 * changes recorded in the transactions that make them, read back in commit
 * order, exactly once.
 *
 * Commit order is a number per application: every transaction that records
 * changes takes its application's next one as its last statement (sealed(),
 * seal()), by an upsert of the application's row of change_clocks whose
 * lock it holds to its commit, and writes it beside its xid in
 * change_commits. The next number is taken only after the previous one's
 * transaction has ended, so numbers follow commits, and a snapshot that sees
 * a number sees every smaller one: a read of "the commits after n" in any
 * snapshot is a gap-free run of them, none skipped, none twice.
 *
 * Every statement names one app_id and, on Citus, goes whole to the node
 * that holds the application (change_clocks and change_commits are
 * distributed with changes), where the trigger of 011 sets the xids of the
 * changes and of their commit to that node's id of the transaction.
 */
import { lastStatement, type Queryable } from "./db.js";
import { placeLegacy, type LegacyPosition } from "./legacy-change-positions.js";

export { isSnapshotText, type SnapshotText } from "./legacy-change-positions.js";

/**
 * Where a reader is: after every change of the commits up to `seq`, or,
 * with `within`, inside commit `seq` after the change named. `seq`
 * undefined: nothing read yet, from the oldest change kept. `legacy`: a
 * token given before the commit order, placed in it on its first read.
 */
export interface ChangePosition {
  seq: string | undefined;
  within?: { stmt: string; ord: number };
  legacy?: LegacyPosition;
}

export interface StoredChange {
  /** The commit's number: its place in the application's commit order. */
  seq: string;
  /** The recording statement's number (change_stmt_seq), greater for each later statement of a transaction. */
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
  /**
   * The reader must start again from a fresh read: the retention sweep
   * deleted changes this position had not read ("retention"), or a token
   * from before the commit order cannot be placed in it ("order").
   */
  refused?: "retention" | "order";
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
    SELECT $1, (SELECT nextval('change_stmt_seq')), (row_number() OVER (${order}))::int, '${kind}', ${rows.body(from)} FROM ${from}
    RETURNING 1)`;
}

/** The greatest int8 and int4: a position after a whole commit compares after every (stmt, ord) of it. */
const STMT_MAX = "9223372036854775807";
const ORD_MAX = 2_147_483_647;

/**
 * CTEs (to follow the recording ones in a WITH) that give the statement's
 * transaction its place in the commit order when any of the CTEs `recorded`
 * (recordChanges's) made a change: the application's next number, taken by
 * an upsert of its change_clocks row, whose lock the transaction then holds
 * to its commit. Only for a statement after which the transaction commits
 * with no other write (an autocommit statement, or a transaction's last
 * write): the lock is the last one it takes. Counting the changes reads the
 * recording CTEs, and so the writes they record, to their end first: every
 * row lock of the write is held before the clock's is asked for.
 */
export function sealed(recorded: readonly string[]): string {
  const made = recorded.map((r) => `SELECT 1 FROM ${r}`).join(" UNION ALL ");
  return `feed_clock AS (
      INSERT INTO change_clocks (app_id, seq) SELECT $1, 1 FROM (${made}) made HAVING count(*) > 0
      ON CONFLICT (app_id) DO UPDATE SET seq = change_clocks.seq + 1
      RETURNING seq
    ), feed_commit AS (
      INSERT INTO change_commits (app_id, seq) SELECT $1, feed_clock.seq FROM feed_clock
      ON CONFLICT (app_id, xid) DO NOTHING
      RETURNING 1
    )`;
}

export const changesStore = {
  /**
   * Records changes given as values, in their order, after the
   * transaction's earlier ones. Call it inside the transaction that makes
   * them, and seal() before it commits. No write of the service records this
   * way (each records its changes in its own statement: recordChanges); the
   * storage's tests do, to drive the reads with changes of their own making.
   */
  async record(q: Queryable, appId: string, changes: readonly NewChange[]): Promise<number> {
    if (changes.length === 0) return 0;
    const { rows } = await q.query(
      `INSERT INTO changes (app_id, stmt, ord, kind, body)
       SELECT $1, (SELECT nextval('change_stmt_seq')), c.n::int, c.kind, c.body
       FROM ROWS FROM (jsonb_to_recordset($2::jsonb) AS (kind text, body jsonb)) WITH ORDINALITY AS c(kind, body, n)
       RETURNING 1`,
      [appId, JSON.stringify(changes)],
    );
    return rows.length;
  },

  /**
   * Gives the transaction its place in the commit order (sealed()), for a
   * transaction whose changes were recorded by several statements: call it
   * as its last act, only when they made a change. In a Transaction the
   * statement goes with its COMMIT (Transaction.atCommit), so the clock is
   * held only while Postgres commits; on another Queryable it runs now, and
   * a second call in one transaction keeps the first place.
   */
  async seal(q: Queryable, appId: string): Promise<void> {
    await lastStatement(q, `WITH made AS (SELECT 1), ${sealed(["made"])} SELECT 1`, [appId]);
  },

  /** Up to `limit` changes after `from`, in commit order, and where the next read starts. */
  async read(q: Queryable, appId: string, from: ChangePosition, limit: number): Promise<ChangePage> {
    let at = from;
    if (from.legacy !== undefined) {
      const placed = await placeLegacy(q, appId, from.legacy);
      if (placed === undefined) return { changes: [], next: from }; // no such application: the service says so first
      if (placed === "retention" || placed === "order") return { changes: [], next: from, refused: placed };
      at = { seq: placed.seq, ...(placed.within === undefined ? {} : { within: placed.within }) };
    }
    const { rows } = await q.query<{ clock: string | null; swept: string | null; seq: string | null; stmt: string | null; ord: number | null; kind: string | null; body: unknown; created_at: Date | null }>(
      `SELECT (SELECT k.seq::text FROM change_clocks k WHERE k.app_id = $1) AS clock,
              (SELECT h.swept_seq::text FROM change_horizons h WHERE h.app_id = $1) AS swept,
              c.seq::text AS seq, c.stmt::text AS stmt, c.ord, c.kind, c.body, c.created_at
       FROM model_versions m
       LEFT JOIN LATERAL (
         SELECT t.seq, c.stmt, c.ord, c.kind, c.body, c.created_at
         FROM change_commits t
         JOIN changes c ON c.app_id = $1 AND c.xid = t.xid
         WHERE t.app_id = $1 AND t.seq >= $2::bigint AND (t.seq > $2::bigint OR (c.stmt, c.ord) > ($3::bigint, $4::int))
         ORDER BY t.seq, c.stmt, c.ord
         LIMIT $5
       ) c ON true
       WHERE m.app_id = $1`,
      [appId, at.seq ?? "0", at.within?.stmt ?? STMT_MAX, at.within?.ord ?? ORD_MAX, limit],
    );
    const first = rows[0];
    if (first === undefined) return { changes: [], next: from }; // no such application: the service says so first
    // The sweep deleted every change of the commits below `swept`, and the first ones of `swept`.
    if (at.seq !== undefined && first.swept !== null) {
      const swept = BigInt(first.swept);
      const seq = BigInt(at.seq);
      if (seq < swept || (seq === swept && at.within !== undefined)) return { changes: [], next: from, refused: "retention" };
    }
    const changes: StoredChange[] = rows
      .filter((r) => r.seq !== null)
      .map((r) => ({
        seq: r.seq!,
        stmt: r.stmt!,
        ord: r.ord!,
        kind: r.kind as ChangeKind,
        body: r.body,
        createdAt: r.created_at!,
        after: { seq: r.seq!, within: { stmt: r.stmt!, ord: r.ord! } },
      }));
    const last = changes.at(-1);
    if (changes.length === limit && last !== undefined) return { changes, next: last.after };
    // A short page read every commit this snapshot sees: the next read starts after the last
    // number given, which is theirs (a number is taken only after the one before it committed).
    const clock = BigInt(first.clock ?? "0");
    const next = at.seq !== undefined && BigInt(at.seq) > clock ? at.seq : clock.toString();
    return { changes, next: { seq: next } };
  },

  /**
   * For each position a reader waits at (the number of the last commit it
   * read), whether a commit came after it: one statement for every reader of
   * an application that waits (domain/change-signals.ts), a read of the
   * application's clock. Returns the positions that have news.
   */
  async newer(q: Queryable, appId: string, seen: readonly string[]): Promise<Set<string>> {
    if (seen.length === 0) return new Set();
    const { rows } = await q.query<{ seq: string }>("SELECT k.seq::text AS seq FROM change_clocks k WHERE k.app_id = $1", [appId]);
    const clock = rows[0] === undefined ? 0n : BigInt(rows[0].seq);
    return new Set(seen.filter((s) => BigInt(s) < clock));
  },

  /**
   * Deletes up to `limit` of an application's changes past retention, in
   * commit order, and moves its horizon past them; returns how many went.
   * It looks at the `limit` oldest commits kept and deletes the changes of
   * those before the first one within retention (numbers follow commits,
   * times follow starts: a long transaction's old change waits for the
   * commits before it to age). Changes go in commit order, so the commits
   * below the horizon have none left: their rows go in the next statement,
   * and a commit whose changes are gone is passed over until then.
   */
  async sweep(q: Queryable, appId: string, retentionMs: number, limit: number): Promise<number> {
    const { rows } = await q.query<{ n: number }>(
      `WITH oldest AS (
         SELECT t.seq, t.xid, t.created_at FROM change_commits t
         WHERE t.app_id = $1 AND t.seq >= coalesce((SELECT h.swept_seq FROM change_horizons h WHERE h.app_id = $1), 0)
           AND EXISTS (SELECT 1 FROM changes x WHERE x.app_id = $1 AND x.xid = t.xid)
         ORDER BY t.seq LIMIT $3
       ), young AS (
         SELECT min(o.seq) AS seq FROM oldest o WHERE o.created_at >= now() - $2::float8 * interval '1 millisecond'
       ), old AS (
         SELECT o.seq, c.xid, c.stmt, c.ord FROM oldest o JOIN changes c ON c.app_id = $1 AND c.xid = o.xid
         WHERE o.seq < coalesce((SELECT y.seq FROM young y), ${STMT_MAX})
         ORDER BY o.seq, c.stmt, c.ord LIMIT $3
       ), gone AS (
         DELETE FROM changes c USING old
         WHERE c.app_id = $1 AND c.xid = old.xid AND c.stmt = old.stmt AND c.ord = old.ord
         RETURNING old.seq, c.xid
       ), emptied AS (
         DELETE FROM change_commits e
         WHERE e.app_id = $1 AND e.seq < coalesce((SELECT h.swept_seq FROM change_horizons h WHERE h.app_id = $1), 0)
         RETURNING 1
       ), moved AS (
         INSERT INTO change_horizons (app_id, swept_xid, swept_seq)
         SELECT $1, max(xid), max(seq) FROM gone HAVING count(*) > 0
         ON CONFLICT (app_id) DO UPDATE SET swept_seq = greatest(change_horizons.swept_seq, excluded.swept_seq),
           swept_xid = greatest(change_horizons.swept_xid, excluded.swept_xid)
         RETURNING 1
       )
       SELECT count(*)::int AS n FROM gone`,
      [appId, retentionMs, limit],
    );
    return rows[0]!.n;
  },
};
