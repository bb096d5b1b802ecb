import type { ReactNode } from "react";
import { Link } from "wouter";

export interface NavItem {
  href: string;
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
              <li key={item.href}>
                <Link href={item.href} className={(active) => (active ? "active" : "")}>
                  {item.label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
      )}
      <main>{children}</main>
    </>
  );
}
