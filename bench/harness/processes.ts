/**
 * The processes the bench starts: the service, the ceiling, the load
 * generator and the CLI, each a Node process of this tree, killed when the
 * bench exits.
 *
 * `npm run bench` runs the compiled harness from dist/bench, and it starts the
 * compiled service and ceiling from dist/ too, as `npm start` runs the
 * service; run from source (node --import tsx bench/run.ts), it starts them
 * from source, under tsx.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort } from "../pg-cluster.js";

export const COMPILED = import.meta.url.endsWith(".js");
export const EXT = COMPILED ? ".js" : ".ts";
/** The tree the harness runs from: dist/ when compiled, else the repository. */
export const TREE = fileURLToPath(new URL("../../", import.meta.url));
export const ROOT = COMPILED ? join(TREE, "..") : TREE;

const children: ChildProcess[] = [];
process.on("exit", () => children.forEach((c) => c.kill("SIGKILL")));

export function node(args: string[], env: Record<string, string>): ChildProcess {
  const loader = COMPILED ? ["--enable-source-maps"] : ["--import", "tsx"];
  const child = spawn(process.execPath, [...loader, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  return child;
}

export function firstLine(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout!.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      const nl = out.indexOf("\n");
      if (nl >= 0) resolve(out.slice(0, nl));
    });
    child.once("exit", (code) => reject(new Error(`process exited (${code}) before answering: ${out}`)));
  });
}

export async function waitReady(url: string, child: ChildProcess): Promise<void> {
  const until = Date.now() + 60_000;
  while (Date.now() < until) {
    if (child.exitCode !== null) throw new Error(`the service exited with ${child.exitCode}`);
    try {
      if ((await fetch(`${url}/readyz`)).status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("the service was not ready within 60 s");
}

/** A service process started with `args` and `env` on a free loopback port, once it is ready. */
export async function startOnFreePort(args: string[], env: Record<string, string>): Promise<{ child: ChildProcess; url: string }> {
  const port = String(await freePort());
  const child = node(args, { ...env, PORT: port });
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitReady(url, child);
  } catch (error) {
    child.kill("SIGKILL");
    throw error;
  }
  return { child, url };
}

/** SIGTERM, and the process's exit (at once when it already exited). */
export async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  await exited;
}
