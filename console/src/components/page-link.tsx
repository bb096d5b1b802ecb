/**
 * The one way to link or go to a page of the console: a ConsolePath (from
 * lib/routes.ts) made absolute for wouter ("~" skips every router's base, so
 * the full URL, /console included, is given). Nothing else in console/src
 * imports wouter's Link, Redirect or useLocation (test/console-links.test.ts
 * checks), so a link cannot miss the prefix or depend on the router it sits in.
 */
import type { ReactNode } from "react";
import { Link, Redirect, useLocation } from "wouter";
import { usePathname } from "wouter/use-browser-location";
import { consoleUrl, type ConsolePath } from "../lib/routes";

const target = (to: ConsolePath) => `~${consoleUrl(to)}`;

/**
 * A link to a page of the console. With `current`, it is marked as the page
 * shown (aria-current, class "active") when the browser is on it or below it.
 */
export function PageLink({ to, current = false, children }: { to: ConsolePath; current?: boolean; children: ReactNode }) {
  const pathname = usePathname();
  const url = consoleUrl(to);
  const here = current && (pathname === url || pathname.startsWith(`${url}/`));
  return (
    <Link href={target(to)} className={here ? "active" : undefined} aria-current={here ? "page" : undefined}>
      {children}
    </Link>
  );
}

/** Goes to a page of the console at once, in place of the current entry of the history. */
export function GoTo({ to }: { to: ConsolePath }) {
  return <Redirect to={target(to)} replace />;
}

/** Navigation after an action (a create, a delete): a function taking the page to go to. */
export function useGo(): (to: ConsolePath) => void {
  const [, navigate] = useLocation();
  return (to) => navigate(target(to));
}

/** A full load of a console page: the console starts again (a new key signed in). */
export function reloadAt(to: ConsolePath): void {
  window.location.assign(consoleUrl(to));
}
