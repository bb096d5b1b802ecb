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
 * of calls gains more from fewer, larger statements.
 *
 * With `gather`, a batch starts only once the current I/O phase is over
 * (setImmediate): for an engine that runs statements on this very thread
 * (PGlite), where no request is read while a statement runs, so without it
 * every batch would hold one call.
 *
 * Freshness is kept: a call's batch starts after the call arrived, so it
 * reads everything committed before the call.
 */
export class Coalescer<I, O> {
  private queue: { inputs: readonly I[]; resolve: (o: O[]) => void; reject: (e: unknown) => void }[] = [];
  private inFlight = 0;
  private queued = 0;
  private scheduled = false;

  constructor(
    private readonly run: (inputs: I[]) => Promise<O[]>,
    private readonly options: {
      maxBatch: number;
      concurrency: number;
      burst?: { at: number; concurrency: number };
      gather?: boolean;
    },
  ) {}

  call(input: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ inputs: [input], resolve: (outputs) => resolve(outputs[0]!), reject });
      this.queued++;
      this.schedule();
    });
  }

  /** Answers `inputs` in order, all from the same batch. */
  callAll(inputs: readonly I[]): Promise<O[]> {
    return new Promise<O[]>((resolve, reject) => {
      this.queue.push({ inputs, resolve, reject });
      this.queued += inputs.length;
      this.schedule();
    });
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
    const { maxBatch, concurrency, burst } = this.options;
    const limit = () => (burst !== undefined && this.queued >= burst.at ? Math.max(concurrency, burst.concurrency) : concurrency);
    while (this.queue.length > 0 && this.inFlight < limit()) {
      let take = 0;
      let size = 0;
      while (take < this.queue.length && (take === 0 || size + this.queue[take]!.inputs.length <= maxBatch)) {
        size += this.queue[take]!.inputs.length;
        take++;
      }
      const batch = this.queue.splice(0, take);
      this.queued -= size;
      this.inFlight++;
      this.run(batch.flatMap((b) => b.inputs)).then(
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
}
