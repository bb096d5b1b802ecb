/**
 * Save confirmations, shown where the user is: a live region fixed to the
 * bottom of the window, so "Catalog saved." is on screen however far the
 * form was scrolled (a status beside the form can fall below the fold, or
 * above it once the page shrinks after the save). A notice belongs to the
 * page it was given on: it is gone on another page, or when dismissed.
 */
import { createContext, useCallback, useContext, useState, type ReactNode } from "react";
import { usePathname } from "wouter/use-browser-location";

interface Notice {
  text: string;
  /** The page it was given on. */
  pathname: string;
  /** Tells two equal texts apart, so a second save is announced again. */
  serial: number;
}

const NoticeContext = createContext<{ notice: Notice | undefined; notify: (text: string) => void; dismiss: () => void }>({
  notice: undefined,
  notify: () => undefined,
  dismiss: () => undefined,
});

export function NoticeProvider({ children }: { children: ReactNode }) {
  const [notice, setNotice] = useState<Notice | undefined>();
  const notify = useCallback(
    (text: string) => setNotice((now) => ({ text, pathname: window.location.pathname, serial: (now?.serial ?? 0) + 1 })),
    [],
  );
  const dismiss = useCallback(() => setNotice(undefined), []);
  return <NoticeContext.Provider value={{ notice, notify, dismiss }}>{children}</NoticeContext.Provider>;
}

/** Shows a confirmation in the notice region (`notify("Role saved.")`). */
export const useNotify = (): ((text: string) => void) => useContext(NoticeContext).notify;

/** The region itself, always in the page (a live region must be there before its text changes). */
export function NoticeRegion() {
  const { notice, dismiss } = useContext(NoticeContext);
  const pathname = usePathname();
  const shown = notice !== undefined && notice.pathname === pathname ? notice : undefined;
  return (
    <div className="notice-region" role="status" aria-live="polite">
      {shown !== undefined && (
        <p key={shown.serial} className="notice">
          <span>{shown.text}</span>
          <button type="button" className="link-button" onClick={dismiss}>
            Dismiss
          </button>
        </p>
      )}
    </div>
  );
}
