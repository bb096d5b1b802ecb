/**
 * The change feed's readers that last: reads waiting for a change (waitMs)
 * and Watch streams. Each is admitted here and counted per key and per
 * application, so one application's readers cannot grow the process's
 * memory and timers without bound: above a bound the next is refused with
 * resource_exhausted (429), and the others go on.
 *
 * A reader lives as long as its key: every `recheckMs`, while readers are
 * open, one statement looks up the keys they were admitted with (on the
 * primary, so a revocation anywhere is seen), and the readers of a key that
 * no longer holds are ended with unauthenticated. A key deleted through this
 * process ends its readers at once (recheckNow).
 */
import { resourceExhausted, unauthenticated } from "./errors.js";
import { REVOKED_KEY } from "./keys.js";

export interface FeedReaderLimits {
  readonly feedWaitsPerKey: number;
  readonly feedWaitsPerApp: number;
  readonly watchStreamsPerKey: number;
  readonly watchStreamsPerApp: number;
  readonly streamKeyRecheckMs: number;
}

/** The feed's bounds when no configuration gives them (the command line's embedded instance, tests): the defaults of docs/configuration.md. */
export const DEFAULT_FEED_READER_LIMITS: FeedReaderLimits = {
  feedWaitsPerKey: 500,
  feedWaitsPerApp: 1_000,
  watchStreamsPerKey: 100,
  watchStreamsPerApp: 250,
  streamKeyRecheckMs: 2_000,
};

/** Which of these key hashes still open something (the keys' own store, read on the primary). */
export interface KeyLiveness {
  live(hashes: readonly string[]): Promise<ReadonlySet<string>>;
}

/** The reader's caller: its application and the hash of its key. */
export interface FeedCaller {
  readonly appId: string;
  readonly keyHash: string;
}

export type ReaderKind = "wait" | "stream";

/** An admitted reader: a signal that aborts when its call ends or its key is revoked. */
export interface FeedReader {
  readonly signal: AbortSignal;
  /** Whether its key was found revoked (its signal then aborted with unauthenticated). */
  readonly revoked: boolean;
  /** Ends it: its place in the counts is free again. Idempotent. */
  release(): void;
}

interface Open {
  caller: FeedCaller;
  kind: ReaderKind;
  controller: AbortController;
  revoked: boolean;
}

export class FeedReaders {
  private readonly open = new Set<Open>();
  private readonly counts = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private checking = false;

  constructor(
    private readonly keys: KeyLiveness,
    private readonly limits: FeedReaderLimits,
    private readonly onError: (error: unknown) => void = () => undefined,
  ) {}

  /** Readers open now, of one kind (tests, metrics). */
  count(kind: ReaderKind): number {
    let n = 0;
    for (const reader of this.open) if (reader.kind === kind) n++;
    return n;
  }

  /**
   * Admits a reader of `caller`, or throws resource_exhausted when its key
   * or its application already has as many of this kind as it may.
   * `signal`: the call's own (the client went away, the deadline passed).
   */
  admit(kind: ReaderKind, caller: FeedCaller, signal: AbortSignal | undefined): FeedReader {
    const [perKey, perApp] =
      kind === "wait" ? [this.limits.feedWaitsPerKey, this.limits.feedWaitsPerApp] : [this.limits.watchStreamsPerKey, this.limits.watchStreamsPerApp];
    const keyCount = `${kind} key ${caller.keyHash}`;
    const appCount = `${kind} app ${caller.appId}`;
    const what = kind === "wait" ? "reads of the change feed waiting (waitMs)" : "Watch streams open";
    if ((this.counts.get(keyCount) ?? 0) >= perKey) {
      throw resourceExhausted(`this API key has ${perKey} ${what}, as many as a key may; retry once one ends`);
    }
    if ((this.counts.get(appCount) ?? 0) >= perApp) {
      throw resourceExhausted(`this application has ${perApp} ${what}, as many as an application may; retry once one ends`);
    }
    this.add(keyCount, 1);
    this.add(appCount, 1);
    const entry: Open = { caller, kind, controller: new AbortController(), revoked: false };
    this.open.add(entry);
    this.schedule();
    let released = false;
    // The call's own end (its client gone, its deadline passed) ends the reader, and frees its
    // place in the counts at once: a stream suspended in a write its client will never read is
    // not resumed to say so.
    const onCallEnd = () => {
      entry.controller.abort(signal!.reason);
      release();
    };
    const release = () => {
      if (released) return;
      released = true;
      signal?.removeEventListener("abort", onCallEnd);
      this.open.delete(entry);
      this.add(keyCount, -1);
      this.add(appCount, -1);
      if (this.open.size === 0 && this.timer !== undefined) {
        clearTimeout(this.timer);
        this.timer = undefined;
      }
    };
    if (signal?.aborted === true) onCallEnd();
    else signal?.addEventListener("abort", onCallEnd, { once: true });
    return {
      signal: entry.controller.signal,
      get revoked() {
        return entry.revoked;
      },
      release,
    };
  }

  /** Looks the open readers' keys up now (a key was deleted through this process). */
  recheckNow(): void {
    if (this.open.size === 0) return;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    void this.recheck();
  }

  /** Ends every reader's timer (the service is stopping; the readers end with the feed's signals). */
  close(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }

  private add(name: string, by: number): void {
    const n = (this.counts.get(name) ?? 0) + by;
    if (n <= 0) this.counts.delete(name);
    else this.counts.set(name, n);
  }

  private schedule(): void {
    if (this.timer !== undefined || this.checking || this.open.size === 0) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.recheck();
    }, this.limits.streamKeyRecheckMs);
    // Readers do not keep the process alive on their own.
    this.timer.unref();
  }

  private async recheck(): Promise<void> {
    if (this.checking) return;
    this.checking = true;
    try {
      const readers = [...this.open];
      const live = await this.keys.live([...new Set(readers.map((r) => r.caller.keyHash))]);
      for (const reader of readers) {
        if (live.has(reader.caller.keyHash) || reader.revoked) continue;
        reader.revoked = true;
        reader.controller.abort(unauthenticated(REVOKED_KEY));
      }
    } catch (error) {
      // The next look-up still comes; the readers go on meanwhile.
      this.onError(error);
    } finally {
      this.checking = false;
      this.schedule();
    }
  }
}
