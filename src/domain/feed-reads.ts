/**
 * The change feed's reads, as the feed's readers share them: readers of one
 * application at the same position, asking for the same page size, share
 * one statement, so a write that wakes a thousand readers waiting at the
 * same token costs one read, not a thousand. Each statement takes a place
 * (Places: the call limiter's, fair among applications) only while it
 * runs: a reader holds no place and no connection while it waits.
 *
 * A reader joins only a read that has not started yet (one still waiting
 * for its place), so whatever committed before the reader asked is in its
 * answer, as it would be in a read of its own.
 */
import type { ChangePosition } from "../store/changes-store.js";
import type { Places } from "./places.js";

/** What one read does: its statements, run while it holds its place. */
export type LoadPage<T> = (appId: string, from: ChangePosition, limit: number) => Promise<T>;

interface Pending<T> {
  promise: Promise<T>;
  /** Readers still waiting for it; when the last goes away before it starts, it is not run. */
  readers: number;
  controller: AbortController;
}

export class FeedReads<T> {
  private readonly pending = new Map<string, Pending<T>>();

  constructor(
    private readonly places: Places,
    private readonly load: LoadPage<T>,
  ) {}

  /** Up to `limit` changes after `from`, read by a statement that starts after this call. */
  read(appId: string, from: ChangePosition, limit: number, signal: AbortSignal | undefined): Promise<T> {
    if (signal?.aborted === true) return Promise.reject(signal.reason as Error);
    const key = JSON.stringify([appId, from.seq ?? null, from.within ?? null, from.legacy ?? null, limit]);
    let entry = this.pending.get(key);
    if (entry === undefined) {
      const controller = new AbortController();
      const created: Pending<T> = { readers: 0, controller, promise: undefined as unknown as Promise<T> };
      created.promise = this.places.run(appId, controller.signal, () => {
        // Started: later readers need a statement of their own.
        if (this.pending.get(key) === created) this.pending.delete(key);
        return this.load(appId, from, limit);
      });
      created.promise.then(
        () => this.forget(key, created),
        () => this.forget(key, created),
      );
      this.pending.set(key, (entry = created));
    }
    const shared = entry;
    shared.readers++;
    if (signal === undefined) return shared.promise;
    return new Promise<T>((resolve, reject) => {
      const onAbort = () => {
        reject(signal.reason as Error);
        if (--shared.readers === 0 && this.pending.get(key) === shared) {
          this.pending.delete(key);
          shared.controller.abort(signal.reason);
        }
      };
      signal.addEventListener("abort", onAbort, { once: true });
      shared.promise.then(
        (read) => {
          signal.removeEventListener("abort", onAbort);
          resolve(read);
        },
        (error: unknown) => {
          signal.removeEventListener("abort", onAbort);
          reject(error as Error);
        },
      );
    });
  }

  private forget(key: string, entry: Pending<T>): void {
    if (this.pending.get(key) === entry) this.pending.delete(key);
  }
}
