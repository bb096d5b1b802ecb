/**
 * The console's groups and hierarchy (docs/hierarchy.md) end to end, in
 * Chromium through the real service, as
 * test/console-e2e.test.ts does the rest: the catalog editor's holders
 * (subjects) and inheritance rules (through a link and within the instance),
 * requirements and exclusions (requires, unless), with the API's field
 * errors beside them;
 * grants held by a subject set or a linked instance (written, listed, found by
 * their holder, deleted one by one and by holder); the explain path as a
 * chain and the "who can" list, paged; the tree of an instance's parents
 * (a forest, a cycle, and the 16-level limit). Each test fails on a script
 * error or a CSP violation, and the page is checked by axe-core at each
 * stage (no serious or critical finding) and for its destructive buttons.
 * About the console, not storage: PGlite only.
 */
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openTab, type Tab, startConsoleRig, type ConsoleRig, expectClean as expectCleanTab } from "./support/browser.js";
import type { TestService } from "./support/service.js";
import { admin, createApp, expectStatus } from "./helpers/authz.js";

/** A model with groups and folders: documents and folders inherit viewer from their parent folder; a team's members can be given a relation at once. */
const HIERARCHY = [
  { resource: "team", description: "Groups of people", actions: ["read"], relations: [{ name: "member", actions: ["read"] }] },
  {
    resource: "folder",
    description: "Folders of documents",
    actions: ["read", "write"],
    relations: [
      { name: "parent", actions: [], subjects: ["folder"] },
      { name: "viewer", actions: ["read"], subjects: ["user", "team#member"], inherits: [{ through: "parent", relation: "viewer" }] },
    ],
  },
  {
    resource: "document",
    description: "Documents",
    actions: ["read", "write"],
    relations: [
      { name: "parent", actions: [], subjects: ["folder"] },
      { name: "viewer", actions: ["read"], subjects: ["user", "team#member"], inherits: [{ through: "parent", relation: "viewer" }] },
    ],
  },
];

/** The same resources before any holder or inheritance: what the catalog editor test starts from. */
const FLAT = HIERARCHY.map((r) => ({ ...r, relations: r.resource === "team" ? r.relations : [] }));

interface Holder {
  resource: string;
  resourceId: string;
  relation?: string;
}

describe("groups and hierarchy in the console, in Chromium", { timeout: 180_000 }, () => {
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

  /** A fresh tab, signed in with `key`, on the application's `page` (catalog, grants, check). */
  async function open(key: string, appId: string, page: string): Promise<Tab> {
    const tab = await openTab(browser, service.url);
    tabs.push(tab);
    await tab.page.goto("/console/");
    await tab.page.getByLabel("API key").fill(key);
    await tab.page.getByRole("button", { name: "Sign in" }).click();
    await expect.poll(() => tab.page.getByRole("heading", { level: 1, name: "Catalog" }).isVisible()).toBe(true);
    if (page !== "catalog") {
      await tab.page.getByRole("navigation", { name: "Sections" }).getByRole("link", { name: page === "grants" ? "Grants" : "Check" }).click();
      await expect.poll(() => tab.page.getByRole("heading", { level: 1, name: page === "grants" ? "Grants" : "Check" }).isVisible()).toBe(true);
    }
    expect(tab.page.url()).toBe(`${service.url}/console/apps/${appId}/${page}`);
    return tab;
  }

  /** No script error or CSP violation so far, nothing serious for axe, destructive buttons in their one style. */
  const expectClean = (tab: Tab, screenshotName?: string) => expectCleanTab(tab, screenshotName === undefined ? {} : { screenshot: screenshotName });

  /** The text of the element that describes `field` (aria-describedby): its field error. */
  const describedText = async (page: Page, field: ReturnType<Page["locator"]>) => {
    const ids = (await field.getAttribute("aria-describedby")) ?? "";
    const texts = await Promise.all(ids.split(/\s+/).filter((id) => id !== "").map((id) => page.locator(`#${id}`).textContent()));
    return texts.join(" ");
  };

  /** A grant through REST with the application's key: to a user id, or to a holder (a subject set, a link). */
  async function grant(key: string, holder: string | Holder, resource: string, resourceId: string, relation: string): Promise<void> {
    const body = typeof holder === "string" ? { userId: holder } : { subject: { relation: "", ...holder } };
    const res = await service.call("POST", "/api/v1/authorization/relationships", { key, body: { ...body, resource, resourceId, relation } });
    expect([200, 201], JSON.stringify(res.body)).toContain(res.status);
  }

  const listed = async (key: string, query: string) => {
    const res = await service.call("GET", `/api/v1/authorization/relationships?${query}`, { key });
    expectStatus(res, 200);
    return res.body.relationships as { userId: string; subject?: Holder; resource: string; resourceId: string; relation: string }[];
  };

  it("catalog: a relation's holders (users, a subject set, a link) and what it inherits, saved; the API's field errors beside the holder and the rule", async () => {
    const key = await createApp(service, "model", FLAT);
    const ops = admin(service, "model");
    const tab = await open(key, "model", "catalog");
    const { page } = tab;
    const folder = page.getByRole("group", { name: "folder", exact: true });
    const document = page.getByRole("group", { name: "document", exact: true });

    /** Adds a custom relation to `resource` and names it; returns its group. */
    const addRelation = async (resource: typeof folder, name: string) => {
      await resource.getByRole("button", { name: "Add a custom relation" }).click();
      const added = resource.getByRole("group", { name: "Relation the new relation" });
      await added.getByLabel("Custom relation").fill(name);
      return resource.getByRole("group", { name: `Relation ${name}`, exact: true });
    };
    const addHolder = async (relation: typeof folder, subject: string) => {
      await relation.getByLabel("Add a holder").selectOption(subject);
      await relation.getByRole("button", { name: "Add holder" }).click();
    };

    // folder.parent: a link to a folder (its user holder removed): no actions to pick, it says it is a link.
    const folderParent = await addRelation(folder, "parent");
    await addHolder(folderParent, "folder");
    await folderParent.getByRole("button", { name: "Remove holder user from parent" }).click();
    expect(await folderParent.getByRole("group", { name: "Actions it implies" }).count()).toBe(0);
    expect(await folderParent.textContent()).toContain("A link: its grants name one instance (folder)");
    // A relation to inherit, removed later while a rule still names it.
    const folderReviewer = await addRelation(folder, "reviewer");
    await folderReviewer.getByRole("group", { name: "Actions it implies" }).getByLabel("read").check();

    // document.parent links to a folder; document.viewer (a built-in redefined) is held by users and team members, and inherits.
    const documentParent = await addRelation(document, "parent");
    await addHolder(documentParent, "folder");
    await documentParent.getByRole("button", { name: "Remove holder user from parent" }).click();
    const viewer = await addRelation(document, "viewer");
    await viewer.getByRole("group", { name: "Actions it implies" }).getByLabel("read").check();
    await addHolder(viewer, "team#member");
    expect(await viewer.getByRole("group", { name: "Who may hold it" }).getByRole("listitem").allTextContents()).toEqual([
      expect.stringContaining("user"),
      expect.stringContaining("everyone with member on a team (team#member)"),
    ]);
    await viewer.getByRole("button", { name: "Add an inheritance rule" }).click();
    const rule = viewer.getByRole("group", { name: "Inheritance rule 1 of viewer" });
    // The one link of document is chosen already; the relations offered are folder's.
    expect(await rule.getByLabel("on", { exact: true }).inputValue()).toBe("parent");
    expect(await rule.getByLabel("on", { exact: true }).locator("option").allTextContents()).toEqual(["this instance", "the instance linked by parent"]);
    expect(await rule.getByLabel("Whoever holds").locator("option").allTextContents()).toEqual(
      expect.arrayContaining(["owner", "editor", "viewer", "commenter", "parent", "reviewer"]),
    );
    await rule.getByLabel("Whoever holds").selectOption("reviewer");
    await expectClean(tab, "catalog-hierarchy");

    // folder.reviewer removed while the rule names it: still shown, marked; the API refuses the save and its error is beside the rule.
    await folderReviewer.getByRole("button", { name: "Remove relation reviewer" }).click();
    expect(await rule.getByLabel("Whoever holds").locator("option:checked").textContent()).toBe("reviewer (not in the catalog)");
    await page.getByRole("button", { name: "Save the catalog" }).click();
    const relationSelect = rule.getByLabel("Whoever holds");
    await expect.poll(() => describedText(page, relationSelect)).toMatch(/reviewer/);
    expect(await relationSelect.getAttribute("aria-invalid")).toBe("true");
    expect(await page.getByRole("alert").filter({ hasText: "was not saved" }).textContent()).toContain("shown next to each");
    await expectClean(tab);

    // A subject set naming a relation the catalog lacks: the API's error beside that holder.
    await relationSelect.selectOption("viewer");
    await addHolder(viewer, "team#owner");
    await page.getByRole("group", { name: "team", exact: true }).getByRole("group", { name: "Relation member" }).getByLabel("Custom relation").fill("members");
    await page.getByRole("button", { name: "Save the catalog" }).click();
    const memberHolder = viewer.getByRole("group", { name: "Who may hold it" }).getByRole("listitem").filter({ hasText: "team#member" });
    await expect.poll(() => memberHolder.locator(".field-error").textContent()).toMatch(/member/);
    expect(await viewer.getByRole("group", { name: "Who may hold it" }).getByRole("listitem").filter({ hasText: "team#owner" }).locator(".field-error").textContent()).toBe("");
    await expectClean(tab);
    expect(((await ops.getCatalog()) as { resource: string; relations: { builtIn: boolean }[] }[]).map((r) => [r.resource, r.relations.filter((x) => !x.builtIn).length])).toEqual([
      ["team", 1],
      ["folder", 0],
      ["document", 0],
    ]);

    // Fixed: saved as edited.
    await page.getByRole("group", { name: "team", exact: true }).getByRole("group", { name: "Relation members" }).getByLabel("Custom relation").fill("member");
    await viewer.getByRole("button", { name: "Remove holder team#owner from viewer" }).click();
    await page.getByRole("button", { name: "Save the catalog" }).click();
    await expect.poll(() => page.getByRole("status").filter({ hasText: "Catalog saved." }).isVisible()).toBe(true);
    const stored = (await ops.getCatalog()) as { resource: string; relations: { name: string; builtIn: boolean; inherits?: unknown[] }[] }[];
    // An empty list spelled out or left out alike.
    const custom = (resource: string) =>
      stored
        .find((r) => r.resource === resource)!
        .relations.filter((r) => !r.builtIn)
        .map((r) => ({ ...r, inherits: r.inherits ?? [] }));
    expect(custom("folder")).toEqual([{ name: "parent", actions: [], builtIn: false, subjects: ["folder"], inherits: [], requires: [], unless: [] }]);
    expect(custom("document")).toHaveLength(2);
    expect(custom("document")).toEqual(
      expect.arrayContaining([
        { name: "viewer", actions: ["read"], builtIn: false, subjects: ["user", "team#member"], inherits: [{ through: "parent", relation: "viewer" }], requires: [], unless: [] },
        { name: "parent", actions: [], builtIn: false, subjects: ["folder"], inherits: [], requires: [], unless: [] },
      ]),
    );
    // What is stored is what the form shows: nothing left to save.
    await expect.poll(() => page.getByRole("button", { name: "Save the catalog" }).isDisabled()).toBe(true);
    expect(await page.getByRole("group", { name: "document", exact: true }).getByRole("group", { name: "Inheritance rule 1 of viewer" }).getByLabel("Whoever holds").inputValue()).toBe("viewer");
    await expectClean(tab);

    // A rule within the instance: every editor of a document is its viewer. The relations offered are
    // document's own, but viewer itself and the link parent.
    const savedViewer = document.getByRole("group", { name: "Relation viewer", exact: true });
    await savedViewer.getByRole("button", { name: "Add an inheritance rule" }).click();
    const within = savedViewer.getByRole("group", { name: "Inheritance rule 2 of viewer" });
    await within.getByLabel("on", { exact: true }).selectOption({ label: "this instance" });
    expect(await within.getByLabel("Whoever holds").locator("option").allTextContents()).toEqual(["Choose a relation", "owner", "editor", "commenter"]);
    await within.getByLabel("Whoever holds").selectOption("editor");
    await page.getByRole("button", { name: "Save the catalog" }).click();
    const viewerRules = async () =>
      ((await ops.getCatalog()) as { resource: string; relations: { name: string; inherits?: unknown[] }[] }[])
        .find((r) => r.resource === "document")!
        .relations.find((r) => r.name === "viewer")!.inherits;
    // The button is disabled while the save is in flight too, and the notice is the earlier save's: the stored catalog says when it landed.
    await expect.poll(viewerRules, { timeout: 10_000 }).toEqual([
      { through: "parent", relation: "viewer" },
      { through: "", relation: "editor" },
    ]);
    await expect.poll(() => page.getByRole("button", { name: "Save the catalog" }).isDisabled()).toBe(true);
    // Shown as stored, after the save's reload.
    expect(await within.getByLabel("on", { exact: true }).inputValue()).toBe("");
    expect(await within.getByLabel("Whoever holds").inputValue()).toBe("editor");
    expect(await within.getByRole("button", { name: "Remove the rule: editor on this instance, from viewer" }).count()).toBe(1);

    // editor redefined to inherit viewer within the instance: a cycle, refused beside the rule that closes it.
    const editor = await addRelation(document, "editor");
    await editor.getByRole("group", { name: "Actions it implies" }).getByLabel("read").check();
    await editor.getByRole("button", { name: "Add an inheritance rule" }).click();
    const back = editor.getByRole("group", { name: "Inheritance rule 1 of editor" });
    await back.getByLabel("on", { exact: true }).selectOption("");
    await back.getByLabel("Whoever holds").selectOption("viewer");
    await page.getByRole("button", { name: "Save the catalog" }).click();
    const backSelect = back.getByLabel("Whoever holds");
    await expect.poll(() => describedText(page, backSelect)).toMatch(/within an instance: viewer → editor → viewer/);
    expect(await backSelect.getAttribute("aria-invalid")).toBe("true");
    expect(await viewerRules()).toHaveLength(2);
    await expectClean(tab, "catalog-same-instance");
  });

  it("catalog: a requirement and an exclusion edited like inheritance rules, saved; a cycle through an exclusion refused beside its rule", async () => {
    const catalog = [
      { resource: "org", description: "", actions: ["read"], relations: [{ name: "member", actions: ["read"] }] },
      {
        resource: "document",
        description: "",
        actions: ["read"],
        relations: [
          { name: "org", actions: [], subjects: ["org"] },
          { name: "blocked", actions: [] },
          { name: "viewer", actions: ["read"] },
        ],
      },
    ];
    const key = await createApp(service, "rules", catalog);
    const ops = admin(service, "rules");
    const tab = await open(key, "rules", "catalog");
    const { page } = tab;
    const document = page.getByRole("group", { name: "document", exact: true });
    const viewer = document.getByRole("group", { name: "Relation viewer", exact: true });
    const blocked = document.getByRole("group", { name: "Relation blocked", exact: true });
    expect(await viewer.getByRole("group", { name: "Requires (and)" }).textContent()).toContain("Nothing more");
    expect(await viewer.getByRole("group", { name: "Unless (but not)" }).textContent()).toContain("Nothing takes it away.");

    // viewer requires member of an org the document is linked to, unless blocked on the document.
    await viewer.getByRole("button", { name: "Add a requirement" }).click();
    const requirement = viewer.getByRole("group", { name: "Requirement 1 of viewer" });
    expect(await requirement.getByLabel("on", { exact: true }).inputValue()).toBe("org");
    expect(await requirement.getByLabel("on", { exact: true }).locator("option").allTextContents()).toEqual(["this instance", "an instance linked by org"]);
    await requirement.getByLabel("Only who also holds").selectOption("member");
    await viewer.getByRole("button", { name: "Add an exclusion" }).click();
    const exclusion = viewer.getByRole("group", { name: "Exclusion 1 of viewer" });
    await exclusion.getByLabel("on", { exact: true }).selectOption({ label: "this instance" });
    expect(await exclusion.getByLabel("Whoever holds").locator("option").allTextContents()).toEqual(expect.arrayContaining(["blocked", "owner"]));
    expect(await exclusion.getByLabel("Whoever holds").locator("option").allTextContents()).not.toContain("viewer");
    await exclusion.getByLabel("Whoever holds").selectOption("blocked");
    await expectClean(tab, "catalog-requires-unless");

    // blocked unless viewer closes a cycle through an exclusion: refused, the error beside that rule, nothing saved.
    await blocked.getByRole("button", { name: "Add an exclusion" }).click();
    const cycle = blocked.getByRole("group", { name: "Exclusion 1 of blocked" });
    await cycle.getByLabel("on", { exact: true }).selectOption({ label: "this instance" });
    await cycle.getByLabel("Whoever holds").selectOption("viewer");
    await page.getByRole("button", { name: "Save the catalog" }).click();
    const cycleSelect = cycle.getByLabel("Whoever holds");
    await expect.poll(() => describedText(page, cycleSelect)).toMatch(/own negation/);
    expect(await cycleSelect.getAttribute("aria-invalid")).toBe("true");
    const unsaved = (await ops.getCatalog()) as { resource: string; relations: { name: string; unless: unknown[] }[] }[];
    expect(unsaved.find((r) => r.resource === "document")!.relations.find((r) => r.name === "viewer")!.unless).toEqual([]);
    await expectClean(tab);

    // The cycle's rule removed: saved as edited, and the check follows it.
    await blocked.getByRole("button", { name: "Remove the rule: viewer on this instance, from blocked's unless" }).click();
    await page.getByRole("button", { name: "Save the catalog" }).click();
    await expect.poll(() => page.getByRole("status").filter({ hasText: "Catalog saved." }).isVisible()).toBe(true);
    const stored = (await ops.getCatalog()) as { resource: string; relations: { name: string; requires: unknown[]; unless: unknown[] }[] }[];
    const storedViewer = stored.find((r) => r.resource === "document")!.relations.find((r) => r.name === "viewer")!;
    expect(storedViewer.requires).toEqual([{ through: "org", relation: "member" }]);
    expect(storedViewer.unless).toEqual([{ through: "", relation: "blocked" }]);
    await expect.poll(() => page.getByRole("button", { name: "Save the catalog" }).isDisabled()).toBe(true);
    await grant(key, "ann", "document", "d1", "viewer");
    await grant(key, { resource: "org", resourceId: "acme" }, "document", "d1", "org");
    await grant(key, "ann", "org", "acme", "member");
    const check = async () => (await service.call("POST", "/api/v1/authorization/check", { key, body: { userId: "ann", resource: "document", resourceId: "d1", action: "read" } })).body.allowed;
    expect(await check()).toBe(true);
    await grant(key, "ann", "document", "d1", "blocked");
    expect(await check()).toBe(false);
    await expectClean(tab);

    // The Check page explains it: the exclusion that took viewer away, with ann's path to blocked.
    await page.getByRole("navigation", { name: "Sections" }).getByRole("link", { name: "Check" }).click();
    await expect.poll(() => page.getByRole("heading", { level: 1, name: "Check" }).isVisible()).toBe(true);
    await page.getByLabel("User").fill("ann");
    await page.getByLabel("Resource", { exact: true }).selectOption("document");
    await page.getByLabel("Instance", { exact: true }).fill("d1");
    await page.getByLabel("Action", { exact: true }).selectOption("read");
    await page.getByRole("button", { name: "Check", exact: true }).click();
    const denied = page.getByRole("region", { name: "Denied" });
    await expect.poll(() => denied.isVisible()).toBe(true);
    await expect.poll(() => denied.getByRole("list", { name: "Taken away" }).textContent()).toBe(
      "Relation viewer: unless blocked on this instance: holds on document:d1, by ann is blocked of document:d1",
    );
    await expectClean(tab);
  });

  it("grants: to a subject set and to a linked instance; listed with their holder, found by holder, deleted one by one and by holder", async () => {
    const key = await createApp(service, "holders", HIERARCHY);
    await grant(key, "alice", "team", "eng", "member");
    const tab = await open(key, "holders", "grants");
    const { page } = tab;
    const add = page.getByRole("region", { name: "Add a grant" });

    // A subject set: every member of team eng is viewer of folder runbooks.
    await add.getByLabel("Resource", { exact: true }).selectOption("folder");
    await add.getByLabel("Instance", { exact: true }).fill("runbooks");
    await add.getByLabel("Relation", { exact: true }).selectOption("viewer");
    // folder.viewer is held by users and team#member: no link offered.
    expect(await add.getByRole("group", { name: "Holder", exact: true }).getByRole("radio").count()).toBe(2);
    await add.getByLabel(/^A subject set/).check();
    expect(await add.getByLabel("Subject set", { exact: true }).inputValue()).toBe("team#member"); // the one set its subjects allow
    await add.getByLabel("Instance of the set", { exact: true }).fill("eng");
    await expectClean(tab, "grants-holder");
    await add.getByRole("button", { name: "Add grant" }).click();
    await expect.poll(() => add.textContent()).toContain("Grant added: team:eng#member is viewer of folder runbooks");

    // A link: document 42's parent is folder runbooks (parent is held by folders only: the one kind offered).
    await add.getByLabel("Resource", { exact: true }).selectOption("document");
    await add.getByLabel("Instance", { exact: true }).fill("42");
    await add.getByLabel("Relation", { exact: true }).selectOption("parent");
    expect(await add.getByRole("group", { name: "Holder", exact: true }).getByRole("radio").count()).toBe(1);
    expect(await add.getByLabel("Linked resource", { exact: true }).inputValue()).toBe("folder");
    await add.getByLabel("Linked instance", { exact: true }).fill("runbooks");
    await add.getByRole("button", { name: "Add grant" }).click();
    await expect.poll(() => add.textContent()).toContain("Grant added: folder:runbooks is parent of document 42");
    expect(await listed(key, "resource=document&resourceId=42")).toEqual([
      expect.objectContaining({ userId: "", subject: { resource: "folder", resourceId: "runbooks", relation: "" }, relation: "parent" }),
    ]);
    expect(await service.call("POST", "/api/v1/authorization/check", { key, body: { userId: "alice", resource: "document", resourceId: "42", action: "read" } })).toMatchObject({
      status: 200,
      body: { allowed: true },
    });

    // Listed by instance, the holder as people read it.
    const find = page.getByRole("region", { name: "Find grants" });
    await find.getByLabel("Resource", { exact: true }).selectOption("folder");
    await find.getByLabel("Instance", { exact: true }).fill("runbooks");
    await find.getByRole("button", { name: "Search" }).click();
    const rows = find.locator("tbody tr");
    await expect.poll(() => rows.count()).toBe(1);
    expect((await rows.first().getByRole("cell").allTextContents()).slice(0, 4)).toEqual(["team:eng#member", "folder", "runbooks", "viewer"]);

    // Found by its holder: what team eng's members hold on folders.
    await find.getByLabel(/^Holder:/).check();
    await find.getByLabel("Holder resource", { exact: true }).selectOption("team");
    await find.getByLabel("Holder instance", { exact: true }).fill("eng");
    await find.getByLabel(/^Holder relation/).selectOption("member");
    await find.getByLabel("Resource", { exact: true }).selectOption("folder");
    await find.getByRole("button", { name: "Search" }).click();
    await expect.poll(() => rows.count()).toBe(1);
    expect((await rows.first().getByRole("cell").allTextContents()).slice(0, 4)).toEqual(["team:eng#member", "folder", "runbooks", "viewer"]);
    await expectClean(tab);

    // Deleted from the list, after a confirmation.
    await find.getByRole("button", { name: "Delete the grant viewer of team:eng#member on folder runbooks" }).click();
    await expectClean(tab);
    await find.getByRole("button", { name: "Delete the grant viewer of team:eng#member on folder runbooks now" }).click();
    await expect.poll(() => find.getByText("No grants match.").isVisible()).toBe(true);
    expect(await listed(key, "resource=folder&resourceId=runbooks")).toEqual([]);

    // By holder: every grant folder runbooks holds (it is gone).
    await grant(key, { resource: "folder", resourceId: "runbooks" }, "document", "43", "parent");
    const filter = page.getByRole("region", { name: "Delete by filter" });
    await filter.getByLabel("Holder resource", { exact: true }).selectOption("folder");
    await filter.getByLabel("Holder instance", { exact: true }).fill("runbooks");
    await filter.getByRole("button", { name: "Delete matching grants…" }).click();
    expect(await filter.getByRole("alert").textContent()).toContain("holder resource “folder”, holder instance “runbooks”");
    await expectClean(tab);
    await filter.getByRole("button", { name: "Delete them" }).click();
    await expect.poll(() => filter.textContent()).toContain("Deleted 2 grants.");
    expect(await listed(key, "resource=document&resourceId=42")).toEqual([]);
    expect(await listed(key, "resource=document&resourceId=43")).toEqual([]);
    expect(await listed(key, "resource=team&resourceId=eng")).toHaveLength(1); // alice's membership stays
  });

  it("check: the explain path as a chain from the user's own grant to the one on the instance; who can, paged", async () => {
    const key = await createApp(service, "reach", HIERARCHY);
    const ops = admin(service, "reach");
    await grant(key, "alice", "team", "eng", "member");
    await grant(key, { resource: "team", resourceId: "eng", relation: "member" }, "folder", "runbooks", "viewer");
    await grant(key, { resource: "folder", resourceId: "runbooks" }, "document", "42", "parent");
    await grant(key, "bob", "document", "42", "viewer");
    const bulk = await service.call("POST", "/api/v1/authorization/relationships/bulk", {
      key,
      body: { writes: Array.from({ length: 57 }, (_, i) => ({ userId: `member-${String(i).padStart(2, "0")}`, resource: "team", resourceId: "eng", relation: "member" })) },
    });
    expectStatus(bulk, 200);
    const readers = await ops.createPolicy("Document readers", ["document:read"]);
    await ops.assign(await ops.createRole("Readers", [readers]), "zoe");

    const tab = await open(key, "reach", "check");
    const { page } = tab;
    const ask = async (userId: string) => {
      await page.getByLabel("User").fill(userId);
      await page.getByLabel("Resource", { exact: true }).selectOption("document");
      await page.getByLabel("Instance", { exact: true }).fill("42");
      await page.getByLabel("Action", { exact: true }).selectOption("read");
    };
    await ask("alice");
    await page.getByRole("button", { name: "Check", exact: true }).click();
    const answer = page.getByRole("region", { name: "Allowed" });
    await expect.poll(() => answer.isVisible()).toBe(true);
    const path = answer.getByRole("list", { name: "Path of grants" });
    await expect.poll(() => path.getByRole("listitem").allTextContents()).toEqual([
      "alice is member of team:eng",
      " → team:eng#member is viewer of folder:runbooks",
      " → folder:runbooks is parent of document:42",
    ]);
    expect((await answer.textContent())!.replace(/\s+/g, " ")).toContain(
      "Relation viewer on this instance, through 3 grants: alice is member of team:eng → team:eng#member is viewer of folder:runbooks → folder:runbooks is parent of document:42",
    );
    await expectClean(tab, "check-path");

    // A grant on the instance itself reads as the grant alone.
    await ask("bob");
    await page.getByRole("button", { name: "Check", exact: true }).click();
    await expect.poll(() => answer.textContent()).toContain("Grant: viewer on this instance");

    // Who can read document 42: the members through the team and the folder, bob by his grant, zoe by her role; 60, 50 a page.
    await page.getByRole("button", { name: "Who can?" }).click();
    const who = page.getByRole("region", { name: "Who can read document 42" });
    const users = who.getByRole("list", { name: /^Users who can/ }).getByRole("listitem");
    await expect.poll(() => users.count()).toBe(50);
    expect((await users.allTextContents()).slice(0, 3)).toEqual(["alice", "bob", "member-00"]);
    await expectClean(tab, "check-who-can");
    await who.getByRole("button", { name: "Next" }).click();
    await expect.poll(() => users.allTextContents()).toEqual(["member-48", "member-49", "member-50", "member-51", "member-52", "member-53", "member-54", "member-55", "member-56", "zoe"]);
    expect(await who.getByRole("button", { name: "Next" }).isDisabled()).toBe(true);
    await who.getByRole("button", { name: "Previous" }).click();
    await expect.poll(() => users.count()).toBe(50);
    await expectClean(tab);

    // Nobody: an instance no one can reach (zoe's role reaches every instance, so write, which no role holds).
    await page.getByLabel("Instance", { exact: true }).fill("nowhere");
    await page.getByLabel("Action", { exact: true }).selectOption("write");
    await page.getByRole("button", { name: "Who can?" }).click();
    await expect.poll(() => page.getByRole("region", { name: "Who can write document nowhere" }).textContent()).toContain("Nobody");
  });

  it("check: contextual grants count for the question and who can alone, marked on the path; a bad one named at its field", async () => {
    const key = await createApp(service, "context", HIERARCHY);
    await grant(key, { resource: "team", resourceId: "eng", relation: "member" }, "folder", "runbooks", "viewer");
    await grant(key, { resource: "folder", resourceId: "runbooks" }, "document", "42", "parent");
    const tab = await open(key, "context", "check");
    const { page } = tab;
    await page.getByLabel("User").fill("dee");
    await page.getByLabel("Resource", { exact: true }).selectOption("document");
    await page.getByLabel("Instance", { exact: true }).fill("42");
    await page.getByLabel("Action", { exact: true }).selectOption("read");
    const contextual = page.getByLabel("Contextual grants (optional)");
    const membership = JSON.stringify([{ userId: "dee", resource: "team", resourceId: "eng", relation: "member" }]);
    const check = () => page.getByRole("button", { name: "Check", exact: true }).click();
    const answer = page.getByRole("region", { name: /Allowed|Denied/ });

    await contextual.fill(membership);
    await check();
    await expect.poll(() => answer.getByRole("heading").first().textContent()).toBe("Allowed");
    expect(await answer.getByRole("list", { name: "Path of grants" }).getByRole("listitem").allTextContents()).toEqual([
      "dee is member of team:eng (contextual)",
      " → team:eng#member is viewer of folder:runbooks",
      " → folder:runbooks is parent of document:42",
    ]);
    await expectClean(tab, "check-contextual");

    // Never stored: without it, denied, and team eng has no member.
    await contextual.fill("");
    await check();
    await expect.poll(() => answer.getByRole("heading").first().textContent()).toBe("Denied");
    expect(await listed(key, "resource=team&resourceId=eng")).toEqual([]);

    // Who can, with it: dee alone.
    await contextual.fill(membership);
    await page.getByRole("button", { name: "Who can?" }).click();
    const who = page.getByRole("region", { name: "Who can read document 42" });
    await expect.poll(() => who.getByRole("list", { name: "Users who can, page 1" }).getByRole("listitem").allTextContents()).toEqual(["dee"]);

    // Not an array of grants: named at the field by the browser, never sent.
    const explains = () => tab.urls.filter((u) => u.endsWith("/authz.v1.CheckService/Explain")).length;
    const before = explains();
    await contextual.fill('{"userId": "dee"}');
    await check();
    await expect.poll(() => describedText(page, contextual)).toContain("a JSON array of grants is needed");
    expect(await contextual.getAttribute("aria-invalid")).toBe("true");
    expect(explains()).toBe(before);
    // A relation the catalog lacks: the service's 400, at the field, naming the grant.
    await contextual.fill(JSON.stringify([{ userId: "dee", resource: "team", resourceId: "eng", relation: "owner-of-all" }]));
    await check();
    await expect.poll(() => describedText(page, contextual)).toContain("contextualGrants[0].relation: ");
    expect(explains()).toBe(before + 1);
    await expectClean(tab);
  });

  it("parents: an instance's parents as a tree, upward through its links; a second parent, a cycle, and the 16-level limit", async () => {
    const key = await createApp(service, "tree", HIERARCHY);
    const link = (child: string, parent: string, resource = "folder") => grant(key, { resource: "folder", resourceId: parent }, resource, child, "parent");
    await link("42", "runbooks", "document");
    await link("42", "archive", "document");
    await link("runbooks", "ops");
    await link("ops", "runbooks"); // a cycle: ops is in runbooks, runbooks in ops
    await link("archive", "root");
    // A chain of 20 folders above document deep: f00 ← f01 ← … ← f19.
    await link("deep", "f00", "document");
    for (let i = 0; i < 19; i++) await link(`f${String(i).padStart(2, "0")}`, `f${String(i + 1).padStart(2, "0")}`);

    const tab = await open(key, "tree", "grants");
    const { page } = tab;
    const parents = page.getByRole("region", { name: "Parents of an instance" });
    await parents.getByLabel("Resource", { exact: true }).selectOption("document");
    await parents.getByLabel("Instance", { exact: true }).fill("42");
    await parents.getByRole("button", { name: "Show parents" }).click();
    const tree = parents.getByRole("list", { name: "Parents of document:42" });
    const lines = async () =>
      (await tree.locator("li").evaluateAll((items) => items.map((li) => [...li.childNodes].filter((n) => n.nodeName !== "UL").map((n) => n.textContent).join("").trim())))
        .map((line) => line.replace(/\s+/g, " "));
    // Depth first, each instance's parents in order of their ids.
    await expect.poll(lines, { timeout: 10_000 }).toEqual([
      "document:42",
      "parent → folder:archive",
      "parent → folder:root",
      "parent → folder:runbooks",
      "parent → folder:ops",
      "parent → folder:runbooks (a cycle: already on this path, not followed again)",
    ]);
    await expectClean(tab, "grants-parents");

    await parents.getByLabel("Instance", { exact: true }).fill("deep");
    await parents.getByRole("button", { name: "Show parents" }).click();
    const deep = parents.getByRole("list", { name: "Parents of document:deep" });
    // 17 instances, one after the other: a walk of 17 calls.
    await expect.poll(() => deep.getByText("has parents further up").count(), { timeout: 20_000 }).toBe(1);
    const shown = await deep.locator("code").allTextContents();
    expect(shown).toEqual(["document:deep", ...Array.from({ length: 16 }, (_, i) => `folder:f${String(i).padStart(2, "0")}`)]);
    await expectClean(tab);

    // No link relation, no parents: said so.
    await parents.getByLabel("Resource", { exact: true }).selectOption("team");
    await parents.getByLabel("Instance", { exact: true }).fill("eng");
    await parents.getByRole("button", { name: "Show parents" }).click();
    await expect.poll(() => parents.getByRole("status").textContent()).toContain("team has no link relation");
  });
});
