// `npm run build`: compiles src/, gen/ and bench/ to dist/ with tsc, and
// copies the SQL migrations beside the compiled migrator, which reads them
// from its own folder. The service runs compiled: under tsx, esbuild's
// keepNames wraps every named closure in a defineProperty call, which the
// check's hot path creates per request (see docs/performance.md).
//
// `--if-stale` (npm start, npm test, npm run bench, the command line) skips the build when dist/ was
// built from exactly the current inputs: a full tsc run takes seconds, a
// hash of the inputs a few milliseconds. The hash is of the files' contents,
// not their times, so a checkout, a touch or an editor's save without a change
// rebuilds nothing, and a deleted or added file rebuilds. The stamp is written
// only after a build succeeds, and a build starts by deleting dist/ (stamp
// included), so a failed or interrupted build is never taken as current.
// With --if-stale it says one line on stderr when it builds (a first start
// waits for it) and nothing else unless it fails: the figures of a build are
// for whoever runs `npm run build`.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { cpSync, existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { initialJavaScript, INITIAL_JS_LIMIT_BYTES } from "./console-size.mjs";

const root = fileURLToPath(new URL("../", import.meta.url));
const stamp = `${root}dist/.build-inputs`;

// Everything the output depends on: the sources, the compiler settings, this
// script, and the lock (which pins the compiler and the types).
const INPUT_DIRS = ["src", "gen", "bench", "console"];
const INPUT_FILES = ["tsconfig.json", "tsconfig.build.json", "scripts/build.mjs", "scripts/console-size.mjs", "package-lock.json"];
const SKIPPED_DIRS = new Set(["bench/results"]); // the bench's output, gitignored

function inputFiles() {
  const files = [...INPUT_FILES];
  const walk = (dir) => {
    if (SKIPPED_DIRS.has(dir)) return;
    for (const entry of readdirSync(`${root}${dir}`, { withFileTypes: true })) {
      const path = `${dir}/${entry.name}`;
      if (entry.isDirectory()) walk(path);
      else if (entry.isFile()) files.push(path);
    }
  };
  for (const dir of INPUT_DIRS) walk(dir);
  return files.sort();
}

function inputsHash() {
  const hash = createHash("sha256");
  for (const file of inputFiles()) {
    hash.update(`${file}\0`);
    hash.update(readFileSync(`${root}${file}`));
    hash.update("\0");
  }
  return hash.digest("hex");
}

const hash = inputsHash();
const current = existsSync(stamp) && readFileSync(stamp, "utf8") === hash;
// `--is-current` answers by its exit code alone (0: dist/ is built from the current inputs), for the
// tests that start the service or the command line as a child: compiled when it is, else from source.
if (process.argv.includes("--is-current")) process.exit(current ? 0 : 1);
if (process.argv.includes("--if-stale") && current) {
  process.exit(0);
}

const quiet = process.argv.includes("--if-stale");
const say = (line) => {
  if (!quiet) console.log(line);
};
if (quiet) process.stderr.write("portcullis: building (the sources changed since the last build; the first build takes about half a minute)\n");

const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
rmSync(`${root}dist`, { recursive: true, force: true });
try {
  execFileSync(process.execPath, [tsc, "-p", `${root}tsconfig.build.json`], { stdio: "inherit" });
} catch {
  process.exit(1); // tsc has printed its errors
}
cpSync(`${root}src/store/migrations`, `${root}dist/src/store/migrations`, { recursive: true });

// `portcullis model test` starts an in-memory database from a migrated one
// dumped here, and the service's first start its new data folder (initdb
// takes seconds; loading the dump, a fraction of that): see
// src/store/pglite-template.ts.
{
  const started = Date.now();
  const { writeTemplate } = await import(`${root}dist/src/embedded.js`);
  const { TEMPLATE_FILE } = await import(`${root}dist/src/store/pglite-template.js`);
  await writeTemplate(TEMPLATE_FILE);
  say(`the embedded database's template made in ${Date.now() - started} ms`);
}

// The console: Vite builds console/ into dist/console, which the service
// serves at /console/. Its initial JavaScript (the entry chunk and what it
// imports statically), gzipped, is printed: it must stay under 250 KB.
try {
  const { build } = await import("vite");
  await build({ configFile: `${root}console/vite.config.ts`, logLevel: "warn" });
} catch (error) {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
}
const { files, gzipBytes } = initialJavaScript(`${root}dist/console`);
say(`console: initial JavaScript ${(gzipBytes / 1024).toFixed(1)} KB gzipped (${files.length} file${files.length === 1 ? "" : "s"}; the limit is ${INITIAL_JS_LIMIT_BYTES / 1024} KB)`);
if (gzipBytes > INITIAL_JS_LIMIT_BYTES) {
  console.error("console: the initial JavaScript is over the limit");
  process.exit(1);
}
writeFileSync(stamp, hash);
