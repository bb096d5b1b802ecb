/**
 * How the service answers under /console/ (src/transport/pages/console-static.ts),
 * through a real port with fetch: the strict Content-Security-Policy and the
 * other security headers on every answer, caching (hashed assets for a year,
 * the page revalidated), the console router's deep links, 404s for missing
 * assets and for a service without a build, and nothing outside the build's
 * assets folder. A small stand-in build keeps this about serving, not Vite
 * (test/console-e2e.test.ts drives the real build). PGlite only: no storage.
 */
import http from "node:http";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pathToFileURL } from "node:url";
import { CONSOLE_CSP, defaultConsoleDir, isConsoleBuild } from "../src/transport/pages/console-static.js";
import { createTestDatabase, type TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, startTestService, type TestService } from "./support/service.js";

const PAGE = '<!doctype html><html><head><script type="module" src="/console/assets/index-abc123.js"></script></head><body><div id="root"></div></body></html>';
const SCRIPT = "console.log('console');";
const ICON = '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" fill="#1d4ed8"/></svg>';

function standInBuild(): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), "portcullis-console-"));
  mkdirSync(path.join(dir, "assets"));
  mkdirSync(path.join(dir, ".vite"));
  writeFileSync(path.join(dir, "index.html"), PAGE);
  writeFileSync(path.join(dir, "assets", "index-abc123.js"), SCRIPT);
  writeFileSync(path.join(dir, "assets", "index-abc123.css"), "body{margin:0}");
  writeFileSync(path.join(dir, "assets", "favicon-abc123.svg"), ICON);
  writeFileSync(path.join(dir, ".vite", "manifest.json"), JSON.stringify({ "index.html": { file: "assets/index-abc123.js", isEntry: true } }));
  writeFileSync(path.join(dir, "secret.txt"), "outside the assets folder");
  return dir;
}

const SECURITY = {
  "content-security-policy": CONSOLE_CSP,
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
  "cross-origin-opener-policy": "same-origin",
};

describe("the console's files", () => {
  let database: TestDatabase;
  let built: TestService;
  let unbuilt: TestService;
  let buildDir: string;
  let emptyDir: string;

  beforeAll(async () => {
    buildDir = standInBuild();
    emptyDir = mkdtempSync(path.join(os.tmpdir(), "portcullis-console-empty-"));
    database = await createTestDatabase("pglite");
    built = await startTestService(database.db, { consoleDir: buildDir });
    unbuilt = await startTestService(database.db, { consoleDir: emptyDir });
  });

  afterAll(async () => {
    await built?.close();
    await unbuilt?.close();
    await database?.dispose();
    rmSync(buildDir, { recursive: true, force: true });
    rmSync(emptyDir, { recursive: true, force: true });
  });

  const get = (service: TestService, p: string, init?: RequestInit) => fetch(`${service.url}${p}`, { redirect: "manual", ...init });

  /**
   * node:http, not fetch, where the request must reach the server as
   * written: fetch normalizes "%2e%2e" segments away, and a conditional
   * request from fetch carries "cache-control: no-cache" (which rightly
   * defeats a 304).
   */
  const raw = (service: TestService, p: string, headers: Record<string, string> = {}) =>
    new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }>((resolve, reject) => {
      const req = http.request(`${service.url}/`, { path: p, headers }, (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (body += chunk));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      });
      req.on("error", reject);
      req.end();
    });

  it("the CSP allows this origin only: no inline script or style, no eval, no framing, no form posts", () => {
    const directives = new Map(CONSOLE_CSP.split("; ").map((d) => [d.split(" ")[0], d.split(" ").slice(1)]));
    expect(directives.get("default-src")).toEqual(["'none'"]);
    expect(directives.get("script-src")).toEqual(["'self'"]);
    expect(directives.get("style-src")).toEqual(["'self'"]);
    expect(directives.get("connect-src")).toEqual(["'self'"]);
    expect(directives.get("frame-ancestors")).toEqual(["'none'"]);
    expect(directives.get("form-action")).toEqual(["'none'"]);
    expect(CONSOLE_CSP).not.toMatch(/unsafe-inline|unsafe-eval|\*/);
  });

  it.each([
    ["/console/", "the page"],
    ["/console/apps/shop/policies/pol_1", "a deep link of the console's router"],
    ["/console/sign-in?next=x", "with a query"],
  ])("%s (%s) answers index.html, revalidated on every load, with the security headers", async (p) => {
    const res = await get(built, p);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/html/);
    expect(res.headers.get("cache-control")).toBe("no-cache");
    for (const [name, value] of Object.entries(SECURITY)) expect(res.headers.get(name), name).toBe(value);
    expect(await res.text()).toBe(PAGE);
  });

  it("/console redirects to /console/", async () => {
    const res = await get(built, "/console");
    expect(res.status).toBe(301);
    expect(res.headers.get("location")).toBe("/console/");
  });

  it.each([
    ["/console/assets/index-abc123.js", /^(application|text)\/javascript/, SCRIPT],
    ["/console/assets/index-abc123.css", /^text\/css/, "body{margin:0}"],
    // The favicon (console/src/favicon.svg, named by index.html): an image the browser draws only with its own type.
    ["/console/assets/favicon-abc123.svg", /^image\/svg\+xml/, ICON],
  ])("%s: the hashed file, cached for a year, with the security headers", async (p, type, body) => {
    const res = await get(built, p);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(type);
    expect(res.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
    expect(res.headers.get("content-security-policy")).toBe(CONSOLE_CSP);
    expect(res.headers.get("etag")).toBeTruthy();
    expect(await res.text()).toBe(body);
    const again = await raw(built, p, { "if-none-match": res.headers.get("etag")! });
    expect(again.status).toBe(304);
    expect(again.body).toBe("");
  });

  it.each([
    ["/console/assets/index-old999.js", "an old build's chunk: a 404, never the page parsed as a script"],
    ["/console/assets/", "the folder"],
    ["/console/assets/%2e%2e/secret.txt", "an encoded climb out of assets"],
    ["/console/assets/..%2fsecret.txt", "an encoded slash"],
    ["/console/assets/%2e%2e/%2e%2e/package.json", "out of the build"],
  ])("%s (%s) is a 404 with a JSON error", async (p) => {
    const res = await raw(built, p);
    expect(res.status).toBe(404);
    expect(res.headers["content-type"]).toMatch(/^application\/json/);
    expect(res.body).not.toContain("outside the assets folder");
    expect(JSON.parse(res.body)).toMatchObject({ code: "not_found" });
  });

  it.each(["/console/.vite/manifest.json", "/console/secret.txt", "/console/../package.json"])("%s never answers a build file: only the page", async (p) => {
    const res = await get(built, p);
    const text = await res.text();
    expect(text).not.toContain("outside the assets folder");
    expect(text).not.toContain('"isEntry"');
    if (res.status === 200) expect(text).toBe(PAGE);
  });

  it("a service without a build says how to build it, and the API is unaffected", async () => {
    const res = await get(unbuilt, "/console/");
    expect(res.status).toBe(404);
    const body = (await res.json()) as { code: string; message: string };
    expect(body).toMatchObject({ code: "not_found" });
    expect(body.message).toContain("npm run build");
    const apps = await unbuilt.call("GET", "/api/v1/applications", { key: ADMIN_KEY });
    expect(apps.status).toBe(200);
  });

  it("the API's answers do not carry the console's page headers, and the console needs no key", async () => {
    const api = await built.call("GET", "/api/v1/applications", { key: ADMIN_KEY });
    expect(api.status).toBe(200);
    expect(api.headers.get("content-security-policy")).toBeNull();
    const page = await get(built, "/console/", { headers: {} });
    expect(page.status).toBe(200);
  });

  it("only GET and HEAD: a POST to the console is refused, changing nothing", async () => {
    const head = await get(built, "/console/", { method: "HEAD" });
    expect(head.status).toBe(200);
    const post = await get(built, "/console/", { method: "POST", body: "x" });
    expect(post.status).toBe(404);
  });
});

/**
 * Without CONSOLE_DIR the service serves the build `npm run build` leaves in
 * dist/console: run compiled (npm start, dist/src/...) and from the sources
 * (npm run dev, tsx). When it finds none, every console page is the service's
 * 404, and Chromium then asks for /favicon.ico (a page with no icon of its
 * own): a 404 for the favicon logged on every load. Run where a build exists
 * (npm test builds first).
 */
describe("where the service finds the console's build without CONSOLE_DIR", () => {
  const built = path.resolve("dist", "console");
  const compiled = path.resolve("dist", "src", "transport", "pages", "console-static.js");
  const same = (dir: string | undefined) => (dir === undefined ? undefined : path.resolve(dir));

  it.skipIf(!isConsoleBuild(built))("run from the sources (npm run dev): dist/console of the checkout", () => {
    expect(same(defaultConsoleDir())).toBe(built);
  });

  it.skipIf(!isConsoleBuild(built) || !existsSync(compiled))("run compiled (npm start): dist/console, beside dist/src", async () => {
    const module = (await import(pathToFileURL(compiled).href)) as { defaultConsoleDir: () => string | undefined };
    expect(same(module.defaultConsoleDir())).toBe(built);
  });
});
