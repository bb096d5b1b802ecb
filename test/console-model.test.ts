/**
 * The console's Model page (API.md, "Models as files") end to end, in
 * Chromium through the real service: the export downloaded as YAML and as
 * JSON equals the REST export; a changed file uploaded shows its plan (each
 * change with its diff, and who gains or loses what) before the apply
 * button, and nothing changes until it is pressed; apply makes the model and
 * audit-logs it; a model changed meanwhile is refused at the plan's version
 * and planned again; a file that cannot be parsed, and one the API refuses,
 * are named by line. Each stage is checked by axe-core, for script errors
 * and CSP violations, and for its destructive buttons.
 */
import { readFile } from "node:fs/promises";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse, stringify } from "yaml";
import { openTab, startConsoleRig, type ConsoleRig, type Tab, expectClean as expectCleanTab } from "./support/browser.js";
import type { TestService } from "./support/service.js";
import { admin, createApp, expectStatus } from "./helpers/authz.js";
import { fileForm } from "../src/lib/model-file.js";

const MODEL = {
  catalog: [
    {
      resource: "invoice",
      description: "An invoice",
      actions: ["read", "approve", "pay"],
      // reviewer: a rule within the instance, which a file writes without `through`.
      relations: [
        { name: "approver", actions: ["read", "approve"] },
        { name: "reviewer", actions: ["read"], inherits: [{ relation: "approver" }] },
      ],
    },
  ],
  policies: [
    { name: "approvers", description: "approve invoices", permissions: ["invoice:read", "invoice:approve"] },
    { name: "payers", description: "pay invoices", permissions: ["invoice:pay"] },
  ],
  roles: [
    { name: "finance", description: "the finance team", policies: ["approvers"] },
    { name: "treasury", description: "", policies: ["payers"] },
  ],
};

/** The change: approvers lose approve, finance gains payers, treasury goes, auditors come. */
const CHANGED = {
  catalog: MODEL.catalog,
  policies: [
    { name: "approvers", description: "approve invoices", permissions: ["invoice:read"] },
    { name: "payers", description: "pay invoices", permissions: ["invoice:pay"] },
  ],
  roles: [
    { name: "finance", description: "the finance team", policies: ["approvers", "payers"] },
    { name: "auditors", description: "read everything", policies: ["approvers"] },
  ],
};

describe("the Model page, in Chromium", { timeout: 180_000 }, () => {
  let service: TestService;
  let rig: ConsoleRig | undefined;
  let tabs: Tab[] = [];
  let key: string;
  const appId = "model-page";

  beforeAll(async () => {
    rig = await startConsoleRig();
    ({ service, tabs } = rig);
    key = await createApp(service, appId, []);
    expectStatus(await service.call("PUT", `/api/v1/applications/${appId}/model`, { body: MODEL }), 200);
    const ops = admin(service, appId);
    const roles = (await service.call("GET", `/api/v1/applications/${appId}/roles`)).body.roles as { roleId: string; name: string }[];
    for (const userId of ["ann", "bob"]) await ops.assign(roles.find((r) => r.name === "finance")!.roleId, userId);
    await ops.assign(roles.find((r) => r.name === "treasury")!.roleId, "tess");
  }, 120_000);

  afterAll(async () => {
    await rig?.close();
  });

  async function open(): Promise<Tab> {
    const tab = await openTab(rig!.browser, service.url);
    tabs.push(tab);
    await tab.page.goto("/console/");
    await tab.page.getByLabel("API key").fill(key);
    await tab.page.getByRole("button", { name: "Sign in" }).click();
    await expect.poll(() => tab.page.getByRole("heading", { level: 1, name: "Catalog" }).isVisible()).toBe(true);
    await tab.page.getByRole("navigation", { name: "Sections" }).getByRole("link", { name: "Model" }).click();
    await expect.poll(() => tab.page.getByRole("heading", { level: 1, name: "Model" }).isVisible()).toBe(true);
    expect(tab.page.url()).toBe(`${service.url}/console/apps/${appId}/model`);
    return tab;
  }

  const expectClean = (tab: Tab, screenshotName?: string) => expectCleanTab(tab, screenshotName === undefined ? {} : { screenshot: screenshotName });

  const restExport = async () => {
    const res = await service.call("GET", `/api/v1/applications/${appId}/model`);
    expectStatus(res, 200);
    return res.body as Record<string, unknown>;
  };

  async function downloaded(page: Page, button: string): Promise<{ name: string; text: string }> {
    const [download] = await Promise.all([page.waitForEvent("download"), page.getByRole("button", { name: button }).click()]);
    return { name: download.suggestedFilename(), text: await readFile((await download.path())!, "utf8") };
  }

  const upload = (page: Page, name: string, text: string) =>
    page.getByLabel("Model file (YAML or JSON)").setInputFiles({ name, mimeType: name.endsWith(".json") ? "application/json" : "application/yaml", buffer: Buffer.from(text) });

  it("downloads the model as YAML and as JSON, each equal to the REST export as `portcullis model export` writes it", async () => {
    const tab = await open();
    const { page } = tab;
    const stored = await restExport();
    expect(await page.getByText(/^Version \d+: 1 resource, 2 policies, 2 roles\.$/).textContent()).toBe(`Version ${String(stored.version)}: 1 resource, 2 policies, 2 roles.`);

    const yaml = await downloaded(page, "Download as YAML");
    expect(yaml.name).toBe(`${appId}.model.yaml`);
    expect(yaml.text.split("\n")[0]).toBe(`# yaml-language-server: $schema=${service.url}/model.schema.json`);
    expect(parse(yaml.text)).toEqual(fileForm(stored));
    // The rule within the instance: through "" in the API's answer, left out in the file.
    const reviewer = (doc: Record<string, unknown>) => (doc.catalog as { relations: { name: string; inherits: unknown[] }[] }[])[0]!.relations.find((r) => r.name === "reviewer")!.inherits;
    expect(reviewer(stored)).toEqual([{ through: "", relation: "approver" }]);
    expect(reviewer(parse(yaml.text) as Record<string, unknown>)).toEqual([{ relation: "approver" }]);

    const json = await downloaded(page, "Download as JSON");
    expect(json.name).toBe(`${appId}.model.json`);
    expect(JSON.parse(json.text)).toEqual(fileForm(stored));
    await expectClean(tab, "model-export");
  });

  it("plans an uploaded file (diffs and impact) before the apply button, changes nothing until applied, then applies it at the plan's version", async () => {
    const tab = await open();
    const { page } = tab;
    const before = await restExport();
    await upload(page, "changed.yaml", stringify(CHANGED));
    const plan = page.getByRole("region", { name: /^Plan of changed\.yaml against version \d+$/ });
    await expect.poll(() => plan.isVisible()).toBe(true);

    const policies = plan.getByRole("region", { name: "Policies: changes" });
    expect(await policies.getByRole("listitem").allTextContents()).toEqual([expect.stringMatching(/^~ changed approvers/)]);
    const diff = policies.getByLabel("Diff of Policies approvers");
    expect(await diff.locator(".diff-removed").allTextContents()).toEqual(["−   - invoice:approve\n"]);
    expect(await diff.locator(".diff-added").allTextContents()).toEqual([]);
    const roles = plan.getByRole("region", { name: "Roles: changes" });
    expect((await roles.getByRole("listitem").allTextContents()).map((t) => t.slice(0, 20))).toEqual([
      expect.stringMatching(/^\+ created auditors/),
      expect.stringMatching(/^~ changed finance/),
      expect.stringMatching(/^− removed treasury/),
    ]);
    expect(await roles.getByLabel("Diff of Roles finance").locator(".diff-added").allTextContents()).toEqual(["+   - payers\n"]);
    expect(await roles.getByLabel("Diff of Roles treasury").locator(".diff-removed").count()).toBeGreaterThan(0);
    expect(await plan.getByRole("region", { name: "Catalog: changes" }).count()).toBe(0);

    // The impact: ann and bob lose approve and gain pay; tess loses pay (treasury goes).
    const impact = plan.getByRole("table", { name: "Access: who gains or loses a permission" });
    const rows = await impact.getByRole("row").allTextContents();
    expect(rows.slice(1).sort()).toEqual(["invoice:approve02 (ann, bob)", "invoice:pay2 (ann, bob)1 (tess)"].sort());

    // Planned, not applied: the model is as it was, and the button applies the plan's version.
    expect(await restExport()).toEqual(before);
    const applyButton = plan.getByRole("button", { name: `Apply this model (version ${String(before.version)})` });
    expect(await plan.getByText("This plan takes something away").isVisible()).toBe(true);
    await expectClean(tab, "model-plan");

    await applyButton.click();
    const applied = page.getByRole("region", { name: /^Applied changed\.yaml: now version \d+$/ });
    await expect.poll(() => applied.isVisible()).toBe(true);
    await expect.poll(() => page.getByRole("status").filter({ hasText: /Model applied: now version \d+\./ }).isVisible()).toBe(true);
    const after = await restExport();
    expect(after.version).not.toBe(before.version);
    expect(after).toMatchObject({ policies: CHANGED.policies, roles: [{ name: "auditors" }, { name: "finance", policies: ["approvers", "payers"] }] });
    const audit = await service.call("GET", `/api/v1/applications/${appId}/audit-log`);
    expect((audit.body.events as { type: string }[]).filter((e) => e.type === "model.applied")).toHaveLength(2);
    await expectClean(tab);

    // The same file again: nothing to apply.
    await page.getByRole("button", { name: "Plan another file" }).click();
    await upload(page, "changed.yaml", stringify(CHANGED));
    await expect.poll(() => page.getByText("Nothing to apply: the file is the model as it is.").isVisible()).toBe(true);
    expect(await page.getByRole("button", { name: /^Apply this model/ }).count()).toBe(0);
    await expectClean(tab);
  });

  it("refuses to apply a plan whose version is stale, and plans again", async () => {
    const tab = await open();
    const { page } = tab;
    await upload(page, "model.json", JSON.stringify(MODEL));
    const applyButton = page.getByRole("button", { name: /^Apply this model/ });
    await expect.poll(() => applyButton.isVisible()).toBe(true);
    // Someone applies another model meanwhile.
    const other = { ...CHANGED, roles: [...CHANGED.roles, { name: "clerks", description: "", policies: [] }] };
    expectStatus(await service.call("PUT", `/api/v1/applications/${appId}/model`, { body: other }), 200);
    const current = await restExport();

    await applyButton.click();
    const alert = page.getByRole("alert").filter({ hasText: "Not applied" });
    await expect.poll(() => alert.isVisible()).toBe(true);
    expect(await alert.textContent()).toContain("Nothing was applied");
    expect(await restExport()).toEqual(current);
    await expectClean(tab);

    await alert.getByRole("button", { name: "Plan again" }).click();
    await expect.poll(() => page.getByRole("button", { name: `Apply this model (version ${String(current.version)})` }).isVisible()).toBe(true);
    expect(await page.getByRole("region", { name: "Roles: changes" }).getByRole("listitem").allTextContents()).toContainEqual(expect.stringMatching(/^− removed clerks/));
    await expectClean(tab);
  });

  it("names the line of a file that cannot be parsed, and of each place the API refuses", async () => {
    const tab = await open();
    const { page } = tab;
    const before = await restExport();
    await upload(page, "broken.yaml", "catalog: []\npolicies:\n\t- name: tabbed\n");
    const unreadable = page.getByRole("alert").filter({ hasText: "The file cannot be planned" });
    await expect.poll(() => unreadable.textContent()).toMatch(/broken\.yaml: line 3: .*[Tt]ab/);
    await upload(page, "extra.yaml", "catalog: []\nsurprise: 1\n");
    await expect.poll(() => unreadable.textContent()).toMatch(/extra\.yaml: not a model document: .*surprise/);

    const wrong = stringify({ ...MODEL, policies: [MODEL.policies[0], { ...MODEL.policies[1], permissions: ["invoice:pay", "invoice:shred"] }] });
    await upload(page, "wrong.yaml", wrong);
    const refused = page.getByRole("alert").filter({ hasText: "The model was not planned" });
    await expect.poll(() => refused.isVisible()).toBe(true);
    const line = wrong.split("\n").findIndex((l) => l.includes("invoice:shred")) + 1;
    expect(await refused.getByRole("listitem").allTextContents()).toEqual([expect.stringMatching(new RegExp(`^line ${line}: policies\\[1\\]\\.permissions\\[1\\]: `))]);
    expect(await page.getByRole("button", { name: /^Apply this model/ }).count()).toBe(0);
    expect(await restExport()).toEqual(before);
    await expectClean(tab, "model-refused");
  });

  it("says a plan's apply would be refused when its catalog strands grants, naming them, and offers no apply", async () => {
    const tab = await open();
    const { page } = tab;
    const grant = { userId: "ann", resource: "invoice", resourceId: "i1", relation: "approver" };
    expectStatus(await service.call("POST", "/api/v1/authorization/relationships", { key, body: grant }), 201);
    try {
      const current = await restExport();
      const dropped = { ...current, catalog: (current.catalog as Record<string, unknown>[]).map((e) => ({ ...e, relations: [] })) };
      await upload(page, "dropped.yaml", stringify(dropped));
      const note = page.getByRole("alert", { name: "Apply would be refused" });
      await expect.poll(() => note.isVisible()).toBe(true);
      expect(await note.textContent()).toContain("the new catalog drops relation invoice#approver used by grants");
      expect(await note.getByRole("listitem").allTextContents()).toEqual(["invoice#approver: grants use this relation"]);
      expect(await page.getByRole("button", { name: /^Apply this model/ }).count()).toBe(0);
      expect(await restExport()).toEqual(current);
      await expectClean(tab, "model-stranding");
    } finally {
      await service.call("DELETE", `/api/v1/authorization/relationships?${new URLSearchParams(grant).toString()}`, { key });
    }
  });
  it("shows who loses a permission on which instance when the catalog changes what a grant implies", async () => {
    const grant = { userId: "carol", resource: "invoice", resourceId: "i-42", relation: "approver" };
    expectStatus(await service.call("POST", "/api/v1/authorization/relationships", { key, body: grant }), 201);
    const tab = await open();
    const { page } = tab;
    const current = await restExport();
    const { version: _, ...doc } = current;
    // The approver no longer approves: carol loses invoice:approve on i-42, through her grant.
    const catalog = (doc.catalog as { relations: { name: string; actions: string[] }[] }[]).map((e) => ({
      ...e,
      relations: e.relations.map((r) => (r.name === "approver" ? { ...r, actions: ["read"] } : r)),
    }));
    await upload(page, "approver.yaml", stringify({ ...doc, catalog }));
    const plan = page.getByRole("region", { name: /^Plan of approver\.yaml against version \d+$/ });
    await expect.poll(() => plan.isVisible()).toBe(true);
    const impact = plan.getByRole("table", { name: "Access: who gains or loses a permission" });
    expect((await impact.getByRole("row").allTextContents()).slice(1)).toEqual(["invoice:approve01 (carol)carol on i-42"]);
    // The file has the API's through: "" (the download leaves it out): the diff shows the change alone.
    const diff = plan.getByRole("region", { name: "Catalog: changes" }).getByLabel("Diff of Catalog invoice");
    expect(await diff.locator(".diff-removed").allTextContents()).toEqual([expect.stringMatching(/^− +- approve\n$/)]);
    expect(await diff.locator(".diff-added").count()).toBe(0);
    expect(await diff.textContent()).toContain("- relation: approver");
    expect(await diff.textContent()).not.toContain("through");
    expect(await impact.getByRole("list", { name: "Losing invoice:approve on" }).getByRole("listitem").allTextContents()).toEqual(["carol on i-42"]);
    expect(await restExport()).toEqual(current);
    await expectClean(tab);
    await service.call("DELETE", `/api/v1/authorization/relationships?${new URLSearchParams(grant).toString()}`, { key });
  });
});
