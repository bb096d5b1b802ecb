/**
 * A bulkhead for the calls that hold a database connection for a while (a
 * list, a write, a bulk write: every RPC but the questions of the
 * CheckService and of AuthZEN, whose concurrent calls are coalesced into a
 * few statements anyway). At
 * most `limit` of them run at once, service-wide; more wait their turn in
 * arrival order, and one whose caller goes away (its signal aborts: a reset
 * stream, a closed connection, a passed deadline) leaves the queue without
 * running at all.
 *
 * Without it, a burst of such calls (hundreds of list calls from a few
 * HTTP/2 connections, or the thousands a "MadeYouReset" client starts and
 * abandons) takes every pool connection and the event loop, and checks from
 * everyone else wait behind them; with it, the checks always find the rest
 * of the pool free.
 */
import type { DescMethod } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";

/** Methods never queued: coalesced, one statement for many calls. */
const UNLIMITED = new Set([
  "authz.v1.CheckService.Check",
  "authz.v1.CheckService.BatchCheck",
  "authz.v1.CheckService.Explain",
  "authz.v1.CheckService.Permissions",
  "authz.v1.CheckService.BatchPermissions",
  "authz.v1.CheckService.Lookup",
  "authz.v1.CheckService.LookupSubjects",
  // AuthZEN's questions are these same questions (domain/authzen-*.ts); Resource Search adds at
  // most one short statement (a page of an index range) where a role allows every instance.
  "authzen.v1.AccessService.Evaluation",
  "authzen.v1.AccessService.Evaluations",
  "authzen.v1.AccessService.SearchSubject",
  "authzen.v1.AccessService.SearchResource",
  "authzen.v1.AccessService.SearchAction",
]);

interface Waiter {
  start(): void;
  /** Whether it still wants to run (its caller has not gone away). */
  live(): boolean;
}

export class CallLimiter {
  private running = 0;
  private readonly queue: Waiter[] = [];
  private head = 0;

  constructor(readonly limit: number) {}

  /** Whether calls of this method go through the limiter. */
  limits(method: DescMethod): boolean {
    return !UNLIMITED.has(`${method.parent.typeName}.${method.name}`);
  }

  /** Calls in progress and waiting, for tests and metrics. */
  get load(): { running: number; waiting: number } {
    return { running: this.running, waiting: this.queue.length - this.head };
  }

  /** Runs `fn` once a place is free; rejects with the signal's reason if the caller goes away first. */
  async run<T>(ctx: HandlerContext, fn: () => Promise<T>): Promise<T> {
    if (this.running < this.limit && this.head === this.queue.length) this.running++;
    else await this.wait(ctx.signal); // resolves with its place already counted
    try {
      return await fn();
    } finally {
      this.running--;
      this.next();
    }
  }

  private wait(signal: AbortSignal): Promise<void> {
    if (signal.aborted) return Promise.reject(signal.reason as Error);
    return new Promise<void>((resolve, reject) => {
      // Rejected at once; its place in the queue is skipped when its turn comes.
      const onAbort = () => reject(signal.reason as Error);
      signal.addEventListener("abort", onAbort, { once: true });
      this.queue.push({
        start: () => {
          signal.removeEventListener("abort", onAbort);
          // It was given a place, and its caller went away before its turn
          // came to start (next() hands a place over a turn of the loop
          // later): the promise is already rejected, so nothing would give
          // the place back. Every such call lost a place for good, and a
          // load whose clients hang up mid-call (a benchmark's end) left
          // none: every limited call then waited forever.
          if (signal.aborted) {
            this.running--;
            this.next();
            return;
          }
          resolve();
        },
        live: () => !signal.aborted,
      });
    });
  }

  /** Gives free places to the callers still waiting, in arrival order. */
  private next(): void {
    while (this.running < this.limit && this.head < this.queue.length) {
      const waiter = this.queue[this.head++]!;
      if (this.head === this.queue.length) {
        this.queue.length = 0;
        this.head = 0;
      } else if (this.head >= 1024) {
        this.queue.splice(0, this.head);
        this.head = 0;
      }
      if (!waiter.live()) continue;
      this.running++;
      // On the next turn of the event loop, not in this chain of promises:
      // otherwise queued calls start one after another without the loop
      // ever reading a socket (PGlite runs its statements on this thread),
      // and every other caller waits for the whole queue.
      setImmediate(waiter.start);
    }
  }
}
