/**
 * Conditions in the console (docs/conditions.md), end to end in Chromium
 * against the real service: a policy created with a CEL condition (a bad one
 * refused at its field by the service's 400), shown in the list and on its
 * page, changed and cleared through the impact preview, which lists the
 * permissions held under a condition apart from those held outright; a role
 * assigned with a condition, listed with it; the check asked with context
 * and properties typed as JSON (refused in the browser when they are not an
 * object, the service's own 400 at its field too), and the conditions
 * explain evaluated, with what they read; the model's plan showing a
 * conditional impact row. Every stage is checked by axe-core, for script
 * errors and CSP violations, and for its destructive buttons. About the
 * console, not storage: PGlite only.
 */
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { openTab, startConsoleRig, type ConsoleRig, type Tab, expectClean as expectCleanTab } from "./support/browser.js";
import type { TestService } from "./support/service.js";
import { admin, createApp, expectStatus, type Admin } from "./helpers/authz.js";

const APP = "todos";
const CATALOG = [{ resource: "todo", description: "Things to do", actions: ["read", "update", "delete"], relations: [{ name: "assignee", actions: ["read", "update"] }] }];

/** The rule conditions are written for: the owner of the todo. */
const OWNER = "resource.properties.ownerID == subject.id";
/** Another one, to change a policy's condition to. */
const LISTED = "subject.id in resource.properties.owners";
/** An assignment's condition: "only while a ticket is open". */
const TICKET = 'context.ticket.startsWith("T-")';

describe("conditions in the console, in Chromium", { timeout: 180_000 }, () => {
  let service: TestService;
  let rig: ConsoleRig | undefined;
  let tabs: Tab[] = [];
  let key: string;
  let ops: Admin;
  const ids = { staff: "", owners: "", keepers: "" };
  const base = `/api/v1/applications/${APP}`;

  beforeAll(async () => {
    rig = await startConsoleRig();
    ({ service, tabs } = rig);
    key = await createApp(service, APP, CATALOG);
    ops = admin(service, APP);
    // Staff: reading todos, for ann and bob outright; erin only while a ticket is open (for the check).
    ids.staff = await ops.createRole("Staff", [await ops.createPolicy("Readers", ["todo:read"])]);
    for (const user of ["ann", "bob"]) await ops.assign(ids.staff, user);
    expectStatus(await service.call("POST", `${base}/roles/${ids.staff}/assignments`, { body: { userId: "erin", condition: TICKET } }), 201);
    // Owners: no policy yet; the policy made in the page is attached to it, so that its preview reaches users.
    ids.owners = await ops.createRole("Owners", []);
    for (const user of ["ann", "cy"]) await ops.assign(ids.owners, user);
    // Keepers: deleting one's own todos, by a conditional policy (for the check).
    const ownItems = await service.call("POST", `${base}/policies`, { body: { name: "Own items", permissions: ["todo:delete"], condition: OWNER } });
    expectStatus(ownItems, 201);
    ids.keepers = await ops.createRole("Keepers", [ownItems.body.policyId]);
    await ops.assign(ids.keepers, "kim");
  }, 120_000);

  afterAll(async () => {
    await rig?.close();
  });

  /** A fresh tab signed in with `as`, on the page `path` of the application. */
  async function open(path: string, as = key, appId = APP): Promise<Tab> {
    const tab = await openTab(rig!.browser, service.url);
    tabs.push(tab);
    await tab.page.goto("/console/");
    await tab.page.getByLabel("API key").fill(as);
    await tab.page.getByRole("button", { name: "Sign in" }).click();
    await expect.poll(() => heading(tab.page, "Catalog").isVisible()).toBe(true);
    await tab.page.goto(`/console/apps/${appId}/${path}`);
    return tab;
  }

  const heading = (page: Page, name: string) => page.getByRole("heading", { level: 1, name });
  const expectClean = (tab: Tab, screenshotName?: string) => expectCleanTab(tab, { key, ...(screenshotName === undefined ? {} : { screenshot: screenshotName }) });
  const stored = async (path: string) => (await service.call("GET", `${base}${path}`)).body;
  /** The field error an input points at (its aria-describedby includes the error's id). */
  const errorOf = (page: Page, id: string) => page.locator(`#${id}-error`);

  it("policies: created with a condition (a bad one refused at its field), shown in the list and on its page; edits preview conditional permissions apart, then change and clear it", async () => {
    const tab = await open("policies");
    const { page } = tab;
    await expect.poll(() => heading(page, "Policies").isVisible()).toBe(true);
    await page.getByLabel("Name").fill("Own todos");
    const todo = page.getByRole("group", { name: /^todo/ });
    await todo.getByLabel("update").check();
    await todo.getByLabel("delete").check();
    const condition = page.getByLabel(/^Condition/);
    await condition.fill("subject.id ==");
    await page.getByRole("button", { name: "Create policy" }).click();
    // The service's 400 at the field: CEL's message, the field marked invalid; nothing created.
    await expect.poll(() => condition.getAttribute("aria-invalid")).toBe("true");
    await expect.poll(() => errorOf(page, "policy-new-condition").textContent()).toContain("not valid CEL");
    expect(await condition.getAttribute("aria-describedby")).toContain("policy-new-condition-error");
    expect((await stored("/policies")).policies.map((p: { name: string }) => p.name)).not.toContain("Own todos");
    await expectClean(tab, "policy-condition-refused");

    await condition.fill(OWNER);
    await page.getByRole("button", { name: "Create policy" }).click();
    await expect.poll(() => heading(page, "Policy Own todos").isVisible()).toBe(true);
    expect(await page.getByText("Condition: its permissions hold only where").textContent()).toBe(`Condition: its permissions hold only where ${OWNER} holds.`);
    expect(await page.getByLabel(/^Condition/).inputValue()).toBe(OWNER);
    const policyId = page.url().split("/").pop()!;
    expect(await stored(`/policies/${policyId}`)).toMatchObject({ name: "Own todos", permissions: ["todo:update", "todo:delete"], condition: OWNER });
    await expectClean(tab);

    // The list: the condition in its own column; a policy without one says so.
    await page.goto(`/console/apps/${APP}/policies`);
    const row = page.getByRole("row", { name: /^Own todos/ });
    await expect.poll(() => row.getByRole("cell").allTextContents()).toEqual(["Own todos", "", "Application-wide", "2", OWNER, "0"]);
    expect(await page.getByRole("row", { name: /^Readers/ }).getByRole("cell").nth(4).textContent()).toBe("none");
    await expectClean(tab, "policies-conditions");

    // Attached to Owners (ann, cy), so that its changes reach users.
    await ops.setRolePolicies(ids.owners, [policyId]);
    await page.goto(`/console/apps/${APP}/policies/${policyId}`);
    await expect.poll(() => heading(page, "Policy Own todos").isVisible()).toBe(true);
    const edit = page.getByLabel(/^Condition/);
    const review = page.getByRole("button", { name: "Review changes" });
    const impact = page.getByRole("region", { name: "Before you save" });

    // A bad one: the preview's 400 at the field, no preview.
    await edit.fill("resource.properties.ownerID ==");
    await review.click();
    await expect.poll(() => errorOf(page, "policy-edit-condition").textContent()).toContain("not valid CEL");
    expect(await edit.getAttribute("aria-invalid")).toBe("true");
    expect(await impact.count()).toBe(0);
    await expectClean(tab);

    // Changed: the permissions go under the old condition and come under the new, listed apart; nothing held outright changes.
    await edit.fill(LISTED);
    expect(await edit.getAttribute("aria-invalid")).toBeNull();
    await review.click();
    const underCondition = impact.getByRole("list", { name: "Under a condition" });
    await expect.poll(() => underCondition.getByRole("listitem").allTextContents()).toEqual([
      `Removes todo:update, todo:delete where ${OWNER} holds`,
      `Adds todo:update, todo:delete where ${LISTED} holds`,
    ]);
    expect(await impact.getByRole("list", { name: "Held outright" }).count()).toBe(0);
    expect(await impact.textContent()).toContain("2 users would lose and 2 users would gain a permission, outright or under a condition, of 2 users its roles are assigned to.");
    await expectClean(tab, "policy-condition-preview");
    expect((await stored(`/policies/${policyId}`)).condition).toBe(OWNER); // not saved until asked
    await impact.getByRole("button", { name: "Save changes" }).click();
    await expect.poll(() => page.getByRole("status").filter({ hasText: "Policy Own todos saved." }).isVisible()).toBe(true);
    expect((await stored(`/policies/${policyId}`)).condition).toBe(LISTED);

    // Another field alone: the update's mask leaves the condition be.
    await expect.poll(() => page.getByLabel(/^Condition/).inputValue()).toBe(LISTED);
    await page.getByLabel("Description").fill("Owners' todos");
    await review.click();
    await expect.poll(() => impact.textContent()).toContain("The permissions do not change");
    // The policy's read back after the save is held a while, as on a slow network: an edit typed meanwhile is not lost
    // when the editor gives way to the saved policy's (the form takes none until then; the fill waits for it).
    let readBack: () => void = () => undefined;
    const held = new Promise<void>((resolve) => (readBack = resolve));
    await page.route("**/authz.v1.PolicyService/GetPolicy", async (route) => {
      await held;
      await route.continue();
    });
    await impact.getByRole("button", { name: "Save changes" }).click();
    await expect.poll(async () => (await stored(`/policies/${policyId}`)).description).toBe("Owners' todos");
    expect((await stored(`/policies/${policyId}`)).condition).toBe(LISTED);
    await expect.poll(() => page.getByLabel(/^Condition/).isDisabled()).toBe(true);
    setTimeout(readBack, 1_000);

    // Cleared: sent as "" under the mask's "condition"; the permissions come outright, and go under the condition.
    await page.getByLabel(/^Condition/).fill("");
    await page.unroute("**/authz.v1.PolicyService/GetPolicy");
    await expect.poll(() => page.getByLabel("Description").inputValue()).toBe("Owners' todos");
    await review.click();
    await expect.poll(() => impact.getByRole("list", { name: "Held outright" }).getByRole("listitem").allTextContents()).toEqual(["Adds todo:update, todo:delete"]);
    expect(await underCondition.getByRole("listitem").allTextContents()).toEqual([`Removes todo:update, todo:delete where ${LISTED} holds`]);
    await expectClean(tab);
    await impact.getByRole("button", { name: "Save changes" }).click();
    await expect.poll(async () => (await stored(`/policies/${policyId}`)).condition).toBeUndefined();
    await expect.poll(() => page.getByText("No condition: its permissions always hold.").isVisible()).toBe(true);
    const events = await service.call("GET", `${base}/audit-log?type=policy.updated&targetId=${policyId}`);
    expect(events.body.events[0].data.condition).toEqual({ from: LISTED, to: null });
  });

  it("role assignments: a condition with the assignment (a bad one refused at its field), listed with it; assigning again without one removes it", async () => {
    const tab = await open(`roles/${ids.staff}`);
    const { page } = tab;
    await expect.poll(() => heading(page, "Staff").isVisible()).toBe(true);
    const section = page.getByRole("region", { name: "Assigned users" });
    const user = section.getByLabel("User id");
    const condition = section.getByLabel(/^Condition/);
    await user.fill("cara");
    await condition.fill("context.ticket ==");
    await section.getByRole("button", { name: "Assign role" }).click();
    await expect.poll(() => condition.getAttribute("aria-invalid")).toBe("true");
    await expect.poll(() => errorOf(page, "roles-assign-condition").textContent()).toContain("not valid CEL");
    expect((await stored(`/roles/${ids.staff}/assignments`)).assignments.map((a: { userId: string }) => a.userId)).not.toContain("cara");
    await expectClean(tab, "role-assign-condition-refused");

    await condition.fill(TICKET);
    await section.getByRole("button", { name: "Assign role" }).click();
    await expect.poll(() => page.getByRole("status").filter({ hasText: `Assigned Staff to cara, where ${TICKET} holds.` }).isVisible()).toBe(true);
    const cara = section.getByRole("row", { name: /^cara/ });
    await expect.poll(() => cara.locator("code.condition").textContent()).toBe(TICKET);
    expect(await section.getByRole("row", { name: /^ann/ }).getByRole("cell").nth(2).textContent()).toBe("none");
    expect(await section.getByRole("row", { name: /^erin/ }).locator("code.condition").textContent()).toBe(TICKET);
    const listed = (await stored(`/roles/${ids.staff}/assignments`)).assignments as { userId: string; condition?: string }[];
    expect(listed.find((a) => a.userId === "cara")?.condition).toBe(TICKET);
    // The form is empty again, the field no longer marked.
    expect([await user.inputValue(), await condition.inputValue(), await condition.getAttribute("aria-invalid")]).toEqual(["", "", null]);
    await expectClean(tab, "role-assignment-conditions");

    // Assigned again with none: the condition goes (the hint says so).
    await user.fill("cara");
    await section.getByRole("button", { name: "Assign role" }).click();
    await expect.poll(() => cara.getByRole("cell").nth(2).textContent()).toBe("none");
    const again = (await stored(`/roles/${ids.staff}/assignments`)).assignments as { userId: string; condition?: string }[];
    expect(again.find((a) => a.userId === "cara")).not.toHaveProperty("condition");
  });

  it("check: context and properties as JSON objects (not sent when they are not one; the service's 400 at its field), and every condition evaluated with what it read", async () => {
    const tab = await open("check");
    const { page } = tab;
    await expect.poll(() => heading(page, "Check").isVisible()).toBe(true);
    const context = page.getByLabel("Context", { exact: true });
    const ask = async (userId: string, resourceId: string, action: string) => {
      await page.getByLabel("User").fill(userId);
      await page.getByLabel("Resource", { exact: true }).selectOption("todo");
      await page.getByLabel("Instance", { exact: true }).fill(resourceId);
      await page.getByLabel("Action", { exact: true }).selectOption(action);
      await page.getByRole("button", { name: "Check", exact: true }).click();
    };
    const answer = page.getByRole("region", { name: /Allowed|Denied/ });
    const evaluated = answer.getByRole("list", { name: "Conditions evaluated" }).getByRole("listitem");
    const reads = (n: number) => answer.getByRole("table", { name: `Values condition ${n} read` }).getByRole("row");

    // erin holds Staff only while a ticket is open: with one in the context, allowed, and the condition held.
    await context.fill('{"ticket": "T-7"}');
    await ask("erin", "t1", "read");
    await expect.poll(() => answer.getByRole("heading").first().textContent()).toBe("Allowed");
    await expect.poll(() => evaluated.count()).toBe(1);
    expect(await evaluated.first().locator("p").first().textContent()).toBe(`Held (it came to true): ${TICKET}, the condition of the user's assignment of role Staff`);
    expect(await reads(1).allTextContents()).toEqual(["PathValue", 'context.ticket"T-7"']);
    await expectClean(tab, "check-conditions");

    // Without it: denied, the evaluation's error said, the value read missing.
    await context.fill("");
    await page.getByRole("button", { name: "Check", exact: true }).click();
    await expect.poll(() => answer.getByRole("heading").first().textContent()).toBe("Denied");
    await expect.poll(() => evaluated.first().locator("p").first().textContent()).toMatch(/^Did not hold \(its evaluation failed\)/);
    expect(await evaluated.first().locator(".condition-message").textContent()).not.toBe("");
    expect(await reads(1).allTextContents()).toEqual(["PathValue", "context.ticketmissing"]);
    await expectClean(tab);

    // Not a JSON object: named at the field by the browser, and never sent.
    const explains = () => tab.urls.filter((u) => u.endsWith("/authz.v1.CheckService/Explain")).length;
    const before = explains();
    await context.fill('{"ticket": }');
    await page.getByRole("button", { name: "Check", exact: true }).click();
    await expect.poll(() => errorOf(page, "check-context").textContent()).toMatch(/^not JSON: /);
    expect(await context.getAttribute("aria-invalid")).toBe("true");
    expect(await answer.count()).toBe(0); // the last answer no longer stands for the form
    await expectClean(tab);
    const resource = page.getByLabel("Resource properties");
    await context.fill('{"ticket": "T-7"}');
    await resource.fill('["T-7"]');
    await page.getByRole("button", { name: "Check", exact: true }).click();
    await expect.poll(() => errorOf(page, "check-resourceProperties").textContent()).toBe('a JSON object is needed ({"key": value, …}), not an array');
    expect(await errorOf(page, "check-context").textContent()).toBe("");
    expect(await context.getAttribute("aria-invalid")).toBeNull();
    expect(explains()).toBe(before);
    await resource.fill("");

    // An object the service refuses (over its 64 KiB): its 400, at the field it names.
    await context.fill(JSON.stringify({ ticket: "T-7", note: "x".repeat(70_000) }));
    await page.getByRole("button", { name: "Check", exact: true }).click();
    await expect.poll(() => errorOf(page, "check-context").textContent()).toContain("at most 65536");
    expect(await context.getAttribute("aria-invalid")).toBe("true");
    expect(explains()).toBe(before + 1);
    await context.fill("");

    // A policy's condition: kim deletes her own todo through Keepers → Own items; each value it read listed; its role and policy linked.
    await resource.fill('{"ownerID": "kim"}');
    await ask("kim", "t9", "delete");
    await expect.poll(() => answer.getByRole("heading").first().textContent()).toBe("Allowed");
    await expect.poll(() => evaluated.count()).toBe(1);
    expect(await evaluated.first().locator("p").first().textContent()).toBe(`Held (it came to true): ${OWNER}, the condition of policy Own items, through role Keepers`);
    expect(await reads(1).allTextContents()).toEqual(expect.arrayContaining(['resource.properties.ownerID"kim"', 'subject.id"kim"']));
    await expectClean(tab);
    await evaluated.first().getByRole("link", { name: "Own items" }).click();
    await expect.poll(() => heading(page, "Policy Own items").isVisible()).toBe(true);
    expect(await page.getByText("Condition: its permissions hold only where").textContent()).toBe(`Condition: its permissions hold only where ${OWNER} holds.`);
    await page.goBack();
    await expect.poll(() => heading(page, "Check").isVisible()).toBe(true);
    await resource.fill('{"ownerID": "kim"}');
    await ask("kim", "t9", "delete");
    await evaluated.first().getByRole("link", { name: "Keepers" }).click();
    await expect.poll(() => heading(page, "Keepers").isVisible()).toBe(true);
    expect(page.url()).toBe(`${service.url}/console/apps/${APP}/roles/${ids.keepers}`);
  });

  it("who can: users allowed only where a condition holds listed apart with it, and every user where an allUsers grant's condition holds", async () => {
    const appId = "todos-who";
    const whoKey = await createApp(service, appId, [
      { resource: "todo", description: "", actions: ["read"], relations: [{ name: "viewer", actions: ["read"], subjects: ["user", "user:*"] }] },
    ]);
    const writes = [
      { userId: "ann", resource: "todo", resourceId: "t1", relation: "viewer" },
      { userId: "bob", resource: "todo", resourceId: "t1", relation: "viewer", condition: TICKET },
      { allUsers: true, resource: "todo", resourceId: "t1", relation: "viewer", condition: OWNER },
      { userId: "cy", resource: "todo", resourceId: "t2", relation: "viewer", condition: TICKET },
    ];
    expectStatus(await service.call("POST", "/api/v1/authorization/relationships/bulk", { key: whoKey, body: { writes } }), 200);
    const tab = await open("check", whoKey, appId);
    const { page } = tab;
    await expect.poll(() => heading(page, "Check").isVisible()).toBe(true);
    const whoCan = async (resourceId: string) => {
      await page.getByLabel("Resource", { exact: true }).selectOption("todo");
      await page.getByLabel("Instance", { exact: true }).fill(resourceId);
      await page.getByLabel("Action", { exact: true }).selectOption("read");
      await page.getByRole("button", { name: "Who can?" }).click();
      return page.getByRole("region", { name: `Who can read todo ${resourceId}` });
    };
    const t1 = await whoCan("t1");
    await expect.poll(() => t1.getByRole("list", { name: "Users who can, page 1" }).getByRole("listitem").allTextContents()).toEqual(["ann"]);
    // bob, as every user, also where the allUsers grant's condition holds.
    expect(await t1.getByRole("list", { name: "Only where a condition holds, page 1" }).getByRole("listitem").allTextContents()).toEqual([
      `bob, where ${TICKET} or ${OWNER} holds`,
    ]);
    expect(await t1.getByRole("list", { name: "Conditions under which every user may" }).getByRole("listitem").allTextContents()).toEqual([OWNER]);
    expect(await t1.textContent()).not.toContain("Nobody");
    await expectClean(tab, "who-can-conditions");
    // Only a conditional user: listed, and "Nobody" is not said.
    const t2 = await whoCan("t2");
    await expect.poll(() => t2.getByRole("list", { name: "Only where a condition holds, page 1" }).getByRole("listitem").allTextContents()).toEqual([
      `cy, where ${TICKET} holds`,
    ]);
    expect(await t2.textContent()).not.toContain("Nobody");
    expect(await t2.getByRole("list", { name: "Conditions under which every user may" }).count()).toBe(0);
    await expectClean(tab);
  });

  it("model: a plan's impact row held under a condition shows it, apart from the same permission held outright", async () => {
    const appId = "todos-model";
    const modelKey = await createApp(service, appId, []);
    const model = {
      catalog: CATALOG,
      policies: [{ name: "readers", description: "", permissions: ["todo:read"] }],
      roles: [{ name: "staff", description: "", policies: ["readers"] }],
    };
    expectStatus(await service.call("PUT", `/api/v1/applications/${appId}/model`, { body: model }), 200);
    const roles = (await service.call("GET", `/api/v1/applications/${appId}/roles`)).body.roles as { roleId: string }[];
    await admin(service, appId).assign(roles[0]!.roleId, "ann");

    const tab = await open("model", modelKey, appId);
    const { page } = tab;
    await expect.poll(() => heading(page, "Model").isVisible()).toBe(true);
    const changed = { ...model, policies: [{ ...model.policies[0], condition: "has(context.ticket)" }] };
    await page.getByLabel("Model file (YAML or JSON)").setInputFiles({ name: "conditional.yaml", mimeType: "application/yaml", buffer: Buffer.from(stringify(changed)) });
    const impact = page.getByRole("table", { name: "Access: who gains or loses a permission" });
    await expect.poll(() => impact.getByRole("row").count()).toBe(3);
    // ann loses todo:read outright and gains it only where the condition holds.
    expect((await impact.getByRole("row").allTextContents()).slice(1).sort()).toEqual(["todo:read01 (ann)", "todo:read only where has(context.ticket) holds1 (ann)0"].sort());
    await expectClean(tab, "model-conditional-impact");
  });
});
