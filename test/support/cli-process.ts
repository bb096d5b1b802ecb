/**
 * The command line (src/cli/) as a real process against a test service
 * (entry-points.ts: compiled when dist/ is current, else under tsx), or as
 * bin/portcullis.mjs with no service at all: what a user at a shell runs.
 */
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { entryArgs, ROOT } from "./entry-points.js";
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
  const entry = options.fromSource === true ? ["--import", "tsx", "src/cli/main.ts"] : entryArgs("src/cli/main.ts");
  return spawnCli([...entry, ...args], { PORTCULLIS_URL: options.url ?? service.url, ...(options.key === null ? {} : { PORTCULLIS_KEY: options.key ?? ADMIN_KEY }) }, options);
}

/**
 * `npx portcullis ARGS` as a user runs it: bin/portcullis.mjs, the compiled
 * command line (built by npm test's pretest), with no service, URL or key.
 */
export function portcullis(args: string[], options: { stdin?: string } = {}): Promise<Run> {
  return spawnCli(["bin/portcullis.mjs", ...args], {}, options);
}

interface CliOptions {
  stdin?: string;
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

