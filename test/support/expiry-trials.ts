/**
 * Trials of "just before an expiry" for tests that prove a grant counts
 * until its instant and not after. What a trial asks "just before" must
 * end before the expiry; on a loaded machine it may not, and then the trial
 * proves nothing (no answer of it is judged): what expires is written again
 * with twice the time, up to three trials, and a third miss fails as too
 * slow, never as a wrong answer.
 */
import { expect } from "vitest";
import type { Queryable } from "../../src/store/db.js";

/** The database's clock in milliseconds: expiry is judged by it, not by the test's. */
export function databaseClock(db: Queryable): () => Promise<number> {
  return async () => Number((await db.query<{ ms: number }>("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms")).rows[0]!.ms);
}

export interface ExpiryTrials {
  clock: () => Promise<number>;
  /** The first trial's time to the expiry, in ms; each next one has twice the time. */
  firstAheadMs: number;
  /** Writes what expires at `expiresAt` (ms); `trial` counts from 0. */
  write: (expiresAt: number, trial: number) => Promise<void>;
  /** The questions asked just before the expiry, side by side; each rejects with its assertion's failure. */
  before: () => Promise<unknown>[];
}

const TRIALS = 3;

/**
 * Runs trials until one's answers all ended before its expiry, throws the
 * first failed answer of that trial, then waits until the database's clock
 * is past the expiry. Returns that expiry (ms).
 */
export async function justBeforeExpiry({ clock, firstAheadMs, write, before }: ExpiryTrials): Promise<number> {
  for (let trial = 0; ; trial++) {
    const expiresAt = Math.floor(await clock()) + firstAheadMs * 2 ** trial;
    await write(expiresAt, trial);
    const answers = await Promise.allSettled(before());
    if ((await clock()) >= expiresAt) {
      expect(trial + 1, `the answers before took too long to be 'just before', ${TRIALS} times`).toBeLessThan(TRIALS);
      continue;
    }
    for (const answer of answers) if (answer.status === "rejected") throw answer.reason;
    await untilPast(clock, expiresAt);
    return expiresAt;
  }
}

/** Waits until `clock` reads past `ms`, polling at most every 50 ms. */
export async function untilPast(clock: () => Promise<number>, ms: number): Promise<void> {
  for (;;) {
    const now = await clock();
    if (now > ms) return;
    await new Promise((resolve) => setTimeout(resolve, Math.min(50, Math.max(1, ms - now))));
  }
}
