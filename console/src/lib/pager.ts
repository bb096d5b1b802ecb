/**
 * Paging through a list route: the page tokens seen so far, so a page can go
 * forward with the answer's nextPageToken and back without refetching
 * everything. Never loads more than one page.
 */
import { useCallback, useState } from "react";

export interface Pager {
  /** The token of the page shown ("" for the first). */
  token: string;
  /** 1-based. */
  page: number;
  next(nextPageToken: string): void;
  previous(): void;
  reset(): void;
}

export function usePager(): Pager {
  const [tokens, setTokens] = useState<string[]>([""]);
  const next = useCallback((t: string) => setTokens((now) => (t === "" ? now : [...now, t])), []);
  const previous = useCallback(() => setTokens((now) => (now.length > 1 ? now.slice(0, -1) : now)), []);
  const reset = useCallback(() => setTokens([""]), []);
  return { token: tokens[tokens.length - 1] ?? "", page: tokens.length, next, previous, reset };
}
