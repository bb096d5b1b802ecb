import { CONDITION_LIMITS } from "./conditions.js";

/**
 * A fair share of the event loop for work that is bounded but not free
 * (conditions' evaluations: docs/conditions.md, "What one may cost"). Each
 * piece runs synchronously, a few milliseconds at most; what this adds is
 * that no stretch of them keeps the loop for long, and that no application
 * queues ahead of another:
 *
 * - a piece runs at once while the loop's current slice has time left and
 *   nothing waits, so a lone question pays no hop;
 * - otherwise it waits in its application's queue, and the queues are
 *   served round-robin, one piece of each application in turn, for a slice
 *   of `sliceMs`, then the loop gets its turn back (setImmediate) before the
 *   next slice: an application with fifty batches in flight costs another
 *   one piece per round.
 */
export class FairCpu {
  /** Waiting pieces by application, in the order the applications first queued. */
  private readonly queues = new Map<string, (() => void)[]>();
  /** When the slice under way began, or undefined when none is. */
  private sliceStart: number | undefined;
  private draining = false;

  constructor(
    private readonly sliceMs = 4,
    private readonly clock: () => number = () => performance.now(),
  ) {}

  /** Runs `work` for `appId` in its turn. */
  run<T>(appId: string, work: () => T): Promise<T> {
    if (this.queues.size === 0 && !this.draining && this.sliceHasTime()) return Promise.resolve(work());
    return new Promise<T>((resolve, reject) => {
      let queue = this.queues.get(appId);
      if (queue === undefined) this.queues.set(appId, (queue = []));
      queue.push(() => {
        try {
          resolve(work());
        } catch (error) {
          reject(error);
        }
      });
      this.drainSoon();
    });
  }

  /** Whether the loop's current slice has time left; the first piece of a turn starts one. */
  private sliceHasTime(): boolean {
    if (this.sliceStart === undefined) {
      this.sliceStart = this.clock();
      // The slice ends with the loop's turn: the next one starts afresh.
      setImmediate(() => {
        if (!this.draining) this.sliceStart = undefined;
      });
      return true;
    }
    return this.clock() - this.sliceStart < this.sliceMs;
  }

  private drainSoon(): void {
    if (this.draining) return;
    this.draining = true;
    setImmediate(() => this.drain());
  }

  /** One slice: a piece of each application in turn until the slice's time is spent, then the loop's turn. */
  private drain(): void {
    const start = this.clock();
    this.sliceStart = start;
    while (this.queues.size > 0 && this.clock() - start < this.sliceMs) {
      for (const [appId, queue] of [...this.queues]) {
        queue.shift()!();
        if (queue.length === 0) this.queues.delete(appId);
        if (this.clock() - start >= this.sliceMs) break;
      }
    }
    if (this.queues.size > 0) {
      setImmediate(() => this.drain());
      return;
    }
    this.draining = false;
    this.sliceStart = undefined;
  }
}

/**
 * The process's one scheduler, so that every kind of bounded work takes
 * turns with the others: conditions' evaluations (check.ts), the reading
 * of large request bodies (rest-gateway.ts) and the checking of batches
 * that carry facts (check.ts), in slices of CONDITION_LIMITS.sliceMs.
 */
export const PROCESS_CPU = new FairCpu(CONDITION_LIMITS.sliceMs);
