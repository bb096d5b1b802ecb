/**
 * Reads a walkthrough out of a Markdown page, and compares a command's output
 * with the output the page shows for it. The convention, which README.md
 * states where its walkthrough begins:
 *
 * - The walkthrough is the ```sh blocks under one heading (up to the next
 *   heading of the same or a higher level); every such block runs, in order.
 * - A command is what bash would read as one: a backslash at a line's end, an
 *   open quote or an open `$(` continue it on the next line.
 * - Its expected output follows it: a comment `# → text`, at the end of the
 *   command's last line or on the lines after it; lines after an output line
 *   that start with `#` and two or more spaces continue that output. Other
 *   comments are prose. A command shown with no output must print nothing.
 * - In an expected output, `...` stands for whatever the service made up (ids,
 *   keys, timestamps) or the page leaves out: inside a JSON string it matches
 *   within that string (escaped quotes included), elsewhere anything. Whitespace outside JSON
 *   strings is not compared, so an answer can be shown spread over lines.
 */

export interface WalkthroughStep {
  /** The command as the page writes it, lines joined by "\n". */
  command: string;
  /** The page's line number of the command's first line (1-based). */
  line: number;
  /** The expected output, its lines joined by "\n"; "" when the page shows none. */
  expected: string;
}

/** The steps of the walkthrough under `heading` (its whole line, e.g. "## Walkthrough"). */
export function walkthroughOf(markdown: string, heading: string): WalkthroughStep[] {
  const lines = markdown.split("\n");
  const start = lines.indexOf(heading);
  if (start < 0) throw new Error(`no heading "${heading}"`);
  const level = /^#+/.exec(heading)![0].length;
  const steps: WalkthroughStep[] = [];
  let fence: { first: number; body: string[] } | undefined;
  for (let i = start + 1; i < lines.length; i++) {
    const line = lines[i]!;
    if (fence === undefined) {
      const h = /^(#+) /.exec(line);
      if (h !== null && h[1]!.length <= level) break;
      if (line === "```sh") fence = { first: i + 2, body: [] };
    } else if (line === "```") {
      steps.push(...stepsOf(fence.body, fence.first));
      fence = undefined;
    } else {
      fence.body.push(line);
    }
  }
  if (fence !== undefined) throw new Error(`the sh block at line ${fence.first - 1} is not closed`);
  return steps;
}

/** The commands and outputs of one sh block whose first line is the page's line `firstLine`. */
export function stepsOf(block: readonly string[], firstLine: number): WalkthroughStep[] {
  const steps: WalkthroughStep[] = [];
  let pending: string[] = [];
  let pendingLine = 0;
  let state: ShellState = { single: false, double: false, depth: 0, backslash: false };
  /** The step whose output the next continuation line extends; undefined after prose or a blank. */
  let inOutput: WalkthroughStep | undefined;
  block.forEach((line, index) => {
    const lineNo = firstLine + index;
    if (pending.length === 0) {
      const comment = /^\s*#(.*)$/.exec(line);
      if (comment !== null) {
        const text = comment[1]!;
        if (text.startsWith(" →")) {
          const step = steps.at(-1);
          if (step === undefined) throw new Error(`line ${lineNo}: an output with no command before it`);
          step.expected = step.expected === "" ? text.slice(2).trim() : `${step.expected}\n${text.slice(2).trim()}`;
          inOutput = step;
        } else if (inOutput !== undefined && /^ {2,}/.test(text)) {
          inOutput.expected += `\n${text.trim()}`;
        } else {
          inOutput = undefined;
        }
        return;
      }
      inOutput = undefined;
      if (line.trim() === "") return;
      pendingLine = lineNo;
    }
    pending.push(line);
    const scanned = scanLine(line, state);
    state = scanned.state;
    if (state.single || state.double || state.depth > 0 || state.backslash) return;
    const step: WalkthroughStep = { command: pending.join("\n"), line: pendingLine, expected: "" };
    if (scanned.comment?.startsWith("→")) {
      step.expected = scanned.comment.slice(1).trim();
      inOutput = step;
    }
    steps.push(step);
    pending = [];
  });
  if (pending.length > 0) throw new Error(`line ${pendingLine}: the command does not end before its block does`);
  return steps;
}

interface ShellState {
  single: boolean;
  double: boolean;
  /** Open `$(` (command substitutions). */
  depth: number;
  /** The line ended with a backslash outside quotes: the command goes on. */
  backslash: boolean;
}

/**
 * Follows one line the way bash's reader does, as far as a walkthrough
 * needs: quotes, `$(...)`, backslash escapes, a trailing backslash, and a
 * comment (`#` at a word's start outside quotes), whose text it returns.
 */
function scanLine(line: string, from: ShellState): { state: ShellState; comment: string | undefined } {
  let { single, double, depth } = from;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (single) {
      if (c === "'") single = false;
    } else if (c === "\\") {
      if (i === line.length - 1) return { state: { single, double, depth, backslash: !double }, comment: undefined };
      i++;
    } else if (double) {
      if (c === '"') double = false;
      else if (c === "$" && line[i + 1] === "(") (depth++, i++);
    } else if (c === "'") single = true;
    else if (c === '"') double = true;
    else if (c === "$" && line[i + 1] === "(") (depth++, i++);
    else if (c === ")" && depth > 0) depth--;
    else if (c === "#" && (i === 0 || /[\s;(]/.test(line[i - 1]!))) {
      return { state: { single, double, depth, backslash: false }, comment: line.slice(i + 1).trim() };
    }
  }
  return { state: { single, double, depth, backslash: false }, comment: undefined };
}

/** Whether `actual` is what `expected` shows, under the rules above. */
export function outputMatches(expected: string, actual: string): boolean {
  return new RegExp(`^${patternOf(expected)}$`).test(compact(actual));
}

/** Drops the whitespace outside JSON strings (a string's escapes kept as they are). */
export function compact(text: string): string {
  let out = "";
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (c === '"') {
      const end = stringEnd(text, i);
      out += text.slice(i, end);
      i = end - 1;
    } else if (!/\s/.test(c)) {
      out += c;
    }
  }
  return out;
}

/** The index just past the string that opens at `start` (or the text's end, for an unclosed one). */
function stringEnd(text: string, start: number): number {
  for (let i = start + 1; i < text.length; i++) {
    if (text[i] === "\\") i++;
    else if (text[i] === '"') return i + 1;
  }
  return text.length;
}

function patternOf(expected: string): string {
  const literal = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const withHoles = (s: string, hole: string) => s.split("...").map(literal).join(hole);
  const text = compact(expected);
  let pattern = "";
  let plain = "";
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '"') {
      pattern += withHoles(plain, "[\\s\\S]*?");
      plain = "";
      const end = stringEnd(text, i);
      pattern += withHoles(text.slice(i, end), '(?:[^"\\\\]|\\\\.)*');
      i = end - 1;
    } else {
      plain += text[i];
    }
  }
  return pattern + withHoles(plain, "[\\s\\S]*?");
}
