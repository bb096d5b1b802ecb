/**
 * AuthZEN's Policy Decision Point metadata (docs/authzen.md):
 * GET /.well-known/authzen-configuration, with no key (discovery comes
 * before credentials, as /openapi.json does). It names the PDP's base URL
 * and the URL of each endpoint, made from the templates of the very routes
 * the AuthZEN gateway serves (their google.api.http annotations), so the
 * document cannot name a route that is not there.
 *
 * The base URL is PUBLIC_URL when set (the service behind a proxy knows
 * itself no better than its operator does); otherwise the request's own:
 * its Host (HTTP/2's :authority), and X-Forwarded-Proto's scheme when a
 * proxy says it terminated TLS, else http (this port speaks cleartext).
 * The standard wants the identifier to equal the URL the client started
 * from, which is what the request carries.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { restErrorBody } from "../call/errors.js";
import type { RestRoute } from "./rest-gateway.js";

/** The metadata's name for each RPC's endpoint (the standard's table "API Endpoint Overview"). */
const ENDPOINT_KEYS: Record<string, string> = {
  Evaluation: "access_evaluation_endpoint",
  Evaluations: "access_evaluations_endpoint",
  SearchSubject: "search_subject_endpoint",
  SearchResource: "search_resource_endpoint",
  SearchAction: "search_action_endpoint",
};

export const AUTHZEN_METADATA_PATH = "/.well-known/authzen-configuration";

/** A host as a Host header may name it: a name or an IPv4 address, or an IPv6 one in brackets, and a port. */
const HOST = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)(?::\d{1,5})?$/;

export function registerAuthZenMetadata(app: FastifyInstance, routes: readonly RestRoute[], publicUrl: string | undefined): void {
  const paths = routes.flatMap(({ route }) => {
    const key = ENDPOINT_KEYS[route.method.name];
    return key === undefined ? [] : [[key, route.template] as const];
  });
  app.get(AUTHZEN_METADATA_PATH, async (req, reply) => {
    const base = publicUrl ?? baseOf(req);
    if (base === undefined) {
      const reason = "is not a host name with an optional port, so no URL can be made from it";
      return reply.code(400).send(restErrorBody(req.id, "invalid_argument", `Host: ${reason}`, [{ field: "Host", reason }]));
    }
    const metadata: Record<string, string> = { policy_decision_point: base };
    for (const [key, path] of paths) metadata[key] = `${base}${path}`;
    // Made from the request when PUBLIC_URL is unset: a cache keeps one per host and scheme.
    if (publicUrl === undefined) reply.header("vary", "Host, X-Forwarded-Proto");
    return reply.header("cache-control", "public, max-age=300").send(metadata);
  });
}

function baseOf(req: FastifyRequest): string | undefined {
  const host = first(req.headers.host) ?? first(req.headers[":authority"]);
  if (host === undefined || !HOST.test(host)) return undefined;
  const forwarded = first(req.headers["x-forwarded-proto"])?.split(",")[0]?.trim().toLowerCase();
  const scheme = forwarded === "https" ? "https" : "http";
  return `${scheme}://${host.toLowerCase()}`;
}

const first = (value: string | string[] | undefined): string | undefined => (Array.isArray(value) ? value[0] : value);
