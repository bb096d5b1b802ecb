/** A pg_lsn's text ("16/B374D848") as a number, for comparing WAL positions. */
export function lsnValue(lsn: string): bigint {
  const slash = lsn.indexOf("/");
  if (slash < 1) throw new Error(`not a WAL position: ${lsn}`);
  return (BigInt(`0x${lsn.slice(0, slash)}`) << 32n) | BigInt(`0x${lsn.slice(slash + 1)}`);
}

/**
 * A standby's replay position as a statement reads it (REPLAY_POSITION in
 * per-application.ts): the WAL position and the standby's incarnation, its
 * postmaster's start. Positions compare only within one incarnation: a
 * standby restarted after a crash opens for reads once it is consistent,
 * which may be behind what it had replayed before it stopped, and the
 * address a replica is reached by may come to reach another standby.
 */
export interface ReplayPosition {
  readonly lsn: bigint;
  readonly incarnation: string;
}

/** The incarnation of a read whose statements ran on different incarnations: equal to none. */
export const MIXED_INCARNATIONS = "mixed";

/** A statement's replay position ("16/B374D848 1796223600.123456") read. */
export function replayPosition(text: string): ReplayPosition {
  const space = text.indexOf(" ");
  if (space < 0) throw new Error(`not a replay position: ${text}`);
  return { lsn: lsnValue(text.slice(0, space)), incarnation: text.slice(space + 1) };
}

/**
 * The lower of two statements' replay positions, the point both answers
 * are at least as fresh as; null stands for a primary, which has none.
 * Positions of two incarnations have no such point: their read is marked
 * MIXED_INCARNATIONS, which no replica's trust matches.
 */
export function lowerReplay(a: string | null, b: string | null): string | null {
  if (a === null) return b;
  if (b === null) return a;
  const [pa, pb] = [replayPosition(a), replayPosition(b)];
  if (pa.incarnation !== pb.incarnation) return `0/0 ${MIXED_INCARNATIONS}`;
  return pa.lsn <= pb.lsn ? a : b;
}
