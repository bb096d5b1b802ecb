import pg from "pg";

/**
 * A statement's parameters written into its text as literals, for a simple
 * query (the protocol's Query message: several statements in one round
 * trip, but no parameters). Each `$n` becomes a quoted literal of unknown
 * type, which Postgres types from where it stands, as it types a parameter
 * sent without a type (node-pg sends every parameter so): the statement
 * means the same either way.
 *
 * An array of strings becomes the literal of its text in Postgres's array
 * syntax, which Postgres types as it types the parameter (a text[]).
 *
 * Undefined when a value cannot be written exactly: a string with a NUL (a
 * Query message ends at the first one, and a parameter with one is refused
 * by Postgres) or a lone UTF-16 surrogate (which UTF-8 cannot carry: it
 * would arrive as U+FFFD), a number that is not finite, an array of
 * anything but strings and nulls, a value of another type. The caller then
 * sends the parameters as parameters.
 *
 * The text is scanned as Postgres scans it: a `$n` inside a quoted string,
 * a quoted identifier or a comment is left alone, and so is one that ends
 * an identifier (`a$1` is a name). A dollar-quoted string is refused (a
 * thrown Error): no statement of the stores has one, and a scan that gets
 * one wrong would put a literal where none belongs.
 */
export function inlineParams(sql: string, params: readonly unknown[]): string | undefined {
  const literals = literalsOf(params);
  if (literals === undefined) return undefined;
  return rewriteParams(sql, (n) => {
    const literal = literals[n - 1];
    if (literal === undefined) throw new Error(`$${n} has no parameter (${params.length} given)`);
    return literal;
  });
}

/**
 * A statement's text with its `$1` written as a literal and the other
 * parameters renumbered from $1 (`$3` becomes `$2`), for a value given
 * later: the text is scanned once, here, and each value joins its parts.
 * Undefined for a value that cannot be written exactly (toLiteral). Used by
 * pg-db.ts's bound statements: on Citus, a prepared statement with its
 * application's id in its text has a generic plan that names the shard,
 * which Citus can route and keep.
 */
export function firstParamBinder(sql: string): (value: unknown) => string | undefined {
  if (sql.includes("\0")) throw new Error("a statement to bind holds a NUL");
  const parts = rewriteParams(sql, (n) => (n === 1 ? "\0" : `$${n - 1}`)).split("\0");
  return (value) => {
    const literal = toLiteral(value);
    return literal === undefined ? undefined : parts.join(literal);
  };
}

/** The statement with each `$n` outside quotes and comments replaced by `replace(n)` (the scan inlineParams describes). */
function rewriteParams(sql: string, replace: (n: number) => string): string {
  let out = "";
  let from = 0;
  let i = 0;
  while (i < sql.length) {
    const c = sql[i]!;
    const next = sql[i + 1];
    if (c === "'") {
      // E'...' takes backslash escapes; a plain string only doubles its quotes.
      const escapes = i > 0 && (sql[i - 1] === "E" || sql[i - 1] === "e") && !isIdentifierChar(sql[i - 2]);
      i = endOfQuoted(sql, i, "'", escapes);
    } else if (c === '"') {
      i = endOfQuoted(sql, i, '"', false);
    } else if (c === "-" && next === "-") {
      const end = sql.indexOf("\n", i);
      i = end === -1 ? sql.length : end + 1;
    } else if (c === "/" && next === "*") {
      i = endOfBlockComment(sql, i);
    } else if (c === "$" && !isIdentifierChar(sql[i - 1])) {
      const digits = /^\d+/.exec(sql.slice(i + 1));
      if (digits === null) throw new Error(`a dollar-quoted string or stray "$" at ${i} of a statement to inline`);
      out += `${sql.slice(from, i)}${replace(Number(digits[0]))}`;
      i += 1 + digits[0].length;
      from = i;
    } else {
      i++;
    }
  }
  return out + sql.slice(from);
}

/** Each parameter as a literal of unknown type (toLiteral), or undefined when one cannot be written exactly. */
export function literalsOf(params: readonly unknown[]): string[] | undefined {
  const literals: string[] = [];
  for (const value of params) {
    const literal = toLiteral(value);
    if (literal === undefined) return undefined;
    literals.push(literal);
  }
  return literals;
}

/** One value as a literal (with a space on each side: it never joins a neighbouring token), or undefined. */
function toLiteral(value: unknown): string | undefined {
  if (value === null || value === undefined) return " NULL ";
  let text: string;
  if (typeof value === "string") text = value;
  else if (Array.isArray(value)) {
    const array = arrayText(value);
    if (array === undefined) return undefined;
    text = array;
  } else if (typeof value === "number") {
    if (!Number.isFinite(value)) return undefined;
    text = String(value);
  } else if (typeof value === "bigint" || typeof value === "boolean") text = String(value);
  else return undefined;
  if (text.includes("\0") || LONE_SURROGATE.test(text)) return undefined;
  // escapeLiteral doubles quotes and, when there is a backslash, doubles those and writes E'...':
  // the same text whatever standard_conforming_strings is.
  return ` ${pg.escapeLiteral(text)} `;
}

/**
 * An array of strings (and nulls) in Postgres's array syntax, as node-pg
 * sends one as a parameter: each string double-quoted with its backslashes
 * and double quotes escaped, a null as NULL. Another element (a number, a
 * nested array) is left to the parameter path: undefined.
 */
function arrayText(values: readonly unknown[]): string | undefined {
  const elements: string[] = [];
  for (const v of values) {
    if (v === null || v === undefined) elements.push("NULL");
    else if (typeof v === "string") elements.push(`"${v.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`);
    else return undefined;
  }
  return `{${elements.join(",")}}`;
}

/** In a `u` expression a well-formed pair is one code point: only a lone surrogate matches. */
const LONE_SURROGATE = /\p{Cs}/u;

const isIdentifierChar = (c: string | undefined) => c !== undefined && /[\p{L}\p{N}_$]/u.test(c);

/** The index after the quoted string or identifier that starts at `start`. */
function endOfQuoted(sql: string, start: number, quote: string, escapes: boolean): number {
  let i = start + 1;
  while (i < sql.length) {
    const c = sql[i]!;
    if (escapes && c === "\\") i += 2;
    else if (c === quote && sql[i + 1] === quote) i += 2;
    else if (c === quote) return i + 1;
    else i++;
  }
  throw new Error(`an unterminated ${quote === "'" ? "string" : "quoted identifier"} in a statement to inline`);
}

/** The index after the block comment that starts at `start` (Postgres's nest). */
function endOfBlockComment(sql: string, start: number): number {
  let depth = 0;
  let i = start;
  while (i < sql.length) {
    if (sql[i] === "/" && sql[i + 1] === "*") {
      depth++;
      i += 2;
    } else if (sql[i] === "*" && sql[i + 1] === "/") {
      depth--;
      i += 2;
      if (depth === 0) return i;
    } else i++;
  }
  throw new Error("an unterminated comment in a statement to inline");
}
