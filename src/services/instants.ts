import type { Timestamp } from "@bufbuild/protobuf/wkt";

/**
 * A Timestamp as milliseconds since the epoch, finer digits dropped (expiries
 * are kept to the millisecond, as every time the service stores). NaN when
 * its nanos are outside 0..999,999,999, so the domain's check of the range
 * (instantProblem) refuses it, naming the field; undefined when absent.
 */
export function instantOf(ts: Timestamp | undefined): number | undefined {
  if (ts === undefined) return undefined;
  if (!Number.isInteger(ts.nanos) || ts.nanos < 0 || ts.nanos > 999_999_999) return Number.NaN;
  return Number(ts.seconds) * 1000 + Math.floor(ts.nanos / 1_000_000);
}
