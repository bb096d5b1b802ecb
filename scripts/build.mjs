// `npm run build`: compiles src/, gen/ and bench/ to dist/ with tsc, and
// copies the SQL migrations beside the compiled migrator, which reads them
// from its own folder. The service runs compiled: under tsx, esbuild's
// keepNames wraps every named closure in a defineProperty call, which the
// check's hot path creates per request (see README, Performance).
import { execFileSync } from "node:child_process";
import { cpSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../", import.meta.url));
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
rmSync(`${root}dist`, { recursive: true, force: true });
execFileSync(process.execPath, [tsc, "-p", `${root}tsconfig.build.json`], { stdio: "inherit" });
cpSync(`${root}src/store/migrations`, `${root}dist/src/store/migrations`, { recursive: true });
