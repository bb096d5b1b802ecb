/**
 * Lookup's and who can's pages where the catalog has `requires` or `unless`
 * (docs/exclusion.md): the walks' pages are a superset (a rule can only
 * take away), read in id order after the cursor; each id of them is asked
 * as a batch check asks it (exact: operator-answers.ts), and the pages go
 * on from the last id read until a page and one more are allowed or the
 * walk has no more ids. Never cut: a page is complete up to its last id.
 * Each further read takes four times as many ids as the one before (at
 * most MAX_CHUNK), so a page behind many excluded ids costs a few
 * statements, not one per page. A page that has read MAX_SCANNED ids and
 * is still not full fails (resource_exhausted) rather than be cut or run on:
 * each id read is a check's work, and a request's work is bounded.
 */
import { resourceExhausted } from "./errors.js";

/** Ids one read and its checks take at most: a batch check's limit. */
export const MAX_CHUNK = 1_000;

/** Ids a page reads at most before it fails: about twenty batch checks of a thousand. */
export const MAX_SCANNED = 20_000;

/**
 * What a read knows of how its ids are reached, where it could tell
 * (lookup-reach.ts): `true`, allowed as read;
 * or the relations implying the action through which it is reached, the
 * ones its check need walk from. An id it does not name: every relation.
 */
export type Reach = ReadonlyMap<string, true | readonly string[]>;

/** One read of the superset: up to `limit` ids after `after`, in order, whether it stopped at `limit`, and how its ids are reached. */
export type ReadIds = (after: string, limit: number) => Promise<{ ids: string[]; full: boolean; reach?: Reach | undefined }>;

/** Which of the ids are allowed, as the check answers each (with what `reach` says of them). */
export type Allowed = (ids: string[], reach: Reach | undefined) => Promise<boolean[]>;

/** The first `limit` allowed ids after `after`, and whether more follow. */
export async function allowedPage(limit: number, after: string, read: ReadIds, allowed: Allowed): Promise<{ ids: string[]; more: boolean }> {
  const out: string[] = [];
  let cursor = after;
  let chunk = Math.min(MAX_CHUNK, limit + 1);
  let scanned = 0;
  for (;;) {
    if (scanned >= MAX_SCANNED) {
      throw resourceExhausted(
        `this page read ${scanned} ids and is not full yet (requires or unless take most of them away); at most ${MAX_SCANNED} are read for one page: ask a smaller pageSize, or narrow the rules that exclude (docs/exclusion.md)`,
      );
    }
    const { ids, full, reach } = await read(cursor, chunk);
    scanned += ids.length;
    if (ids.length > 0) {
      const answers = await allowed(ids, reach);
      ids.forEach((id, i) => answers[i] === true && out.push(id));
    }
    if (out.length > limit || !full || ids.length === 0) break;
    cursor = ids[ids.length - 1]!;
    chunk = Math.min(MAX_CHUNK, chunk * 4);
  }
  return { ids: out.slice(0, limit), more: out.length > limit };
}
