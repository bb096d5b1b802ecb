/**
 * allUsers grants (API.md, "Everyone") in the console, in Chromium through
 * the real service, as test/console-hierarchy.test.ts does holders: the
 * catalog editor's "user:*" holder, saved; a grant to every user written
 * from the form, listed as "every user", found by the "Every user" search,
 * deleted from the list and by filter; the check page's explain path from
 * an allUsers grant and its "who can" note. Each stage fails on a script
 * error or a CSP violation and is checked by axe-core. About the console,
 * not storage: PGlite only.
 */
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectClean, openTab, startConsoleRig, type ConsoleRig, type Tab } from "./support/browser.js";
import type { TestService } from "./support/service.js";
import { admin, createApp, expectStatus } from "./helpers/authz.js";

const CATALOG = [
  {
    resource: "folder",
    description: "Folders",
    actions: ["read"],
    relations: [{ name: "viewer", actions: ["read"], subjects: ["user", "user:*"] }],
  },
  {
    resource: "document",
    description: "Documents",
    actions: ["read", "write"],
    relations: [
      { name: "parent", actions: [], subjects: ["folder"] },
      { name: "viewer", actions: ["read"], subjects: ["user", "user:*"], inherits: [{ through: "parent", relation: "viewer" }] },
    ],
  },
];

describe("allUsers grants in the console, in Chromium", { timeout: 180_000 }, () => {
  let service: TestService;
  let browser: Browser;
  let rig: ConsoleRig | undefined;
  let tabs: Tab[] = [];

  beforeAll(async () => {
    rig = await startConsoleRig();
    ({ service, browser, tabs } = rig);
  }, 120_000);
  afterAll(async () => {
    await rig?.close();
  });

  /** A fresh tab signed in with `key` on the application's `page`. */
  async function open(key: string, page: "catalog" | "grants" | "check"): Promise<Tab> {
    const tab = await openTab(browser, service.url);
    tabs.push(tab);
    await tab.page.goto("/console/");
    await tab.page.getByLabel("API key").fill(key);
    await tab.page.getByRole("button", { name: "Sign in" }).click();
    await expect.poll(() => tab.page.getByRole("heading", { level: 1, name: "Catalog" }).isVisible()).toBe(true);
    if (page !== "catalog") {
      const name = page === "grants" ? "Grants" : "Check";
      await tab.page.getByRole("navigation", { name: "Sections" }).getByRole("link", { name }).click();
      await expect.poll(() => tab.page.getByRole("heading", { level: 1, name }).isVisible()).toBe(true);
    }
    return tab;
  }

  const listed = async (key: string, query: string) => {
    const res = await service.call("GET", `/api/v1/authorization/relationships?${query}`, { key });
    expectStatus(res, 200);
    return res.body.relationships as { userId: string; allUsers: boolean; resourceId: string }[];
  };

  it('catalog: "user:*" offered as a holder, described, and saved', async () => {
    const key = await createApp(service, "pub-catalog", [{ resource: "document", description: "", actions: ["read"], relations: [] }]);
    const tab = await open(key, "catalog");
    const { page } = tab;
    const document = page.getByRole("group", { name: "document", exact: true });
    await document.getByRole("button", { name: "Add a custom relation" }).click();
    await document.getByRole("group", { name: "Relation the new relation" }).getByLabel("Custom relation").fill("reader");
    const reader = document.getByRole("group", { name: "Relation reader", exact: true });
    await reader.getByRole("group", { name: "Actions it implies" }).getByLabel("read").check();
    await reader.getByLabel("Add a holder").selectOption("user:*");
    await reader.getByRole("button", { name: "Add holder" }).click();
    expect(await reader.getByRole("group", { name: "Who may hold it" }).getByRole("listitem").allTextContents()).toEqual([
      expect.stringContaining("user"),
      expect.stringContaining("every user at once"),
    ]);
    await expectClean(tab, { screenshot: "catalog-all-users" });
    await page.getByRole("button", { name: "Save the catalog" }).click();
    await expect.poll(() => page.getByRole("status").filter({ hasText: "Catalog saved." }).isVisible()).toBe(true);
    const stored = (await admin(service, "pub-catalog").getCatalog()) as { relations: { name: string; subjects: string[] }[] }[];
    expect(stored[0]!.relations.find((r) => r.name === "reader")!.subjects).toEqual(["user", "user:*"]);
  });

  it("grants: to every user from the form; listed as every user; found, deleted one by one and by filter", async () => {
    const key = await createApp(service, "pub-grants", CATALOG);
    const tab = await open(key, "grants");
    const { page } = tab;
    const add = page.getByRole("region", { name: "Add a grant" });
    await add.getByLabel("Resource", { exact: true }).selectOption("document");
    await add.getByLabel("Instance", { exact: true }).fill("handbook");
    await add.getByLabel("Relation", { exact: true }).selectOption("viewer");
    await add.getByLabel(/^Every user at once/).check();
    expect(await add.getByLabel("User", { exact: true }).count()).toBe(0);
    await expectClean(tab, { screenshot: "grants-all-users" });
    await add.getByRole("button", { name: "Add grant" }).click();
    await expect.poll(() => add.textContent()).toContain("Grant added: every user is viewer of document handbook");
    expect(await listed(key, "resource=document&resourceId=handbook")).toEqual([expect.objectContaining({ userId: "", allUsers: true })]);

    // Where the relation's holders lack user:* the kind is not offered.
    await add.getByLabel("Relation", { exact: true }).selectOption("owner");
    expect(await add.getByLabel(/^Every user at once/).count()).toBe(0);

    // Found by instance and by the "Every user" search, shown as every user; deleted from the list.
    const find = page.getByRole("region", { name: "Find grants" });
    await find.getByLabel("Resource", { exact: true }).selectOption("document");
    await find.getByLabel("Instance", { exact: true }).fill("handbook");
    await find.getByRole("button", { name: "Search" }).click();
    const rows = find.locator("tbody tr");
    await expect.poll(() => rows.count()).toBe(1);
    expect((await rows.first().getByRole("cell").allTextContents()).slice(0, 4)).toEqual(["every user", "document", "handbook", "viewer"]);
    await find.getByLabel(/^Every user: the allUsers grants/).check();
    await find.getByRole("button", { name: "Search" }).click();
    await expect.poll(() => rows.count()).toBe(1);
    await expectClean(tab);
    await find.getByRole("button", { name: "Delete the grant viewer of every user on document handbook" }).click();
    await find.getByRole("button", { name: "Delete the grant viewer of every user on document handbook now" }).click();
    await expect.poll(() => find.getByText("No grants match.").isVisible()).toBe(true);
    expect(await listed(key, "resource=document&resourceId=handbook")).toEqual([]);

    // By filter: every user's grants on documents; a folder's stays.
    for (const [resource, resourceId] of [["document", "a"], ["document", "b"], ["folder", "f"]] as const) {
      expectStatus(await service.call("POST", "/api/v1/authorization/relationships", { key, body: { allUsers: true, resource, resourceId, relation: "viewer" } }), 201);
    }
    const filter = page.getByRole("region", { name: "Delete by filter" });
    await filter.getByLabel(/^Every user: the allUsers grants/).check();
    await filter.getByLabel("Resource", { exact: true }).selectOption("document");
    await filter.getByRole("button", { name: "Delete matching grants…" }).click();
    expect(await filter.getByRole("alert").textContent()).toContain("every user (allUsers), resource “document”");
    await expectClean(tab);
    await filter.getByRole("button", { name: "Delete them" }).click();
    await expect.poll(() => filter.textContent()).toContain("Deleted 2 grants.");
    expect(await listed(key, "allUsers=true&resource=folder")).toHaveLength(1);
  });

  it("check: the explain path from an allUsers grant; who can says every user may", async () => {
    const key = await createApp(service, "pub-check", CATALOG);
    const writes = [
      { allUsers: true, resource: "folder", resourceId: "public", relation: "viewer" },
      { subject: { resource: "folder", resourceId: "public" }, resource: "document", resourceId: "42", relation: "parent" },
      { userId: "bob", resource: "document", resourceId: "42", relation: "owner" },
    ];
    expectStatus(await service.call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes } }), 200);
    const tab = await open(key, "check");
    const { page } = tab;
    await page.getByLabel("User").fill("anyone");
    await page.getByLabel("Resource", { exact: true }).selectOption("document");
    await page.getByLabel("Instance", { exact: true }).fill("42");
    await page.getByLabel("Action", { exact: true }).selectOption("read");
    await page.getByRole("button", { name: "Check", exact: true }).click();
    const answer = page.getByRole("region", { name: "Allowed" });
    await expect.poll(() => answer.getByRole("list", { name: "Path of grants" }).getByRole("listitem").allTextContents()).toEqual([
      "every user is viewer of folder:public",
      " → folder:public is parent of document:42",
    ]);
    await page.getByRole("button", { name: "Who can?" }).click();
    const who = page.getByRole("region", { name: "Who can read document 42" });
    await expect.poll(() => who.textContent()).toContain("Every user may");
    expect(await who.getByRole("list", { name: /^Users who can/ }).getByRole("listitem").allTextContents()).toEqual(["bob"]);
    expect(await who.textContent()).not.toContain("Nobody");
    await expectClean(tab, { screenshot: "check-all-users" });
  });
});
