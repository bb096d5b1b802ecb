/**
 * What a call carries from the transport to its service: who is calling (set
 * by the transport's authorization, read by the services) and whether the
 * call created something (set by a service, read by the REST gateway for its
 * 201). Declared here, below the transport, so the services depend on no
 * protocol: they read the HandlerContext every protocol hands them.
 */
import { createContextKey, type HandlerContext } from "@connectrpc/connect";
import type { Principal } from "../domain/principal.js";

const principalKey = createContextKey<Principal | undefined>(undefined, { description: "the authenticated caller" });

/** Records the authorized caller of a call (the transport, once the key is checked). */
export function setCaller(ctx: Pick<HandlerContext, "values">, principal: Principal): void {
  ctx.values.set(principalKey, principal);
}

/** The caller of a call, once authorized; undefined before (or when authorization failed). */
export function callerOf(ctx: Pick<HandlerContext, "values">): Principal | undefined {
  return ctx.values.get(principalKey);
}

/** The caller of an authorized call. */
export function principalOf(ctx: HandlerContext): Principal {
  const principal = ctx.values.get(principalKey);
  if (principal === undefined) throw new Error("principalOf called on a call that was not authorized");
  return principal;
}

/** The application key of an /authorization/* call, which acts on the key's own application. */
export function callerKeyOf(ctx: HandlerContext): Extract<Principal, { kind: "application" }> {
  const principal = principalOf(ctx);
  if (principal.kind !== "application") throw new Error("an /authorization/* call without an application key");
  return principal;
}

/** The application an /authorization/* call acts on: the calling key's own. */
export function ownAppOf(ctx: HandlerContext): string {
  return callerKeyOf(ctx).appId;
}

const createdKey = createContextKey(false, { description: "the call created its resource (REST answers 201)" });

/** Marks the call as having created something new; the REST gateway then answers 201. */
export function markCreated(ctx: HandlerContext): void {
  ctx.values.set(createdKey, true);
}

export function wasCreated(ctx: HandlerContext): boolean {
  return ctx.values.get(createdKey);
}
