/**
 * Paging of AuthZEN's searches (the standard's "Pagination"): `page.limit`
 * and `page.token` in, `page.next_token` ("" on the last page) and
 * `page.count` out. Every search pages by keyset, ascending: the token
 * holds the last id of the page, so items added or removed meanwhile never
 * make a page repeat or skip one that stays.
 *
 * The standard asks that a request with a token repeat the one that gave
 * it, and that the PDP should say so when it does not: the token carries a
 * digest of what the search asks (its entities' types, ids and names), and
 * a token of another search is a 400 naming page.token.
 */
import { createHash } from "node:crypto";
import { DomainError, invalidArgument } from "./errors.js";
import { LIMITS } from "./formats.js";
import { decodePageToken, encodePageToken } from "./paging.js";

export interface PageInput {
  token: string;
  /** Absent or 0: the default. */
  limit: number | undefined;
}

/** Where a page starts and how long it is. */
export interface PageStart {
  /** The page starts after this id ("" for the first). */
  after: string;
  limit: number;
  /** The digest of the search, which the next token carries. */
  search: string;
}

/** A page of ids, ascending, and the token of the next ("" when it is the last). */
export interface SearchPage {
  ids: string[];
  nextToken: string;
}

/**
 * Where the page starts, for a search asking `asks` (what identifies it:
 * the same for every page of it). Past the maximum, a limit is lowered to
 * it rather than refused: the standard lets a PDP return fewer.
 */
export function pageStart(page: PageInput | undefined, asks: readonly string[]): PageStart {
  const search = createHash("sha256").update(JSON.stringify(asks)).digest("base64url").slice(0, 16);
  const limit = page?.limit === undefined || page.limit === 0 ? LIMITS.pageSizeDefault : Math.min(page.limit, LIMITS.pageSizeMax);
  const token = page?.token ?? "";
  if (token === "") return { after: "", limit, search };
  let position: { after: string; search: string } | undefined;
  try {
    position = decodePageToken(token, { after: "string", search: "string" });
  } catch (error) {
    if (!(error instanceof DomainError)) throw error;
    throw badToken("is not a page token of a search");
  }
  if (position === undefined || position.search !== search) {
    throw badToken("belongs to another search: a page's request must be the one that gave its token");
  }
  return { after: position.after, limit, search };
}

/**
 * The page from what was read after the start: `more` says whether the
 * source holds ids beyond those read. Ids are cut to the limit.
 */
export function pageOf(start: PageStart, ids: readonly string[], more: boolean, read?: string): SearchPage {
  const kept = ids.slice(0, start.limit);
  // Where the next page starts: after the last id read (`read`, when the
  // page read ids it does not list: conditional ones that did not hold),
  // else after the last listed.
  const last = ids.length <= start.limit && read !== undefined ? read : kept[kept.length - 1];
  const next = (more || ids.length > start.limit) && last !== undefined;
  return { ids: kept, nextToken: next ? encodePageToken({ after: last, search: start.search }) : "" };
}

export const EMPTY_PAGE: SearchPage = { ids: [], nextToken: "" };

function badToken(reason: string) {
  return invalidArgument(`page.token: ${reason}`, [{ field: "page.token", reason }]);
}
