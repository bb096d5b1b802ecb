/**
 * The console end to end: a real Vite build of console/, served by a real
 * service on a real port, driven by a real Chromium (playwright-core), with
 * the data set up and read back through the REST API. Each test opens a
 * fresh browser context (its own sessionStorage) and fails on any script
 * error or Content-Security-Policy violation; every page is checked by
 * axe-core (no serious or critical finding) and for its destructive buttons
 * (one look, on those only). About the console, not storage, so it runs on
 * PGlite only. (test/console-links.test.ts follows every link.)
 */
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { initialJavaScript, INITIAL_JS_LIMIT_BYTES } from "../scripts/console-size.mjs";
import { inPage, openTab, type Tab, startConsoleRig, type ConsoleRig, expectClean as expectCleanTab } from "./support/browser.js";
import type { TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, type TestService } from "./support/service.js";
import { admin, createApp, expectStatus, type Admin } from "./helpers/authz.js";

const APP = "shop";
const CATALOG = [
  {
    resource: "document",
    description: "Documents customers upload",
    actions: ["read", "update", "delete", "share"],
    relations: [{ name: "reviewer", actions: ["read"] }],
  },
  { resource: "invoice", description: "Invoices we send", actions: ["read", "pay"] },
];

describe("the console in Chromium", { timeout: 120_000 }, () => {
  let database: TestDatabase;
  let service: TestService;
  let browser: Browser;
  let rig: ConsoleRig | undefined;
  let appKey: string;
  let ops: Admin;
  const ids = { deleters: "", alsoDelete: "", editors: "", backups: "" };
  let tabs: Tab[] = [];

  beforeAll(async () => {
    rig = await startConsoleRig();
    ({ database, service, browser, tabs } = rig);
    appKey = await createApp(service, APP, CATALOG);
    ops = admin(service, APP);
    ids.deleters = await ops.createPolicy("Document deleters", ["document:delete", "document:read"]);
    ids.alsoDelete = await ops.createPolicy("Also delete", ["document:delete"]);
    ids.editors = await ops.createRole("Editors", [ids.deleters]);
    ids.backups = await ops.createRole("Backups", [ids.alsoDelete]);
    for (const user of ["u1", "u2", "u3", "u4", "u5"]) await ops.assign(ids.editors, user);
    await ops.assign(ids.backups, "u5");
    await createApp(service, "other", []);
  }, 120_000);

  afterAll(async () => {
    await rig?.close();
  });

  /** A fresh tab, signed in with `key`; its problems are checked when the test ends. */
  async function signIn(key: string): Promise<Tab> {
    const tab = await openTab(browser, service.url);
    tabs.push(tab);
    await tab.page.goto("/console/");
    await tab.page.getByLabel("API key").fill(key);
    await tab.page.getByRole("button", { name: "Sign in" }).click();
    return tab;
  }

  /** What every page must be: no script error or CSP violation, nothing serious for axe, one look for destructive buttons, the key in no URL. */
  const expectClean = (tab: Tab, key: string, screenshotName?: string) => expectCleanTab(tab, { key, ...(screenshotName === undefined ? {} : { screenshot: screenshotName }) });

  const heading = (page: Page, name: string) => page.getByRole("heading", { level: 1, name });

  it("the initial JavaScript stays under 250 KB gzipped", () => {
    const { files, gzipBytes } = initialJavaScript(rig!.buildDir);
    expect(files.length).toBeGreaterThan(0);
    expect(gzipBytes).toBeLessThan(INITIAL_JS_LIMIT_BYTES);
  });

  it("the operator: applications, a new application, a key with scopes whose secret shows once, revoking it", async () => {
    const tab = await signIn(ADMIN_KEY);
    const { page } = tab;
    await expect.poll(() => heading(page, "Applications").isVisible()).toBe(true);
    await expectClean(tab, ADMIN_KEY);

    await page.getByLabel("Application id").fill("made-in-ui");
    await page.getByLabel("Name").fill("Made in the UI");
    await page.getByRole("button", { name: "Create application" }).click();
    await page.getByRole("link", { name: "made-in-ui" }).click();
    await expect.poll(() => heading(page, "API keys").isVisible()).toBe(true);
    expectStatus(await service.call("GET", "/api/v1/applications/made-in-ui"), 200);

    await page.getByLabel("Key name").fill("ui-key");
    await page.getByLabel(/^write:/).uncheck();
    await page.getByRole("button", { name: "Create key" }).click();
    const secret = page.getByLabel("New key secret");
    await expect.poll(() => secret.isVisible()).toBe(true);
    const key = (await secret.textContent())!;
    expect(key.length).toBeGreaterThan(20);
    await page.getByRole("button", { name: "Copy secret" }).click();
    await expect.poll(() => page.getByText("Copied.").isVisible()).toBe(true);
    expect(await inPage<string>(page, "navigator.clipboard.readText()")).toBe(key);
    const me = await service.call("GET", "/api/v1/api-keys/current", { key });
    expect(me.body).toMatchObject({ kind: "application", appId: "made-in-ui", scopes: ["check", "read"] });
    await expectClean(tab, key, "keys");

    // Shown once: a reload of the page shows the key in the list, never its secret.
    await page.reload();
    await expect.poll(() => page.getByRole("cell", { name: "ui-key", exact: true }).isVisible()).toBe(true);
    expect(await page.content()).not.toContain(key);

    await page.getByRole("button", { name: "Revoke ui-key" }).click();
    await expectClean(tab, ADMIN_KEY);
    await page.getByRole("button", { name: "Revoke ui-key now" }).click();
    await expect.poll(() => page.getByRole("cell", { name: "ui-key", exact: true }).count()).toBe(0);
    expect((await service.call("GET", "/api/v1/api-keys/current", { key })).status).toBe(401);
  });

  it("the key lives in sessionStorage only: no cookie, no localStorage, no URL; sign-out forgets it", async () => {
    const tab = await signIn(appKey);
    const { page } = tab;
    await expect.poll(() => heading(page, "Catalog").isVisible()).toBe(true);
    expect(page.url()).toBe(`${service.url}/console/apps/${APP}/catalog`);
    const stored = await inPage(page, "({ session: Object.keys(sessionStorage).map((k) => sessionStorage.getItem(k)), local: localStorage.length, cookie: document.cookie })");
    expect(stored).toEqual({ session: [appKey], local: 0, cookie: "" });
    expect(await tab.context.cookies()).toEqual([]);
    await page.getByRole("button", { name: "Sign out" }).click();
    await expect.poll(() => page.getByLabel("API key").isVisible()).toBe(true);
    expect(await inPage<number>(page, "sessionStorage.length")).toBe(0);
    await expectClean(tab, appKey, "sign-in");
  });

  it("an unknown key is refused with a note on the sign-in page", async () => {
    const tab = await signIn("not-a-key-0000000000000000");
    await expect.poll(() => tab.page.getByRole("alert").textContent()).toContain("refused");
    expect(await inPage<number>(tab.page, "sessionStorage.length")).toBe(0);
  });

  it("a key revoked while signed in goes back to sign-in on its next call", async () => {
    const created = await service.call("POST", `/api/v1/applications/${APP}/api-keys`, { body: { name: "soon revoked" } });
    const tab = await signIn(created.body.key);
    const { page } = tab;
    await expect.poll(() => heading(page, "Catalog").isVisible()).toBe(true);
    expectStatus(await service.call("DELETE", `/api/v1/applications/${APP}/api-keys/${created.body.keyId}`), 200);
    await page.getByRole("link", { name: "Policies" }).click();
    await expect.poll(() => page.getByLabel("API key").isVisible()).toBe(true);
    expect(await page.getByRole("alert").textContent()).toContain("revoked");
    expect(await inPage<number>(page, "sessionStorage.length")).toBe(0);
  });

  it("an application key cannot open another application: the page says why", async () => {
    const tab = await signIn(appKey);
    await expect.poll(() => heading(tab.page, "Catalog").isVisible()).toBe(true);
    await tab.page.goto(`/console/apps/other/catalog`);
    await expect.poll(() => tab.page.getByRole("alert").textContent()).toContain('cannot act on application "other"');
  });

  it("catalog: resources, descriptions, built-in and custom relations; a field error beside its field; a 409 naming the policy in the way", async () => {
    const tab = await signIn(appKey);
    const { page } = tab;
    await expect.poll(() => heading(page, "Catalog").isVisible()).toBe(true);
    const document = page.getByRole("group", { name: "document", exact: true });
    expect(await document.getByLabel("Description").inputValue()).toBe("Documents customers upload");
    expect(await document.getByText("owner (built-in) implies read, update, delete, share").isVisible()).toBe(true);
    expect(await document.getByLabel("Custom relation").inputValue()).toBe("reviewer");
    await expectClean(tab, appKey, "catalog");

    // A new resource with a bad action: the API's field error appears next to the actions field; nothing is saved.
    await page.getByRole("button", { name: "Add a resource" }).click();
    // By position: the group's name follows the resource's name as it is typed.
    const added = page.locator("fieldset.resource").nth(2);
    await added.getByLabel("Resource", { exact: true }).fill("report");
    await added.getByLabel(/^Actions/).fill("read, export!");
    await page.getByRole("button", { name: "Save the catalog" }).click();
    const actionsField = page.getByRole("group", { name: "report" }).getByLabel(/^Actions/);
    await expect.poll(async () => page.locator(`#${await actionsField.getAttribute("aria-describedby")}`).textContent()).toMatch(/export!/);
    expect(((await ops.getCatalog()) as { resource: string }[]).map((r) => r.resource)).toEqual(["document", "invoice"]);

    // Fixed: saved, with a custom relation implying one of the new actions.
    await page.getByRole("group", { name: "report" }).getByLabel(/^Actions/).fill("read export");
    await page.getByRole("group", { name: "report" }).getByRole("button", { name: "Add a custom relation" }).click();
    await page.getByRole("group", { name: "report" }).getByLabel("Custom relation").fill("exporter");
    await page.getByRole("group", { name: "report" }).getByRole("group", { name: "Actions it implies" }).getByLabel("export").check();
    await page.getByRole("button", { name: "Save the catalog" }).click();
    await expect.poll(() => page.getByRole("status").filter({ hasText: "Catalog saved." }).isVisible()).toBe(true);
    const report = ((await ops.getCatalog()) as { resource: string; relations: { name: string; actions: string[]; builtIn: boolean }[] }[]).find(
      (r) => r.resource === "report",
    );
    const exporter = report?.relations.find((r) => r.name === "exporter") as { subjects?: string[]; inherits?: unknown[] } | undefined;
    expect(exporter).toMatchObject({ name: "exporter", actions: ["export"], builtIn: false });
    // Users only, nothing inherited: the defaults (spelled out, or left out).
    expect(exporter?.subjects ?? []).toEqual(exporter?.subjects?.length ? ["user"] : []);
    expect(exporter?.inherits ?? []).toEqual([]);

    // Dropping an action a policy holds: 409, listing the policy; nothing changes.
    await page.getByRole("group", { name: "document", exact: true }).getByLabel(/^Actions/).fill("read, update, share");
    await page.getByRole("button", { name: "Save the catalog" }).click();
    const alert = page.getByRole("alert").filter({ hasText: "was not saved" });
    await expect.poll(() => alert.textContent()).toContain("Document deleters holds document:delete");
    expect(await alert.textContent()).toContain("Also delete holds document:delete");
    expect(((await ops.getCatalog()) as { resource: string; actions: string[] }[]).find((r) => r.resource === "document")?.actions).toContain("delete");
    await expectClean(tab, appKey);
  });

  it("policies: the list with role counts and tenants; create with the picker grouped by resource and its descriptions", async () => {
    const tab = await signIn(ADMIN_KEY);
    const { page } = tab;
    await page.goto(`/console/apps/${APP}/policies`);
    await expect.poll(() => heading(page, "Policies").isVisible()).toBe(true);
    // The heading shows before the list arrives: allTextContents() does not wait for rows.
    const row = page.getByRole("row", { name: /Document deleters/ });
    await expect.poll(() => row.getByRole("cell").allTextContents()).toEqual(["Document deleters", "", "Application-wide", "2", "none", "1"]);

    await page.getByLabel("Name").fill("Invoice payers");
    await page.getByLabel("Tenant (empty: application-wide)").fill("acme");
    const invoice = page.getByRole("group", { name: /^invoice/ });
    await expect.poll(() => invoice.getByText("Invoices we send").isVisible()).toBe(true);
    await invoice.getByLabel("pay").check();
    await invoice.getByLabel("read").check();
    await expectClean(tab, ADMIN_KEY, "policy-new");
    await page.getByRole("button", { name: "Create policy" }).click();
    await expect.poll(() => heading(page, "Policy Invoice payers").isVisible()).toBe(true);
    const listed = await service.call("GET", `/api/v1/applications/${APP}/policies?tenantId=acme`);
    expect(listed.body.policies.map((p: { name: string; permissions: string[]; tenantId: string }) => [p.name, p.permissions.sort(), p.tenantId])).toEqual([
      ["Invoice payers", ["invoice:pay", "invoice:read"], "acme"],
    ]);

    // A field error from the API beside the name field.
    await page.goto(`/console/apps/${APP}/policies`);
    await page.getByLabel("Name").fill("x".repeat(300));
    await page.getByRole("button", { name: "Create policy" }).click();
    await expect.poll(() => page.locator("#policy-new-name-error").textContent()).not.toBe("");
  });

  it("policies: an edit is previewed (who loses, who keeps it through another role) before it is saved", async () => {
    const tab = await signIn(appKey);
    const { page } = tab;
    await page.goto(`/console/apps/${APP}/policies/${ids.deleters}`);
    await expect.poll(() => heading(page, "Policy Document deleters").isVisible()).toBe(true);
    await page.getByRole("group", { name: /^document/ }).getByLabel("delete").uncheck();
    await page.getByRole("button", { name: "Review changes" }).click();
    const impact = page.getByRole("region", { name: "Before you save" });
    await expect.poll(() => impact.textContent()).toContain("Removes document:delete from 4 users; 1 other user of its roles keeps it through another role.");
    expect(await impact.textContent()).toContain("Losing, for example: u1, u2, u3, u4");
    expect(await impact.textContent()).toContain("Editors, 5 users");
    await expectClean(tab, appKey, "policy-preview");
    // Not saved until asked.
    expect((await service.call("GET", `/api/v1/applications/${APP}/policies/${ids.deleters}`)).body.permissions.sort()).toEqual(["document:delete", "document:read"]);
    await impact.getByRole("button", { name: "Save changes" }).click();
    await expect.poll(() => page.getByRole("status").filter({ hasText: "Policy Document deleters saved." }).isVisible()).toBe(true);
    expect((await service.call("GET", `/api/v1/applications/${APP}/policies/${ids.deleters}`)).body.permissions).toEqual(["document:read"]);
    const events = await service.call("GET", `/api/v1/applications/${APP}/audit-log?type=policy.updated&targetId=${ids.deleters}`);
    expect(events.body.events[0].data).toEqual({ permissionsAdded: [], permissionsRemoved: ["document:delete"] });
  });

  it("policies: a blocked delete shows the attached roles, and the forced delete takes the typed name", async () => {
    const doomed = await ops.createPolicy("Doomed", ["invoice:read"]);
    const holder = await ops.createRole("Holder", [doomed]);
    const tab = await signIn(appKey);
    const { page } = tab;
    await page.goto(`/console/apps/${APP}/policies/${doomed}`);
    await page.getByRole("button", { name: "Delete policy Doomed" }).click();
    const blocked = page.getByRole("alert");
    await expect.poll(() => blocked.textContent()).toContain("is attached to 1 role");
    await expect.poll(() => blocked.getByRole("listitem").allTextContents()).toEqual(["Holder"]);
    // In words: what the forced delete does (not the API's "delete with force=true").
    expect(await blocked.textContent()).not.toContain("force");
    const force = page.getByRole("button", { name: "Detach from 1 role and delete" });
    expect(await force.isDisabled()).toBe(true);
    await page.getByLabel(/type its name/).fill("Doome");
    expect(await force.isDisabled()).toBe(true);
    await expectClean(tab, appKey, "policy-delete-blocked");
    await page.getByLabel(/type its name/).fill("Doomed");
    await force.click();
    await expect.poll(() => heading(page, "Policies").isVisible()).toBe(true);
    expect((await service.call("GET", `/api/v1/applications/${APP}/policies/${doomed}`)).status).toBe(404);
    expect((await service.call("GET", `/api/v1/applications/${APP}/roles/${holder}`)).body.policyIds).toEqual([]);
  });

  it("check: allowed through role → policy → permission and through a grant; denied shows what the user holds", async () => {
    const bearer = { "x-api-key": appKey };
    const write = await fetch(`${service.url}/api/v1/authorization/relationships`, {
      method: "POST",
      headers: { ...bearer, "content-type": "application/json" },
      body: JSON.stringify({ userId: "u9", resource: "document", resourceId: "d2", relation: "reviewer" }),
    });
    expect(write.status).toBe(201);
    const tab = await signIn(appKey);
    const { page } = tab;
    await page.getByRole("link", { name: "Check" }).click();
    await expect.poll(() => heading(page, "Check").isVisible()).toBe(true);
    const ask = async (userId: string, resourceId: string, action: string) => {
      await page.getByLabel("User").fill(userId);
      await page.getByLabel("Resource", { exact: true }).selectOption("document");
      await page.getByLabel("Instance", { exact: true }).fill(resourceId);
      await page.getByLabel("Action", { exact: true }).selectOption(action);
      await page.getByRole("button", { name: "Check", exact: true }).click();
    };
    await ask("u5", "d1", "delete");
    const answer = page.getByRole("region", { name: /Allowed|Denied/ });
    await expect.poll(() => answer.textContent()).toContain("Allowed");
    expect(await answer.textContent()).toContain("Role Backups → policy Also delete → permission document:delete");
    await expectClean(tab, appKey, "check");

    await ask("u9", "d2", "read");
    await expect.poll(() => answer.textContent()).toContain("Grant: reviewer on this instance");
    await ask("u9", "d2", "update");
    await expect.poll(() => answer.textContent()).toContain("Denied");
    expect(await answer.textContent()).toContain("Relation reviewer, which allows read");
  });
  it("grants: add with an expiry, search by instance and by user (paged), delete one, delete by filter", async () => {
    const bulk = await fetch(`${service.url}/api/v1/authorization/relationships/bulk`, {
      method: "POST",
      headers: { "x-api-key": appKey, "content-type": "application/json" },
      body: JSON.stringify({
        writes: Array.from({ length: 60 }, (_, i) => ({ userId: `reader-${String(i).padStart(2, "0")}`, resource: "document", resourceId: "big", relation: "viewer" })),
      }),
    });
    expect(bulk.status).toBe(200);
    const tab = await signIn(appKey);
    const { page } = tab;
    await page.getByRole("link", { name: "Grants" }).click();
    await expect.poll(() => heading(page, "Grants").isVisible()).toBe(true);

    const add = page.getByRole("region", { name: "Add a grant" });
    await add.getByLabel("User", { exact: true }).fill("temp-worker");
    await add.getByLabel("Resource", { exact: true }).selectOption("document");
    await add.getByLabel("Instance", { exact: true }).fill("d7");
    await add.getByLabel("Relation", { exact: true }).selectOption("editor");
    await add.getByLabel(/^Expires/).fill("2031-01-31T12:00");
    await add.getByRole("button", { name: "Add grant" }).click();
    await expect.poll(() => add.textContent()).toContain("Grant added: temp-worker is editor of document d7");
    const stored = await fetch(`${service.url}/api/v1/authorization/relationships?resource=document&resourceId=d7`, { headers: { "x-api-key": appKey } });
    const [grant] = ((await stored.json()) as { relationships: { userId: string; expiresAt?: string }[] }).relationships;
    expect(grant?.userId).toBe("temp-worker");
    expect(new Date(grant!.expiresAt!).getTime()).toBe(new Date(2031, 0, 31, 12, 0).getTime()); // the browser's local time
    await expectClean(tab, appKey, "grants");

    // By instance, paged 50 at a time: never everything at once.
    const find = page.getByRole("region", { name: "Find grants" });
    await find.getByLabel("Resource", { exact: true }).selectOption("document");
    await find.getByLabel("Instance", { exact: true }).fill("big");
    await find.getByRole("button", { name: "Search" }).click();
    const rows = find.locator("tbody tr");
    await expect.poll(() => rows.count()).toBe(50);
    await find.getByRole("button", { name: "Next" }).click();
    await expect.poll(() => rows.count()).toBe(10);
    await find.getByRole("button", { name: "Previous" }).click();
    await expect.poll(() => rows.count()).toBe(50);

    // By user; delete one (confirmed).
    await find.getByLabel(/^User:/).check();
    await find.getByLabel("User", { exact: true }).fill("reader-07");
    await find.getByRole("button", { name: "Search" }).click();
    await expect.poll(() => rows.count()).toBe(1);
    await find.getByRole("button", { name: /^Delete the grant/ }).click();
    await expectClean(tab, appKey);
    await find.getByRole("button", { name: /^Delete the grant .* now$/ }).click();
    await expect.poll(() => find.getByText("No grants match.").isVisible()).toBe(true);

    // Delete by filter: every grant on the instance, after a confirmation.
    const filter = page.getByRole("region", { name: "Delete by filter" });
    await filter.getByLabel("Resource", { exact: true }).selectOption("document");
    await filter.getByLabel("Instance", { exact: true }).fill("big");
    await filter.getByRole("button", { name: "Delete matching grants…" }).click();
    await expectClean(tab, appKey);
    await filter.getByRole("button", { name: "Delete them" }).click();
    await expect.poll(() => filter.textContent()).toMatch(/59 grants? deleted|Deleted 59/);
    const left = await fetch(`${service.url}/api/v1/authorization/relationships?resource=document&resourceId=big`, { headers: { "x-api-key": appKey } });
    expect(((await left.json()) as { relationships: unknown[] }).relationships).toEqual([]);
  });

  it("grants: a condition is entered with the grant, a bad one is named at its field, and the list shows it", async () => {
    const tab = await signIn(appKey);
    const { page } = tab;
    await page.goto(`/console/apps/${APP}/grants`);
    const add = page.getByRole("region", { name: "Add a grant" });
    await add.getByLabel("User", { exact: true }).fill("cond-user");
    await add.getByLabel("Resource", { exact: true }).selectOption("document");
    await add.getByLabel("Instance", { exact: true }).fill("d-cond");
    await add.getByLabel("Relation", { exact: true }).selectOption("editor");
    const condition = add.getByLabel(/^Condition/);
    await condition.fill("subject.id ==");
    await add.getByRole("button", { name: "Add grant" }).click();
    // The service's 400 at the field: described by its error, announced, nothing written.
    await expect.poll(() => condition.getAttribute("aria-invalid")).toBe("true");
    await expect.poll(() => add.locator("#grants-add-condition-error").textContent()).toContain("not valid CEL");
    await expectClean(tab, appKey, "grants");
    await condition.fill("resource.properties.ownerID == subject.id");
    await add.getByRole("button", { name: "Add grant" }).click();
    await expect.poll(() => add.textContent()).toContain("Grant added: cond-user is editor of document d-cond, with no expiry, where resource.properties.ownerID == subject.id holds.");
    const stored = await fetch(`${service.url}/api/v1/authorization/relationships?resource=document&resourceId=d-cond`, { headers: { "x-api-key": appKey } });
    expect(((await stored.json()) as { relationships: { condition?: string }[] }).relationships[0]?.condition).toBe("resource.properties.ownerID == subject.id");

    const find = page.getByRole("region", { name: "Find grants" });
    await find.getByLabel("Resource", { exact: true }).selectOption("document");
    await find.getByLabel("Instance", { exact: true }).fill("d-cond");
    await find.getByRole("button", { name: "Search" }).click();
    const row = find.locator("tbody tr");
    await expect.poll(() => row.count()).toBe(1);
    expect(await row.locator("code.grants-condition").textContent()).toBe("resource.properties.ownerID == subject.id");
    await expectClean(tab, appKey, "grants");
  });

  it("grants: a CSV import reports each refused row by its line and writes the rest; 12,001 NDJSON rows go in chunks of 5,000", async () => {
    const tab = await signIn(appKey);
    const { page } = tab;
    await page.goto(`/console/apps/${APP}/grants`);
    const imports = page.getByRole("region", { name: "Import" });
    const csv = [
      "userId,resource,resourceId,relation",
      "csv-1,document,c1,viewer",
      "csv-2,document,c1,no-such-relation",
      "csv-3,document,c1", // line 4: a missing column
      '"csv,4",document,c1,owner',
      "csv-5,spaceship,c1,viewer",
      "csv-6,invoice,i1,viewer",
    ].join("\n");
    await imports.getByLabel("Grants file (CSV or NDJSON)").setInputFiles({ name: "grants.csv", mimeType: "text/csv", buffer: Buffer.from(csv) });
    await imports.getByRole("button", { name: "Import 5 rows" }).click();
    await expect.poll(() => imports.getByRole("heading", { name: "Import finished" }).isVisible()).toBe(true);
    const refused = imports.getByRole("region", { name: "Rows the service refused" });
    expect((await refused.locator("tbody tr td:first-child").allTextContents()).sort()).toEqual(["3", "6"]);
    expect(await imports.getByRole("region", { name: "Lines with problems in the file" }).locator("tbody tr td:first-child").allTextContents()).toEqual(["4"]);
    const written = await fetch(`${service.url}/api/v1/authorization/relationships?resource=document&resourceId=c1`, { headers: { "x-api-key": appKey } });
    expect(((await written.json()) as { relationships: { userId: string }[] }).relationships.map((r) => r.userId).sort()).toEqual(["csv,4", "csv-1"]);
    expect(await imports.getByRole("progressbar", { name: "Import progress" }).getAttribute("value")).toBe("5");
    await expectClean(tab, appKey, "grants-import");

    const ndjson = Array.from({ length: 12_001 }, (_, i) => JSON.stringify({ userId: `bulk-${i}`, resource: "invoice", resourceId: "many", relation: "viewer" })).join("\n");
    const before = tab.urls.length;
    await imports.getByLabel("Grants file (CSV or NDJSON)").setInputFiles({ name: "grants.ndjson", mimeType: "application/x-ndjson", buffer: Buffer.from(ndjson) });
    await imports.getByRole("button", { name: "Import 12,001 rows" }).click();
    await expect.poll(() => imports.getByText("12,001 of 12,001 rows").isVisible(), { timeout: 60_000 }).toBe(true);
    await expect.poll(() => imports.getByRole("heading", { name: "Import finished" }).isVisible()).toBe(true);
    expect(tab.urls.slice(before).filter((u) => u.endsWith("/BulkWriteRelationships"))).toHaveLength(3);
    const counted = await database.db.query<{ n: number }>("SELECT count(*)::int AS n FROM relationships WHERE app_id = $1 AND resource_id = 'many'", [APP]);
    expect(counted.rows[0]!.n).toBe(12_001);
  });
  it("roles: the list with scopes and policies by name; create, edit, assign and remove; a user's roles, removed at once", async () => {
    const readers = await ops.createPolicy("Readers", ["document:read"]);
    const tab = await signIn(ADMIN_KEY);
    const { page } = tab;
    await page.goto(`/console/apps/${APP}/roles`);
    await expect.poll(() => heading(page, "Roles").isVisible()).toBe(true);
    const editors = page.getByRole("row", { name: /^Editors/ });
    await expect.poll(() => editors.textContent()).toContain("Application-wide");
    // The policies' names come in their own call: "Loading…" until then, never their ids.
    await expect.poll(() => editors.textContent()).toContain("Document deleters");
    expect(await editors.textContent()).not.toMatch(/pol_/);
    await expectClean(tab, ADMIN_KEY, "roles");

    await page.getByLabel("Name", { exact: true }).fill("Auditors");
    await page.getByLabel(/^Tenant/).fill("acme");
    await page.getByLabel("Description").fill("Read everything in acme");
    await page.getByRole("group", { name: "Attached policies" }).getByLabel("Readers").check();
    await page.getByRole("button", { name: "Create role" }).click();
    await page.getByRole("status").getByRole("link", { name: "Auditors" }).click();
    await expect.poll(() => heading(page, "Auditors").isVisible()).toBe(true);
    const [auditors] = (await service.call("GET", `/api/v1/applications/${APP}/roles?tenantId=acme`)).body.roles as { roleId: string; policyIds: string[]; description: string }[];
    expect(auditors).toMatchObject({ policyIds: [readers], description: "Read everything in acme" });

    // Assignments: add two, remove one.
    for (const user of ["ann", "bob"]) {
      await page.getByLabel("User id").fill(user);
      await page.getByRole("button", { name: "Assign" }).click();
      await expect.poll(() => page.getByRole("cell", { name: user, exact: true }).isVisible()).toBe(true);
    }
    await page.getByRole("button", { name: "Remove ann" }).click();
    await expect.poll(() => page.getByRole("cell", { name: "ann", exact: true }).count()).toBe(0);
    const assigned = await service.call("GET", `/api/v1/applications/${APP}/roles/${auditors!.roleId}/assignments`);
    expect(assigned.body.assignments.map((a: { userId: string }) => a.userId)).toEqual(["bob"]);
    await expectClean(tab, ADMIN_KEY, "role");

    // An edit of the description alone keeps the policies (the update mask names what changed).
    await page.getByLabel("Description").fill("Reads acme's documents");
    await page.getByRole("button", { name: "Save changes" }).click();
    await expect.poll(async () => (await service.call("GET", `/api/v1/applications/${APP}/roles/${auditors!.roleId}`)).body.description).toBe("Reads acme's documents");
    expect((await service.call("GET", `/api/v1/applications/${APP}/roles/${auditors!.roleId}`)).body.policyIds).toEqual([readers]);

    // A user's roles, and offboarding.
    await page.goto(`/console/apps/${APP}/roles`);
    await page.getByLabel("User id").fill("u5");
    await page.getByRole("button", { name: "Show roles" }).click();
    const theirs = page.getByRole("table", { name: "Roles of user u5" });
    await expect.poll(() => theirs.locator("tbody tr").count()).toBe(2);
    await page.getByRole("button", { name: "Remove all of this user's roles" }).click();
    await expectClean(tab, ADMIN_KEY);
    await page.getByRole("button", { name: "Remove all roles of u5 now" }).click();
    await expect.poll(async () => (await service.call("GET", `/api/v1/applications/${APP}/users/u5/roles`)).body.roles).toEqual([]);
  });

  it("audit log: newest first, filtered by type and target, each event expandable to its data, with the actor's key name", async () => {
    const bot = await service.call("POST", `/api/v1/applications/${APP}/api-keys`, { body: { name: "auditor-bot" } });
    const as = (method: string, path: string, body?: unknown) => service.call(method, path, { key: bot.body.key, ...(body === undefined ? {} : { body }) });
    const created = await as("POST", `/api/v1/applications/${APP}/policies`, { name: "Audited", permissions: ["document:read"] });
    expectStatus(created, 201);
    expectStatus(await as("PATCH", `/api/v1/applications/${APP}/policies/${created.body.policyId}`, { permissions: ["document:share"] }), 200);

    const tab = await signIn(appKey);
    const { page } = tab;
    await page.getByRole("link", { name: "Audit log" }).click();
    await expect.poll(() => heading(page, "Audit log").isVisible()).toBe(true);
    const rows = page.locator("table.audit-table tbody tr");
    await expect.poll(() => rows.first().textContent()).toContain("policy.updated");
    expect(await rows.first().textContent()).toContain("auditor-bot");
    await expectClean(tab, appKey, "audit");

    await page.getByLabel("Target id").fill(created.body.policyId);
    await page.getByRole("button", { name: "Apply filters" }).click();
    await expect.poll(() => rows.count()).toBe(2);
    expect(await rows.locator("td:nth-child(2)").allTextContents()).toEqual(["policy.updated", "policy.created"]);
    await rows.first().locator("summary").first().click();
    const opened = rows.first().locator("details.audit-data");
    await expect.poll(() => opened.textContent()).toMatch(/Permissions added:?\s*document:share/);
    expect(await opened.textContent()).toMatch(/Permissions removed:?\s*document:read/);
    await expectClean(tab, appKey);

    await page.getByLabel("Event type").selectOption("policy.created");
    await expect.poll(() => rows.count()).toBe(1);
    await page.getByRole("button", { name: "Clear filters" }).click();
    await page.getByLabel("Event type").selectOption("role.assigned");
    await expect.poll(async () => new Set(await rows.locator("td:nth-child(2)").allTextContents())).toEqual(new Set(["role.assigned"]));
  });
  it("edit forms: Save is disabled until something changes, and again after a revert or a save; the confirmation shows in the window", async () => {
    const formsKey = await createApp(service, "forms", CATALOG);
    const forms = admin(service, "forms");
    const readers = await forms.createPolicy("Readers", ["document:read"]);
    const staff = await forms.createRole("Staff", [readers]);
    for (const user of ["f1", "f2", "f3", "f4", "f5", "f6"]) await forms.assign(staff, user);
    const tab = await signIn(formsKey);
    const { page } = tab;
    // A short window: the forms run past its foot, as on a laptop.
    const height = 600;
    await page.setViewportSize({ width: 1280, height });
    /** The confirmation, once shown: within the window, wherever the form was scrolled. */
    const confirmedInWindow = async (text: string) => {
      const notice = page.getByRole("status").filter({ hasText: text });
      await expect.poll(() => notice.isVisible()).toBe(true);
      const box = (await notice.boundingBox())!;
      expect(box.y, text).toBeGreaterThanOrEqual(0);
      expect(box.y + box.height, text).toBeLessThanOrEqual(height);
    };
    const stored = async (path: string) => (await service.call("GET", `/api/v1/applications/forms${path}`)).body;

    // The catalog: an edit enables Save and Discard; typing the old text back, or discarding, disables them.
    await expect.poll(() => heading(page, "Catalog").isVisible()).toBe(true);
    const saveCatalog = page.getByRole("button", { name: "Save the catalog" });
    const discard = page.getByRole("button", { name: "Discard changes" });
    const invoice = page.getByRole("group", { name: "invoice", exact: true }).getByLabel("Description");
    expect([await saveCatalog.isDisabled(), await discard.isDisabled()]).toEqual([true, true]);
    await invoice.fill("Invoices we send and receive");
    expect([await saveCatalog.isDisabled(), await discard.isDisabled()]).toEqual([false, false]);
    await invoice.fill("Invoices we send");
    expect([await saveCatalog.isDisabled(), await discard.isDisabled()]).toEqual([true, true]);
    await page.getByRole("group", { name: "invoice", exact: true }).getByLabel(/^Actions/).fill("read pay");
    expect(await saveCatalog.isDisabled()).toBe(true); // the same actions, written otherwise
    await invoice.fill("Invoices we send and receive");
    await discard.click();
    expect(await invoice.inputValue()).toBe("Invoices we send");
    expect(await saveCatalog.isDisabled()).toBe(true);
    await invoice.fill("Invoices we send and receive");
    await saveCatalog.click();
    await confirmedInWindow("Catalog saved.");
    await expect.poll(() => saveCatalog.isDisabled()).toBe(true);
    expect((await stored("/resources")).resources.find((r: { resource: string }) => r.resource === "invoice").description).toBe("Invoices we send and receive");
    await expectClean(tab, formsKey);

    // A policy: Review changes (its save goes through the preview) likewise.
    await page.goto(`/console/apps/forms/policies/${readers}`);
    await expect.poll(() => heading(page, "Policy Readers").isVisible()).toBe(true);
    const review = page.getByRole("button", { name: "Review changes" });
    const pay = page.getByRole("group", { name: /^invoice/ }).getByLabel("pay");
    expect(await review.isDisabled()).toBe(true);
    await pay.check();
    expect(await review.isDisabled()).toBe(false);
    await pay.uncheck();
    expect(await review.isDisabled()).toBe(true);
    await pay.check();
    await review.click();
    await page.getByRole("region", { name: "Before you save" }).getByRole("button", { name: "Save changes" }).click();
    await confirmedInWindow("Policy Readers saved.");
    await expect.poll(() => review.isDisabled()).toBe(true);
    expect((await stored(`/policies/${readers}`)).permissions.sort()).toEqual(["document:read", "invoice:pay"]);

    // A role: its name, description and policies (the same set in another order is no change).
    await page.goto(`/console/apps/forms/roles/${staff}`);
    await expect.poll(() => heading(page, "Staff").isVisible()).toBe(true);
    const saveRole = page.getByRole("button", { name: "Save changes" });
    const description = page.getByLabel("Description");
    const attached = page.getByRole("group", { name: "Attached policies" }).getByLabel("Readers");
    expect(await saveRole.isDisabled()).toBe(true);
    await description.fill("Front desk");
    expect(await saveRole.isDisabled()).toBe(false);
    await description.fill("");
    expect(await saveRole.isDisabled()).toBe(true);
    await attached.uncheck();
    expect(await saveRole.isDisabled()).toBe(false);
    await attached.check();
    expect(await saveRole.isDisabled()).toBe(true);
    await description.fill("Front desk");
    await saveRole.click();
    await confirmedInWindow("Role Staff saved.");
    await expect.poll(() => saveRole.isDisabled()).toBe(true);
    expect(await stored(`/roles/${staff}`)).toMatchObject({ description: "Front desk", policyIds: [readers] });
    await expectClean(tab, formsKey);

    // A confirmation belongs to its page: gone on the next one.
    await page.getByRole("link", { name: "Policies" }).click();
    await expect.poll(() => heading(page, "Policies").isVisible()).toBe(true);
    expect(await page.getByText("Role Staff saved.").count()).toBe(0);
  });
});
