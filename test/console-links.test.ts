/**
 * No dead ends in the console: signed in as the operator and as an
 * application key, over data set up through REST so that every page has
 * rows (applications, keys, a catalog, policies attached to roles, roles
 * with assignments, grants, audit events), a real Chromium crawls every
 * page it can reach. On each page it follows every link twice: by clicking
 * it (the console's own navigation, no reload) and by loading its URL fresh
 * (what a reload or a shared link does); a link met again on another page
 * (the same href and words: the navigation's) is followed the first time. A link fails when it leaves
 * /console/ for a page that is not the API's, when its target answers an
 * error status, lands somewhere else than the link said, shows a blank page
 * (no text, no main heading) or an error, or when anything logs an error in
 * the browser's console (a 404 for any file among them). Every destructive
 * button on the way wears the one destructive style. A fresh load of each
 * page logs nothing at all in the browser's console and no request fails (the
 * icon Chromium fetches among them); the icon is also checked on its own: the
 * page names it, the service serves it as SVG, the page's CSP lets it draw.
 * The console's sources are also held to
 * the one link mechanism (console/src/components/page-link.tsx), so a raw
 * href cannot miss the prefix again. About the console, not storage: PGlite only.
 */
import type { Browser, Page } from "playwright-core";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buttonLooks, destructiveButtonProblems, inPage, openTab, type Tab, startConsoleRig, type ConsoleRig } from "./support/browser.js";
import type { TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, type TestService } from "./support/service.js";
import { admin, createApp, expectStatus } from "./helpers/authz.js";

const APP = "shop";
const CATALOG = [
  {
    resource: "document",
    description: "Documents customers upload",
    actions: ["read", "update", "delete"],
    relations: [
      { name: "reviewer", actions: ["read"] },
      // Groups and hierarchy: a link to a folder, and a viewer held by team members too, inherited from the folder.
      { name: "parent", actions: [], subjects: ["folder"] },
      { name: "viewer", actions: ["read"], subjects: ["user", "team#member"], inherits: [{ through: "parent", relation: "viewer" }] },
    ],
  },
  { resource: "invoice", description: "Invoices we send", actions: ["read", "pay"] },
  { resource: "folder", description: "Folders of documents", actions: ["read"], relations: [{ name: "parent", actions: [], subjects: ["folder"] }] },
  { resource: "team", description: "Groups of people", actions: ["read"], relations: [{ name: "member", actions: ["read"] }] },
];

/** The API's own paths: Connect (/authz.v1.*), REST (/api/), its docs. A link may lead there; a failed call there is the page's business. */
const isApi = (url: URL) => url.pathname.startsWith("/authz.v1.") || url.pathname.startsWith("/api/") || url.pathname.startsWith("/docs") || url.pathname === "/openapi.json";

interface Link {
  href: string;
  url: string;
  text: string;
}

interface Crawl {
  pages: string[];
  clicked: number;
  failures: string[];
}

// ---------------------------------------------------------------------------
// The sources: one way to link

/** Where links and navigation are made (PageLink, GoTo, useGo, reloadAt), and the one destructive button. */
const LINK_MODULE = "components/page-link.tsx";
const DANGER_MODULE = "components/danger-button.tsx";

/**
 * What in a console source file bypasses the one link mechanism or the one
 * destructive style: wouter's Link, Redirect or useLocation, a raw href or
 * <a>, a navigation through window.location or history, the danger class.
 */
export function sourceProblems(file: string, text: string): string[] {
  const problems: string[] = [];
  if (file !== LINK_MODULE) {
    for (const m of text.matchAll(/import\s*(?:type\s*)?{([^}]*)}\s*from\s*"wouter(?:\/[^"]*)?"/g)) {
      for (const name of m[1]!.split(",").map((n) => n.trim().split(/\s+as\s+/)[0]!)) {
        if (["Link", "Redirect", "useLocation", "navigate", "useBrowserLocation"].includes(name)) problems.push(`imports ${name} from wouter`);
      }
    }
    if (/\bhref=["'{]/.test(text)) problems.push("a raw href");
    if (/<a[\s>]/.test(text)) problems.push("a raw <a>");
    if (/\blocation\.(assign|replace)\s*\(|\blocation\.href\s*=|\bhistory\.(push|replace)State\s*\(/.test(text)) problems.push("navigates around the router");
  }
  if (file !== DANGER_MODULE && /className=\{?\s*["'`][^"'`]*\bdanger\b/.test(text)) problems.push("the danger class outside DangerButton");
  return problems;
}

function consoleSources(dir: string, prefix = ""): { file: string; text: string }[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = `${prefix}${entry.name}`;
    if (entry.isDirectory()) return consoleSources(path.join(dir, entry.name), `${file}/`);
    return /\.tsx?$/.test(entry.name) ? [{ file, text: readFileSync(path.join(dir, entry.name), "utf8") }] : [];
  });
}

describe("the console's sources link one way", () => {
  it.each([
    ["pages/x.tsx", '<PageLink to={appPaths(appId).role(r.roleId)}>{r.name}</PageLink>', []],
    ["pages/x.tsx", 'import { Route, Switch } from "wouter";', []],
    ["pages/x.tsx", 'import { usePathname } from "wouter/use-browser-location";', []],
    ["pages/x.tsx", '<DangerButton onClick={remove}>Delete</DangerButton>', []],
    ["pages/x.tsx", 'import { Link, Route } from "wouter";', ["imports Link from wouter"]],
    ["pages/x.tsx", 'import {\n  Redirect as R,\n  Switch,\n} from "wouter";', ["imports Redirect from wouter"]],
    ["pages/x.tsx", 'import { useLocation } from "wouter";', ["imports useLocation from wouter"]],
    ["pages/x.tsx", 'import { navigate } from "wouter/use-browser-location";', ["imports navigate from wouter"]],
    ["pages/x.tsx", "<Link href={`~/apps/${appId}/roles/${id}`}>x</Link>", ["a raw href"]],
    ["pages/x.tsx", '<a href="/console/">Home</a>', ["a raw href", "a raw <a>"]],
    ["pages/x.tsx", 'window.location.assign("/console/");', ["navigates around the router"]],
    ["pages/x.tsx", 'window.location.href = "/";', ["navigates around the router"]],
    ["pages/x.tsx", 'history.pushState(null, "", "/x");', ["navigates around the router"]],
    ["pages/x.tsx", '<button type="button" className="danger">Delete</button>', ["the danger class outside DangerButton"]],
    ["pages/x.tsx", "<button className={`danger big`}>Delete</button>", ["the danger class outside DangerButton"]],
    [LINK_MODULE, 'import { Link, Redirect, useLocation } from "wouter";\nwindow.location.assign(url);', []],
    [DANGER_MODULE, '<button {...props} className="danger" />', []],
  ])("%s: %s", (file, text, expected) => {
    expect(sourceProblems(file, text)).toEqual(expected);
  });

  it("every file of console/src keeps to PageLink, GoTo, useGo, reloadAt and DangerButton", () => {
    const files = consoleSources(path.resolve("console/src"));
    expect(files.map((f) => f.file)).toEqual(expect.arrayContaining([LINK_MODULE, DANGER_MODULE, "pages/policies.tsx", "pages/roles.tsx"]));
    expect(files.flatMap((f) => sourceProblems(f.file, f.text).map((p) => `${f.file}: ${p}`))).toEqual([]);
  });
});

describe("the console's links in Chromium", { timeout: 600_000 }, () => {
  let database: TestDatabase;
  let service: TestService;
  let browser: Browser;
  let rig: ConsoleRig | undefined;
  let appKey: string;
  let tabs: Tab[] = [];

  beforeAll(async () => {
    rig = await startConsoleRig();
    ({ database, service, browser, tabs } = rig);

    // Rows on every page: an application; keys; a catalog; policies (one a tenant's) attached to roles;
    // roles with assignments; grants; and the audit events all of this writes.
    appKey = await createApp(service, APP, CATALOG);
    expectStatus(await service.call("POST", `/api/v1/applications/${APP}/api-keys`, { body: { name: "ci reader", scopes: ["read"] } }), 201);
    const ops = admin(service, APP);
    const deleters = await ops.createPolicy("Document deleters", ["document:delete", "document:read"]);
    const readers = await ops.createPolicy("Readers", ["document:read", "invoice:read"]);
    const payers = await ops.createPolicy("Acme payers", ["invoice:pay"], "acme");
    await ops.createPolicy("Unattached", ["invoice:read"]);
    const editors = await ops.createRole("Editors", [deleters, readers]);
    const billing = await ops.createRole("Acme billing", [payers, readers], "acme");
    for (const user of ["u1", "u2"]) await ops.assign(editors, user);
    await ops.assign(billing, "u3");
    const grants = await service.call("POST", "/api/v1/authorization/relationships/bulk", {
      key: appKey,
      body: {
        writes: [
          { userId: "u1", resource: "document", resourceId: "d1", relation: "owner" },
          { userId: "u4", resource: "document", resourceId: "d1", relation: "reviewer" },
          { userId: "u5", resource: "team", resourceId: "eng", relation: "member" },
          { subject: { resource: "team", resourceId: "eng", relation: "member" }, resource: "document", resourceId: "d1", relation: "viewer" },
          { subject: { resource: "folder", resourceId: "f1" }, resource: "document", resourceId: "d1", relation: "parent" },
        ],
      },
    });
    expectStatus(grants, 200);
  }, 120_000);

  afterAll(async () => {
    await rig?.close();
  });

  /**
   * A fresh tab, signed in, that also counts requests in flight (to know when
   * a page has settled) and records every answer of 400 or more from a file
   * that is not the API (a missing favicon, chunk or page).
   */
  async function signedIn(key: string): Promise<{ tab: Tab; settle: () => Promise<string | undefined>; badFiles: string[] }> {
    const tab = await openTab(browser, service.url);
    tabs.push(tab);
    const { page } = tab;
    let inFlight = 0;
    const badFiles: string[] = [];
    page.on("request", () => inFlight++);
    page.on("requestfinished", () => inFlight--);
    page.on("requestfailed", () => inFlight--);
    page.on("response", (response) => {
      if (response.status() >= 400 && !isApi(new URL(response.url()))) badFiles.push(`${response.status()} for ${response.url()}`);
    });
    // Chromium's "Failed to load resource" line for a file that is not the API (openTab lets 4xx lines pass: the API's refusals).
    page.on("console", (message) => {
      const from = message.location().url;
      if (message.type() === "error" && from !== "" && !isApi(new URL(from))) badFiles.push(`console: ${message.text()} (${from})`);
    });

    /** Waits until nothing is in flight or loading and the page shows a main heading and text (undefined), or 10 s: then why not. */
    const settle = async (): Promise<string | undefined> => {
      const deadline = Date.now() + 10_000;
      let quietSince = Date.now();
      for (;;) {
        const state = await inPage<{ loading: boolean; heading: string; text: number; alert: string }>(
          page,
          `(() => {
            const root = document.getElementById("root");
            const h1 = document.querySelector("main h1");
            const statuses = [...document.querySelectorAll('[role="status"]')].map((s) => s.textContent ?? "");
            const alerts = [...document.querySelectorAll('[role="alert"]')].map((s) => s.textContent ?? "").join(" | ");
            return {
              loading: statuses.some((s) => /^(Loading|Signing in)/.test(s.trim())),
              heading: h1 === null ? "" : h1.innerText.trim(),
              text: root === null ? 0 : root.innerText.trim().length,
              alert: alerts,
            };
          })()`,
        ).catch(() => ({ loading: true, heading: "", text: 0, alert: "" }));
        if (inFlight > 0 || state.loading) quietSince = Date.now();
        const quiet = Date.now() - quietSince >= 100;
        const problem =
          state.text === 0 ? "a blank page (no text at all)" : state.heading === "" ? "no main heading" : state.alert !== "" ? `an error on the page: ${state.alert}` : undefined;
        if (quiet && problem === undefined) return undefined;
        // Quiet but not yet whole: a page between two renders (a click whose request has not
        // started yet on a busy machine, a route's code arriving) is waited for; only what
        // lasts to the deadline is the page's own.
        if (Date.now() > deadline) return quiet ? problem : "still loading after 10 s";
        await page.waitForTimeout(25);
      }
    };

    await page.goto("/console/");
    await page.getByLabel("API key").fill(key);
    await page.getByRole("button", { name: "Sign in" }).click();
    expect(await settle()).toBeUndefined();
    return { tab, settle, badFiles };
  }

  const links = (page: Page) =>
    inPage<Link[]>(page, `[...document.querySelectorAll("a[href]")].map((a) => ({ href: a.getAttribute("href"), url: a.href, text: a.innerText.trim() }))`);

  /** Every page reachable by links from where the key lands, each link followed by a click and by a fresh load. */
  async function crawl(key: string): Promise<Crawl> {
    const { tab, settle, badFiles } = await signedIn(key);
    const { page } = tab;
    const failures: string[] = [];
    const pagePath = (url: string) => new URL(url).pathname;
    const queue = [pagePath(page.url())];
    const seen = new Set(queue);
    const loaded = new Set<string>();
    const dangerLooks = new Set<string>();
    const clickedLinks = new Set<string>();
    let clicked = 0;

    /** Runs `step`, then reports what went wrong in it (as a failure about `what`). */
    const checked = async (what: string, step: () => Promise<string | undefined>) => {
      const problemsBefore = tab.problems.length;
      const filesBefore = badFiles.length;
      const problem = await step();
      const logged = [...tab.problems.slice(problemsBefore), ...badFiles.slice(filesBefore)];
      if (problem !== undefined) failures.push(`${what}: ${problem}`);
      for (const line of logged) failures.push(`${what}: ${line}`);
    };

    /** A fresh load of `target` (a reload, a shared link): a page of the console, not an error status. */
    const load = (target: string, from: string) =>
      checked(`loading ${target} fresh (linked from ${from})`, async () => {
        loaded.add(target);
        const response = await page.goto(target);
        const status = response?.status() ?? 0;
        if (status >= 400) return `answered ${status}`;
        if (pagePath(page.url()) !== target) return `landed on ${pagePath(page.url())}`;
        const problem = await settle();
        if (problem !== undefined) return problem;
        for (const line of await destructiveButtonProblems(page)) failures.push(`${target}: ${line}`);
        for (const button of await buttonLooks(page)) if (button.danger) dangerLooks.add(button.look);
        return undefined;
      });

    while (queue.length > 0) {
      const source = queue.shift()!;
      if (!loaded.has(source)) await load(source, "the crawl");
      else {
        await page.goto(source);
        await settle();
      }
      const found = await links(page);
      if (found.length === 0 && source.startsWith("/console/apps/")) failures.push(`${source}: no links at all`);
      for (const link of new Map(found.map((l) => [l.url, l])).values()) {
        const target = new URL(link.url);
        const what = `the link "${link.text}" (href="${link.href}") on ${source}`;
        if (target.origin !== new URL(service.url).origin) {
          failures.push(`${what}: leads to another site, ${link.url}`);
          continue;
        }
        if (isApi(target)) continue;
        const inConsole = target.pathname.startsWith("/console/");
        if (!inConsole) failures.push(`${what}: leaves the console for ${target.pathname}`);
        // The same link (its href and its words) met again on another page, the navigation's
        // on every page: clicked once, its target loaded once; the others are that link again.
        const sameLink = `${link.href}\n${link.text}`;
        if (clickedLinks.has(sameLink)) continue;
        clickedLinks.add(sameLink);
        clicked++;
        await checked(`clicking ${what}`, async () => {
          await page.locator(`a[href="${link.href}"]`).first().click();
          await page.waitForURL((url) => url.pathname !== source || target.pathname === source).catch(() => undefined);
          const landed = pagePath(page.url());
          const problem = await settle();
          if (landed !== target.pathname) return `landed on ${landed}${problem === undefined ? "" : `, ${problem}`}`;
          return problem;
        });
        // Back where the link was, by the browser's history (as a person would); the next click waits for its link.
        await page.goBack();
        if (pagePath(page.url()) !== source) {
          await page.goto(source);
          await settle();
        }
        if (!inConsole) {
          await load(target.pathname, source);
          await page.goto(source);
          await settle();
        } else if (!seen.has(target.pathname)) {
          seen.add(target.pathname);
          queue.push(target.pathname);
        }
      }
    }
    if (dangerLooks.size > 1) failures.push(`destructive buttons in ${dangerLooks.size} looks across pages: ${[...dangerLooks].join("; ")}`);
    return { pages: [...seen].sort(), clicked, failures };
  }

  it("every page names the console's icon, which the service serves as SVG and the page's CSP allows", async () => {
    const { tab, settle } = await signedIn(appKey);
    const { page } = tab;
    for (const at of ["/console/", `/console/apps/${APP}/roles`]) {
      await page.goto(at);
      expect(await settle()).toBeUndefined();
      const icon = await inPage<{ href: string; type: string } | null>(
        page,
        `(() => { const l = document.querySelector('link[rel~="icon"]'); return l === null ? null : { href: l.href, type: l.type }; })()`,
      );
      expect(icon, at).not.toBeNull();
      expect(new URL(icon!.href).pathname).toMatch(/^\/console\/assets\/favicon-[\w-]+\.svg$/);
      const served = await fetch(icon!.href);
      expect(served.status).toBe(200);
      expect(served.headers.get("content-type")).toMatch(/^image\/svg\+xml/);
      expect(await served.text()).toMatch(/^<svg [^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/);
      // Drawn by the page itself, under its own Content-Security-Policy (img-src 'self').
      const drawn = await inPage<number>(
        page,
        `new Promise((resolve) => { const i = new Image(); i.onload = () => resolve(i.naturalWidth); i.onerror = () => resolve(0); i.src = ${JSON.stringify(icon!.href)}; })`,
      );
      expect(drawn).toBeGreaterThan(0);
    }
    expect(tab.problems).toEqual([]);
  });

  /**
   * The pages an application key and the operator land on or link to, each
   * loaded fresh: a load logs nothing at all in the browser's console (no
   * error, no warning, no "Failed to load resource" even for a 4xx, which
   * the crawl lets pass for the API's refusals a page shows on purpose) and
   * no request fails or answers 400 or more; the icon Chromium asks for is
   * the page's own SVG, never /favicon.ico.
   */
  it("a fresh load of every page logs nothing in the browser's console and no request fails: the favicon among them", async () => {
    const policies = (await service.call("GET", `/api/v1/applications/${APP}/policies`)).body.policies as { policyId: string }[];
    const roles = (await service.call("GET", `/api/v1/applications/${APP}/roles`)).body.roles as { roleId: string }[];
    const appPages = ["catalog", "policies", `policies/${policies[0]!.policyId}`, "roles", `roles/${roles[0]!.roleId}`, "grants", "audit", "check", "keys"].map(
      (p) => `/console/apps/${APP}/${p}`,
    );
    for (const [key, pages] of [
      [appKey, appPages],
      [ADMIN_KEY, ["/console/", ...appPages]],
    ] as const) {
      const { tab, settle } = await signedIn(key);
      const { page } = tab;
      const logged: string[] = [];
      const icons: string[] = [];
      page.on("console", (message) => {
        if (message.type() === "error" || message.type() === "warning") logged.push(`${message.type()}: ${message.text()} (${message.location().url})`);
      });
      page.on("response", (response) => {
        if (response.status() >= 400) logged.push(`${response.status()} for ${response.url()}`);
        if (/favicon/.test(response.url())) icons.push(`${response.status()} ${new URL(response.url()).pathname}`);
      });
      // A call still in flight when the next page is loaded is aborted by the navigation: not a failure.
      page.on("requestfailed", (request) => {
        const why = request.failure()?.errorText ?? "";
        if (why !== "net::ERR_ABORTED") logged.push(`failed: ${request.url()} (${why})`);
      });
      for (const at of pages) {
        const iconsBefore = icons.length;
        const response = await page.goto(at);
        expect(response?.status(), at).toBe(200);
        expect(await settle(), at).toBeUndefined();
        // The icon is fetched after the load: its answer, or 200 ms (it is usually in by now).
        for (const until = Date.now() + 200; icons.length === iconsBefore && Date.now() < until; ) await page.waitForTimeout(10);
        expect(logged, at).toEqual([]);
      }
      expect(tab.problems).toEqual([]);
      // Chromium fetched the page's icon (headless too, these days): the hashed SVG, found.
      expect(icons.length).toBeGreaterThan(0);
      for (const icon of icons) expect(icon).toMatch(/^200 \/console\/assets\/favicon-[\w-]+\.svg$/);
    }
  });

  // The crawls run side by side, each in its own browser context: most of their time is waiting for pages.
  it.concurrent("the operator: every link of every page, clicked and loaded fresh, leads to a page of the console", async ({ expect }) => {
    const result = await crawl(ADMIN_KEY);
    expect(result.failures).toEqual([]);
    // It did crawl: the applications, each application's pages, a policy's and a role's pages.
    expect(result.pages).toEqual(
      expect.arrayContaining([
        "/console/",
        `/console/apps/${APP}/catalog`,
        `/console/apps/${APP}/keys`,
        `/console/apps/${APP}/audit`,
      ]),
    );
    expect(result.pages.some((p) => p.startsWith(`/console/apps/${APP}/policies/`))).toBe(true);
    expect(result.pages.some((p) => p.startsWith(`/console/apps/${APP}/roles/`))).toBe(true);
    // Distinct links clicked (the navigation's once, each row's): 18 when this was written.
    expect(result.clicked).toBeGreaterThanOrEqual(15);
  });

  it.concurrent("an application key: every link of every page, clicked and loaded fresh, leads to a page of the console", async ({ expect }) => {
    const result = await crawl(appKey);
    expect(result.failures).toEqual([]);
    expect(result.pages).toEqual(expect.arrayContaining([`/console/apps/${APP}/catalog`, `/console/apps/${APP}/grants`, `/console/apps/${APP}/check`]));
    expect(result.pages.filter((p) => p.startsWith(`/console/apps/${APP}/policies/`))).toHaveLength(4);
    expect(result.pages.filter((p) => p.startsWith(`/console/apps/${APP}/roles/`))).toHaveLength(2);
    expect(result.pages.every((p) => p.startsWith(`/console/apps/${APP}/`))).toBe(true);
  });
});
