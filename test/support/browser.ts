/**
 * The console's end-to-end tests drive a real Chromium (Debian's, at
 * /usr/bin/chromium, or CHROMIUM_PATH) through playwright-core, against a
 * real Vite build of console/ served by a real service. This module builds
 * the console once into a temporary folder, launches the browser, and gives
 * each test a fresh context (its own sessionStorage) that records what a
 * page must never do: a script error, a Content-Security-Policy violation,
 * a request whose URL carries the key.
 */
import { expect } from "vitest";
import { AxeBuilder } from "@axe-core/playwright";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";
import { build } from "vite";
import { createTestDatabase, type TestDatabase } from "./engines.js";
import { startTestService, type TestService } from "./service.js";

export const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
export const chromiumAvailable = existsSync(CHROMIUM);

/** Where the tests leave their screenshots (gitignored; the two docs/console.md shows live in docs/console/). */
export const SCREENSHOTS = path.resolve("test-results", "console");

/** Builds console/ with its own Vite config into a fresh folder; returns the folder. */
export async function buildConsole(): Promise<string> {
  const outDir = mkdtempSync(path.join(os.tmpdir(), "portcullis-console-build-"));
  await build({ configFile: path.resolve("console/vite.config.ts"), logLevel: "warn", build: { outDir, emptyOutDir: true } });
  return outDir;
}

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
}

export interface Tab {
  context: BrowserContext;
  page: Page;
  /** Script errors, console errors (CSP violations among them), and failed requests to this origin. */
  problems: string[];
  /** Every URL the page requested. */
  urls: string[];
  close(): Promise<void>;
}

export async function openTab(browser: Browser, baseUrl: string): Promise<Tab> {
  const context = await browser.newContext({ baseURL: baseUrl, viewport: { width: 1280, height: 900 } });
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: baseUrl });
  const page = await context.newPage();
  page.setDefaultTimeout(15_000);
  const problems: string[] = [];
  const urls: string[] = [];
  page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  page.on("console", (message) => {
    // The API's refusals the pages show on purpose are logged by Chromium as failed loads; only other errors count.
    if (message.type() === "error" && !/Failed to load resource: the server responded with a status of (4\d\d)/.test(message.text())) {
      problems.push(`console error: ${message.text()}`);
    }
  });
  page.on("request", (request) => urls.push(request.url()));
  return { context, page, problems, urls, close: () => context.close() };
}

/** axe-core's serious and critical findings on the page as it is now, as readable lines. */
export async function accessibilityProblems(page: Page): Promise<string[]> {
  const results = await new AxeBuilder({ page }).withTags(["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]).analyze();
  return results.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`);
}

/**
 * A screenshot for people reading the run. It is not an assertion: a capture
 * Chromium is slow to give on a busy machine (CI once waited 15 s for one
 * after the fonts loaded) is reported on stderr and the test goes on.
 */
export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(SCREENSHOTS, { recursive: true });
  try {
    await page.screenshot({ path: path.join(SCREENSHOTS, `${name}.png`), fullPage: true, animations: "disabled", timeout: 30_000 });
  } catch (error) {
    process.stderr.write(`screenshot ${name} not taken: ${error instanceof Error ? error.message.split("\n")[0] : String(error)}\n`);
  }
}

/** Buttons that delete, remove, revoke or detach, by their text or accessible name. */
export const DESTRUCTIVE = /^(Delete|Remove|Revoke|Detach)\b/;

/**
 * The visible buttons of the page, each with whether it is destructive (by
 * its words), whether it wears the one destructive style (the "danger" class
 * of console/src/components/danger-button.tsx) and its look (colours), to
 * check that every destructive action looks the same and nothing else does.
 */
export async function buttonLooks(page: Page): Promise<{ name: string; destructive: boolean; danger: boolean; look: string }[]> {
  const buttons = await inPage<{ text: string; label: string; danger: boolean; look: string }[]>(
    page,
    `[...document.querySelectorAll("button")].filter((b) => b.offsetParent !== null).map((b) => {
      const style = getComputedStyle(b);
      return { text: b.innerText.trim(), label: b.getAttribute("aria-label") ?? "", danger: b.classList.contains("danger"), look: [style.backgroundColor, style.color, style.borderTopColor].join(" ") };
    })`,
  );
  return buttons.map((b) => ({ name: b.label || b.text, destructive: DESTRUCTIVE.test(b.text) || DESTRUCTIVE.test(b.label), danger: b.danger, look: b.look }));
}

/** What is wrong with the destructive buttons on the page: one not in the style, another button in it, or two looks. */
export async function destructiveButtonProblems(page: Page): Promise<string[]> {
  const buttons = await buttonLooks(page);
  const problems = buttons.filter((b) => b.destructive !== b.danger).map((b) => `"${b.name}" is ${b.destructive ? "destructive but not" : "not destructive but"} styled as such`);
  const looks = new Set(buttons.filter((b) => b.danger).map((b) => b.look));
  if (looks.size > 1) problems.push(`destructive buttons in ${looks.size} looks: ${[...looks].join("; ")}`);
  return problems;
}

/** An expression evaluated in the page (a string: the test's own types have no DOM). */
export const inPage = <T>(page: Page, expression: string): Promise<T> => page.evaluate(expression) as Promise<T>;

/**
 * What the console's Chromium tests run on: the console built into a folder
 * of its own, a service serving it on embedded PGlite, and Chromium. close()
 * closes the tabs opened (pushed to `tabs`) and everything else.
 */
export interface ConsoleRig {
  database: TestDatabase;
  service: TestService;
  browser: Browser;
  tabs: Tab[];
  /** The console's build, which the service serves. */
  buildDir: string;
  close(): Promise<void>;
}

export async function startConsoleRig(): Promise<ConsoleRig> {
  const buildDir = await buildConsole();
  const database = await createTestDatabase("pglite");
  const service = await startTestService(database.db, { consoleDir: buildDir });
  const browser = await launchChromium();
  const tabs: Tab[] = [];
  return {
    database,
    service,
    browser,
    tabs,
    buildDir,
    async close() {
      for (const tab of tabs) await tab.close().catch(() => undefined);
      await browser.close();
      await service.close();
      await database.dispose();
      rmSync(buildDir, { recursive: true, force: true });
    },
  };
}

/**
 * No script error or CSP violation so far, nothing serious or critical for
 * axe, destructive buttons in their one style; a screenshot when named.
 * With `key`, no request URL carried the key either.
 */
export async function expectClean(tab: Tab, options: { screenshot?: string; key?: string } = {}): Promise<void> {
  expect(await accessibilityProblems(tab.page), tab.page.url()).toEqual([]);
  expect(await destructiveButtonProblems(tab.page), tab.page.url()).toEqual([]);
  if (options.screenshot !== undefined) await screenshot(tab.page, options.screenshot);
  expect(tab.problems).toEqual([]);
  const { key } = options;
  if (key !== undefined) expect(tab.urls.filter((u) => u.includes(key) || u.includes(encodeURIComponent(key)))).toEqual([]);
}
