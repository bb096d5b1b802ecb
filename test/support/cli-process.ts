/**
 * The command line (src/cli/) against a test service: in this process, its
 * program's run() with the environment and streams main.ts would hand it
 * (the same argv, exit code and output, without a process's start-up), or
 * as a real process (entry-points.ts: compiled when dist/ is current, else
 * under tsx) where the test needs one: signals, a kill mid-run, the
 * sources' own embedded template, the exit status itself. And as
 * bin/portcullis.mjs with no service at all: what a user at a shell runs.
 */
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { PassThrough, Readable } from "node:stream";
import { finished } from "node:stream/promises";
import { pathToFileURL } from "node:url";
import type * as Program from "../../src/cli/program.js";
import { distIsCurrent, entryArgs, ROOT } from "./entry-points.js";
import { ADMIN_KEY, type TestService } from "./service.js";

export interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/**
 * The CLI as a child process; `key` goes in PORTCULLIS_KEY (null: none), the URL in PORTCULLIS_URL
 * (`url` instead of the service's). `onSpawn` gets a SIGKILL, and the child for a test that reads its
 * output as it comes or sends it another signal.
 */
export function cli(service: TestService, args: string[], options: CliOptions & { key?: string | null; url?: string } = {}): Promise<Run> {
  const url = options.url ?? service.url;
  const key = options.key === null ? undefined : (options.key ?? ADMIN_KEY);
  if (options.process !== true && options.fromSource !== true && options.onSpawn === undefined) return inProcess(args, { key, url }, options.stdin);
  const entry = options.fromSource === true ? ["--import", "tsx", "src/cli/main.ts"] : entryArgs("src/cli/main.ts");
  return spawnCli([...entry, ...args], { PORTCULLIS_URL: options.url ?? service.url, ...(options.key === null ? {} : { PORTCULLIS_KEY: options.key ?? ADMIN_KEY }) }, options);
}

/**
 * `npx portcullis ARGS` as a user runs it: bin/portcullis.mjs, the compiled
 * command line (built by npm test's pretest), with no service, URL or key.
 */
export function portcullis(args: string[], options: { stdin?: string; process?: boolean } = {}): Promise<Run> {
  if (options.process === false) return inProcess(args, { key: undefined, url: undefined }, options.stdin);
  return spawnCli(["bin/portcullis.mjs", ...args], {}, options);
}

interface CliOptions {
  stdin?: string;
  /** A real process even where nothing else asks for one (the exit status, main.ts's own streams). */
  process?: boolean;
  /** Under tsx from src/, even when dist/ is current: for what differs between the two (the embedded database's template). */
  fromSource?: boolean;
  onSpawn?: (kill: () => void, child: ChildProcessWithoutNullStreams) => void;
}

function spawnCli(argv: string[], vars: Record<string, string>, options: CliOptions): Promise<Run> {
  const env = { ...process.env };
  for (const name of ["PORTCULLIS_KEY", "PORTCULLIS_URL", "NODE_OPTIONS"]) delete env[name];
  const child = spawn(process.execPath, argv, { cwd: ROOT, env: { ...env, ...vars }, stdio: ["pipe", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (c: string) => (stdout += c));
  child.stderr.setEncoding("utf8").on("data", (c: string) => (stderr += c));
  child.stdin.end(options.stdin ?? "");
  options.onSpawn?.(() => child.kill("SIGKILL"), child);
  // "close", not "exit": the process may exit before its output is read to the end (when the tests are busy).
  return new Promise((resolve) => child.once("close", (code, signal) => resolve({ code, signal, stdout, stderr })));
}


let program: Promise<typeof Program> | undefined;

/**
 * The program's module: compiled from dist/ when it is current, as a child
 * would run it (its embedded template is the build's, beside it), else the
 * sources.
 */
function programModule(): Promise<typeof Program> {
  program ??= distIsCurrent()
    ? (import(pathToFileURL(`${ROOT}dist/src/cli/program.js`).href) as Promise<typeof Program>)
    : import("../../src/cli/program.js");
  return program;
}

/** run() as main.ts calls it, with the environment and stdin given and the output kept. */
async function inProcess(argv: string[], env: Program.Env, stdin = ""): Promise<Run> {
  const { run } = await programModule();
  const out = new PassThrough();
  const err = new PassThrough();
  let stdout = "";
  let stderr = "";
  out.setEncoding("utf8").on("data", (c: string) => (stdout += c));
  err.setEncoding("utf8").on("data", (c: string) => (stderr += c));
  const code = await run(argv, env, { out, err: err as unknown as NodeJS.WriteStream, stdin: Readable.from(stdin === "" ? [] : [Buffer.from(stdin)]) });
  out.end();
  err.end();
  await Promise.all([finished(out), finished(err)]);
  return { code, signal: null, stdout, stderr };
}
