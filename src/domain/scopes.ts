import { permissionDenied, Violations } from "./errors.js";
import { show } from "./formats.js";

/**
 * Key scopes (docs/decisions.md, "Key scopes"): what a key may call.
 * - check: the questions (check, batch check, explain, permissions, lookup, who can);
 * - read: every GET;
 * - write: every other route.
 * A backend that only asks questions gets a check key: leaked, it cannot
 * change the model or read it whole.
 */
export const SCOPES = ["check", "read", "write"] as const;
export type Scope = (typeof SCOPES)[number];

export const ALL_SCOPES: readonly Scope[] = SCOPES;

const isScope = (value: string): value is Scope => (SCOPES as readonly string[]).includes(value);

/**
 * The scopes asked for a new key, in canonical order without repeats; all
 * three when none were given. A scope the creating key lacks is a 403: a key
 * cannot mint a key that may do more than itself.
 */
export function scopesOfNewKey(asked: readonly string[], creator: readonly Scope[]): Scope[] {
  if (asked.length === 0) return [...creator];
  const v = new Violations();
  asked.forEach((s, i) => {
    if (!isScope(s)) v.add(`scopes[${i}]`, `${show(s)} is not a scope (accepted: ${SCOPES.join(", ")})`);
  });
  v.throwIfAny();
  const scopes = SCOPES.filter((s) => asked.includes(s));
  const beyond = scopes.filter((s) => !creator.includes(s));
  if (beyond.length > 0) {
    throw permissionDenied(
      `this API key lacks the ${beyond.map((s) => `"${s}"`).join(" and ")} scope${beyond.length > 1 ? "s" : ""}, so it cannot create a key that has ${beyond.length > 1 ? "them" : "it"}`,
    );
  }
  return scopes;
}

/** 403 unless the key holds `scope`. */
export function requireScope(held: readonly Scope[], scope: Scope, route: string): void {
  if (held.includes(scope)) return;
  throw permissionDenied(`this API key lacks the "${scope}" scope, which ${route} requires (the key has: ${held.join(", ")})`);
}

/** Scopes as stored: the database's CHECK admits only known ones. */
export function storedScopes(value: readonly string[]): Scope[] {
  return value.filter(isScope);
}
