/**
 * Coalesces calls that arrive together into one batched call. The first call
 * runs at once; calls arriving while `concurrency` batches are in flight
 * queue up and go together in the next batch (up to `maxBatch`). Under load
 * one database round trip answers many requests; an idle service adds no
 * delay, because nothing waits on a timer.
 *
 * Freshness is kept: a call's batch starts after the call arrived, so it
 * reads everything committed before the call.
 */
export class Coalescer<I, O> {
  private queue: { input: I; resolve: (o: O) => void; reject: (e: unknown) => void }[] = [];
  private inFlight = 0;

  constructor(
    private readonly run: (inputs: I[]) => Promise<O[]>,
    private readonly options: { maxBatch: number; concurrency: number },
  ) {}

  call(input: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ input, resolve, reject });
      this.drain();
    });
  }

  private drain(): void {
    while (this.inFlight < this.options.concurrency && this.queue.length > 0) {
      const batch = this.queue.splice(0, this.options.maxBatch);
      this.inFlight++;
      this.run(batch.map((b) => b.input)).then(
        (outputs) => batch.forEach((b, i) => b.resolve(outputs[i]!)),
        (error: unknown) => batch.forEach((b) => b.reject(error)),
      ).finally(() => {
        this.inFlight--;
        this.drain();
      });
    }
  }
}
