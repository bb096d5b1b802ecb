/**
 * Pages filtered by exact checks (src/domain/operator-pages.ts), against a
 * source of ids in memory and a rule for which are allowed: every page is
 * exactly the allowed ids after the cursor, in order, with "more" exactly
 * when one follows; reads grow fourfold up to a batch check's thousand; a
 * page that reads MAX_SCANNED ids without filling fails, never cut.
 */
import { describe, expect, it } from "vitest";
import { allowedPage, MAX_CHUNK, MAX_SCANNED } from "../src/domain/operator-pages.js";

const ids = Array.from({ length: 5_000 }, (_, i) => `id${String(i).padStart(5, "0")}`);

function source(all: string[]) {
  const reads: number[] = [];
  const read = async (after: string, limit: number) => {
    reads.push(limit);
    const page = all.filter((id) => id > after).slice(0, limit);
    return { ids: page, full: page.length === limit };
  };
  return { read, reads };
}

describe("pages filtered by exact checks", () => {
  it.each([
    { name: "every id allowed", allowed: () => true },
    { name: "one in seven", allowed: (n: number) => n % 7 === 0 },
    { name: "only the last few", allowed: (n: number) => n >= 4_990 },
    { name: "none", allowed: () => false },
  ])("$name: each page is the allowed ids after the cursor, and more exactly when one follows", async ({ allowed }) => {
    const expected = ids.filter((_, n) => allowed(n));
    for (const limit of [1, 3, 100]) {
      const { read } = source(ids);
      const got: string[] = [];
      let after = "";
      for (let pages = 0; pages < 10_000; pages++) {
        const page = await allowedPage(limit, after, read, async (batch) => batch.map((id) => allowed(Number(id.slice(2)))));
        expect(page.ids.length).toBeLessThanOrEqual(limit);
        got.push(...page.ids);
        if (!page.more) break;
        expect(page.ids).toHaveLength(limit);
        after = page.ids[page.ids.length - 1]!;
      }
      expect(got).toEqual(expected);
    }
  });

  it("reads grow fourfold from a page and one up to a batch check's thousand", async () => {
    const { read, reads } = source(ids);
    await allowedPage(10, "", read, async (batch) => batch.map((id) => id >= "id04900"));
    expect(reads.slice(0, 4)).toEqual([11, 44, 176, 704]);
    expect(Math.max(...reads)).toBe(MAX_CHUNK);
  });

  it("a page that reads its bound of ids without filling fails rather than be cut", async () => {
    const many = Array.from({ length: MAX_SCANNED + 5_000 }, (_, i) => `x${String(i).padStart(6, "0")}`);
    const { read } = source(many);
    await expect(allowedPage(10, "", read, async (batch) => batch.map(() => false))).rejects.toMatchObject({ code: "resource_exhausted" });
  });
});
