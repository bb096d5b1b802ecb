// The console's initial JavaScript: the entry chunks of a Vite build and what
// they import statically (what a browser must fetch before the first page
// shows), read from the build's manifest, gzipped. Shared by the build, which
// prints it and fails over the limit, and by the console's end-to-end test.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";

export const INITIAL_JS_LIMIT_BYTES = 250 * 1024;

/** @param {string} dir a console build (dist/console) @returns {{ files: string[], gzipBytes: number }} */
export function initialJavaScript(dir) {
  const manifest = JSON.parse(readFileSync(join(dir, ".vite", "manifest.json"), "utf8"));
  const files = new Set();
  const visit = (name) => {
    const chunk = manifest[name];
    if (chunk === undefined || files.has(chunk.file)) return;
    files.add(chunk.file);
    for (const imported of chunk.imports ?? []) visit(imported);
  };
  for (const [name, chunk] of Object.entries(manifest)) if (chunk.isEntry) visit(name);
  const gzipBytes = [...files].reduce((n, file) => n + gzipSync(readFileSync(join(dir, file))).length, 0);
  return { files: [...files], gzipBytes };
}
