/**
 * The README's walkthrough, and the tour of docs/api.md, run as a newcomer
 * runs them: the compiled service started as its own process with nothing
 * but PORT and a fresh data folder (`npm start`'s build first, when a source
 * changed), its operator key read from what it prints, then every command of
 * the page, in order, in one bash session per page, each output compared with
 * the one the page shows (the convention is in support/walkthrough.ts and at
 * the top of the README's walkthrough). What the test gives the commands: the
 * shell variable PORT, and the operator key wherever a command says `pcl_...`.
 * PGlite only: the pages are about the API, not the engine.
 */
import { execFileSync, spawn, type ChildProcess, type ChildProcessWithoutNullStreams } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "./support/ports.js";
import { compact, outputMatches, stepsOf, walkthroughOf, type WalkthroughStep } from "./support/walkthrough.js";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const KEY_LINE = /Operator API key \(shown once, store it now\): (pcl_[a-z2-7]+)/;
/** A step's command: seconds alone, but `npx portcullis ...` took over 30 s beside the other test files on a loaded 2-core machine. */
const COMMAND_TIMEOUT_MS = 90_000;
/** A stale dist/ is rebuilt first (tsc and Vite): seconds alone, longer beside other test files. */
const BUILD_TIMEOUT_MS = 300_000;

/** The walkthroughs this test keeps true, each in its own shell, in this order, against one service. */
const PAGES = [
  { file: "README.md", heading: "## Walkthrough" },
  { file: "docs/api.md", heading: "## A tour of the API" },
] as const;

const read = (file: string) => readFileSync(join(ROOT, file), "utf8");

// Started once, before any test that needs it, with the time a build may take.
beforeAll(() => theService().then(() => undefined), BUILD_TIMEOUT_MS + 60_000);

describe("the walkthrough convention", () => {
  it("splits commands as bash would and takes each one's output", () => {
    const block = [
      "# prose",
      "export A=1",
      "curl -s $URL/x \\",
      "  -d '{\"a\": 1,",
      "  \"b\": [2]}'   # → {\"ok\": true}",
      "B=$(curl -s $URL/y \\",
      "  -H 'k: v'); echo \"$B\"",
      "# → {\"list\": [1,",
      "#      2]}",
      "# more prose",
      "#      not an output",
      "echo '# not a comment'",
    ];
    expect(stepsOf(block, 10)).toEqual([
      { command: "export A=1", line: 11, expected: "" },
      { command: "curl -s $URL/x \\\n  -d '{\"a\": 1,\n  \"b\": [2]}'   # → {\"ok\": true}", line: 12, expected: '{"ok": true}' },
      { command: "B=$(curl -s $URL/y \\\n  -H 'k: v'); echo \"$B\"", line: 15, expected: '{"list": [1,\n2]}' },
      { command: "echo '# not a comment'", line: 21, expected: "" },
    ]);
  });

  it("refuses an output with no command, and a command its block cuts off", () => {
    expect(() => stepsOf(["# → 1"], 1)).toThrow(/no command/);
    expect(() => stepsOf(["curl -d '{", "}"], 1)).toThrow(/does not end/);
  });

  it.each([
    ['{"allowed": true}', '{"allowed":true}', true],
    ['{"allowed": true}', '{"allowed":false}', false],
    ['{"id": "rol_...", "n": 1}', '{"id":"rol_ab12","n":1}', true],
    ['{"id": "rol_...", "n": 1}', '{"id":"pol_ab12","n":1}', false],
    // Inside a string, ... stays inside it.
    ['{"a": "...", "b": 2}', '{"a":"x","c":"y","b":2}', false],
    ['{"a": "x", ..., "b": 2}', '{"a":"x","c":"y","b":2}', true],
    ['{"a": "x y"}', '{"a":"xy"}', false],
    ['{"m": "the \\"write\\" scope"}', '{"m":"the \\"write\\" scope"}', true],
    ['{"m": "...", "n": 1}', '{"m":"the \\"write\\" scope","n":1}', true],
    ['{"m": "...", "n": 1}', '{"m":"a","x":"b","n":1}', false],
    ["allowed", "allowed\n", true],
    ["", "", true],
    ["", "something", false],
    ["{\n  \"a\": [\n    1\n  ]\n}", '{"a":[1]}', true],
  ])("%s against %s: %s", (expected, actual, matches) => {
    expect(outputMatches(expected, actual)).toBe(matches);
  });
});

describe.each(PAGES)("the walkthrough of $file", ({ file, heading }) => {
  const steps = walkthroughOf(read(file), heading);

  it("has commands", () => {
    expect(steps.length).toBeGreaterThan(10);
  });

  let shell: Shell;
  let failed = false;
  beforeAll(async () => {
    const service = await theService();
    shell = startShell({ PORT: String(service.port) });
  });
  afterAll(() => shell?.close());

  it.for(steps.map((step) => [`${file}:${step.line} ${firstLine(step)}`, step] as const))("%s", { timeout: COMMAND_TIMEOUT_MS + 10_000 }, async ([, step], context) => {
    // The steps build on one another: after a failure, the rest would only repeat it.
    if (failed) context.skip();
    failed = true;
    const service = await theService();
    const ran = await shell.run(step.command.replaceAll("pcl_...", service.operatorKey));
    const shown = [
      `${file}, line ${step.line}:`,
      step.command,
      "--- the page shows:",
      step.expected === "" ? "(no output)" : step.expected,
      `--- it printed (exit status ${ran.status}):`,
      ran.stdout === "" ? "(no output)" : ran.stdout,
      ...(ran.stderr === "" ? [] : ["--- and on stderr:", ran.stderr]),
    ].join("\n");
    expect(ran.status, shown).toBe(0);
    expect(ran.stderr, shown).toBe("");
    // On a mismatch, the compacted texts say exactly where they part.
    if (!outputMatches(step.expected, ran.stdout)) expect(compact(ran.stdout), shown).toBe(compact(step.expected));
    failed = false;
  });
});

describe("the README's quick start", () => {
  it("shows what the service prints on its first start", async () => {
    const service = await theService();
    // The quick start's one block with no language: the lines printed with the operator key.
    const quickStart = read("README.md").split("\n## Quick start\n")[1]!.split("\n## ")[0]!;
    const shown = fencedBlocks(quickStart).find((b) => b.info === "")?.lines.filter((l) => l.trim() !== "");
    expect(shown, "the quick start shows the printed lines").toBeDefined();
    const printed = service.stdout().split("\n");
    for (const line of shown!) {
      expect(printed.some((p) => outputMatches(line, p)), `README: ${line}\nprinted:\n${service.stdout()}`).toBe(true);
    }
  });
});

function fencedBlocks(markdown: string): { info: string; lines: string[] }[] {
  const blocks: { info: string; lines: string[] }[] = [];
  let open: { info: string; lines: string[] } | undefined;
  for (const line of markdown.split("\n")) {
    if (open === undefined && line.startsWith("```")) blocks.push((open = { info: line.slice(3).trim(), lines: [] }));
    else if (open !== undefined && line === "```") open = undefined;
    else open?.lines.push(line);
  }
  return blocks;
}

function firstLine(step: WalkthroughStep): string {
  const first = step.command.split("\n")[0]!;
  return first.length > 90 ? `${first.slice(0, 87)}...` : first;
}

// ---------------------------------------------------------------- the service, as its own process

interface Service {
  port: number;
  operatorKey: string;
  stdout(): string;
}

let started: Promise<Service> | undefined;
let child: ChildProcess | undefined;
let dataDir: string | undefined;

/** Starts the service once for the whole file (every page's walkthrough runs against it). */
function theService(): Promise<Service> {
  started ??= startService();
  return started;
}

async function startService(): Promise<Service> {
  // What `npm start` runs before the service: a build when an input changed.
  try {
    execFileSync(process.execPath, ["scripts/build.mjs", "--if-stale"], { cwd: ROOT, stdio: "pipe", timeout: BUILD_TIMEOUT_MS });
  } catch (error) {
    const { stdout, stderr } = error as { stdout?: Buffer; stderr?: Buffer };
    throw new Error(`the build failed:\n${stdout?.toString() ?? ""}${stderr?.toString() ?? ""}`);
  }
  dataDir = await mkdtemp(join(tmpdir(), "portcullis-walkthrough-"));
  const port = await freePort();
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME, PORT: String(port), AUTHZ_DATA_DIR: join(dataDir, "data") };
  child = spawn(process.execPath, ["--enable-source-maps", "dist/src/main.js"], { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exited = new Promise<void>((resolve) => child!.once("exit", () => resolve()));
  const deadline = Date.now() + 60_000;
  for (;;) {
    const key = KEY_LINE.exec(stdout)?.[1];
    if (key !== undefined && (await ready(port))) return { port, operatorKey: key, stdout: () => stdout };
    if (child.exitCode !== null || Date.now() > deadline) {
      throw new Error(`the service did not become ready (exit ${child.exitCode})\nstdout:\n${stdout}\nstderr:\n${stderr}`);
    }
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 100))]);
  }
}

async function ready(port: number): Promise<boolean> {
  try {
    return (await fetch(`http://127.0.0.1:${port}/readyz`)).status === 200;
  } catch {
    return false;
  }
}

afterAll(async () => {
  if (child !== undefined && child.exitCode === null) {
    const exited = new Promise((resolve) => child!.once("exit", resolve));
    child.kill("SIGTERM");
    await exited;
  }
  if (dataDir !== undefined) await rm(dataDir, { recursive: true, force: true });
});

// ---------------------------------------------------------------- one bash session per page

interface Ran {
  status: number;
  stdout: string;
  stderr: string;
}

interface Shell {
  run(command: string): Promise<Ran>;
  close(): void;
}

/**
 * A bash reading commands from a pipe, as a terminal's would from a person:
 * variables set by one command are there for the next. After each command
 * it prints a marker with the exit status on both streams, so each
 * command's output is told apart; the command's own stdin is /dev/null.
 */
function startShell(vars: Record<string, string>): Shell {
  // A newcomer's shell: no variable of this test process, nor of npm's; but
  // no npm update notice either, which npx may print on stderr once a week.
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME, LANG: "C.UTF-8", npm_config_update_notifier: "false", ...vars };
  const bash: ChildProcessWithoutNullStreams = spawn("bash", ["--noprofile", "--norc"], { cwd: ROOT, env });
  let stdout = "";
  let stderr = "";
  let wake = () => {};
  bash.stdout.setEncoding("utf8").on("data", (chunk: string) => ((stdout += chunk), wake()));
  bash.stderr.setEncoding("utf8").on("data", (chunk: string) => ((stderr += chunk), wake()));
  bash.on("exit", () => wake());
  let count = 0;
  return {
    async run(command) {
      const marker = `__walkthrough_${++count}__`;
      const end = new RegExp(`\\n${marker} (\\d+)\\n$`);
      stdout = "";
      stderr = "";
      bash.stdin.write(`{\n${command}\n} </dev/null\n__status=$?; printf '\\n${marker} %d\\n' $__status; printf '\\n${marker} %d\\n' $__status >&2\n`);
      const deadline = Date.now() + COMMAND_TIMEOUT_MS;
      while (!(end.test(stdout) && end.test(stderr))) {
        if (bash.exitCode !== null) throw new Error(`bash exited (${bash.exitCode}) during the command\nstdout:\n${stdout}\nstderr:\n${stderr}`);
        if (Date.now() > deadline) throw new Error(`no answer within ${COMMAND_TIMEOUT_MS} ms\nstdout:\n${stdout}\nstderr:\n${stderr}`);
        await new Promise<void>((resolve) => {
          wake = resolve;
          setTimeout(resolve, 200);
        });
      }
      const status = Number(end.exec(stdout)![1]);
      return { status, stdout: stdout.replace(end, "").trim(), stderr: stderr.replace(end, "").trim() };
    },
    close() {
      bash.stdin.end();
      if (bash.exitCode === null) bash.kill("SIGTERM");
    },
  };
}
