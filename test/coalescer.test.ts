/**
 * The Coalescer: calls arriving while a batch is in flight go together in the
 * next one, never more than maxBatch inputs (a larger group alone), a group's
 * inputs always in one batch, answers back to their callers in order, and a
 * failed batch failing exactly its own callers.
 */
import { describe, expect, it } from "vitest";
import { Coalescer } from "../src/lib/coalescer.js";

/** A run that records each batch and answers when released. */
function gatedRun() {
  const batches: number[][] = [];
  const gates: { release: () => void; fail: (e: Error) => void }[] = [];
  const flight = { now: 0, most: 0 };
  const run = (inputs: number[]) =>
    new Promise<string[]>((resolve, reject) => {
      batches.push([...inputs]);
      flight.most = Math.max(flight.most, ++flight.now);
      const done = () => flight.now--;
      gates.push({ release: () => (done(), resolve(inputs.map((i) => `answer ${i}`))), fail: (e) => (done(), reject(e)) });
    });
  return { batches, gates, flight, run };
}

const tick = () => new Promise((r) => setImmediate(r));

describe("Coalescer", () => {
  it.each([
    { name: "one call alone runs at once", concurrency: 1, burst: undefined, gather: undefined, maxBatch: 10, groups: [[1]], expected: [[1]], mostInFlight: 1 },
    { name: "calls during a batch share the next", concurrency: 1, maxBatch: 10, groups: [[1], [2], [3], [4]], expected: [[1], [2, 3, 4]], mostInFlight: 1 },
    { name: "two in flight: the first two run at once", concurrency: 2, maxBatch: 10, groups: [[1], [2], [3], [4]], expected: [[1], [2], [3, 4]], mostInFlight: 2 },
    { name: "maxBatch splits the queue", concurrency: 1, maxBatch: 2, groups: [[1], [2], [3], [4], [5]], expected: [[1], [2, 3], [4, 5]], mostInFlight: 1 },
    { name: "a group is never split", concurrency: 1, maxBatch: 3, groups: [[1], [2, 3], [4, 5], [6]], expected: [[1], [2, 3], [4, 5, 6]], mostInFlight: 1 },
    { name: "a group larger than maxBatch goes alone", concurrency: 1, maxBatch: 2, groups: [[1], [2], [3, 4, 5], [6]], expected: [[1], [2], [3, 4, 5], [6]], mostInFlight: 1 },
    {
      name: "once burst.at inputs wait, batches may run side by side, up to burst.concurrency",
      concurrency: 1,
      burst: { at: 2, concurrency: 3 },
      maxBatch: 2,
      groups: [[1], [2], [3], [4], [5], [6]],
      expected: [[1], [2, 3], [4, 5], [6]],
      mostInFlight: 3,
    },
    {
      name: "below burst.at, one batch at a time; at it, a second one starts, smaller than maxBatch",
      concurrency: 1,
      burst: { at: 2, concurrency: 2 },
      maxBatch: 10,
      groups: [[1], [2], [3], [4]],
      expected: [[1], [2, 3], [4]],
      mostInFlight: 2,
    },
    {
      name: "with key, inputs count once a key: the same question asked six times waits for one batch, past maxBatch",
      concurrency: 1,
      burst: { at: 2, concurrency: 3 },
      key: () => "the same page",
      maxBatch: 2,
      groups: [[1], [2], [3], [4], [5], [6]],
      expected: [[1], [2, 3, 4, 5, 6]],
      mostInFlight: 1,
    },
    {
      name: "with key, maxBatch counts distinct questions: copies join the batch of their question",
      concurrency: 1,
      key: (i: number) => `page ${i % 3}`,
      maxBatch: 2,
      groups: [[0], [1], [4], [2], [3], [7], [5]],
      expected: [[0], [1, 4, 2], [3, 7], [5]],
      mostInFlight: 1,
    },
    {
      name: "with key, distinct questions waiting still burst",
      concurrency: 1,
      burst: { at: 2, concurrency: 3 },
      key: (i: number) => `page ${i}`,
      maxBatch: 2,
      groups: [[1], [2], [3], [4], [5], [6]],
      expected: [[1], [2, 3], [4, 5], [6]],
      mostInFlight: 3,
    },
    {
      name: "with key, the questions a batch took no longer count as waiting",
      concurrency: 1,
      burst: { at: 3, concurrency: 3 },
      key: (i: number) => `page ${i}`,
      maxBatch: 2,
      groups: [[1], [2], [3], [4], [5]],
      expected: [[1], [2, 3], [4, 5]],
      mostInFlight: 2,
    },
    {
      name: "with key, two questions each asked twice are two waiting, not four",
      concurrency: 1,
      burst: { at: 3, concurrency: 2 },
      key: (i: number) => `page ${i % 2}`,
      maxBatch: 10,
      groups: [[1], [2], [3], [4], [5]],
      expected: [[1], [2, 3, 4, 5]],
      mostInFlight: 1,
    },
    {
      name: "gather: calls of the same turn of the event loop go together, the first one too",
      concurrency: 1,
      gather: true,
      maxBatch: 10,
      groups: [[1], [2], [3, 4]],
      expected: [[1, 2, 3, 4]],
      mostInFlight: 1,
    },
  ] as { name: string; concurrency: number; burst?: { at: number; concurrency: number }; key?: (i: number) => string; gather?: boolean; maxBatch: number; groups: number[][]; expected: number[][]; mostInFlight: number }[])(
    "$name",
    async ({ concurrency, burst, key, gather, maxBatch, groups, expected, mostInFlight }) => {
    const { batches, gates, flight, run } = gatedRun();
    const coalescer = new Coalescer(run, { maxBatch, concurrency, burst, key, gather });
    const answers = groups.map((g) => (g.length === 1 ? coalescer.call(g[0]!).then((a) => [a]) : coalescer.callAll(g)));
    for (let released = 0; released < expected.length; released++) {
      await tick();
      gates[released]!.release();
    }
    expect(await Promise.all(answers)).toEqual(groups.map((g) => g.map((i) => `answer ${i}`)));
    expect(batches).toEqual(expected);
    expect(flight.most).toBe(mostInFlight);
  },
  );

  it("a failed batch rejects its own callers only, and the next batch still runs", async () => {
    const { gates, run } = gatedRun();
    const coalescer = new Coalescer(run, { maxBatch: 10, concurrency: 1 });
    const first = coalescer.call(1);
    const second = coalescer.callAll([2, 3]);
    const third = coalescer.call(4);
    await tick();
    gates[0]!.fail(new Error("statement failed"));
    await expect(first).rejects.toThrow("statement failed");
    await tick();
    gates[1]!.fail(new Error("also failed"));
    await expect(second).rejects.toThrow("also failed");
    await expect(third).rejects.toThrow("also failed");
    const fourth = coalescer.call(5);
    await tick();
    gates[2]!.release();
    expect(await fourth).toBe("answer 5");
  });
});
