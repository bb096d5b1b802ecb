/**
 * The check's statements as functions the database plans once per
 * connection, made from the statements' own text.
 *
 * Run as a prepared statement, Postgres kept choosing a custom plan for the
 * check: the generic plan's estimate looked dearer, so every call planned
 * the statement afresh, and planning cost as much as running (the direct
 * check: 0.17-0.36 ms of planning beside 0.16-0.28 ms of execution; the
 * graph's: 1.2-2.5 ms beside 0.3-0.7 ms). Every part of either statement
 * is an index lookup on app_id = $1 and the question's own columns, whatever
 * the values, so the one generic plan is right for every call. A function's
 * SET clause asks for it for this statement alone (set for the connection,
 * it would change every other statement's plans too), and PL/pgSQL keeps
 * the plan of the query inside for the life of the connection.
 *
 * A function's body is its inline statement, verbatim: the definition is
 * generated from the statement's text, and named by a hash of it
 * (portcullis_check_facts_1a2b3c4d5e6f). A build calls only the functions of
 * its own statements, so during a rolling upgrade an older build still finds
 * its own while a newer one creates its own beside them. migrate() creates
 * the functions of the running build, after the numbered migrations, in
 * their transaction and under their lock (installCheckFunctions), and
 * records them in check_functions (migration 022).
 *
 * What is dropped: a rolling upgrade runs at most two builds at once, so
 * the functions of this build's generation (the set of names it calls) and
 * of the newest other generation (by first creation) are kept, and those
 * only older generations name are dropped. A build older than both that
 * still runs is answered by its inline statement (undefined_function), as
 * a standby that has not replayed the functions yet is (check-store.ts);
 * started again, it is refused by migrate's version check if the schema
 * moved, or else creates its functions again, as the newest generation.
 *
 * Standbys never migrate: they get the functions by replaying the
 * primary's. On Citus the functions are created too, and the database
 * refuses them at the first call (check-store.ts sends the inline
 * statement from then on). PGlite plans them once as Postgres does.
 */
import { createHash } from "node:crypto";
import { bindable } from "./bound-statements.js";
import type { Queryable } from "./db.js";
import { REPLAYED } from "./per-application.js";
import { sqlState, SqlState } from "./sqlstate.js";

/** One of the check's statements as a function. */
export interface CheckFunction {
  /** Which statement: "check" (the direct one), "graph check", "decision rows" or "who can". */
  kind: string;
  /** The prefix and 12 hex digits of the SHA-256 of the definition made with the prefix as its name. */
  name: string;
  /** The types of its parameters, $1, $2... of the statement. */
  parameters: readonly string[];
  /** The inline statement, whose $1, $2... are the function's parameters. */
  statement: string;
  /** CREATE OR REPLACE FUNCTION, its body the statement (functionBody). */
  definition: string;
  /** The statement calling it, without and with the standby's replay position. */
  call: { plain: string; replayed: string };
}

/** What a check statement answers, one row (check-store.ts, StatementRow): the columns of its function, by default. */
const CHECK_COLUMNS: readonly (readonly [name: string, type: string])[] = [
  ["keys", "json"],
  ["version", "text"],
  ["now_ms", "float8"],
  ["rows", "json"],
];

/**
 * The PL/pgSQL body around a statement: the statement's rows returned as they
 * are. Where a column and a result column's variable share a name, the
 * column is meant.
 */
export const functionBody = (statement: string): string => `
#variable_conflict use_column
BEGIN
  RETURN QUERY${statement};
END
`;

const definitionOf = (name: string, parameters: readonly string[], statement: string, columns: typeof CHECK_COLUMNS) => `CREATE OR REPLACE FUNCTION ${name}(${parameters.join(", ")})
RETURNS TABLE (${columns.map(([column, type]) => `${column} ${type}`).join(", ")})
LANGUAGE plpgsql STABLE ROWS 1
SET plan_cache_mode = force_generic_plan
AS $$${functionBody(statement)}$$`;

const shortHash = (text: string) => createHash("sha256").update(text).digest("hex").slice(0, 12);

/** A statement's function: `parameters` are the types of its $1, $2..., `columns` those of the row it answers. */
export function checkFunction(prefix: string, kind: string, parameters: readonly string[], statement: string, columns = CHECK_COLUMNS): CheckFunction {
  if (statement.includes("$$")) throw new Error(`${kind}: a statement made a function may not hold $$`);
  const name = `${prefix}_${shortHash(definitionOf(prefix, parameters, statement, columns))}`;
  const args = parameters.map((type, i) => `$${i + 1}::${type}`).join(", ");
  const call = (replayed: boolean) => `SELECT ${columns.map(([column]) => `f.${column}`).join(", ")}${replayed ? REPLAYED : ""} FROM ${name}(${args}) AS f`;
  return { kind, name, parameters, statement, definition: definitionOf(name, parameters, statement, columns), call: { plain: call(false), replayed: call(true) } };
}

/**
 * A statement sent as its function (planned once per connection) until a
 * database refuses it: feature_not_supported (Citus, which cannot
 * distribute the function's generic plan) sends the inline statement from
 * then on; undefined_function (a standby that has not replayed this build's
 * functions yet) sends it this time. The call that met the refusal is
 * answered by the inline statement. Statements may share their `state`:
 * one refusal then sends all of them inline. The inline statements' `$1` is
 * the application's id: on Citus they go bound (bound-statements.ts), so
 * that the coordinator keeps their plan as Postgres keeps the function's.
 */
export class PlannedStatement {
  private readonly inline: { plain: string; replayed: string };

  constructor(
    private readonly fn: CheckFunction,
    inline: { plain: string; replayed: string },
    private readonly state: { planOnce: boolean } = { planOnce: true },
  ) {
    this.inline = bindable(inline);
  }

  async row<R>(q: Queryable, replayed: boolean, params: unknown[]): Promise<R> {
    const which = replayed ? "replayed" : "plain";
    if (this.state.planOnce) {
      try {
        return (await q.query<R & object>(this.fn.call[which], params)).rows[0]!;
      } catch (error) {
        const code = sqlState(error);
        if (code === SqlState.featureNotSupported) this.state.planOnce = false;
        else if (code !== SqlState.undefinedFunction) throw error;
      }
    }
    return (await q.query<R & object>(this.inline[which], params)).rows[0]!;
  }
}

/** A build's functions by one name: a hash of their names. */
export const generationOf = (functions: readonly CheckFunction[]): string => shortHash(functions.map((f) => f.name).sort().join("\n"));

/** Generations kept: this build's and the newest before it (the two builds of a rolling upgrade). */
export const KEPT_GENERATIONS = 2;

const IDENTIFIER = /^[a-z_][a-z0-9_]*$/;

/**
 * Creates the functions of `functions` the database lacks, records them as
 * one generation, and drops the functions only older generations name (see
 * above). Inside migrate()'s transaction and advisory lock, after the
 * numbered migrations; nothing before migration 022 (a database migrated
 * part of the way).
 */
export async function installCheckFunctions(tx: Queryable, functions: readonly CheckFunction[]): Promise<void> {
  const { rows: table } = await tx.query<{ present: boolean }>("SELECT to_regclass('check_functions') IS NOT NULL AS present");
  if (table[0]?.present !== true) return;
  const names = functions.map((f) => f.name);
  const { rows: present } = await tx.query<{ name: string }>(
    "SELECT n AS name FROM unnest($1::text[]) AS n WHERE to_regproc(n) IS NOT NULL",
    [names],
  );
  const have = new Set(present.map((r) => r.name));
  for (const f of functions) if (!have.has(f.name)) await tx.query(f.definition);
  const generation = generationOf(functions);
  await tx.query(
    `INSERT INTO check_functions (generation, name, kind)
     SELECT $1, t.name, t.kind FROM unnest($2::text[], $3::text[]) AS t(name, kind)
     ON CONFLICT (generation, name) DO NOTHING`,
    [generation, names, functions.map((f) => f.kind)],
  );
  const { rows: generations } = await tx.query<{ generation: string; names: string[] }>(
    `SELECT generation, array_agg(name::text ORDER BY name) AS names FROM check_functions
     GROUP BY generation ORDER BY min(created_at) DESC, generation`,
  );
  const kept = [generation, ...generations.map((g) => g.generation).filter((g) => g !== generation).slice(0, KEPT_GENERATIONS - 1)];
  const keptNames = new Set(generations.filter((g) => kept.includes(g.generation)).flatMap((g) => g.names));
  const older = generations.filter((g) => !kept.includes(g.generation));
  for (const name of new Set(older.flatMap((g) => g.names))) {
    if (keptNames.has(name)) continue;
    if (!IDENTIFIER.test(name)) throw new Error(`check_functions names a function that is not a plain identifier: ${JSON.stringify(name)}`);
    await tx.query(`DROP FUNCTION IF EXISTS ${name}`);
  }
  if (older.length > 0) await tx.query("DELETE FROM check_functions WHERE generation = ANY($1::text[])", [older.map((g) => g.generation)]);
}
