/**
 * How deeply a condition's source nests, read before it is parsed: the
 * parser, the planner and the evaluator all recurse once per level (about
 * fifteen frames a parenthesis in the parser), so a source nested a few
 * hundred deep would exhaust the stack. Brackets of every kind count a
 * level each, and so does each operator of a run of prefix operators
 * (`!!!!x`, `- - -x`); string literals and comments do not count.
 */

/** Where the nesting first goes past `max`, as a character offset; undefined when it never does. */
export function tooDeepAt(source: string, max: number): number | undefined {
  let depth = 0;
  let prefixRun = 0;
  for (let i = 0; i < source.length; i++) {
    const c = source[i]!;
    if (c === " " || c === "\t" || c === "\n" || c === "\r") continue;
    if (c === "/" && source[i + 1] === "/") {
      while (i < source.length && source[i] !== "\n") i++;
      continue;
    }
    if (c === '"' || c === "'") {
      i = endOfString(source, i) - 1;
      prefixRun = 0;
      continue;
    }
    if (c === "(" || c === "[" || c === "{") {
      depth += 1;
      prefixRun = 0;
      if (depth > max) return i;
      continue;
    }
    if (c === ")" || c === "]" || c === "}") {
      depth = Math.max(0, depth - 1);
      prefixRun = 0;
      continue;
    }
    if (c === "!" || c === "-") {
      if (c === "!" && source[i + 1] === "=") {
        i += 1;
        prefixRun = 0;
        continue;
      }
      prefixRun += 1;
      if (depth + prefixRun > max) return i;
      continue;
    }
    prefixRun = 0;
  }
  return undefined;
}

/**
 * The offset just past the string literal opening at `start` (its quote):
 * single or triple quoted; a backslash escapes the next character unless
 * the literal is raw (an `r` or `R` just before, maybe after a `b`).
 */
function endOfString(source: string, start: number): number {
  const quote = source[start]!;
  const raw = /(^|\W)([bB]?[rR]|[rR][bB])$/.test(source.slice(Math.max(0, start - 3), start));
  const triple = source.startsWith(quote.repeat(3), start);
  const closing = triple ? quote.repeat(3) : quote;
  for (let i = start + closing.length; i < source.length; i++) {
    if (!raw && source[i] === "\\") {
      i += 1;
      continue;
    }
    if (!triple && (source[i] === "\n" || source[i] === "\r")) return i;
    if (source.startsWith(closing, i)) return i + closing.length;
  }
  return source.length;
}
