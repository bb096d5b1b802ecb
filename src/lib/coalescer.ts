import type { Telemetry } from "./telemetry.js";
import { Tracing, type Span } from "./tracing.js";

/**
 * Coalesces calls that arrive together into one batched call. The first call
 * runs at once; calls arriving while `concurrency` batches are in flight
 * queue up and go together in the next batch (up to `maxBatch` inputs). Under
 * load one database round trip answers many requests; an idle service adds
 * no delay, because nothing waits on a timer.
 *
 * A call may bring several inputs (callAll): they always travel in the same
 * batch, so their answers come from one statement, one snapshot. A group
 * larger than maxBatch goes alone.
 *
 * While `burst.at` inputs or more wait, up to `burst.concurrency` batches
 * may be in flight: a queue that long fills statements worth a round trip
 * of their own and keeps several database connections busy, where a trickle
 * of calls gains more from fewer, larger statements. With `key`, the inputs
 * waiting, and maxBatch, are counted by distinct key: a store that asks
 * each distinct question once a statement (per-application.ts,
 * distinctQuestions) gets no work from a second copy, so fifty callers, or
 * five hundred, asking the same page wait for one statement rather than
 * several that each compute it.
 *
 * With `gather`, a batch starts only once the current I/O phase is over
 * (setImmediate): for an engine that runs statements on this very thread
 * (PGlite), where no request is read while a statement runs, so without it
 * every batch would hold one call.
 *
 * Freshness is kept: a call's batch starts after the call arrived, so it
 * reads everything committed before the call.
 *
 * With `telemetry` (named by `reads`): each batch's size goes to the
 * metrics, which read the batches in flight when scraped; with tracing on,
 * each batch runs in a span of its own linked from the span of every call
 * it answers (lib/tracing.ts). Off, a call costs one test of a constant.
 */
export class Coalescer<I, O> {
  private queue: Waiting<I, O>[] = [];
  private inFlight = 0;
  private queued = 0;
  /** The inputs waiting by key, with `key`. */
  private readonly keys = new Map<string, number>();
  private scheduled = false;
  private readonly batchSize: ((size: number) => void) | undefined;
  private readonly tracing: Tracing;

  constructor(
    private readonly run: (inputs: I[]) => Promise<O[]>,
    private readonly options: {
      maxBatch: number;
      concurrency: number;
      burst?: { at: number; concurrency: number };
      /** What makes two inputs the same question, for burst.at and maxBatch (above). */
      key?: (input: I) => string;
      gather?: boolean;
      /** What is coalesced ("checks", "keys"...), for the metrics and spans. */
      reads?: string;
      telemetry?: Telemetry;
    },
  ) {
    const { reads = "reads", telemetry } = options;
    this.batchSize = telemetry?.metrics.coalescer(reads, () => this.inFlight);
    this.tracing = telemetry?.tracing ?? Tracing.off;
  }

  call(input: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.enqueue({ inputs: [input], keys: this.keysOf([input]), resolve: (outputs) => resolve(outputs[0]!), reject, span: this.tracing.enabled ? this.tracing.activeSpan() : undefined });
    });
  }

  /** Answers `inputs` in order, all from the same batch. */
  callAll(inputs: readonly I[]): Promise<O[]> {
    return new Promise<O[]>((resolve, reject) => {
      this.enqueue({ inputs, keys: this.keysOf(inputs), resolve, reject, span: this.tracing.enabled ? this.tracing.activeSpan() : undefined });
    });
  }

  /** The inputs' keys, with `key`: computed once a call. */
  private keysOf(inputs: readonly I[]): readonly string[] | undefined {
    const { key } = this.options;
    return key === undefined ? undefined : inputs.map(key);
  }

  private enqueue(waiting: Waiting<I, O>): void {
    this.queue.push(waiting);
    this.queued += waiting.inputs.length;
    this.count(waiting.keys, 1);
    this.schedule();
  }

  /** Counts keys in (1) or out (-1) of the queue. */
  private count(keys: readonly string[] | undefined, by: 1 | -1): void {
    for (const k of keys ?? []) {
      const n = (this.keys.get(k) ?? 0) + by;
      if (n === 0) this.keys.delete(k);
      else this.keys.set(k, n);
    }
  }

  private schedule(): void {
    if (!this.options.gather) return this.drain();
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.drain();
    });
  }

  private drain(): void {
    const { maxBatch, concurrency, burst, key } = this.options;
    const waiting = () => (key === undefined ? this.queued : this.keys.size);
    const limit = () => (burst !== undefined && waiting() >= burst.at ? Math.max(concurrency, burst.concurrency) : concurrency);
    while (this.queue.length > 0 && this.inFlight < limit()) {
      let take = 0;
      let size = 0;
      // With `key`, maxBatch bounds the distinct questions of a batch: copies add no work to its statement.
      const distinct = new Set<string>();
      const fits = ({ inputs, keys }: Waiting<I, O>) =>
        keys === undefined ? size + inputs.length <= maxBatch : new Set([...distinct, ...keys]).size <= maxBatch;
      while (take < this.queue.length && (take === 0 || fits(this.queue[take]!))) {
        const { inputs, keys } = this.queue[take]!;
        size += inputs.length;
        for (const k of keys ?? []) distinct.add(k);
        take++;
      }
      const batch = this.queue.splice(0, take);
      this.queued -= size;
      this.inFlight++;
      this.batchSize?.(size);
      const inputs = batch.flatMap((b) => b.inputs);
      for (const b of batch) this.count(b.keys, -1);
      // A span for the batch when a call it answers is traced (sampled): else none.
      (this.tracing.enabled && batch.some((b) => b.span !== undefined) ? this.traced(batch, inputs) : this.run(inputs)).then(
        (outputs) => {
          let at = 0;
          for (const b of batch) {
            b.resolve(outputs.slice(at, at + b.inputs.length));
            at += b.inputs.length;
          }
        },
        (error: unknown) => batch.forEach((b) => b.reject(error)),
      ).finally(() => {
        this.inFlight--;
        this.schedule();
      });
    }
  }

  /** The batch in a span of its own, linked from each call's span; its statements are the span's children. */
  private traced(batch: readonly Waiting<I, O>[], inputs: I[]): Promise<O[]> {
    const span = this.tracing.startBatch(this.options.reads ?? "reads", inputs.length, batch.map((b) => b.span));
    return this.tracing.within(span, () => this.run(inputs)).then(
      (outputs) => {
        this.tracing.end(span);
        return outputs;
      },
      (error: unknown) => {
        this.tracing.end(span, error);
        throw error;
      },
    );
  }
}

interface Waiting<I, O> {
  inputs: readonly I[];
  /** The inputs' keys, with the `key` option. */
  keys: readonly string[] | undefined;
  resolve: (o: O[]) => void;
  reject: (e: unknown) => void;
  /** The span of the call's RPC, when tracing is on and the call's trace was sampled. */
  span: Span | undefined;
}
