/**
 * The rules Portcullis's SQL keeps so that it runs on Citus (docs/scale-out.md),
 * checked on the text of statements as they reach the database. A text
 * check, not a SQL parser: the statements are the project's own, written to
 * a few shapes, and the table-driven tests in sql-rules.test.ts show what it
 * catches.
 */
import { DISTRIBUTED_TABLES, REFERENCE_TABLES } from "../../src/store/distribute.js";

const distributed = new Set<string>(DISTRIBUTED_TABLES);
const reference = new Set<string>(REFERENCE_TABLES);

/** Functions Citus refuses in writes to distributed tables (evaluated per row, on the workers). */
const VOLATILE = /\b(random|clock_timestamp|timeofday|gen_random_uuid|uuid_generate_v4|txid_current|setseed)\s*\(/i;

interface TableRef {
  table: string;
  alias: string;
  /** The table written: INSERT INTO, UPDATE, DELETE FROM. */
  written: boolean;
  /** Where the innermost parenthesis around it opens (-1: none), and whether that is a scalar subquery. */
  scope: number;
  scalar: boolean;
}

/**
 * The innermost subquery around `at`: where its parenthesis opens, and
 * whether it is a scalar one (`(SELECT ...)`, `ARRAY(SELECT ...)` in a select
 * list or a comparison). Postgres plans those as subplans, their correlation
 * with the outer query a parameter, so Citus cannot prune their tables to
 * the outer query's shard: it runs them on every shard. EXISTS, IN and FROM
 * subqueries are joins to it and prune as joins do.
 */
function enclosingSubquery(sql: string, at: number): { scope: number; scalar: boolean } {
  let depth = 0;
  for (let i = at - 1; i >= 0; i--) {
    if (sql[i] === ")") depth++;
    else if (sql[i] === "(" && depth-- === 0) {
      if (!/^\(\s*select\b/i.test(sql.slice(i, i + 12))) return { scope: i, scalar: false };
      return { scope: i, scalar: !/\b(exists|in|from|join|lateral)\s*$/i.test(sql.slice(Math.max(0, i - 10), i)) };
    }
  }
  return { scope: -1, scalar: false };
}

const KEYWORDS = new Set(["where", "on", "using", "join", "left", "right", "inner", "cross", "natural", "group", "order", "limit", "set", "values", "returning", "for", "select", "lateral", "with", "union", "default", "and", "or"]);

function tableRefs(sql: string): TableRef[] {
  const refs: TableRef[] = [];
  const pattern = /(?:\b(from|join|update|into|using)|(,))\s+([a-z_][a-z0-9_]*)(?:\s+(?:as\s+)?([a-z_][a-z0-9_]*))?/gi;
  for (const m of sql.matchAll(pattern)) {
    const table = m[3]!.toLowerCase();
    if (!distributed.has(table) && !reference.has(table)) continue;
    const maybeAlias = m[4]?.toLowerCase();
    const alias = maybeAlias !== undefined && !KEYWORDS.has(maybeAlias) ? maybeAlias : table;
    const keyword = (m[1] ?? m[2]!).toLowerCase();
    const before = sql.slice(Math.max(0, m.index - 8), m.index).toLowerCase();
    const written = keyword === "into" || keyword === "update" || (keyword === "from" && /delete\s*$/.test(before));
    refs.push({ table, alias, written, ...enclosingSubquery(sql, m.index) });
  }
  return refs;
}

/** What is wrong with one statement under the rules; empty when nothing. */
export function sqlRuleViolations(rawSql: string): string[] {
  const sql = rawSql.replace(/--[^\n]*/g, " ").replace(/\s+/g, " ").trim();
  if (/^(create|alter|drop|begin|commit|rollback|set|savepoint|release)\b/i.test(sql)) return [];
  const refs = tableRefs(sql);
  const touchesDistributed = refs.some((r) => distributed.has(r.table));
  const problems: string[] = [];

  // 1. Every distributed table, and every reference table read beside one,
  // is pinned to one application: `alias.app_id = $n` (or an unqualified
  // `app_id = $n` when it is the statement's only such table), or joined on
  // app_id to a table that is.
  const pinned = new Set<string>();
  const eq = (a: string) => new RegExp(`(^|[^.\\w])${a}\\.app_id\\s*=\\s*\\$\\d+\\b`, "i");
  const unqualified = /(^|[^.\w])app_id\s*=\s*\$\d+\b/i;
  for (const r of refs) {
    if (eq(r.alias).test(sql) || (r.alias === r.table && unqualified.test(sql))) pinned.add(r.alias);
    // An INSERT names its application in the row it writes.
    if (r.written && new RegExp(`into ${r.table} \\(app_id\\b`, "i").test(sql)) pinned.add(r.alias);
  }
  for (let changed = true; changed; ) {
    changed = false;
    for (const r of refs) {
      if (pinned.has(r.alias)) continue;
      // A table of a scalar subquery is pinned by its own `app_id = $n`, or
      // through a join inside the same subquery; not by its correlation.
      const reachable = [...pinned].filter((p) => !r.scalar || refs.some((o) => o.alias === p && o.scope === r.scope));
      const joined = reachable.some(
        (p) =>
          new RegExp(`\\b${r.alias}\\.app_id\\s*=\\s*${p}\\.app_id\\b`, "i").test(sql) ||
          new RegExp(`\\b${p}\\.app_id\\s*=\\s*${r.alias}\\.app_id\\b`, "i").test(sql),
      );
      const usingJoin = new RegExp(`join ${r.table}(?: (?:as )?${r.alias})? using \\(app_id\\b`, "i").test(sql) && reachable.length > 0;
      if (joined || usingJoin) {
        pinned.add(r.alias);
        changed = true;
      }
    }
  }
  for (const r of refs) {
    const mustPin = distributed.has(r.table) || touchesDistributed;
    if (mustPin && !pinned.has(r.alias)) problems.push(`${r.table} is not limited to one application (app_id = $n)`);
  }
  if (touchesDistributed && /app_id\s*(=\s*any|in\s*\()/i.test(sql)) problems.push("names several applications");

  // 2. No volatile functions in writes to distributed tables; a sequence
  // value only through a scalar subquery, which Citus evaluates once.
  const writesDistributed = refs.some((r) => r.written && distributed.has(r.table));
  if (writesDistributed) {
    if (VOLATILE.test(sql)) problems.push("a volatile function in a write to a distributed table");
    if (/nextval\s*\(/i.test(sql) && !/\(\s*select\s+nextval\s*\(/i.test(sql)) problems.push("nextval() outside a scalar subquery in a write");
    // Citus refuses any function that is not immutable in a RETURNING
    // (json_build_object is stable): return columns, build values in code.
    if (returningLists(sql).some((list) => /\b[a-z_]+\s*\(/i.test(list))) problems.push("a function in the RETURNING of a write to a distributed table");
    // Likewise in an upsert's DO UPDATE SET (now() included); GREATEST, LEAST,
    // COALESCE and NULLIF are SQL's own expressions, not functions.
    if (updateSetLists(sql).some((list) => [...list.matchAll(/\b([a-z_]+)\s*\(/gi)].some((m) => !SQL_EXPRESSIONS.has(m[1]!.toLowerCase())))) {
      problems.push("a function in the DO UPDATE SET of a write to a distributed table");
    }
  }

  // 3. No row locks on reference tables (Citus makes them table locks on every node).
  if (/\bfor (update|share|no key update|key share)\b/i.test(sql) && refs.length > 0 && refs.every((r) => reference.has(r.table))) {
    problems.push("a row lock on a reference table");
  }
  return problems;
}

const SQL_EXPRESSIONS = new Set(["greatest", "least", "coalesce", "nullif"]);

/** The text of each DO UPDATE SET list of a statement, up to its WHERE, its RETURNING or the end of its CTE. */
function updateSetLists(sql: string): string[] {
  const lists: string[] = [];
  for (const match of sql.matchAll(/\bdo update set\b/gi)) {
    let depth = 0;
    let end = match.index + match[0].length;
    for (; end < sql.length; end++) {
      if (sql[end] === "(") depth++;
      else if (sql[end] === ")" && --depth < 0) break;
      else if (depth === 0 && /^\s(where|returning)\b/i.test(sql.slice(end, end + 11))) break;
    }
    lists.push(sql.slice(match.index + match[0].length, end));
  }
  return lists;
}

/**
 * The text of each RETURNING list of a statement: from the keyword to the
 * parenthesis that closes the data-modifying CTE it ends, or to the end.
 */
function returningLists(sql: string): string[] {
  const lists: string[] = [];
  for (const match of sql.matchAll(/\breturning\b/gi)) {
    let depth = 0;
    let end = match.index + match[0].length;
    for (; end < sql.length; end++) {
      if (sql[end] === "(") depth++;
      else if (sql[end] === ")" && --depth < 0) break;
    }
    lists.push(sql.slice(match.index + match[0].length, end));
  }
  return lists;
}
