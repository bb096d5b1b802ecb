#!/usr/bin/env node
// `npx portcullis`: the command line (src/cli/), compiled. Like `npm start`,
// it builds first when dist/ is stale (scripts/build.mjs --if-stale: a hash of
// the inputs, about 0.1 s when nothing changed), with the build's output on
// stderr so that stdout stays the command's (an export, a catalog, a key).
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const build = spawnSync(process.execPath, [fileURLToPath(new URL("../scripts/build.mjs", import.meta.url)), "--if-stale"], {
  stdio: ["ignore", 2, 2],
});
if (build.status !== 0) {
  process.stderr.write("portcullis: the build failed (see above); fix it or run npm run build\n");
  process.exit(3);
}
await import(new URL("../dist/src/cli/main.js", import.meta.url).href);
