/**
 * Every relative link and image of README.md and docs/*.md points at a file
 * or folder of the repository, and a link's #anchor at a heading of the page
 * it names (by GitHub's rule for heading anchors). Links in code (fenced
 * blocks and `code spans`) are not links; http(s) and mailto links are not
 * checked (the tests reach no network).
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const PAGES = ["README.md", ...readdirSync(join(ROOT, "docs")).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`)];

interface Link {
  page: string;
  line: number;
  target: string;
}

/** The page's lines with fenced blocks blanked (line numbers kept). */
function outsideFences(markdown: string): string[] {
  let fenced = false;
  return markdown.split("\n").map((line) => {
    if (/^\s*```/.test(line)) {
      fenced = !fenced;
      return "";
    }
    return fenced ? "" : line;
  });
}

function linksOf(page: string): Link[] {
  const links: Link[] = [];
  outsideFences(readFileSync(join(ROOT, page), "utf8")).forEach((line, i) => {
    const text = line.replace(/`[^`]*`/g, "``"); // a code span holds no link
    for (const m of text.matchAll(/!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) links.push({ page, line: i + 1, target: m[1]! });
  });
  return links;
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens, repeats numbered. */
function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of outsideFences(markdown)) {
    const h = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (h === null) continue;
    const text = h[1]!.replace(/\[([^\]]*)\]\([^)]*\)/g, "$1");
    const base = text
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, "")
      .replace(/\s/g, "-");
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

const links = PAGES.flatMap(linksOf).filter((l) => !/^(https?:|mailto:)/.test(l.target));

describe("the documentation's links", () => {
  it("finds the pages and their links", () => {
    expect(PAGES).toEqual(expect.arrayContaining(["README.md", "docs/api.md", "docs/configuration.md"]));
    expect(links.length).toBeGreaterThan(30);
  });

  it("links every docs/ page from the README", () => {
    const fromReadme = new Set(links.filter((l) => l.page === "README.md").map((l) => l.target.split("#")[0]));
    expect(PAGES.filter((p) => p !== "README.md" && !fromReadme.has(p))).toEqual([]);
  });

  it.each(links.map((l) => [`${l.page}:${l.line} ${l.target}`, l] as const))("%s", (_, link) => {
    const [path, anchor] = link.target.split("#") as [string, string?];
    const file = path === "" ? join(ROOT, link.page) : join(ROOT, dirname(link.page), decodeURIComponent(path));
    expect(relative(ROOT, file).startsWith(".."), "the link leaves the repository").toBe(false);
    expect(existsSync(file), `${relative(ROOT, file)} does not exist`).toBe(true);
    if (anchor !== undefined) {
      expect(statSync(file).isFile() && file.endsWith(".md"), "an anchor needs a Markdown page").toBe(true);
      expect([...anchorsOf(readFileSync(file, "utf8"))]).toContain(anchor);
    }
  });
});

describe("GitHub's heading anchors", () => {
  it.each([
    ["## Quick start", "quick-start"],
    ["## Metrics, traces and request ids", "metrics-traces-and-request-ids"],
    ["## gRPC and Connect with `buf curl`", "grpc-and-connect-with-buf-curl"],
    ["## Limits: one client cannot take it down", "limits-one-client-cannot-take-it-down"],
    ["## The tests and the bench", "the-tests-and-the-bench"],
  ])("%s → #%s", (heading, anchor) => {
    expect([...anchorsOf(heading)]).toEqual([anchor]);
  });

  it("numbers repeated headings", () => {
    expect([...anchorsOf("## Layout\n## Layout\n")]).toEqual(["layout", "layout-1"]);
  });
});
