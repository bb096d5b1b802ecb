import type { ReactNode } from "react";
import type { ConsolePath } from "../lib/routes";
import { NoticeRegion } from "./notice";
import { PageLink } from "./page-link";

export interface NavItem {
  to: ConsolePath;
  label: string;
}

/** The frame of every signed-in page: where you are, where you can go, and sign-out. */
export function Layout({ title, nav, onSignOut, children }: { title: string; nav: NavItem[]; onSignOut: () => void; children: ReactNode }) {
  return (
    <>
      <header className="top">
        <span className="brand">Portcullis</span>
        <span className="where">{title}</span>
        <button type="button" className="link-button" onClick={onSignOut}>
          Sign out
        </button>
      </header>
      {nav.length > 0 && (
        <nav aria-label="Sections">
          <ul>
            {nav.map((item) => (
              <li key={item.to}>
                <PageLink to={item.to} current>
                  {item.label}
                </PageLink>
              </li>
            ))}
          </ul>
        </nav>
      )}
      <main>
        {children}
        <NoticeRegion />
      </main>
    </>
  );
}
