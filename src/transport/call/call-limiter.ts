/**
 * A bulkhead for the calls that hold a database connection for a while (a
 * list, a write, a bulk write, a read of the change feed: every RPC but the
 * questions of the CheckService and of AuthZEN, whose concurrent calls are
 * coalesced into a few statements anyway). At most `limit` of them run at
 * once, service-wide, and at most `perOwner` of one owner (an application,
 * or the operator): one application's burst cannot take every place. The
 * others wait: each owner's calls in arrival order, the owners in turn
 * (round robin), so a call of a quiet application waits for at most one
 * call of each busy one, not for their whole queues. An owner with
 * `maxWaiting` calls already waiting is refused at once (429), so a queue
 * costs bounded memory. A call whose caller goes away (its signal aborts: a
 * reset stream, a closed connection, a passed deadline) leaves the queue
 * without running at all.
 *
 * Without it, a burst of such calls (hundreds of list calls from a few
 * HTTP/2 connections, or the thousands a "MadeYouReset" client starts and
 * abandons) takes every pool connection and the event loop, and checks from
 * everyone else wait behind them; with it, the checks always find the rest
 * of the pool free.
 */
import type { DescMethod } from "@bufbuild/protobuf";
import { resourceExhausted } from "../../domain/errors.js";
import type { Places } from "../../domain/places.js";

/** Methods the guard never queues: coalesced (one statement for many calls), or taking places of their own. */
const UNLIMITED = new Set([
  "authz.v1.CheckService.Check",
  "authz.v1.CheckService.BatchCheck",
  "authz.v1.CheckService.Explain",
  "authz.v1.CheckService.Permissions",
  "authz.v1.CheckService.BatchPermissions",
  "authz.v1.CheckService.Lookup",
  "authz.v1.CheckService.WhoCan",
  // AuthZEN's questions are these same questions (domain/authzen-*.ts); Resource Search adds at
  // most one short statement (a page of an index range) where a role allows every instance.
  "authzen.v1.AccessService.Evaluation",
  "authzen.v1.AccessService.Evaluations",
  "authzen.v1.AccessService.SearchSubject",
  "authzen.v1.AccessService.SearchResource",
  "authzen.v1.AccessService.SearchAction",
  // The change feed takes a place for each of its reads and none while it waits between them
  // (domain/feed-reads.ts): a waiting reader holds nothing.
  "authz.v1.ChangeService.ListChanges",
  "authz.v1.ChangeService.Watch",
]);

interface Waiter {
  start(): void;
  /** Whether it still wants to run (its caller has not gone away). */
  live(): boolean;
}

/** One owner's calls: how many run, and those waiting, in arrival order. */
interface Owner {
  running: number;
  queue: Waiter[];
  head: number;
}

export interface CallLimiterOptions {
  /** Calls running at once, service-wide. */
  limit: number;
  /** Calls of one owner running at once (default: half the limit, at least one). */
  perOwner?: number;
  /** Calls of one owner waiting at once; the next is refused (default 1,000). */
  maxWaiting?: number;
}

export class CallLimiter implements Places {
  readonly limit: number;
  readonly perOwner: number;
  readonly maxWaiting: number;
  private running = 0;
  private readonly owners = new Map<string, Owner>();
  /** Owners with calls waiting, in the order their turns come. */
  private readonly turns: string[] = [];

  constructor(options: CallLimiterOptions | number) {
    const o = typeof options === "number" ? { limit: options } : options;
    this.limit = o.limit;
    this.perOwner = Math.min(o.limit, o.perOwner ?? Math.max(1, Math.ceil(o.limit / 2)));
    this.maxWaiting = o.maxWaiting ?? 1_000;
  }

  /** Whether the guard queues calls of this method. */
  limits(method: DescMethod): boolean {
    return !UNLIMITED.has(`${method.parent.typeName}.${method.name}`);
  }

  /** Calls in progress and waiting, for tests and metrics. */
  get load(): { running: number; waiting: number } {
    let waiting = 0;
    for (const owner of this.owners.values()) waiting += owner.queue.length - owner.head;
    return { running: this.running, waiting };
  }

  /**
   * Runs `fn` once a place is free for `owner`; rejects with the signal's
   * reason if the caller goes away first, and with resource_exhausted when
   * the owner already has `maxWaiting` calls waiting.
   */
  async run<T>(owner: string, signal: AbortSignal | undefined, fn: () => Promise<T>): Promise<T> {
    const o = this.ownerOf(owner);
    if (this.running < this.limit && o.running < this.perOwner && o.head === o.queue.length) {
      this.running++;
      o.running++;
    } else {
      await this.wait(owner, o, signal); // resolves with its place already counted
    }
    try {
      return await fn();
    } finally {
      this.running--;
      o.running--;
      this.forgetIfIdle(owner, o);
      this.next();
    }
  }

  private ownerOf(name: string): Owner {
    let owner = this.owners.get(name);
    if (owner === undefined) this.owners.set(name, (owner = { running: 0, queue: [], head: 0 }));
    return owner;
  }

  private forgetIfIdle(name: string, owner: Owner): void {
    if (owner.running === 0 && owner.head === owner.queue.length && this.owners.get(name) === owner) this.owners.delete(name);
  }

  private wait(name: string, owner: Owner, signal: AbortSignal | undefined): Promise<void> {
    if (signal?.aborted === true) return Promise.reject(signal.reason as Error);
    if (owner.queue.length - owner.head >= this.maxWaiting) {
      this.forgetIfIdle(name, owner);
      return Promise.reject(
        resourceExhausted(`too many calls of this application are waiting for a place (${this.maxWaiting}); retry after the running ones finish`),
      );
    }
    return new Promise<void>((resolve, reject) => {
      // Rejected at once; its place in the queue is skipped when its turn comes.
      const onAbort = () => reject(signal!.reason as Error);
      signal?.addEventListener("abort", onAbort, { once: true });
      if (owner.head === owner.queue.length) this.turns.push(name);
      owner.queue.push({
        start: () => {
          signal?.removeEventListener("abort", onAbort);
          // It was given a place, and its caller went away before its turn
          // came to start (next() hands a place over a turn of the loop
          // later): the promise is already rejected, so nothing else would
          // give the place back.
          if (signal?.aborted === true) {
            this.running--;
            owner.running--;
            this.forgetIfIdle(name, owner);
            this.next();
            return;
          }
          resolve();
        },
        live: () => signal?.aborted !== true,
      });
      // A place may be free while this owner is at its own limit; otherwise nothing to do.
      if (this.running < this.limit) this.next();
    });
  }

  /**
   * Gives free places to the callers still waiting: one call of each owner
   * in turn, skipping an owner at its own limit (its turn comes back when
   * one of its calls ends).
   */
  private next(): void {
    let skipped = 0;
    while (this.running < this.limit && this.turns.length > skipped) {
      const name = this.turns.shift()!;
      const owner = this.owners.get(name);
      if (owner === undefined) continue;
      if (owner.running >= this.perOwner) {
        // Not its turn yet: its turn comes back when one of its calls ends.
        this.turns.push(name);
        skipped++;
        continue;
      }
      const waiter = this.take(owner);
      if (waiter === undefined) {
        this.forgetIfIdle(name, owner);
        continue;
      }
      skipped = 0;
      if (owner.head < owner.queue.length) this.turns.push(name);
      this.running++;
      owner.running++;
      // On the next turn of the event loop, not in this chain of promises:
      // otherwise queued calls start one after another without the loop
      // ever reading a socket (PGlite runs its statements on this thread),
      // and every other caller waits for the whole queue.
      setImmediate(waiter.start);
    }
  }

  /** The owner's first waiter still live, taken off its queue (undefined: none). */
  private take(owner: Owner): Waiter | undefined {
    while (owner.head < owner.queue.length) {
      const waiter = owner.queue[owner.head++]!;
      if (owner.head === owner.queue.length) {
        owner.queue.length = 0;
        owner.head = 0;
      } else if (owner.head >= 1024) {
        owner.queue.splice(0, owner.head);
        owner.head = 0;
      }
      if (waiter.live()) return waiter;
    }
    return undefined;
  }
}
