/**
 * Tokens in the snapshot form, which a service whose schema is older than
 * migration 021 gives (docs/change-feed.md): a reader's position as
 * snapshots of transaction ids. Such a position is placed in the commit order
 * on its first read, when it can be exactly: the changes it had read must
 * be exactly the changes of the commits up to some number (and, inside a
 * window, a first part of the next commit). Otherwise the read is refused
 * (409), as a token past retention is, and the reader starts again.
 */
import type { Queryable } from "./db.js";

/** A snapshot as pg_snapshot's text: xmin:xmax:xip,... (xid8 values, decimal). */
export type SnapshotText = string;

/** A position in the snapshot form (a schema older than migration 021). */
export interface LegacyPosition {
  /** Read: every transaction visible in this snapshot (undefined: from the oldest kept). */
  seen: SnapshotText | undefined;
  /** Inside a window: its upper snapshot, and the last change read from it. */
  window?: { upTo: SnapshotText; xid: string; stmt: string; ord: number };
}

/** Where a legacy position stands in the commit order: after commit `seq`, or inside it after `within`. */
export type Placed = { seq: string; within?: { stmt: string; ord: number } } | "retention" | "order" | undefined;

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

const xminOf = (snapshot: SnapshotText) => snapshot.split(":")[0]!;

/**
 * Places a legacy position in the commit order; "retention" when the sweep
 * deleted a change it had not read, "order" when what it read is no first
 * part of the commit order, undefined when there is no such application.
 * One statement: the commits it had not read all have an xid at or above its
 * snapshot's xmin (the unique index on (app_id, xid) finds them); the first
 * of them in the new order is where it stands, if no later commit is one it
 * had read.
 */
export async function placeLegacy(q: Queryable, appId: string, legacy: LegacyPosition): Promise<Placed> {
  const read = `coalesce(pg_visible_in_snapshot(t.xid, $2::pg_snapshot), false)
             OR (t.xid < $4::xid8 AND coalesce(pg_visible_in_snapshot(t.xid, $3::pg_snapshot), false))`;
  const { rows } = await q.query<{ swept: string | null; clock: string | null; open: string | null; partial: string | null; beyond: boolean }>(
    `WITH open AS (
       SELECT min(t.seq) AS seq FROM change_commits t
       WHERE t.app_id = $1 AND t.xid >= $5::xid8 AND NOT (${read})
     )
     SELECT (SELECT h.swept_xid::text FROM change_horizons h WHERE h.app_id = $1) AS swept,
            (SELECT k.seq::text FROM change_clocks k WHERE k.app_id = $1) AS clock,
            (SELECT o.seq::text FROM open o) AS open,
            (SELECT p.seq::text FROM change_commits p WHERE p.app_id = $1 AND p.xid = $4::xid8) AS partial,
            EXISTS (SELECT 1 FROM change_commits t JOIN open o ON t.seq > o.seq
                    WHERE t.app_id = $1 AND t.xid <> $4::xid8 AND (t.xid < $5::xid8 OR ${read})) AS beyond
     FROM model_versions m WHERE m.app_id = $1`,
    [appId, legacy.seen ?? null, legacy.window?.upTo ?? null, legacy.window?.xid ?? "0", legacy.seen === undefined ? "0" : xminOf(legacy.seen)],
  );
  const row = rows[0];
  if (row === undefined) return undefined;
  // Every deleted change's transaction is at most `swept`; one this position had not read is at least its xmin.
  if (row.swept !== null && (legacy.seen === undefined || BigInt(row.swept) >= BigInt(xminOf(legacy.seen)))) return "retention";
  if (row.open === null) return { seq: row.clock ?? "0" };
  if (row.beyond) return "order";
  const w = legacy.window;
  if (row.partial !== null && w !== undefined) return row.partial === row.open ? { seq: row.open, within: { stmt: w.stmt, ord: w.ord } } : "order";
  return { seq: (BigInt(row.open) - 1n).toString() };
}
