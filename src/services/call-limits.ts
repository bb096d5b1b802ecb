import type { HandlerContext } from "@connectrpc/connect";
import type { AbortOptions } from "../store/db.js";

/**
 * What a write hands the database so it stops when the caller does: the
 * call's signal (aborted when the client goes away or the deadline passes)
 * and the deadline itself, which Postgres is told as well. Only writes ask:
 * reading `signal` makes its controller and timer, which the check (the hot
 * path) has no use for.
 */
export function callLimits(ctx: HandlerContext): AbortOptions {
  const timeout = ctx.timeoutMs();
  return timeout === undefined ? { signal: ctx.signal } : { signal: ctx.signal, deadline: Date.now() + timeout };
}
