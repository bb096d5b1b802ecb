/**
 * A database that tells `record` of every statement sent through it, with
 * its parameters, before it runs (transactions, their last statements and
 * one-statement transactions included): for tests that read what the
 * service sends (the SQL rules' test, the Citus router test).
 */
import type { Db, Transaction } from "../../src/store/db.js";

export function recordingDb(db: Db, record: (sql: string, params: readonly unknown[] | undefined) => void): Db {
  return new Proxy(db, {
    get(target, property, receiver) {
      if (property === "query") {
        return (sql: string, params?: readonly unknown[], options?: never) => (record(sql, params), target.query(sql, params, options));
      }
      if (property === "transactionOf") {
        return (sql: string, params: readonly unknown[], options?: never) => (record(sql, params), target.transactionOf(sql, params, options));
      }
      if (property === "transaction") {
        return <T>(fn: (tx: Transaction) => Promise<T>, options?: never) =>
          target.transaction(
            (tx) =>
              fn({
                query: (sql, params) => (record(sql, params), tx.query(sql, params)),
                atCommit: (sql, params) => (record(sql, params), tx.atCommit(sql, params)),
              }),
            options,
          );
      }
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === "function" ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}
