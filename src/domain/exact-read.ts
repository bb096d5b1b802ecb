import { Coalescer } from "../lib/coalescer.js";
import type { Telemetry } from "../lib/telemetry.js";
import type { Db, Queryable } from "../store/db.js";
import type { ReadRows } from "../store/per-application.js";
import type { ReadReplicas, ReplicaRead } from "../store/read-replicas.js";
import { unauthenticated, Violations } from "./errors.js";

/**
 * Runs a read that must be exact (it answers a question about access) where
 * checks run: on a read replica that has replayed every change committed
 * before the read began, or on the primary (see ReadReplicas). `read` gets
 * whether it runs on a replica, so its statement can also report the
 * replay position. It may run twice, so it must only read.
 */
export function exactRead<T>(
  db: Db,
  replicas: ReadReplicas | undefined,
  read: (q: Queryable, onReplica: boolean) => Promise<ReplicaRead<T>>,
): Promise<T> {
  if (replicas === undefined) return read(db, false).then((r) => r.value);
  return replicas.read(read);
}

/**
 * Questions asked together (a Coalescer of `maxBatch` at most) and answered
 * by one store read for the batch, exact as exactRead makes it: the read
 * gets whether it runs on a replica (`replayed`) and returns its rows in
 * input order with the replay position it read.
 */
export function exactReads<I, R>(
  db: Db,
  replicas: ReadReplicas | undefined,
  read: (q: Queryable, inputs: I[], options: { replayed: boolean }) => Promise<ReadRows<R>>,
  options: { maxBatch: number; reads: string; telemetry: Telemetry; key?: (input: I) => string },
): Coalescer<I, R> {
  return new Coalescer(
    (inputs) =>
      exactRead(db, replicas, async (q, onReplica) => {
        const { rows, replayed } = await read(q, inputs, { replayed: onReplica });
        return { value: rows, replayed };
      }),
    { ...db.reads, ...options },
  );
}

/**
 * A page's question as the Coalescer's key (its `key` option): inputs of
 * plain fields, made in one place, so equal questions have equal texts, as
 * the store's distinctQuestions finds them.
 */
export const sameQuestion = (input: object): string => JSON.stringify(input);

/** A 401 when the key a statement verified no longer holds (revoked since the call was authorized). */
export function requireKey(row: { keyValid: boolean }): void {
  if (!row.keyValid) throw unauthenticated("the API key is not valid: it is unknown or revoked");
}

/**
 * What a question's statement read about the key and the catalog, made
 * errors: a 401 when the key no longer holds, a 400 naming resource or
 * action when the catalog lacks them (explain, lookup and who can).
 */
export function requireAnswerable(row: { keyValid: boolean; actions: string[] | null }, q: { resource: string; action: string }): void {
  requireKey(row);
  const v = new Violations();
  if (row.actions === null) v.add("resource", `"${q.resource}" is not a resource of the catalog`);
  else if (!row.actions.includes(q.action)) v.add("action", `"${q.action}" is not an action of resource "${q.resource}"`);
  v.throwIfAny();
}
