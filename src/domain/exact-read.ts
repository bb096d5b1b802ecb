import type { Db, Queryable } from "../store/db.js";
import type { ReadReplicas, ReplicaRead } from "../store/read-replicas.js";

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
