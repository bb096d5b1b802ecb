/**
 * Every page of the console, as a path under its base. The console is served
 * at /console/ (Vite's base, the service's prefix) and wouter's Router has
 * that base, while an application's pages sit in nested routers whose own
 * base is /console/apps/{appId}: a raw href means a different page depending
 * on where it is rendered, and "~/" escapes every base, /console included.
 * So links and navigation take a ConsolePath, which only this module makes,
 * and components/page-link.tsx turns it into one absolute URL: a link means
 * the same page wherever it is, and cannot miss the prefix.
 */
export const CONSOLE_BASE = "/console";

declare const consolePath: unique symbol;
/** A page of the console, relative to CONSOLE_BASE ("/" is the home page). */
export type ConsolePath = string & { readonly [consolePath]: true };

const at = (path: string) => path as ConsolePath;
const segment = (value: string) => encodeURIComponent(value);

/** The pages of one application. */
export function appPaths(appId: string) {
  const base = `/apps/${segment(appId)}`;
  return {
    catalog: at(`${base}/catalog`),
    policies: at(`${base}/policies`),
    policy: (policyId: string) => at(`${base}/policies/${segment(policyId)}`),
    roles: at(`${base}/roles`),
    role: (roleId: string) => at(`${base}/roles/${segment(roleId)}`),
    grants: at(`${base}/grants`),
    model: at(`${base}/model`),
    audit: at(`${base}/audit`),
    check: at(`${base}/check`),
    keys: at(`${base}/keys`),
  };
}

/** The operator's home (the applications), or, for an application key, what it lands on. */
export const homePath = (): ConsolePath => at("/");

/** The URL of a console page, for the browser (an href, a full load). */
export const consoleUrl = (path: ConsolePath): string => (path === "/" ? `${CONSOLE_BASE}/` : `${CONSOLE_BASE}${path}`);
