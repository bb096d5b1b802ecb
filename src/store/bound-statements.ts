import { createHash } from "node:crypto";
import { firstParamBinder } from "./sql-literals.js";

/**
 * Statements that may go to Citus with their application's id written into
 * their text (docs/scale-out.md, "Bound statements"): the questions'
 * statements (the checks', the decision's, lookup's and who can's), whose
 * planning is most of what a call costs there.
 *
 * Citus plans a statement that names an application with its values on
 * every call: the coordinator's planner needs the value of `app_id` to find
 * the shard, and a generic plan, with `$1` unknown, is one it cannot route
 * (it prices it out of Postgres's choice). With the id in the text instead,
 * the generic plan names the shard: Postgres keeps it for the prepared
 * statement from its sixth run on, and the coordinator then only sends the
 * shard's query to the worker. The worker still plans that query each call.
 *
 * Each bound statement is a prepared statement of its own per application
 * and connection (its generic plan takes a megabyte or two of the
 * coordinator's memory), so a connection binds at most `capacity`: the
 * first it runs; past them it sends the statement with the id as `$1`, as
 * every other statement goes.
 */

/** The texts registered: each one's `$1` is an application's id. */
const registered = new Map<string, { bind: (value: unknown) => string | undefined; hash: string }>();

/** Registers statements whose `$1` is the application's id; returns them. */
export function bindable<T extends Record<string, string>>(statements: T): T {
  for (const sql of Object.values(statements)) {
    if (!registered.has(sql)) registered.set(sql, { bind: firstParamBinder(sql), hash: createHash("sha1").update(sql).digest("hex").slice(0, 16) });
  }
  return statements;
}

/** A statement as pg sends it: its name when prepared, its text, its values. */
export interface Sent {
  name?: string;
  text: string;
  values?: unknown[];
}

/** The bound statements each connection has prepared, at most `capacity` a connection. */
export class StatementBinding {
  private readonly prepared = new WeakMap<object, Set<string>>();

  constructor(readonly capacity: number) {}

  /**
   * The bound form of `sql` for `connection`, when it is registered, its
   * `$1` can be written as a literal and the connection has room or has
   * prepared it already; otherwise undefined (send it as it is).
   */
  bound(connection: object, sql: string, params: readonly unknown[] | undefined): Sent | undefined {
    if (params === undefined || params.length === 0) return undefined;
    const statement = registered.get(sql);
    if (statement === undefined || typeof params[0] !== "string") return undefined;
    const name = `pcb_${statement.hash}_${createHash("sha1").update(params[0]).digest("hex").slice(0, 16)}`;
    let names = this.prepared.get(connection);
    if (names === undefined) this.prepared.set(connection, (names = new Set()));
    // A full connection sends the statement as it is, without writing its text.
    if (!names.has(name) && names.size >= this.capacity) return undefined;
    const text = statement.bind(params[0]);
    if (text === undefined) return undefined;
    names.add(name);
    return { name, text, values: params.slice(1) as unknown[] };
  }

  /** How many bound statements `connection` has prepared. */
  count(connection: object): number {
    return this.prepared.get(connection)?.size ?? 0;
  }
}
