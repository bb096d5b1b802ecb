#!/usr/bin/env node
// `npm test`: the whole suite, in two phases, so that the cores are busy
// without a file's timing being measured beside a neighbour it did not ask for.
//
// 1. Vitest's `together` room (vitest.config.ts) and, beside it, the Citus
//    leg (scripts/test-citus.mjs, `npm run test:citus`) when this machine's
//    PostgreSQL has Citus, then the `paired` room (Chromium, processes
//    starting and stopping). Each mostly waits on its databases, services and
//    browser, so each fills the other's idle cores. The reports beside
//    `together`'s are kept in files and printed after it, whole, so that no
//    two interleave.
// 2. Then the rooms that must run with nothing beside them: `timing` and
//    `clocks`.
//
// Every phase runs even when one before it failed; the exit status is 1 when
// any did. Without Citus the leg is skipped with a warning, and in CI
// (CI=true) that is a failure; a run narrowed to engines
// (PORTCULLIS_TEST_ENGINES) runs no leg. Arguments (a file, a filter, a flag)
// go to one plain `vitest run` instead.
import { spawn, spawnSync } from "node:child_process";
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const vitest = join(root, "node_modules", ".bin", "vitest");
const args = process.argv.slice(2);

/** Runs a command in the repository; resolves to its exit status (1 when it could not start or was killed). */
function run(command, argv, options = {}) {
  return new Promise((resolve) => {
    const child = spawn(command, argv, { cwd: root, stdio: "inherit", ...options });
    child.on("error", (error) => {
      console.error(`${command}: ${error.message}`);
      resolve(1);
    });
    child.on("exit", (code) => resolve(code ?? 1));
  });
}

if (args.length > 0) process.exit(await run(vitest, ["run", ...args]));

/** Whether this machine's PostgreSQL has Citus: its library and its extension files (as test/support/citus.ts asks). */
function citusInstalled() {
  const pgConfig = spawnSync("pg_config", ["--bindir"], { encoding: "utf8" });
  const bin = pgConfig.status === 0 ? pgConfig.stdout.trim() : "/usr/lib/postgresql/15/bin";
  const dirs = spawnSync(join(bin, "pg_config"), ["--pkglibdir", "--sharedir"], { encoding: "utf8" });
  if (dirs.status !== 0) return false;
  const [lib, share] = dirs.stdout.trim().split("\n");
  return existsSync(join(lib, "citus.so")) && existsSync(join(share, "extension", "citus.control"));
}

const started = Date.now();
const seconds = () => `${((Date.now() - started) / 1000).toFixed(0)} s`;
const statuses = [];
const reports = mkdtempSync(join(tmpdir(), "portcullis-test-reports-"));

/** Runs a command with its output in a file of `reports`; resolves to its status, its report and when it ended. */
async function reported(name, command, argv) {
  const file = join(reports, `${name}.txt`);
  const out = openSync(file, "w");
  try {
    const status = await run(command, argv, { stdio: ["ignore", out, out] });
    return { name, status, file, ended: seconds() };
  } finally {
    closeSync(out);
  }
}

let leg = true;
if (process.env.PORTCULLIS_TEST_ENGINES !== undefined) {
  console.log(`npm test: PORTCULLIS_TEST_ENGINES=${process.env.PORTCULLIS_TEST_ENGINES} narrows the run; no Citus leg`);
  leg = false;
} else if (!citusInstalled()) {
  leg = false;
  if (process.env.CI === "true") {
    console.error("npm test: Citus is not installed in this machine's PostgreSQL, and CI runs the Citus leg: run `bash ../shared/citus/install.sh` as root");
    statuses.push(1);
  } else {
    console.warn("npm test: WARNING: Citus is not installed in this machine's PostgreSQL; the Citus leg is skipped (docs/development.md#tests)");
  }
}
console.log(
  `npm test: beside the together room, ${leg ? "the Citus leg, then " : ""}the paired room; their reports follow the together room's (meanwhile in ${reports})`,
);
const beside = (async () => {
  const done = [];
  if (leg) done.push(await reported("the Citus leg", process.execPath, [join(root, "scripts", "test-citus.mjs")]));
  done.push(await reported("the paired room", vitest, ["run", "--project", "paired"]));
  return done;
})();

statuses.push(await run(vitest, ["run", "--project", "together"]));
console.log(`npm test: the together room ended at ${seconds()}`);
for (const { name, status, file, ended } of await beside) {
  process.stdout.write(readFileSync(file, "utf8"));
  console.log(`npm test: ${name} ended at ${ended}`);
  statuses.push(status);
}
rmSync(reports, { recursive: true, force: true });

statuses.push(await run(vitest, ["run", "--project", "timing", "--project", "clocks"]));
const failed = statuses.some((s) => s !== 0);
console.log(`npm test: ${failed ? "failed" : "passed"} in ${seconds()}`);
process.exit(failed ? 1 : 0);
