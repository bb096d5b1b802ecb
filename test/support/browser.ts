/**
 * The console's end-to-end tests drive a real Chromium (Debian's, at
 * /usr/bin/chromium, or CHROMIUM_PATH) through playwright-core, against a
 * real Vite build of console/ served by a real service. This module builds
 * the console once for all the files of a run (consoleBuild), gives each
 * file a copy of that build, its service and a browser, and gives each
 * test a fresh context (its own sessionStorage) that records what a
 * page must never do: a script error, a Content-Security-Policy violation,
 * a request whose URL carries the key.
 */
import { expect } from "vitest";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, utimesSync } from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";
import { createTestDatabase, type TestDatabase } from "./engines.js";
import { startTestService, type TestService } from "./service.js";

export const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
export const chromiumAvailable = existsSync(CHROMIUM);

/** Where the tests leave their screenshots (gitignored; the two docs/console.md shows live in docs/console/). */
export const SCREENSHOTS = path.resolve("test-results", "console");

/** Builds console/ with its own Vite config into a fresh folder; returns the folder. */
export async function buildConsole(): Promise<string> {
  const outDir = mkdtempSync(path.join(os.tmpdir(), "portcullis-console-build-"));
  // Imported when a build is needed: most files find one (consoleBuild).
  const { build } = await import("vite");
  await build({ configFile: path.resolve("console/vite.config.ts"), logLevel: "warn", build: { outDir, emptyOutDir: true } });
  return outDir;
}

/** A hash of what the console's build depends on: console/ (its sources and Vite config) and the lock. */
function consoleInputsHash(): string {
  const hash = createHash("sha256");
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const file = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(file);
      else if (entry.isFile()) hash.update(`${path.relative(process.cwd(), file)}\0`).update(readFileSync(file)).update("\0");
    }
  };
  walk(path.resolve("console"));
  hash.update(readFileSync(path.resolve("package-lock.json")));
  return hash.digest("hex").slice(0, 20);
}

const CACHE_PREFIX = "portcullis-console-cache-";

/**
 * The console built from the current sources, built at most once for all the
 * files of a run (a Vite build takes 7 to 11 s on two busy cores): dist/console
 * when `scripts/build.mjs --is-current` says dist/ holds the current sources
 * (CI and `npm test` build first), else a build kept in the temporary folder
 * under a hash of its inputs, which the next file (and the next run) finds.
 * A build appears there by a rename, whole or not at all; one no run has
 * used for a day is removed.
 */
export async function consoleBuild(): Promise<string> {
  const dist = path.resolve("dist", "console");
  if (existsSync(path.join(dist, ".vite", "manifest.json")) && spawnSync(process.execPath, ["scripts/build.mjs", "--is-current"], { stdio: "ignore" }).status === 0) {
    return dist;
  }
  const cached = path.join(os.tmpdir(), `${CACHE_PREFIX}${consoleInputsHash()}`);
  if (existsSync(cached)) {
    // Marked as used: what is removed is what no run has used for a day.
    utimesSync(cached, new Date(), new Date());
    return cached;
  }
  const built = await buildConsole();
  try {
    renameSync(built, cached);
  } catch (error) {
    // Another file's build got there first: the same inputs, so the same build.
    if (!existsSync(cached)) throw error;
    rmSync(built, { recursive: true, force: true });
  }
  for (const name of readdirSync(os.tmpdir())) {
    const old = path.join(os.tmpdir(), name);
    if (!name.startsWith(CACHE_PREFIX) || old === cached) continue;
    // Another run may be removing it too.
    const unusedFor = Date.now() - (statSync(old, { throwIfNoEntry: false })?.mtimeMs ?? Date.now());
    if (unusedFor > 86_400_000) rmSync(old, { recursive: true, force: true });
  }
  return cached;
}

/** A copy of the current console build (consoleBuild) in a fresh folder of its own; returns the folder. */
export async function copyOfConsoleBuild(): Promise<string> {
  const source = await consoleBuild();
  const outDir = mkdtempSync(path.join(os.tmpdir(), "portcullis-console-build-"));
  cpSync(source, outDir, { recursive: true });
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

/**
 * axe-core's source, read on first use: the same version @axe-core/playwright
 * runs (package.json pins both), injected into the page once.
 */
let axeSource: string | undefined;
function axeCoreSource(): string {
  return (axeSource ??= (createRequire(import.meta.url)("axe-core") as { source: string }).source);
}

const AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"];

interface AxeFinding {
  id: string;
  impact?: string | null;
  help: string;
  nodes: { target: unknown[] }[];
}

/**
 * axe-core's serious and critical findings on the page as it is now, as
 * readable lines. On a page without frames (the console's) axe-core runs in
 * the page itself, injected once per document, and sends back its
 * violations alone: @axe-core/playwright would inject it again on each call,
 * finish every run in a new blank page and send back every rule's passes
 * too, about six times as long for the same rules and the same findings. A
 * page with frames goes through @axe-core/playwright, which reaches into them.
 */
export async function accessibilityProblems(page: Page): Promise<string[]> {
  let violations: AxeFinding[];
  if (page.frames().length > 1) {
    const { AxeBuilder } = await import("@axe-core/playwright");
    violations = (await new AxeBuilder({ page }).withTags(AXE_TAGS).analyze()).violations;
  } else {
    if (!(await inPage<boolean>(page, "typeof window.axe?.run === 'function'"))) await page.evaluate(axeCoreSource());
    // Only the violations in full (resultTypes keeps one node of each other kind), and of them only what the lines say.
    violations = await inPage<AxeFinding[]>(
      page,
      `axe.run(document, { runOnly: { type: "tag", values: ${JSON.stringify(AXE_TAGS)} }, resultTypes: ["violations"] })
        .then((r) => r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => ({ target: n.target })) })))`,
    );
  }
  return violations
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
  // Side by side: the build's copy and the database, then the service; Chromium meanwhile.
  const launching = launchChromium();
  let buildDir: string, database: TestDatabase, service: TestService;
  try {
    [buildDir, database] = await Promise.all([copyOfConsoleBuild(), createTestDatabase("pglite")]);
    service = await startTestService(database.db, { consoleDir: buildDir });
  } catch (error) {
    // No Chromium left behind to keep the file's process alive.
    await launching.then((b) => b.close()).catch(() => undefined);
    throw error;
  }
  const browser = await launching;
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
