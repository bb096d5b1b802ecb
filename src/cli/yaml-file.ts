/**
 * Reading a YAML (or JSON) file the command line sends somewhere: a model,
 * a model test, a catalog. A hostile or broken file is a usage error (exit
 * 2) naming the file and the line, never a stack trace and never a hang:
 *
 * - bytes that are not UTF-8 are refused, not read as U+FFFD;
 * - nesting deeper than MAX_DEPTH is found by an iterative walk of the
 *   library's CST (its Parser keeps a stack, no recursion) before anything
 *   recursive runs: the composer, toJS and JSON.stringify recurse, and a
 *   5,000-deep file overflows them;
 * - aliases are resolved by a walk that counts the values they add (a
 *   "billion laughs" file adds 10^9 from a few lines) and the depth they
 *   reach, and refuses an alias to no anchor or to the collection it is in
 *   (a cycle JSON cannot carry), each naming the alias's line; the
 *   library's own maxAliasCount stays on in toJS behind it.
 */
import { isUtf8 } from "node:buffer";
import { readFile } from "node:fs/promises";
import { isAlias, isMap, isPair, isScalar, isSeq, LineCounter, parseDocument, Parser, type CST, type Document, type Node } from "yaml";
import { usageError } from "./errors.js";

/**
 * Collections nested deeper than this are refused: the service refuses a
 * JSON body nested deeper (LIMITS.jsonDepth), and a real model is under 10.
 */
export const MAX_DEPTH = 64;
/** Values aliases may add to a document, counted as they would be sent (each alias as a copy of its anchor). */
export const MAX_ALIAS_VALUES = 100_000;
/** A message from the library is cut to this: it may quote the file. */
const MESSAGE_CHARS = 200;

/** The bytes of FILE, or of stdin for "-"; one that cannot be read is a usage error. */
async function readBytes(file: string, stdin: NodeJS.ReadableStream): Promise<Buffer> {
  try {
    if (file !== "-") return await readFile(file);
    const chunks: Buffer[] = [];
    for await (const chunk of stdin) chunks.push(typeof chunk === "string" ? Buffer.from(chunk) : (chunk as Buffer));
    return Buffer.concat(chunks);
  } catch (error) {
    throw usageError(`FILE ${file}: cannot read it (${(error as NodeJS.ErrnoException).code ?? String(error)})`);
  }
}

/** The text of FILE (or stdin for "-"); bytes that are not UTF-8 are a usage error naming their line. */
export async function readText(file: string, stdin: NodeJS.ReadableStream): Promise<string> {
  const bytes = await readBytes(file, stdin);
  if (!isUtf8(bytes)) {
    let line = 1;
    for (let start = 0; start <= bytes.length; line++) {
      const end = bytes.indexOf(0x0a, start);
      const stop = end < 0 ? bytes.length : end;
      if (!isUtf8(bytes.subarray(start, stop))) break;
      start = stop + 1;
    }
    throw usageError(`FILE ${file}: line ${line}: is not UTF-8 text`);
  }
  return bytes.toString("utf8");
}

/**
 * The first collection of `text` nested deeper than MAX_DEPTH, as "line N:
 * ...", or undefined. An iterative walk over the library's CST, so a file
 * of any depth is measured without recursion; the library's own errors are
 * left to parseDocument, which reports them.
 */
export function nestingProblem(text: string): string | undefined {
  const lines = new LineCounter();
  const stack: { token: CST.Token; depth: number }[] = [];
  for (const token of new Parser(lines.addNewLine).parse(text)) stack.push({ token, depth: 0 });
  while (stack.length > 0) {
    const { token, depth } = stack.pop()!;
    const push = (child: CST.Token | null | undefined, d: number) => {
      if (child !== null && child !== undefined) stack.push({ token: child, depth: d });
    };
    switch (token.type) {
      case "document":
        push(token.value, depth);
        break;
      case "block-map":
      case "block-seq":
      case "flow-collection":
        if (depth + 1 > MAX_DEPTH) return `line ${lines.linePos(token.offset).line}: is nested deeper than ${MAX_DEPTH} levels`;
        for (const item of token.items) {
          push(item.key, depth + 1);
          push(item.value, depth + 1);
        }
        break;
      default:
        break;
    }
  }
  return undefined;
}

/**
 * What the document's aliases do, as "line N: ...", or undefined when they
 * are harmless. Walks the composed document (its depth is bounded by then)
 * in order, keeping each anchor's latest node as YAML resolves them, and
 * measures every node as it would be sent: the values it holds and its depth,
 * an alias counting as a copy of its anchor.
 */
function aliasProblem(doc: Document, lines: LineCounter): { problem?: string; firstAlias?: number } {
  const anchors = new Map<string, Node>();
  const measured = new Map<Node, { values: number; depth: number }>();
  const open = new Set<Node>();
  let added = 0;
  let firstAlias: number | undefined;
  const lineOf = (node: Node) => (node.range === undefined || node.range === null ? 1 : lines.linePos(node.range[0]).line);
  class Refusal {
    constructor(readonly text: string) {}
  }
  const measure = (node: unknown): { values: number; depth: number } => {
    if (isAlias(node)) {
      const target = anchors.get(node.source);
      firstAlias ??= lineOf(node);
      const name = node.source.length > 40 ? `${node.source.slice(0, 37)}...` : node.source;
      if (target === undefined) throw new Refusal(`line ${lineOf(node)}: alias *${name} names no anchor before it`);
      if (open.has(target)) throw new Refusal(`line ${lineOf(node)}: alias *${name} is inside the collection it names (a cycle)`);
      const m = measured.get(target)!;
      added += m.values - 1;
      if (added > MAX_ALIAS_VALUES) {
        throw new Refusal(`line ${lineOf(node)}: aliases expand the document by more than ${MAX_ALIAS_VALUES} values (an alias bomb?)`);
      }
      return m;
    }
    if (!isScalar(node) && !isMap(node) && !isSeq(node)) return { values: 0, depth: 0 };
    if (node.anchor !== undefined) anchors.set(node.anchor, node);
    let m = { values: 1, depth: 0 };
    if (!isScalar(node)) {
      open.add(node);
      for (const item of node.items as unknown[]) {
        for (const child of isPair(item) ? [item.key, item.value] : [item]) {
          const c = measure(child);
          m = { values: m.values + c.values, depth: Math.max(m.depth, c.depth) };
        }
      }
      open.delete(node);
      m = { values: m.values, depth: m.depth + 1 };
      // The file's own nesting is bounded already (nestingProblem): only aliases reach here.
      if (m.depth > MAX_DEPTH) throw new Refusal(`line ${lineOf(node)}: its aliases nest it deeper than ${MAX_DEPTH} levels`);
    }
    measured.set(node, m);
    return m;
  };
  try {
    measure(doc.contents);
    return firstAlias === undefined ? {} : { firstAlias };
  } catch (error) {
    if (error instanceof Refusal) return { problem: error.text };
    throw error;
  }
}

const cut = (message: string) => (message.length > MESSAGE_CHARS ? `${message.slice(0, MESSAGE_CHARS - 3)}...` : message);

/**
 * FILE (or stdin for "-") parsed as YAML (JSON is YAML) into a mapping: a
 * file that cannot be read or parsed, that is hostile (above), or that is no
 * mapping, is a usage error naming its line, `what` saying what it should
 * be. `options.lineCounter` keeps the way back from a node to its line, for
 * errors found later (model test); `maxAliases` is the library's
 * maxAliasCount.
 */
export async function readYamlMap(
  file: string,
  stdin: NodeJS.ReadableStream,
  what: string,
  options: { lineCounter?: LineCounter; maxAliases: number },
): Promise<{ doc: Document; value: Record<string, unknown> }> {
  const text = await readText(file, stdin);
  const refuse = (problem: string) => usageError(`FILE ${file}: ${cut(problem)}`);
  const deep = nestingProblem(text);
  if (deep !== undefined) throw refuse(deep);
  const lineCounter = options.lineCounter ?? new LineCounter();
  const doc = parseDocument(text, { uniqueKeys: true, prettyErrors: true, lineCounter });
  const problem = doc.errors[0];
  if (problem !== undefined) {
    const line = problem.linePos?.[0].line;
    const message = problem.message.split("\n")[0]!.replace(/ at line \d+, column \d+:?$/, "");
    throw refuse(`${line === undefined ? "" : `line ${line}: `}${message}`);
  }
  if (!isMap(doc.contents)) throw refuse(`line 1: ${what}`);
  const aliases = aliasProblem(doc, lineCounter);
  if (aliases.problem !== undefined) throw refuse(aliases.problem);
  try {
    return { doc, value: doc.toJS({ maxAliasCount: options.maxAliases }) as Record<string, unknown> };
  } catch (error) {
    // The library's own alias limit, behind the walk above: its words, at the first alias.
    throw refuse(`line ${aliases.firstAlias ?? 1}: ${error instanceof Error ? error.message : String(error)}`);
  }
}
