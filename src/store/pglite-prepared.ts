import { literalsOf } from "./sql-literals.js";

/** What runs a statement: PGlite itself, or its transaction's handle. */
export interface StatementRunner<Result> {
  query(sql: string, params?: unknown[]): Promise<Result>;
}

/** Statements that may be prepared: one statement each, planned the same on every run. */
const PREPARABLE = /^\s*(SELECT|WITH|INSERT|UPDATE|DELETE)\b/i;

/**
 * The statements PGlite plans once. PGlite's `query` parses and plans its
 * statement on every call (the protocol's unnamed statement), and the
 * walks of groups and hierarchy, lookup's and who can's pages, are big
 * statements: on this engine their planning took as long as running them
 * (3.7 and 4.7 ms a lookup, by EXPLAIN ANALYZE). A statement seen a second
 * time is prepared under a name (`PREPARE`), and from then on run by
 * `EXECUTE name(literals)`, which Postgres plans as it plans any prepared
 * statement: custom plans for the first five runs, then the generic one
 * when it costs no more. The statements are written to be planned without
 * their values (the questions arrive as JSON), so the generic plan is the
 * one they were written for, as the check's functions already run.
 *
 * EXECUTE takes no bound parameters, so each value becomes a literal of
 * unknown type (sql-literals.ts), which Postgres types from the prepared
 * statement's parameter, as it types a parameter PGlite sends as text (an
 * array of strings, such as the graph's statements' keys, as array syntax).
 * A value no literal can carry exactly (an array of numbers, an object, a
 * string with a NUL) runs the statement unprepared. At most `capacity` names
 * are kept; the one unused longest is deallocated to make room. Prepared
 * statements live in the session, not in a transaction: one prepared
 * inside a transaction that rolls back stays (the tests check it).
 */
export class PreparedStatements {
  /** Statement text → its name, the least recently run first. */
  private readonly named = new Map<string, Promise<string>>();
  /** Statements run once: the second run prepares them. Cleared when it grows past 4 × capacity. */
  private readonly seen = new Set<string>();
  private counter = 0;

  constructor(private readonly capacity = 256) {}

  /** How many statements are prepared now. */
  get size(): number {
    return this.named.size;
  }

  async run<Result>(runner: StatementRunner<Result>, sql: string, params: readonly unknown[] | undefined): Promise<Result> {
    const args = PREPARABLE.test(sql) ? literalsOf(params ?? []) : undefined;
    if (args === undefined) return runner.query(sql, params as unknown[] | undefined);
    let name = this.named.get(sql);
    if (name === undefined) {
      if (!this.seen.has(sql)) {
        if (this.seen.size >= 4 * this.capacity) this.seen.clear();
        this.seen.add(sql);
        return runner.query(sql, params as unknown[] | undefined);
      }
      name = this.prepare(runner, sql);
    } else {
      this.named.delete(sql);
      this.named.set(sql, name);
    }
    const statement = await name;
    return runner.query(args.length === 0 ? `EXECUTE ${statement}` : `EXECUTE ${statement}(${args.join(",")})`);
  }

  /**
   * Prepares `sql` under a new name, set synchronously so that a second
   * caller waits for this one rather than preparing it twice. A statement
   * PREPARE refuses is refused with the same error (its parse and analysis
   * are the statement's own), and is not remembered.
   */
  private prepare<Result>(runner: StatementRunner<Result>, sql: string): Promise<string> {
    const name = `portcullis_p${++this.counter}`;
    const prepared = (async () => {
      await runner.query(`PREPARE ${name} AS ${sql}`);
      while (this.named.size > this.capacity) {
        const [oldest, oldestName] = this.named.entries().next().value as [string, Promise<string>];
        this.named.delete(oldest);
        // One whose PREPARE failed was never made (and removes itself).
        const made = await oldestName.catch(() => undefined);
        if (made !== undefined) await runner.query(`DEALLOCATE ${made}`);
      }
      return name;
    })();
    this.named.set(sql, prepared);
    this.seen.delete(sql);
    prepared.catch(() => {
      if (this.named.get(sql) === prepared) this.named.delete(sql);
    });
    return prepared;
  }
}
