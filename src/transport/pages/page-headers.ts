/**
 * The headers of the pages the service serves itself (the console, the API
 * docs): a strict Content-Security-Policy and the usual hardening. Each page
 * states its policy's directives beyond the shared strict base.
 */

/**
 * This origin only: no inline script or style, no eval, no framing, no form
 * posts; images also from data: URLs (both pages draw icons with them).
 */
const STRICT_BASE = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
];
const STRICT_TAIL = ["base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'"];

/** The strict policy, with `extra` directives (e.g. "manifest-src 'self'"). */
export const strictCsp = (...extra: string[]): string => [...STRICT_BASE, ...extra, ...STRICT_TAIL].join("; ");

/** The security headers of a page under `csp`. */
export const pageSecurityHeaders = (csp: string): Readonly<Record<string, string>> => ({
  "content-security-policy": csp,
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cross-origin-opener-policy": "same-origin",
  "x-frame-options": "DENY",
});
