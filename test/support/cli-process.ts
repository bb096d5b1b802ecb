/**
 * The command line (src/cli/) as a real process, `node --import tsx
 * src/cli/main.ts`, against a test service: what a user at a shell runs.
 */
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { ADMIN_KEY, type TestService } from "./service.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

export interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** The CLI as a child process; `key` goes in PORTCULLIS_KEY (null: none), the URL in PORTCULLIS_URL. */
export function cli(service: TestService, args: string[], options: { key?: string | null; stdin?: string; onSpawn?: (kill: () => void) => void } = {}): Promise<Run> {
  const env = { ...process.env };
  for (const name of ["PORTCULLIS_KEY", "PORTCULLIS_URL", "NODE_OPTIONS"]) delete env[name];
  const child = spawn(process.execPath, ["--import", "tsx", "src/cli/main.ts", ...args], {
    cwd: ROOT,
    env: { ...env, PORTCULLIS_URL: service.url, ...(options.key === null ? {} : { PORTCULLIS_KEY: options.key ?? ADMIN_KEY }) },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (c: string) => (stdout += c));
  child.stderr.setEncoding("utf8").on("data", (c: string) => (stderr += c));
  child.stdin.end(options.stdin ?? "");
  options.onSpawn?.(() => child.kill("SIGKILL"));
  return new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal, stdout, stderr })));
}

