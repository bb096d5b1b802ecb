#!/usr/bin/env node
// The package registry this project is built against serves only the
// platform packages of this machine (linux x64 glibc). npm then leaves the
// other platforms' optional packages (buf, rollup) out of package-lock.json,
// and `npm ci` refuses the lock as out of sync. This adds each missing
// optional package to the lock as an entry for its own platform, which npm
// skips on every other platform, so `npm ci` accepts the lock here and
// installs the right binaries elsewhere.
//
// Run after any `npm install` that changes package-lock.json:
//   node scripts/lock-platform-stubs.mjs
import { readFileSync, writeFileSync } from "node:fs";

const file = new URL("../package-lock.json", import.meta.url);
const lock = JSON.parse(readFileSync(file, "utf8"));
const packages = lock.packages;

const OS = ["darwin", "win32", "linux", "android", "freebsd", "openbsd", "openharmony", "sunos", "aix", "netbsd"];
const CPU = { x64: "x64", arm64: "arm64", aarch64: "arm64", armv7: "arm", arm: "arm", ia32: "ia32", loong64: "loong64", ppc64: "ppc64", riscv64: "riscv64", s390x: "s390x" };

function platformOf(name) {
  const parts = name.split("/").pop().split("-");
  const os = parts.find((p) => OS.includes(p));
  const cpu = parts.map((p) => CPU[p]).find(Boolean);
  const libc = parts.includes("musl") ? "musl" : parts.includes("gnu") || parts.includes("gnueabihf") ? "glibc" : undefined;
  return os && cpu ? { os: [os], cpu: [cpu], ...(libc ? { libc: [libc] } : {}) } : undefined;
}

// npm writes every object of the lock with its keys in one order: a few
// top-level keys first (name, version, lockfileVersion, ...), then the other
// keys with scalar or array values, then those with object values, each
// group in English locale order (so "cpu", "dev", "optional", "os" and only
// then "engines"). Writing the same order means the next `npm install`
// leaves the file byte for byte as this script wrote it.
const PREFERRED = ["name", "version", "lockfileVersion", "resolved", "integrity", "requires", "packages", "dependencies"];
const isObject = (value) => value !== null && typeof value === "object" && !Array.isArray(value);
function compareKeys([a, va], [b, vb]) {
  if (isObject(va) !== isObject(vb)) return isObject(va) ? 1 : -1;
  const ia = PREFERRED.indexOf(a);
  const ib = PREFERRED.indexOf(b);
  if (ia !== -1 || ib !== -1) return ia === -1 ? 1 : ib === -1 ? -1 : ia - ib;
  return a.localeCompare(b, "en");
}
function npmLockText(value) {
  const ordered = (_key, v) => (isObject(v) ? Object.fromEntries(Object.entries(v).sort(compareKeys)) : v);
  return `${JSON.stringify(value, ordered, 2)}\n`;
}

let added = 0;
for (const [path, entry] of Object.entries(packages)) {
  for (const [name, version] of Object.entries(entry.optionalDependencies ?? {})) {
    const key = `node_modules/${name}`;
    if (packages[key] !== undefined) continue;
    const platform = platformOf(name);
    if (platform === undefined) {
      console.error(`${name} (optional dependency of ${path || "the project"}) is missing and not a platform package; run npm install`);
      process.exitCode = 1;
      continue;
    }
    packages[key] = { version, ...(entry.dev ? { dev: true } : {}), optional: true, ...platform };
    added++;
  }
}
writeFileSync(file, npmLockText(lock));
console.log(`package-lock.json: ${added} platform package entr${added === 1 ? "y" : "ies"} added`);
