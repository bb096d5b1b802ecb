/**
 * How the tests start the service or the command line as a child process:
 * compiled, from dist/, when dist/ is built from the current sources (CI
 * builds before it tests, and `npm test`'s pretest builds when they changed),
 * which starts in about half a second; otherwise from the sources under tsx
 * (a second or two more), so a file run on its own after an edit still tests
 * the edit.
 */
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

export const ROOT = fileURLToPath(new URL("../..", import.meta.url));

let compiled: boolean | undefined;

/** dist/ holds the current sources, compiled (scripts/build.mjs --is-current). */
export function distIsCurrent(): boolean {
  compiled ??= spawnSync(process.execPath, ["scripts/build.mjs", "--is-current"], { cwd: ROOT, stdio: "ignore" }).status === 0;
  return compiled;
}

/** Node's arguments that run `entry` (a module of src/, as "src/main.ts"), before its own. */
export function entryArgs(entry: `src/${string}.ts`): string[] {
  return distIsCurrent() ? ["--enable-source-maps", `dist/${entry.replace(/\.ts$/, ".js")}`] : ["--import", "tsx", entry];
}
