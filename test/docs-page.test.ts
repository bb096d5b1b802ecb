/**
 * /openapi.json and the docs page at /docs (src/transport/pages/api-docs.ts) over
 * a real port: headers, caching and conditional requests, the Swagger UI
 * files served from node_modules and nothing else of that folder; then the
 * page in a real Chromium (playwright-core), which must render every
 * operation, call the API with "Try it out", and never log a script error
 * or a Content-Security-Policy violation. About serving, not storage: PGlite only.
 */
import http from "node:http";
import { mkdirSync, readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DOCS_CSP } from "../src/transport/pages/api-docs.js";
import type { OpenApiDocument } from "../src/transport/pages/openapi-types.js";
import { inPage, launchChromium, openTab, SCREENSHOTS } from "./support/browser.js";
import { createTestDatabase, type TestDatabase } from "./support/engines.js";
import { createAppWithKey, startTestService, type TestService } from "./support/service.js";

const SWAGGER_DIR = path.dirname(createRequire(import.meta.url).resolve("swagger-ui-dist/package.json"));
const SWAGGER_VERSION = (JSON.parse(readFileSync(path.join(SWAGGER_DIR, "package.json"), "utf8")) as { version: string }).version;
const YEAR = "public, max-age=31536000, immutable";

const SECURITY = {
  "content-security-policy": DOCS_CSP,
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
  "cross-origin-opener-policy": "same-origin",
};

/** node:http, so the request reaches the server as written (fetch normalizes dot segments and adds cache headers to conditional requests). */
function raw(base: string, target: string, headers: Record<string, string> = {}, method = "GET") {
  return new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }>((resolve, reject) => {
    const req = http.request(`${base}/`, { path: target, headers, method }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.on("error", reject);
    req.end();
  });
}

describe("the OpenAPI document and the docs page", { timeout: 120_000 }, () => {
  let database: TestDatabase;
  let service: TestService;
  let browser: Browser;
  let appKey: string;

  beforeAll(async () => {
    database = await createTestDatabase("pglite");
    service = await startTestService(database.db);
    appKey = await createAppWithKey(service, "docs");
    const catalog = await service.call("PUT", "/api/v1/applications/docs/resources", {
      body: { resources: [{ resource: "document", description: "", actions: ["read", "update"] }] },
    });
    expect(catalog.status).toBe(200);
    const grant = await service.call("POST", "/api/v1/authorization/relationships", {
      key: appKey,
      body: { userId: "bob", resource: "document", resourceId: "d1", relation: "editor" },
    });
    expect(grant.status).toBe(201);
    browser = await launchChromium();
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await service?.close();
    await database?.dispose();
  });

  it("serves /openapi.json without a key, cacheable, with an ETag that revalidates", async () => {
    const res = await raw(service.url, "/openapi.json");
    expect(res.status).toBe(200);
    expect(res.headers["content-type"]).toBe("application/json; charset=utf-8");
    expect(res.headers["cache-control"]).toBe("public, max-age=300");
    expect(res.headers["access-control-allow-origin"]).toBe("*");
    expect(res.headers["x-content-type-options"]).toBe("nosniff");
    expect(res.headers.etag).toMatch(/^"[\w-]+"$/);
    const doc = JSON.parse(res.body.toString("utf8")) as OpenApiDocument;
    expect(doc.openapi).toBe("3.1.0");
    expect(doc.paths["/api/v1/authorization/check"]?.post).toBeDefined();

    const again = await raw(service.url, "/openapi.json", { "if-none-match": res.headers.etag! });
    expect(again.status).toBe(304);
    expect(again.body.length).toBe(0);
    expect(again.headers.etag).toBe(res.headers.etag);
    const stale = await raw(service.url, "/openapi.json", { "if-none-match": '"something-else"' });
    expect(stale.status).toBe(200);
    const head = await raw(service.url, "/openapi.json", {}, "HEAD");
    expect(head.status).toBe(200);
    expect(head.body.length).toBe(0);
    // The same bytes every time: made once, at start-up.
    expect((await raw(service.url, "/openapi.json")).body.equals(res.body)).toBe(true);
  });

  it.each(["/docs", "/docs/"])("serves the page at %s with the strict policy and no inline script", async (target) => {
    const res = await raw(service.url, target);
    expect(res.status).toBe(200);
    expect(res.headers["content-type"]).toBe("text/html; charset=utf-8");
    expect(res.headers["cache-control"]).toBe("no-cache");
    expect(res.headers).toMatchObject(SECURITY);
    const html = res.body.toString("utf8");
    const scripts = [...html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)];
    expect(scripts.map((s) => s[1]!.match(/src="([^"]+)"/)?.[1])).toEqual([
      `/docs/swagger-ui-bundle.js?v=${SWAGGER_VERSION}`,
      "/docs/portcullis-docs.js",
    ]);
    for (const script of scripts) expect(script[2]).toBe(""); // no inline code
    expect(html).not.toMatch(/\sstyle=|<style|\son\w+=/); // no inline style or handler either
    expect(html).not.toMatch(/https?:\/\//); // nothing from another origin
  });

  it.each([
    ["/docs/swagger-ui-bundle.js", /^application\/javascript|^text\/javascript/],
    ["/docs/swagger-ui.css", /^text\/css/],
    ["/docs/favicon-32x32.png", /^image\/png$/],
    ["/docs/favicon-16x16.png", /^image\/png$/],
  ])("serves %s from swagger-ui-dist, cached for a year", async (file, type) => {
    const res = await raw(service.url, `${file}?v=${SWAGGER_VERSION}`);
    expect(res.status).toBe(200);
    expect(res.headers["content-type"]).toMatch(type);
    expect(res.headers["cache-control"]).toBe(YEAR);
    expect(res.headers).toMatchObject(SECURITY);
    expect(res.body.length).toBe(statSync(path.join(SWAGGER_DIR, path.basename(file))).size);
    const again = await raw(service.url, `${file}?v=${SWAGGER_VERSION}`, { "if-none-match": res.headers.etag! });
    expect(again.status).toBe(304);
  });

  it("serves its own initializer script, revalidated on every load", async () => {
    const res = await raw(service.url, "/docs/portcullis-docs.js");
    expect(res.status).toBe(200);
    expect(res.headers["content-type"]).toBe("text/javascript; charset=utf-8");
    expect(res.headers["cache-control"]).toBe("no-cache");
    expect(res.body.toString("utf8")).toContain('url: "/openapi.json"');
  });

  it.each([
    "/docs/missing.js",
    "/docs/index.html", // swagger-ui-dist's demo page (the Petstore)
    "/docs/swagger-initializer.js",
    "/docs/package.json",
    "/docs/swagger-ui-bundle.js.map",
    "/docs/swagger-ui.js",
    "/docs/%2e%2e/package.json",
    "/docs/..%2f..%2fpackage.json",
    "/docs/%2e%2e/%2e%2e/%2e%2e/package.json",
  ])("answers %s with the JSON 404, nothing else of the folder", async (target) => {
    const res = await raw(service.url, target);
    expect(res.status).toBe(404);
    expect(res.headers["content-type"]).toMatch(/^application\/json/);
    expect(JSON.parse(res.body.toString("utf8"))).toMatchObject({ code: "not_found" });
  });

  it("renders every operation in Chromium, calls the check with Try it out, with no script error or CSP violation", async () => {
    const doc = (await (await fetch(`${service.url}/openapi.json`)).json()) as OpenApiDocument;
    const operations = Object.values(doc.paths).reduce((n, item) => n + Object.keys(item).length, 0);
    const tab = await openTab(browser, service.url);
    try {
      const { page } = tab;
      await page.addInitScript(
        'window.__violations = []; document.addEventListener("securitypolicyviolation", (e) => window.__violations.push(e.violatedDirective + " " + e.blockedURI));',
      );
      const answer = await page.goto("/docs");
      expect((await answer!.allHeaders())["content-security-policy"]).toBe(DOCS_CSP);

      // The check's row: its path and its summary, the RPC's comment.
      const check = page.locator("#operations-CheckService-Check");
      await check.getByText("/api/v1/authorization/check", { exact: true }).waitFor();
      await expect(check.locator(".opblock-summary-description").innerText()).resolves.toBe(doc.paths["/api/v1/authorization/check"]!.post!.summary);
      expect(await page.locator(".opblock").count()).toBe(operations);

      // Open one operation of each kind (query parameters, a required body, a 201, path variables,
      // a deep answer, no key) and expand a few schemas whole: each renders its own components.
      // (Not all of them: Swagger UI takes about a second per operation and per schema here.)
      for (const id of [
        "RelationshipService-ListRelationships",
        "CatalogService-PutCatalog",
        "PolicyService-CreatePolicy",
        "RoleService-UnassignRole",
        "CheckService-Explain",
        "Health-Readyz",
        "CheckService-Check",
      ]) {
        await page.locator(`#operations-${id} .opblock-summary-control`).click();
        await page.locator(`#operations-${id}.is-open .responses-table`).first().waitFor();
      }
      const schemasControl = page.locator("section.models button.models-control");
      if ((await schemasControl.getAttribute("aria-expanded")) !== "true") await schemasControl.click();
      for (const name of ["ExplainResponse", "PutCatalogRequest", "Error"]) {
        const schema = page.locator('section.models article[data-json-schema-level="0"]', {
          has: page.locator(":scope > .json-schema-2020-12-head .json-schema-2020-12__title", { hasText: new RegExp(`^${name}$`) }),
        });
        // The list is virtual (only the rows near the viewport are in the page): from its top, scroll
        // down until the schema's row is rendered.
        await schemasControl.scrollIntoViewIfNeeded();
        for (let step = 0; step < 400 && (await schema.count()) === 0; step++) await page.mouse.wheel(0, 300);
        const expand = schema.locator(":scope > .json-schema-2020-12-head .json-schema-2020-12-expand-deep-button");
        await expand.click();
        await expand.getByText("Collapse all").waitFor();
      }

      // Authorize with an application key, then ask the check.
      await page.getByRole("button", { name: "Authorize" }).first().click();
      // The dialog has a form per scheme: the key goes in X-API-Key's (Bearer's is AuthZEN's).
      const apiKey = page.locator(".auth-container", { hasText: "X-API-Key" });
      await apiKey.locator("input").fill(appKey);
      await apiKey.locator(".auth-btn-wrapper button.authorize").click();
      await apiKey.getByRole("button", { name: "Close" }).click();
      await check.getByRole("button", { name: "Try it out" }).click();
      await check.locator("textarea.body-param__text").fill(JSON.stringify({ userId: "bob", resource: "document", resourceId: "d1", action: "update" }));
      await check.getByRole("button", { name: "Execute" }).click();
      const live = check.locator(".live-responses-table .response");
      await live.locator(".response-col_status").getByText("200").waitFor();
      await expect(live.locator(".response-col_description").innerText()).resolves.toContain('"allowed": true');
      mkdirSync(SCREENSHOTS, { recursive: true });
      await check.screenshot({ path: path.join(SCREENSHOTS, "api-docs-check.png") });

      expect(await inPage<string[]>(page, "window.__violations")).toEqual([]);
      expect(tab.problems).toEqual([]);
      // Everything from this origin (no CDN), and the key kept in the page's memory only.
      expect(tab.urls.filter((u) => !u.startsWith(`${service.url}/`))).toEqual([]);
      expect(await inPage<number>(page, "localStorage.length + sessionStorage.length")).toBe(0);
      expect(await inPage<string>(page, "document.cookie")).toBe("");
    } finally {
      await tab.close();
    }
  });
});
