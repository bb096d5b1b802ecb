/**
 * Who may call what. Every RPC, whichever protocol carries it, passes here
 * before its implementation runs.
 */
import { getOption, type DescMethod } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { permissionDenied, unauthenticated } from "../../domain/errors.js";
import type { KeyAuthenticator } from "../../domain/keys.js";
import type { Access } from "../../domain/principal.js";
import { requireScope, type Scope } from "../../domain/scopes.js";
import { http } from "../../../gen/google/api/annotations_pb.js";
import { callerOf, setCaller } from "../../services/call-values.js";
import { headerOf } from "./call-context.js";

/** Routes that differ from their service's default access. */
const methodAccess: Record<string, Access> = {
  "authz.v1.ApplicationService.CreateApplication": "operator",
  "authz.v1.ApplicationService.ListApplications": "operator",
  "authz.v1.ApplicationService.GetCurrentKey": "any",
};

/** AuthZEN's Authorization API (docs/authzen.md): questions, on the key's own application, the key also as a bearer token. */
const AUTHZEN = "authzen.v1.AccessService";

/** Services acting on the calling key's own application (/api/v1/authorization/*, /access/v1/*). */
const ownApplicationServices = new Set(["authz.v1.RelationshipService", "authz.v1.CheckService", "authz.v1.ChangeService", AUTHZEN]);

/** Services that only ask questions: the "check" scope. */
const questionServices = new Set(["authz.v1.CheckService", AUTHZEN]);

/**
 * Services whose every query verifies the calling key itself, in the same
 * statement (see check-store): the key may be identified from memory, and a
 * revoked key still fails on its very next call, without a round trip of its own.
 * (AuthZEN's answers without a question verify it with an empty batch check.)
 */
const keyVerifiedInQuery = new Set(["authz.v1.CheckService", AUTHZEN]);

const accessByMethod = new Map<DescMethod, Access>();
const scopeByMethod = new Map<DescMethod, { scope: Scope; route: string }>();

/**
 * The scope a method takes (API.md, key scopes): "check" for the questions
 * of the CheckService and AuthZEN's, then by the REST verb its google.api.http annotation
 * gives it, on every protocol alike: "read" for a GET (and a server stream,
 * which has no route), "write" otherwise.
 */
export function scopeOf(method: DescMethod): { scope: Scope; route: string } {
  let scoped = scopeByMethod.get(method);
  if (scoped === undefined) {
    const rule = getOption(method, http).pattern;
    const route = rule.case === undefined ? method.name : `${rule.case.toUpperCase()} ${String(rule.value)}`;
    // A server stream (Watch) has no REST route, and only reads.
    const reads = rule.case === "get" || method.methodKind === "server_streaming";
    const scope: Scope = questionServices.has(method.parent.typeName) ? "check" : reads ? "read" : "write";
    scopeByMethod.set(method, (scoped = { scope, route }));
  }
  return scoped;
}

export function accessOf(method: DescMethod): Access {
  let access = accessByMethod.get(method);
  if (access === undefined) {
    access =
      methodAccess[`${method.parent.typeName}.${method.name}`] ??
      (ownApplicationServices.has(method.parent.typeName) ? "own-application" : "application");
    accessByMethod.set(method, access);
  }
  return access;
}

/**
 * Authenticates the call's key and checks it may reach `appId`; stores the
 * principal on the context. A second call for the same context (the REST
 * gateway authorizes before it reads the body, the guard again after)
 * reuses the principal instead of looking the key up again.
 */
export async function authorizeCall(
  keys: KeyAuthenticator,
  method: DescMethod,
  ctx: HandlerContext,
  appId: string | undefined,
): Promise<void> {
  const access = accessOf(method);
  const key = method.parent.typeName === AUTHZEN ? authzenKey(ctx) : headerOf(ctx, "x-api-key");
  const principal =
    callerOf(ctx) ??
    (keyVerifiedInQuery.has(method.parent.typeName) ? await keys.identify(key) : await keys.authenticate(key));
  switch (access) {
    case "operator":
      if (principal.kind !== "operator") {
        throw permissionDenied("this route takes the operator key; an application key cannot create or list applications");
      }
      break;
    case "application":
      if (principal.kind === "application" && principal.appId !== appId) {
        throw permissionDenied(
          `this API key belongs to application "${principal.appId}" and cannot act on application "${appId ?? ""}"`,
        );
      }
      break;
    case "own-application":
      if (principal.kind === "operator") {
        throw permissionDenied(
          "the operator key cannot call /api/v1/authorization/*: these act on the calling key's own application, so use an application key",
        );
      }
      break;
    case "any":
      // About the calling key itself: every valid key may ask, whatever its scopes.
      setCaller(ctx, principal);
      return;
  }
  const { scope, route } = scopeOf(method);
  requireScope(principal.scopes, scope, route);
  setCaller(ctx, principal);
}

/**
 * The key of an AuthZEN call: `Authorization: Bearer KEY` (the standard
 * recommends OAuth-style bearer credentials), or X-API-Key as everywhere
 * else. Two different keys in one request are refused rather than one
 * picked; another Authorization scheme is named in the 401.
 */
function authzenKey(ctx: HandlerContext): string {
  const apiKey = headerOf(ctx, "x-api-key");
  const authorization = headerOf(ctx, "authorization");
  if (authorization === undefined || authorization === "") {
    if (apiKey === undefined || apiKey === "") throw unauthenticated("the API key is missing: send it as Authorization: Bearer KEY, or as X-API-Key");
    return apiKey;
  }
  const bearer = /^bearer +(\S+) *$/i.exec(authorization)?.[1];
  if (bearer === undefined) throw unauthenticated("the Authorization header must be Bearer KEY (with the API key)");
  if (apiKey !== undefined && apiKey !== "" && apiKey !== bearer) throw unauthenticated("Authorization and X-API-Key carry two different keys; send one");
  return bearer;
}
