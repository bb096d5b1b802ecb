/**
 * The bulkhead for calls other than the check: at most `limit` run at once,
 * the others start in arrival order as places free up, and one whose caller
 * goes away while it waits never runs.
 */
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { CheckService } from "../gen/authz/v1/check_pb.js";
import { AccessService } from "../gen/authzen/v1/access_pb.js";
import { RelationshipService } from "../gen/authz/v1/relationships_pb.js";
import { CallLimiter } from "../src/transport/call/call-limiter.js";

function context(): { ctx: HandlerContext; abort(): void } {
  const controller = new AbortController();
  return {
    ctx: { signal: controller.signal } as HandlerContext,
    abort: () => controller.abort(new ConnectError("the client cancelled the call", Code.Canceled)),
  };
}

/** A call that runs until released, recording when it started. */
function held(started: string[], name: string) {
  let release!: () => void;
  const done = new Promise<void>((resolve) => (release = resolve));
  return {
    fn: async () => {
      started.push(name);
      await done;
      return name;
    },
    release: () => release(),
  };
}

/** A few turns of the event loop: a queued call starts on one (see next). */
const tick = async () => {
  for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
};
const microtasks = async () => {
  for (let i = 0; i < 20; i++) await Promise.resolve();
};

describe("call limiter", () => {
  it("limits everything but the check and the batch check", () => {
    const limiter = new CallLimiter({ limit: 2, perOwner: 2 });
    expect(limiter.limits(CheckService.method.check)).toBe(false);
    expect(limiter.limits(CheckService.method.batchCheck)).toBe(false);
    // The other questions are coalesced too.
    for (const method of [CheckService.method.explain, CheckService.method.permissions, CheckService.method.batchPermissions, CheckService.method.lookup]) {
      expect(limiter.limits(method)).toBe(false);
    }
    // AuthZEN's are the same questions.
    for (const method of AccessService.methods) expect(limiter.limits(method), method.name).toBe(false);
    expect(limiter.limits(RelationshipService.method.listRelationships)).toBe(true);
    expect(limiter.limits(RelationshipService.method.bulkWriteRelationships)).toBe(true);
  });

  it("runs at most `limit` at once, the rest in arrival order", async () => {
    const limiter = new CallLimiter({ limit: 2, perOwner: 2 });
    const started: string[] = [];
    const calls = ["a", "b", "c", "d", "e"].map((name) => held(started, name));
    const results = calls.map((c) => limiter.run("app", context().ctx.signal, c.fn));
    await tick();
    expect(started).toEqual(["a", "b"]);
    expect(limiter.load).toEqual({ running: 2, waiting: 3 });
    calls[1]!.release();
    // Not in the released call's chain of promises: the loop reads sockets first.
    await microtasks();
    expect(started).toEqual(["a", "b"]);
    await tick();
    expect(started).toEqual(["a", "b", "c"]);
    // A caller arriving now waits behind those already waiting.
    const late = held(started, "late");
    const lateResult = limiter.run("app", context().ctx.signal, late.fn);
    calls[0]!.release();
    calls[2]!.release();
    await tick();
    expect(started).toEqual(["a", "b", "c", "d", "e"]);
    for (const c of calls) c.release();
    await tick();
    expect(started.at(-1)).toBe("late");
    late.release();
    expect(await Promise.all([...results, lateResult])).toEqual(["a", "b", "c", "d", "e", "late"]);
    expect(limiter.load).toEqual({ running: 0, waiting: 0 });
  });

  it("drops a waiting call whose caller goes away, without running it", async () => {
    const limiter = new CallLimiter({ limit: 1 });
    const started: string[] = [];
    const first = held(started, "first");
    const gone = held(started, "gone");
    const next = held(started, "next");
    const firstResult = limiter.run("app", context().ctx.signal, first.fn);
    const caller = context();
    const goneResult = limiter.run("app", caller.ctx.signal, gone.fn);
    const nextResult = limiter.run("app", context().ctx.signal, next.fn);
    await tick();
    caller.abort();
    await expect(goneResult).rejects.toMatchObject({ code: Code.Canceled });
    first.release();
    await tick();
    expect(started).toEqual(["first", "next"]);
    next.release();
    await Promise.all([firstResult, nextResult]);
    expect(limiter.load).toEqual({ running: 0, waiting: 0 });
  });

  it("gives back the place of a caller that goes away after its place was given and before it started", async () => {
    const limiter = new CallLimiter({ limit: 1 });
    const started: string[] = [];
    const first = held(started, "first");
    const firstResult = limiter.run("app", context().ctx.signal, first.fn);
    const caller = context();
    const gone = held(started, "gone");
    const goneResult = limiter.run("app", caller.ctx.signal, gone.fn);
    const after = held(started, "after");
    const afterResult = limiter.run("app", context().ctx.signal, after.fn);
    await tick();
    // first ends: its place goes to the waiting caller, to start on the next turn of the loop...
    first.release();
    await microtasks();
    expect(limiter.load.running).toBe(1);
    // ...and the caller hangs up before that turn.
    caller.abort();
    await expect(goneResult).rejects.toMatchObject({ code: Code.Canceled });
    await tick();
    expect(started).toEqual(["first", "after"]);
    after.release();
    await Promise.all([firstResult, afterResult]);
    expect(limiter.load).toEqual({ running: 0, waiting: 0 });
    expect(await limiter.run("app", context().ctx.signal, async () => "still free")).toBe("still free");
  });

  it("refuses at once a caller already gone, and frees its place when a call fails", async () => {
    const limiter = new CallLimiter({ limit: 1 });
    const started: string[] = [];
    const first = held(started, "first");
    const firstResult = limiter.run("app", context().ctx.signal, first.fn);
    const caller = context();
    caller.abort();
    await expect(limiter.run("app", caller.ctx.signal, async () => "never")).rejects.toMatchObject({ code: Code.Canceled });
    first.release();
    await firstResult;
    await expect(limiter.run("app", context().ctx.signal, () => Promise.reject(new Error("boom")))).rejects.toThrow("boom");
    expect(await limiter.run("app", context().ctx.signal, async () => "after")).toBe("after");
  });

  it("one owner holds at most its share; another owner's call starts while the first one's queue waits", async () => {
    const limiter = new CallLimiter({ limit: 4, perOwner: 2 });
    const started: string[] = [];
    const busy = ["a1", "a2", "a3", "a4", "a5"].map((name) => held(started, name));
    const busyResults = busy.map((c) => limiter.run("a", context().ctx.signal, c.fn));
    await tick();
    // Two places of four: the other two stay free for everyone else.
    expect(started).toEqual(["a1", "a2"]);
    expect(limiter.load).toEqual({ running: 2, waiting: 3 });
    const quiet = held(started, "b1");
    const quietResult = limiter.run("b", context().ctx.signal, quiet.fn);
    await tick();
    expect(started).toEqual(["a1", "a2", "b1"]);
    quiet.release();
    for (const c of busy) c.release();
    await tick();
    await tick();
    expect(started).toEqual(["a1", "a2", "b1", "a3", "a4", "a5"]);
    expect(await Promise.all([...busyResults, quietResult])).toEqual(["a1", "a2", "a3", "a4", "a5", "b1"]);
    expect(limiter.load).toEqual({ running: 0, waiting: 0 });
  });

  it("owners take turns: a quiet owner's call waits for one call of each busy owner, not for their queues", async () => {
    const limiter = new CallLimiter({ limit: 1 });
    const started: string[] = [];
    const first = held(started, "a0");
    const firstResult = limiter.run("a", context().ctx.signal, first.fn);
    const busy = ["a1", "a2", "a3", "a4"].map((name) => held(started, name));
    const busyResults = busy.map((c) => limiter.run("a", context().ctx.signal, c.fn));
    const other = ["c1", "c2"].map((name) => held(started, name));
    const otherResults = other.map((c) => limiter.run("c", context().ctx.signal, c.fn));
    const quiet = held(started, "b1");
    const quietResult = limiter.run("b", context().ctx.signal, quiet.fn);
    for (const c of [first, ...busy, ...other, quiet]) c.release();
    await Promise.all([firstResult, ...busyResults, ...otherResults, quietResult]);
    // In turns: a, c, b, then what is left of a and c.
    expect(started).toEqual(["a0", "a1", "c1", "b1", "a2", "c2", "a3", "a4"]);
  });

  it("refuses at once (resource_exhausted) an owner's call beyond maxWaiting; other owners still queue", async () => {
    const limiter = new CallLimiter({ limit: 1, maxWaiting: 2 });
    const started: string[] = [];
    const first = held(started, "first");
    const firstResult = limiter.run("a", context().ctx.signal, first.fn);
    const waiting = [held(started, "w1"), held(started, "w2")];
    const waitingResults = waiting.map((c) => limiter.run("a", context().ctx.signal, c.fn));
    await expect(limiter.run("a", context().ctx.signal, async () => "never")).rejects.toMatchObject({ code: "resource_exhausted" });
    const other = held(started, "other");
    const otherResult = limiter.run("b", context().ctx.signal, other.fn);
    for (const c of [first, ...waiting, other]) c.release();
    expect(await Promise.all([firstResult, ...waitingResults, otherResult])).toEqual(["first", "w1", "w2", "other"]);
    expect(started).not.toContain("never");
  });
});
