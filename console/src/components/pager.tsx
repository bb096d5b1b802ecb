import type { Pager } from "../lib/pager";

/** Previous / next buttons for one paged list; `label` names the list for screen readers. */
export function PagerControls({ pager, nextPageToken, label }: { pager: Pager; nextPageToken: string | undefined; label: string }) {
  if (pager.page === 1 && (nextPageToken ?? "") === "") return null;
  return (
    <nav className="pager" aria-label={`${label} pages`}>
      <button type="button" onClick={pager.previous} disabled={pager.page === 1}>
        Previous
      </button>
      <span>Page {pager.page}</span>
      <button type="button" onClick={() => pager.next(nextPageToken ?? "")} disabled={(nextPageToken ?? "") === ""}>
        Next
      </button>
    </nav>
  );
}
