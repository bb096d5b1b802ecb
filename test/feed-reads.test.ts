/**
 * The change feed's shared reads (src/domain/feed-reads.ts): readers at the
 * same position share one read that has not started yet, never one already
 * running (its snapshot could predate what the reader was woken for); each
 * read takes a place only while it runs; a read all of whose readers went
 * away before it started never runs.
 */
import { describe, expect, it } from "vitest";
import { FeedReads } from "../src/domain/feed-reads.js";
import type { Places } from "../src/domain/places.js";
import type { ChangePosition } from "../src/store/changes-store.js";

/** Places handed out by the test: each run waits until `open()`. */
function gate() {
  const waiting: (() => void)[] = [];
  let held = 0;
  const places: Places = {
    run: async (_owner, signal, fn) => {
      await new Promise<void>((resolve, reject) => {
        waiting.push(resolve);
        signal?.addEventListener("abort", () => reject(signal.reason as Error), { once: true });
      });
      held++;
      try {
        return await fn();
      } finally {
        held--;
      }
    },
  };
  return { places, open: () => waiting.splice(0).forEach((go) => go()), held: () => held, asked: () => waiting.length };
}

const at = (seq: string): ChangePosition => ({ seq });
const settle = () => new Promise((resolve) => setImmediate(resolve));

describe("the change feed's shared reads", () => {
  it("a thousand readers at one position share one read; another position or page size reads apart", async () => {
    const g = gate();
    const loads: string[] = [];
    const reads = new FeedReads(g.places, async (appId, from, limit) => {
      loads.push(`${appId} ${from.seq} ${limit}`);
      return `${from.seq}/${limit}`;
    });
    const same = Array.from({ length: 1_000 }, () => reads.read("a", at("1:2:"), 100, new AbortController().signal));
    const other = [reads.read("a", at("1:3:"), 100, undefined), reads.read("a", at("1:2:"), 50, undefined), reads.read("b", at("1:2:"), 100, undefined)];
    expect(g.asked()).toBe(4);
    g.open();
    expect(new Set(await Promise.all(same))).toEqual(new Set(["1:2:/100"]));
    expect(await Promise.all(other)).toEqual(["1:3:/100", "1:2:/50", "1:2:/100"]);
    expect(loads.sort()).toEqual(["a 1:2: 100", "a 1:2: 50", "a 1:3: 100", "b 1:2: 100"]);
  });

  it("a reader arriving while the read runs gets a read of its own, started after it asked", async () => {
    const g = gate();
    let release!: () => void;
    let n = 0;
    const reads = new FeedReads(g.places, async () => {
      const mine = ++n;
      if (mine === 1) await new Promise<void>((resolve) => (release = resolve));
      return mine;
    });
    const first = reads.read("a", at("1:2:"), 100, undefined);
    g.open();
    await settle();
    expect(g.held()).toBe(1);
    const late = reads.read("a", at("1:2:"), 100, undefined);
    expect(g.asked()).toBe(1);
    release();
    expect(await first).toBe(1);
    g.open();
    expect(await late).toBe(2);
  });

  it("a read whose readers all went away before its place came never runs; one reader going leaves the others theirs", async () => {
    const g = gate();
    let loads = 0;
    const reads = new FeedReads(g.places, async () => ++loads);
    const gone = [new AbortController(), new AbortController()];
    const abandoned = gone.map((c) => reads.read("a", at("1:2:"), 100, c.signal));
    for (const c of gone) c.abort(new Error("gone"));
    for (const read of abandoned) await expect(read).rejects.toThrow("gone");
    g.open();
    await settle();
    expect(loads).toBe(0);
    const staying = new AbortController();
    const leaving = new AbortController();
    const kept = reads.read("a", at("1:2:"), 100, staying.signal);
    const left = reads.read("a", at("1:2:"), 100, leaving.signal);
    leaving.abort(new Error("left"));
    await expect(left).rejects.toThrow("left");
    g.open();
    expect(await kept).toBe(1);
  });
});
