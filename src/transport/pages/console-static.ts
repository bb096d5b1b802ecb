/**
 * The console (console/, built by Vite into dist/console) served at
 * /console/ on the same port as the API, by @fastify/static: content types,
 * ETags, conditional requests and path checks are the library's.
 *
 * Every answer under /console/ carries a strict Content-Security-Policy: the
 * page may load scripts, styles and images only from this origin (no inline
 * script or style, no eval), talk only to this origin, and be framed by
 * nobody. The built files are content-hashed, so they are cached for a year;
 * index.html is revalidated on every load, so a new build is picked up.
 * Any other path under /console/ is a page of the console's own router, so
 * it answers index.html.
 */
import fastifyStatic from "@fastify/static";
import type { FastifyInstance, FastifyReply } from "fastify";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { restErrorBody } from "../call/errors.js";
import { pageSecurityHeaders, strictCsp } from "./page-headers.js";

export const CONSOLE_CSP = strictCsp("manifest-src 'self'");

const SECURITY_HEADERS = pageSecurityHeaders(CONSOLE_CSP);

/** Whether `dir` holds a Vite build of the console (its manifest marks a build, not the source folder). */
export const isConsoleBuild = (dir: string): boolean => existsSync(join(dir, "index.html")) && existsSync(join(dir, ".vite", "manifest.json"));

/**
 * Where a build is looked for when CONSOLE_DIR is not set: beside the
 * compiled service (dist/src → dist/console), or, running from the sources
 * (tsx), in dist/console of the checkout.
 */
export function defaultConsoleDir(): string | undefined {
  const candidates = [new URL("../../../console/", import.meta.url), new URL("../../../dist/console/", import.meta.url)].map((u) => fileURLToPath(u));
  return candidates.find(isConsoleBuild);
}

export async function registerConsole(app: FastifyInstance, dir: string | undefined): Promise<void> {
  const setSecurity = (reply: FastifyReply) => {
    for (const [name, value] of Object.entries(SECURITY_HEADERS)) reply.header(name, value);
  };
  app.get("/console", (_req, reply) => reply.redirect("/console/", 301));
  if (dir === undefined || !isConsoleBuild(dir)) {
    app.get("/console/*", (req, reply) =>
      reply.code(404).send(restErrorBody(req.id, "not_found", "the console is not built: run npm run build (npm start builds it)")),
    );
    return;
  }
  // The hashed build output only: never the build's own files (.vite/).
  await app.register(fastifyStatic, {
    root: join(dir, "assets"),
    prefix: "/console/assets/",
    wildcard: false,
    index: false,
    cacheControl: false,
    setHeaders(res) {
      for (const [name, value] of Object.entries(SECURITY_HEADERS)) res.setHeader(name, value);
      res.setHeader("cache-control", "public, max-age=31536000, immutable");
    },
  });
  const page = (_req: unknown, reply: FastifyReply) => {
    setSecurity(reply);
    reply.header("cache-control", "no-cache");
    return reply.sendFile("index.html", dir, { cacheControl: false });
  };
  app.get("/console/", page);
  app.get("/console/*", page);
  // A missing asset is a 404, not the page (a stale tab asking for an old build's chunk must fail, not parse HTML as JS).
  app.get("/console/assets/*", (req, reply) => reply.code(404).send(restErrorBody(req.id, "not_found", "no such console asset")));
}
