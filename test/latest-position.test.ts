/**
 * LatestPosition (src/store/read-replicas.ts): the primary's WAL position
 * that a replica must have replayed is read after the caller asked, never
 * before, yet one read serves every caller that asked while none was in flight.
 */
import { describe, expect, it } from "vitest";
import { LatestPosition } from "../src/store/read-replicas.js";

/** A position source whose reads finish when the test says, counting them. */
function source() {
  const reads: { started: number; finish: (value: string) => void; fail: (error: Error) => void }[] = [];
  let clock = 0;
  const read = () =>
    new Promise<string>((resolve, reject) => {
      reads.push({ started: ++clock, finish: resolve, fail: reject });
    });
  return { reads, read, tick: () => ++clock };
}

const settle = () => new Promise((r) => setImmediate(r));

describe("LatestPosition", () => {
  it("a caller with no read in flight starts one", async () => {
    const s = source();
    const position = new LatestPosition(s.read);
    const a = position.get();
    expect(s.reads).toHaveLength(1);
    s.reads[0]!.finish("0/10");
    expect(await a).toBe("0/10");
  });

  it("callers arriving during a read wait for the next one, which they share, and which starts after they asked", async () => {
    const s = source();
    const position = new LatestPosition(s.read);
    const first = position.get();
    const asked = s.tick();
    const second = position.get();
    const third = position.get();
    expect(s.reads).toHaveLength(1); // nothing new while the first is in flight
    s.reads[0]!.finish("0/10");
    expect(await first).toBe("0/10");
    await settle();
    expect(s.reads).toHaveLength(2);
    expect(s.reads[1]!.started).toBeGreaterThan(asked);
    s.reads[1]!.finish("0/20");
    expect(await second).toBe("0/20");
    expect(await third).toBe("0/20");
  });

  it("a failed read fails its callers; those waiting for the next get a read of their own", async () => {
    const s = source();
    const position = new LatestPosition(s.read);
    const first = position.get();
    const second = position.get();
    s.reads[0]!.fail(new Error("primary gone"));
    await expect(first).rejects.toThrow("primary gone");
    await settle();
    s.reads[1]!.finish("0/30");
    expect(await second).toBe("0/30");
    // And afterwards a caller starts afresh.
    const later = position.get();
    expect(s.reads).toHaveLength(3);
    s.reads[2]!.finish("0/40");
    expect(await later).toBe("0/40");
  });
});
