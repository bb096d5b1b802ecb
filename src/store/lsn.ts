/** A pg_lsn's text ("16/B374D848") as a number, for comparing WAL positions. */
export function lsnValue(lsn: string): bigint {
  const slash = lsn.indexOf("/");
  if (slash < 1) throw new Error(`not a WAL position: ${lsn}`);
  return (BigInt(`0x${lsn.slice(0, slash)}`) << 32n) | BigInt(`0x${lsn.slice(slash + 1)}`);
}

/** The lower of two standby replay positions; null stands for a primary, which has none. */
export function lowerReplay(a: string | null, b: string | null): string | null {
  if (a === null) return b;
  if (b === null) return a;
  return lsnValue(a) <= lsnValue(b) ? a : b;
}
