/**
 * The OpenAPI document at GET /openapi.json and a docs page at GET /docs that
 * renders it with Swagger UI, on the same port, with no key.
 *
 * The document is made once, when the app is built, from the bindings the
 * REST gateway serves (openapi.ts), and sent as the same bytes every time,
 * with an ETag: clients and caches revalidate with If-None-Match.
 *
 * Swagger UI comes from the swagger-ui-dist package, served from
 * node_modules by @fastify/static (no CDN): its bundle, its stylesheet and
 * its icons, nothing else of the folder (which holds a demo page pointing at
 * the Petstore). Their URLs carry the package's version, so they are cached
 * for a year and a new version is fetched under new URLs. The page and the
 * script that starts Swagger UI are ours, kept in memory: the page has no
 * inline script, so its Content-Security-Policy allows scripts from this
 * origin only.
 */
import fastifyStatic from "@fastify/static";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname } from "node:path";
import type { HttpBinding } from "../rest/http-rules.js";
import { openApiDocument } from "./openapi.js";
import { modelSchema, modelTestSchema } from "./model-schema.js";
import { pageSecurityHeaders, strictCsp } from "./page-headers.js";

/**
 * The docs page's policy, as strict as the console's (CONSOLE_CSP, less the
 * manifest). Swagger UI 5.35 needs no inline script, no eval and no inline
 * style: its React components set styles through the DOM (element.style),
 * which CSP does not count as inline style, and its syntax highlighting does
 * the same. test/docs-page.test.ts opens the page in Chromium, opens an
 * operation of each kind, expands schemas whole, calls a route with "Try it
 * out" and fails on any violation.
 * - script-src 'self': the bundle and our initializer; no inline script, no eval.
 * - style-src 'self': swagger-ui.css only.
 * - img-src 'self' data:: swagger-ui.css draws its icons (the lock, the
 *   arrows, copy to clipboard) as data: SVG images; without data: each is a
 *   violation and the icons vanish.
 * - connect-src 'self': the document and "Try it out" calls, this origin only.
 */
export const DOCS_CSP = strictCsp();

const SECURITY_HEADERS = pageSecurityHeaders(DOCS_CSP);

/** The files of swagger-ui-dist the page uses; anything else under /docs/ is a 404. */
const SWAGGER_FILES = new Set(["/swagger-ui-bundle.js", "/swagger-ui.css", "/favicon-32x32.png", "/favicon-16x16.png"]);

const INITIALIZER = "/docs/portcullis-docs.js";

/**
 * Starts Swagger UI on the page. No configuration from the page's URL
 * (queryConfigEnabled: a link could otherwise point the page at another
 * document); no validator badge (it would load an image from
 * validator.swagger.io); the key typed into "Authorize" is kept in the page's
 * memory only (persistAuthorization: false), never in localStorage.
 */
const INITIALIZER_JS = `// Portcullis API docs: Swagger UI over /openapi.json.
"use strict";
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  queryConfigEnabled: false,
  validatorUrl: null,
  persistAuthorization: false,
  tryItOutEnabled: false,
  displayOperationId: false,
  defaultModelsExpandDepth: 0
});
`;

function swaggerUiDist(): { dir: string; version: string } {
  const manifest = createRequire(import.meta.url).resolve("swagger-ui-dist/package.json");
  const { version } = JSON.parse(readFileSync(manifest, "utf8")) as { version: string };
  return { dir: dirname(manifest), version };
}

function page(version: string): string {
  const asset = (file: string) => `/docs${file}?v=${encodeURIComponent(version)}`;
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Portcullis API</title>
<link rel="stylesheet" href="${asset("/swagger-ui.css")}">
<link rel="icon" type="image/png" href="${asset("/favicon-32x32.png")}" sizes="32x32">
<link rel="icon" type="image/png" href="${asset("/favicon-16x16.png")}" sizes="16x16">
<script defer src="${asset("/swagger-ui-bundle.js")}"></script>
<script defer src="${INITIALIZER}"></script>
</head>
<body>
<main id="swagger-ui"><noscript>The API documentation needs JavaScript; the document itself is at <a href="/openapi.json">/openapi.json</a>.</noscript></main>
</body>
</html>
`;
}

const etagOf = (text: string) => `"${createHash("sha256").update(text).digest("base64url").slice(0, 27)}"`;

/** Whether the request's If-None-Match names `etag` (or is "*"). */
function notModified(req: FastifyRequest, etag: string): boolean {
  const header = req.headers["if-none-match"];
  if (header === undefined) return false;
  return header
    .split(",")
    .map((t) => t.trim().replace(/^W\//, ""))
    .some((t) => t === etag || t === "*");
}

/** Sends `text` with an ETag, or a 304 when the client has it. */
function sendCached(req: FastifyRequest, reply: FastifyReply, text: string, etag: string, type: string, cacheControl: string): FastifyReply {
  reply.header("etag", etag).header("cache-control", cacheControl).header("x-content-type-options", "nosniff");
  if (notModified(req, etag)) return reply.code(304).send();
  return reply.type(type).send(text);
}

export async function registerApiDocs(app: FastifyInstance, bindings: readonly HttpBinding[]): Promise<void> {
  const openapi = openApiDocument(bindings);
  const document = JSON.stringify(openapi);
  const documentTag = etagOf(document);
  const schema = JSON.stringify(modelSchema(openapi));
  const schemaTag = etagOf(schema);
  const testSchema = JSON.stringify(modelTestSchema(openapi));
  const testSchemaTag = etagOf(testSchema);
  const { dir, version } = swaggerUiDist();
  const html = page(version);
  const htmlTag = etagOf(html);
  const initializerTag = etagOf(INITIALIZER_JS);

  app.get("/openapi.json", (req, reply) => {
    // Public and without secrets: tools on other origins (editors, client generators) may read it.
    reply.header("access-control-allow-origin", "*");
    return sendCached(req, reply, document, documentTag, "application/json; charset=utf-8", "public, max-age=300");
  });

  // A model file's schema and a test file's (model-schema.ts), for editors, likewise public.
  app.get("/model.schema.json", (req, reply) => {
    reply.header("access-control-allow-origin", "*");
    return sendCached(req, reply, schema, schemaTag, "application/schema+json; charset=utf-8", "public, max-age=300");
  });
  app.get("/model-test.schema.json", (req, reply) => {
    reply.header("access-control-allow-origin", "*");
    return sendCached(req, reply, testSchema, testSchemaTag, "application/schema+json; charset=utf-8", "public, max-age=300");
  });

  const docsPage = (req: FastifyRequest, reply: FastifyReply) => {
    for (const [name, value] of Object.entries(SECURITY_HEADERS)) reply.header(name, value);
    return sendCached(req, reply, html, htmlTag, "text/html; charset=utf-8", "no-cache");
  };
  app.get("/docs", docsPage);
  app.get("/docs/", docsPage);
  app.get(INITIALIZER, (req, reply) => {
    for (const [name, value] of Object.entries(SECURITY_HEADERS)) reply.header(name, value);
    return sendCached(req, reply, INITIALIZER_JS, initializerTag, "text/javascript; charset=utf-8", "no-cache");
  });

  // The console registered @fastify/static already, with its reply decorators: none here.
  await app.register(fastifyStatic, {
    root: dir,
    prefix: "/docs/",
    decorateReply: false,
    index: false,
    dotfiles: "deny",
    cacheControl: false,
    // A file outside the list goes to the not-found handler: the JSON 404.
    allowedPath: (pathName) => SWAGGER_FILES.has(pathName),
    setHeaders(res) {
      for (const [name, value] of Object.entries(SECURITY_HEADERS)) res.setHeader(name, value);
      res.setHeader("cache-control", "public, max-age=31536000, immutable");
    },
  });
}
