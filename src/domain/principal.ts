import type { Scope } from "./scopes.js";

/** Who is calling: resolved from the API key on every request. */
export type Principal =
  | { readonly kind: "operator"; readonly keyId: string; readonly scopes: readonly Scope[] }
  | {
      readonly kind: "application";
      readonly keyId: string;
      readonly appId: string;
      /** What the key may call (fixed at creation, so it may be remembered with the key). */
      readonly scopes: readonly Scope[];
      /** The key's SHA-256, for queries that verify the key themselves (the check). */
      readonly keyHash: string;
    };

/**
 * What a route requires of its caller:
 * - operator: the operator key only (creating and listing applications);
 * - application: a route under /applications/{appId}/: the operator key, or a
 *   key of that very application;
 * - own-application: /authorization/*, acting on the key's own application,
 *   so an application key only.
 * - any: any valid key, about itself (GET /api/v1/api-keys/current).
 * Reflection and health need no key; they are not guarded at all.
 */
export type Access = "operator" | "application" | "own-application" | "any";

/** The key id the AUTHZ_ADMIN_KEY operator key is recorded under in the audit log. */
export const ENV_OPERATOR_KEY_ID = "operator";
