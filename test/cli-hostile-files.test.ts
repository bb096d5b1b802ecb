/**
 * Hostile and broken files given to every command that reads a YAML or JSON
 * model (model plan, model apply, model test; catalog put for JSON), as a
 * real process: each exits 2 with one line naming the file and the line and
 * what is wrong, never a stack trace, a hang or a call to the service. The
 * files are refused before any request: the URL points at nothing.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cli } from "./support/cli-process.js";
import type { TestService } from "./support/service.js";

const DEEP = 5_000;

/** Billion laughs: nine levels, each ten aliases of the one before (10^9 values once expanded). */
const bombFlow = () =>
  ["catalog: []", 'lol0: &a0 "lol"', ...Array.from({ length: 9 }, (_, i) => `lol${i + 1}: &a${i + 1} [${Array(10).fill(`*a${i}`).join(", ")}]`)].join("\n");
const bombBlock = () =>
  ["catalog: []", "l0: &b0 lol", ...Array.from({ length: 9 }, (_, i) => [`l${i + 1}: &b${i + 1}`, ...Array(10).fill(`  - *b${i}`)].join("\n"))].join("\n");

/** name, the file's bytes, and what stderr must say (the line included). */
const FILES: [string, string | Buffer, RegExp][] = [
  ["alias bomb, flow style", bombFlow(), /: line 7: aliases expand the document by more than 100000 values/],
  ["alias bomb, block style", bombBlock(), /: line 55: aliases expand the document by more than 100000 values/],
  [`${DEEP}-deep flow sequence`, `${"[".repeat(DEEP)}${"]".repeat(DEEP)}`, /: line 1: is nested deeper than 64 levels/],
  [`${DEEP}-deep block mapping`, `${Array.from({ length: DEEP }, (_, i) => `${" ".repeat(i)}a:`).join("\n")} 1\n`, /: line 65: is nested deeper than 64 levels/],
  [`${DEEP}-deep JSON`, `${'{"a":'.repeat(DEEP)}1${"}".repeat(DEEP)}`, /: line 1: is nested deeper than 64 levels/],
  [`${DEEP}-deep compact block sequence`, `catalog:\n  ${"- ".repeat(DEEP)}x\n`, /: line 2: is nested deeper than 64 levels/],
  ["an alias nesting past the limit", `a: &a ${"[".repeat(40)}${"]".repeat(40)}\nb: ${"[".repeat(40)}*a${"]".repeat(40)}\n`, /: line 2: its aliases nest it deeper than 64 levels/],
  ["an alias inside the collection it names", "catalog: &c [*c]\n", /: line 1: alias \*c is inside the collection it names/],
  ["an alias to no anchor", "catalog: []\npolicies: *nothing\n", /: line 2: alias \*nothing names no anchor before it/],
  ["binary garbage", Buffer.from(Array.from({ length: 2_560 }, (_, i) => i % 256)), /: line 2: is not UTF-8 text/],
  ["invalid UTF-8", Buffer.concat([Buffer.from("catalog: []\npolicies:\n  - name: "), Buffer.from([0xff, 0xfe]), Buffer.from("\n")]), /: line 3: is not UTF-8 text/],
  ["a huge single line", "a".repeat(10 * 1024 * 1024), /: line 1: a (model|test file) is a mapping/],
  ["an empty file", "", /: line 1: a (model|test file) is a mapping/],
  ["a scalar", '"just a string"\n', /: line 1: a (model|test file) is a mapping/],
  ["a YAML error", "catalog: [\n  a: b\n", /: line \d+: /],
];

const COMMANDS: string[][] = [
  ["model", "plan"],
  ["model", "apply"],
  ["model", "test"],
];

describe("hostile model files", () => {
  let dir: string;
  // Nothing listens there: a file that got as far as a request would show a network error and exit 3.
  const nowhere = { url: "http://127.0.0.1:1" } as TestService;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "portcullis-hostile-"));
    for (const [i, [, bytes]] of FILES.entries()) await writeFile(join(dir, `f${i}.yaml`), bytes);
  });
  afterAll(async () => {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  for (const command of COMMANDS) {
    describe(command.join(" "), () => {
      it.each(FILES.map(([name, , expected], i) => [name, i, expected] as const))("%s: exit 2 naming the line, no stack trace", { timeout: 30_000 }, async (_name, i, expected) => {
        const file = join(dir, `f${i}.yaml`);
        const run = await cli(nowhere, [...command, file], { key: "pcl_never_used" });
        expect(run.stderr).not.toMatch(/^\s+at /m);
        expect(run.stderr.trimEnd().split("\n")).toHaveLength(1);
        expect(run.stderr).toContain(`portcullis: FILE ${file}: line `);
        expect(run.stderr).toMatch(expected);
        expect(run.code).toBe(2);
        expect(run.stdout).toBe("");
      });
    });
  }

  describe("catalog put", () => {
    it.each([
      [`${DEEP}-deep JSON`, `{"resources": ${"[".repeat(DEEP)}${"]".repeat(DEEP)}}`, /: line 1: is nested deeper than 64 levels/],
      ["invalid UTF-8", Buffer.from([0x7b, 0x0a, 0xff, 0x0a, 0x7d]), /: line 2: is not UTF-8 text/],
    ] as const)("%s: exit 2 naming the line, no stack trace", { timeout: 30_000 }, async (_name, bytes, expected) => {
      const file = join(dir, "catalog.json");
      await writeFile(file, bytes);
      const run = await cli(nowhere, ["catalog", "put", file, "--app", "any"], { key: "pcl_never_used" });
      expect(run.stderr).not.toMatch(/^\s+at /m);
      expect(run.stderr).toMatch(expected);
      expect(run.code).toBe(2);
    });
  });
});
