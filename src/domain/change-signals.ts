/**
 * Wakes the change feed's waiting readers (a Watch stream with nothing left
 * to send, a REST read with waitMs) when a change they have not seen
 * commits.
 *
 * Two ways in:
 * - `changed(appId)`: a write through this process has committed; its
 *   readers wake at once and read. This is what keeps the delay from commit
 *   to a Watch client short (docs/change-feed.md).
 * - A probe of the database every `pollMs` while an application has readers
 *   waiting, for the writes other processes make (another replica of the
 *   service, the expiry sweep): one statement per application, whatever the
 *   number of readers: the application's last commit number, which tells
 *   each position they wait at whether a commit came after it
 *   (changesStore.newer). While it finds none,
 *   it asks half as often each time, down to once every 16 × pollMs: idle
 *   readers cost next to nothing, and a change brings it back to pollMs.
 *
 * A reader waits at the last commit its read read, so the probe's answer is
 * exact for it: no change committed after that read can be missed, whenever
 * the probe runs. A spurious wake costs a read that finds nothing, and the
 * reader waits again.
 */
import type { Db } from "../store/db.js";
import { changesStore } from "../store/changes-store.js";

interface Waiter {
  /** The number of the last commit the reader read (store/changes-store.ts). */
  seen: string;
  wake: () => void;
}

interface AppWaiters {
  waiters: Set<Waiter>;
  timer: NodeJS.Timeout | undefined;
  probing: boolean;
  /** The probe's interval now: pollMs while changes come, doubling up to MAX_BACKOFF × pollMs while none do. */
  intervalMs: number;
  /** A wake after this process's write, held a moment to gather the writes that follow. */
  wakeTimer: NodeJS.Timeout | undefined;
}

/** How far the probe slows while an application has no change: 16 × CHANGES_POLL_MS (4 s by default). */
const MAX_BACKOFF = 16;

/**
 * How long a wake after a write through this process waits for more: at
 * 1,000 writes a second a reader then reads once per few writes instead of
 * once per write (each read a statement), for 10 ms more delay.
 */
export const GATHER_MS = 10;

export interface ChangeSignalsOptions {
  /** How often an application with waiting readers is probed for others' writes. */
  readonly pollMs: number;
  /** A probe that failed (the next one still runs; the readers keep waiting). */
  readonly onError: (error: unknown) => void;
}

export class ChangeSignals {
  private readonly apps = new Map<string, AppWaiters>();
  /** Writes through this process, per application: a reader that saw one come after its read does not wait. */
  private readonly generations = new Map<string, number>();
  private closed = false;

  constructor(
    private readonly db: Db,
    private readonly options: ChangeSignalsOptions,
  ) {}

  /** A write through this process committed changes of `appId`: its waiting readers read again. */
  changed(appId: string): void {
    this.generations.set(appId, (this.generations.get(appId) ?? 0) + 1);
    const app = this.apps.get(appId);
    if (app === undefined) return;
    app.intervalMs = this.options.pollMs;
    if (app.wakeTimer !== undefined) return;
    app.wakeTimer = setTimeout(() => {
      app.wakeTimer = undefined;
      for (const waiter of [...app.waiters]) waiter.wake();
    }, GATHER_MS);
  }

  /** Closed: waits return at once, and readers stop waiting (the service is stopping). */
  get isClosed(): boolean {
    return this.closed;
  }

  /**
   * The count of this process's writes to `appId`. A reader takes it before
   * each read and hands it to wait(): a write that committed after the read's
   * snapshot but before the reader began to wait then ends the wait at once.
   */
  generation(appId: string): number {
    return this.generations.get(appId) ?? 0;
  }

  /** Readers waiting now (all applications). */
  get waiting(): number {
    let n = 0;
    for (const app of this.apps.values()) n += app.waiters.size;
    return n;
  }

  /**
   * Resolves when a commit after `seen` (the number of the last commit the reader read) may have come,
   * after `ms`, or when `signal` aborts, whichever comes first.
   */
  wait(appId: string, seen: string, ms: number, signal: AbortSignal | undefined, since?: number): Promise<void> {
    if (this.closed || ms <= 0 || signal?.aborted === true) return Promise.resolve();
    if (since !== undefined && this.generation(appId) !== since) return Promise.resolve();
    return new Promise<void>((resolve) => {
      let app = this.apps.get(appId);
      if (app === undefined) {
        this.apps.set(appId, (app = { waiters: new Set(), timer: undefined, probing: false, intervalMs: this.options.pollMs, wakeTimer: undefined }));
      }
      const timeout = setTimeout(() => waiter.wake(), ms);
      const onAbort = () => waiter.wake();
      const waiter: Waiter = {
        seen,
        wake: () => {
          clearTimeout(timeout);
          signal?.removeEventListener("abort", onAbort);
          const current = this.apps.get(appId);
          if (current !== undefined && current.waiters.delete(waiter) && current.waiters.size === 0) this.drop(appId, current);
          resolve();
        },
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      app.waiters.add(waiter);
      this.schedule(appId, app);
    });
  }

  /** Wakes every reader and stops probing (the service is stopping). */
  close(): void {
    this.closed = true;
    for (const app of [...this.apps.values()]) for (const waiter of [...app.waiters]) waiter.wake();
  }

  private schedule(appId: string, app: AppWaiters): void {
    if (app.timer !== undefined || app.probing || this.closed) return;
    app.timer = setTimeout(() => void this.probe(appId, app), app.intervalMs);
    // Waiting readers do not keep the process alive on their own.
    app.timer.unref();
  }

  private drop(appId: string, app: AppWaiters): void {
    if (app.timer !== undefined) clearTimeout(app.timer);
    if (app.wakeTimer !== undefined) clearTimeout(app.wakeTimer);
    app.timer = undefined;
    app.wakeTimer = undefined;
    if (this.apps.get(appId) === app) this.apps.delete(appId);
  }

  private async probe(appId: string, app: AppWaiters): Promise<void> {
    app.timer = undefined;
    if (app.waiters.size === 0) return;
    app.probing = true;
    try {
      const waiters = [...app.waiters];
      const news = await changesStore.newer(this.db, appId, [...new Set(waiters.map((w) => w.seen))]);
      for (const waiter of waiters) if (news.has(waiter.seen)) waiter.wake();
      // Quiet: ask less often; a change (found here, or written through this process) brings it back.
      app.intervalMs = news.size > 0 ? this.options.pollMs : Math.min(app.intervalMs * 2, this.options.pollMs * MAX_BACKOFF);
    } catch (error) {
      this.options.onError(error);
    } finally {
      app.probing = false;
    }
    if (app.waiters.size > 0 && this.apps.get(appId) === app) this.schedule(appId, app);
  }
}
