/**
 * The arrows point down: which part of src/ may import which. The service is
 * layered transport → services → domain → store, with lib/ (metrics,
 * tracing, the coalescer, the grant import) and gen/ below everything; inside
 * the transport, each protocol has its own room over the shared call/ room,
 * and http/ (the one port) sits on top and composes them. An import that
 * points up (a service reaching into the transport, unary gRPC reaching into
 * the HTTP/2 server) fails here with the file and the specifier. And modules
 * stay small: no hand-written source file of the folders in SIZED (the
 * service's, the console's and the bench's) passes 600 lines, and no files of
 * the service or of the bench import each other round a loop.
 */
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = path.resolve(import.meta.dirname, "..");
const SRC = path.join(ROOT, "src");
/** The folders whose files import no loop (see the last test of "the arrows point down"). */
const LOOPLESS = ["src", "bench"] as const;

/** A module's room: the first folder under src/, or two for the transport's rooms. */
function roomOf(file: string): string {
  const parts = path.relative(SRC, file).split(path.sep);
  if (parts[0] === "..") return parts.slice(1).find((p) => p !== "..") ?? "outside"; // gen/, for one
  if (parts.length === 1) return parts[0]!.replace(/\.[jt]s$/, ""); // main, app, config
  return parts[0] === "transport" ? `transport/${parts[1]}` : parts[0]!;
}

/** What each room may import, besides itself. */
const MAY_IMPORT: Record<string, readonly string[]> = {
  main: ["app", "config", "store", "lib", "transport/http", "domain"],
  app: ["bindings", "config", "transport/http", "transport/grpc", "transport/call", "transport/pages", "services", "domain", "store", "lib", "gen"],
  config: ["domain", "lib"],
  "transport/http": ["config", "transport/pages", "transport/rest", "transport/grpc", "transport/call", "services", "domain", "store", "lib", "gen"],
  "transport/pages": ["transport/rest", "transport/call", "domain", "lib", "gen"],
  "transport/rest": ["transport/call", "services", "domain", "lib", "gen"],
  "transport/grpc": ["transport/call", "services", "domain", "lib", "gen"],
  "transport/call": ["services", "domain", "store", "lib", "gen"],
  services: ["domain", "store", "lib", "gen"],
  domain: ["store", "lib", "gen"],
  store: ["lib"],
  lib: [],
  // The command line is a client; `model test` alone runs the service in its process (embedded.ts).
  cli: ["lib", "gen", "embedded"],
  // The command line's in-process service: composed like app, served by the REST gateway without a port.
  // The services guarded on a database, for app and embedded alike.
  bindings: ["services", "domain", "store", "transport/call", "lib", "gen"],
  embedded: ["bindings", "transport/rest", "transport/call", "domain", "store", "lib"],
};

function* sourceFiles(dir: string, endings: readonly string[] = [".ts"]): Generator<string> {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) yield* sourceFiles(full, endings);
    else if (endings.some((ending) => entry.name.endsWith(ending))) yield full;
  }
}

/** Relative specifiers of static imports, re-exports and dynamic imports. */
function importsOf(text: string): string[] {
  const found: string[] = [];
  const pattern = /(?:^|\n)\s*(?:import|export)\b[^"';]*?from\s*["'](\.{1,2}\/[^"']+)["']|(?:^|\n)\s*import\s*["'](\.{1,2}\/[^"']+)["']|import\(\s*["'](\.{1,2}\/[^"']+)["']\s*\)/g;
  for (const m of text.matchAll(pattern)) {
    found.push((m[1] ?? m[2] ?? m[3])!);
  }
  return found;
}

const edges = [...sourceFiles(SRC)].flatMap((file) =>
  importsOf(readFileSync(file, "utf8")).map((specifier) => ({
    file: path.relative(SRC, file),
    specifier,
    from: roomOf(file),
    to: roomOf(path.resolve(path.dirname(file), specifier)),
  })),
);

describe("the arrows point down", () => {
  it("finds the imports it judges (the reader is not blind)", () => {
    expect(edges.length).toBeGreaterThan(300);
    expect(edges).toContainEqual(expect.objectContaining({ from: "services", to: "domain" }));
    expect(edges).toContainEqual(expect.objectContaining({ from: "transport/http", to: "transport/grpc" }));
  });

  it("every room is known", () => {
    const unknown = [...new Set(edges.map((e) => e.from))].filter((room) => MAY_IMPORT[room] === undefined);
    expect(unknown).toEqual([]);
  });

  it.each(Object.keys(MAY_IMPORT))("%s imports only what lies below it", (room) => {
    const allowed = new Set([room, ...MAY_IMPORT[room]!]);
    const upward = edges.filter((e) => e.from === room && !allowed.has(e.to)).map((e) => `${e.file} → ${e.specifier} (${e.to})`);
    expect(upward).toEqual([]);
  });

  it("no two rooms import each other", () => {
    const pairs = new Set(edges.filter((e) => e.from !== e.to).map((e) => `${e.from} → ${e.to}`));
    const cycles = [...pairs].filter((p) => {
      const [a, b] = p.split(" → ");
      return pairs.has(`${b} → ${a}`);
    });
    expect(cycles).toEqual([]);
  });

  it("no files import each other, directly or round a longer loop", () => {
    // Files as nodes (the service's and the bench's), an import as an arrow; a strongly connected
    // set of more than one file is a loop (Tarjan's algorithm), type-only imports included: they
    // tie the files' meanings too.
    const arrows = new Map<string, Set<string>>();
    for (const folder of LOOPLESS) {
      for (const file of sourceFiles(path.join(ROOT, folder))) {
        const from = path.relative(ROOT, file).split(path.sep).join("/");
        for (const specifier of importsOf(readFileSync(file, "utf8"))) {
          const target = path.relative(ROOT, path.resolve(path.dirname(file), specifier)).split(path.sep).join("/").replace(/\.js$/, ".ts");
          if (!LOOPLESS.some((f) => target.startsWith(`${f}/`))) continue;
          let set = arrows.get(from);
          if (set === undefined) arrows.set(from, (set = new Set()));
          set.add(target);
        }
      }
    }
    const index = new Map<string, number>();
    const low = new Map<string, number>();
    const stack: string[] = [];
    const onStack = new Set<string>();
    const loops: string[][] = [];
    const visit = (file: string) => {
      index.set(file, index.size);
      low.set(file, index.get(file)!);
      stack.push(file);
      onStack.add(file);
      for (const next of arrows.get(file) ?? []) {
        if (!index.has(next)) {
          visit(next);
          low.set(file, Math.min(low.get(file)!, low.get(next)!));
        } else if (onStack.has(next)) low.set(file, Math.min(low.get(file)!, index.get(next)!));
      }
      if (low.get(file) !== index.get(file)) return;
      const component: string[] = [];
      for (let top = stack.pop()!; ; top = stack.pop()!) {
        onStack.delete(top);
        component.push(top);
        if (top === file) break;
      }
      if (component.length > 1) loops.push(component.sort());
    };
    for (const file of arrows.keys()) if (!index.has(file)) visit(file);
    expect(arrows.size).toBeGreaterThan(100);
    expect(arrows.get("bench/run.ts")?.size).toBeGreaterThan(10);
    expect(loops).toEqual([]);
  });

});

/** The folders whose source files stay small (600 lines at most), each with the endings it holds. */
const SIZED: readonly { folder: string; endings: readonly string[] }[] = [
  { folder: "src", endings: [".ts"] },
  { folder: "console/src", endings: [".ts", ".tsx"] },
  { folder: "bench", endings: [".ts"] },
];

/** Files written by a generator, not by hand: scripts/proto-comments.mjs writes this one from proto/. */
const GENERATED = new Set(["src/transport/pages/proto-comments.ts"]);

describe("small modules", () => {
  const sized = SIZED.flatMap(({ folder, endings }) =>
    [...sourceFiles(path.join(ROOT, folder), endings)].map((file) => ({
      file: path.relative(ROOT, file).split(path.sep).join("/"),
      lines: readFileSync(file, "utf8").split("\n").length,
    })),
  );

  it("reads every folder it sizes (the reader is not blind)", () => {
    const files = sized.map((s) => s.file);
    expect(files).toEqual(expect.arrayContaining(["src/app.ts", "console/src/app.tsx", "console/src/lib/routes.ts", "bench/run.ts", ...GENERATED]));
  });

  it("no source file grows past 600 lines", () => {
    const long = sized.filter(({ file, lines }) => lines > 600 && !GENERATED.has(file));
    expect(long).toEqual([]);
  });
});
