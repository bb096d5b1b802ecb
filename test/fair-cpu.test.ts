/**
 * The fair share of the event loop for conditions' evaluations
 * (domain/fair-cpu.ts): a lone piece runs at once; under load the loop gets
 * its turn between slices, and the applications take turns.
 */
import { describe, expect, it } from "vitest";
import { FairCpu } from "../src/domain/fair-cpu.js";

/** Keeps the CPU busy for `ms`. */
const busy = (ms: number) => {
  const end = performance.now() + ms;
  while (performance.now() < end);
};

describe("FairCpu", () => {
  it("runs a lone piece at once, in the same turn", async () => {
    const cpu = new FairCpu(4);
    let ran = false;
    const done = cpu.run("a", () => (ran = true));
    expect(ran).toBe(true);
    await expect(done).resolves.toBe(true);
  });

  it("gives the loop its turn between slices while one application's pieces wait", async () => {
    const cpu = new FairCpu(4);
    let finished = 0;
    const pieces = Array.from({ length: 40 }, () => cpu.run("attacker", () => (busy(2), finished++)));
    // Other work the loop has meanwhile: without the slices the 40 pieces (80 ms) would all run first.
    const seen = await new Promise<number>((resolve) => setImmediate(() => resolve(finished)));
    expect(seen).toBeLessThan(20);
    await Promise.all(pieces);
    expect(finished).toBe(40);
  });

  it("serves the applications in turn: one waiting behind another's long queue runs in the first slices", async () => {
    const cpu = new FairCpu(4);
    const order: string[] = [];
    const attacker = Array.from({ length: 30 }, (_, i) => cpu.run("attacker", () => (busy(1), order.push(`a${i}`))));
    const victim = cpu.run("victim", () => order.push("v"));
    await Promise.all([...attacker, victim]);
    expect(order.indexOf("v")).toBeLessThan(8); // after the pieces the first turn ran at once, and one more
    expect(order).toHaveLength(31);
  });

  it("passes a piece's error to its caller and goes on", async () => {
    const cpu = new FairCpu(4);
    const pieces = [cpu.run("a", () => busy(5)), cpu.run("a", () => { throw new Error("boom"); }), cpu.run("b", () => 2)];
    await expect(pieces[1]).rejects.toThrow("boom");
    await expect(pieces[2]).resolves.toBe(2);
    await pieces[0];
  });
});
