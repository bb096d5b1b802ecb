/**
 * The places for work that holds a database connection a while (the
 * transport's call limiter is one): the domain asks for one around each
 * statement that needs it, and holds none while it waits for something else.
 */
export interface Places {
  /**
   * Runs `fn` once a place is free for `owner` (an application id), fairly
   * among owners; rejects with the signal's reason if it aborts first, and
   * with resource_exhausted when the owner already waits too much.
   */
  run<T>(owner: string, signal: AbortSignal | undefined, fn: () => Promise<T>): Promise<T>;
}

/** No bulkhead: every statement runs at once (the embedded instance of the command line). */
export const UNBOUNDED_PLACES: Places = { run: (_owner, _signal, fn) => fn() };
