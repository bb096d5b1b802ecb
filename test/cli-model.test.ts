/**
 * `portcullis model export|plan|apply` as a real process, as a new user
 * runs it: a model written by hand in YAML, planned (plain in a CI log,
 * Markdown for a pull request, JSON), applied with the plan's version,
 * exported back and applied elsewhere; a stale version and a file that
 * cannot be parsed (its line named) refused with their exit codes.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { createTestDatabase, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";
import { cli } from "./support/cli-process.js";
import { createApp } from "./helpers/authz.js";

const MODEL_YAML = `# the invoices app's model
catalog:
  - resource: invoice
    description: An invoice
    actions: [read, approve, pay]
    relations:
      - name: approver
        actions: [read, approve]
policies:
  - name: approvers
    description: approve invoices
    permissions: ["invoice:read", "invoice:approve"]
roles:
  - name: finance
    description: the finance team
    policies: [approvers]
`;

describe("portcullis model", () => {
  let database: TestDatabase;
  let service: TestService;
  let dir: string;
  let key: string;

  beforeAll(async () => {
    database = await createTestDatabase("pglite");
    service = await startTestService(database.db);
    dir = await mkdtemp(join(tmpdir(), "portcullis-model-"));
    key = await createApp(service, "cli-model", []);
  }, 60_000);
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  it("plans a hand-written YAML model, applies it with the plan's version, and exports it back", { timeout: 60_000 }, async () => {
    const file = join(dir, "model.yaml");
    await writeFile(file, MODEL_YAML);
    const planned = await cli(service, ["model", "plan", file], { key });
    expect(planned.stderr).toBe("");
    expect(planned.code).toBe(0);
    // Plain in a CI log (no terminal, no colour codes).
    expect(planned.stdout).not.toContain("\x1b[");
    expect(planned.stdout).toMatch(/^plan of .*model\.yaml against cli-model, version \d+\n/);
    expect(planned.stdout).toContain("catalog:\n  + invoice\n");
    expect(planned.stdout).toContain("policies:\n  + approvers\n");
    expect(planned.stdout).toContain("roles:\n  + finance\n");
    expect(planned.stdout).toContain("access: no user gains or loses a permission");
    const version = /version (\d+)/.exec(planned.stdout)![1]!;

    const applied = await cli(service, ["model", "apply", file, "--expected-version", version], { key });
    expect(applied.code).toBe(0);
    expect(applied.stdout).toMatch(/^applied .*model\.yaml to cli-model: now version \d+\n/);
    // Applying it again against the old version: refused, exit 3, the service's words.
    const stale = await cli(service, ["model", "apply", file, "--expected-version", version], { key });
    expect(stale.code).toBe(3);
    expect(stale.stderr).toContain("409 failed_precondition");

    const exported = await cli(service, ["model", "export"], { key });
    expect(exported.code).toBe(0);
    expect(exported.stdout.split("\n")[0]).toBe(`# yaml-language-server: $schema=${service.url}/model.schema.json`);
    const doc = parse(exported.stdout) as { catalog: { resource: string }[]; policies: { name: string; permissions: string[] }[]; roles: { name: string }[] };
    expect(doc.catalog.map((e) => e.resource)).toEqual(["invoice"]);
    expect(doc.policies).toMatchObject([{ name: "approvers", permissions: ["invoice:read", "invoice:approve"] }]);
    expect(doc.roles).toMatchObject([{ name: "finance", policies: ["approvers"] }]);

    // The export, applied to another application through stdin, plans no change there afterwards.
    const otherKey = await createApp(service, "cli-model-copy", []);
    expect((await cli(service, ["model", "apply", "-"], { key: otherKey, stdin: exported.stdout })).code).toBe(0);
    const again = await cli(service, ["model", "plan", "-", "--format", "json"], { key: otherKey, stdin: exported.stdout });
    expect(again.code).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ policies: {}, roles: {} });
    expect(JSON.parse(again.stdout).impact ?? []).toEqual([]);
  });

  it("prints the impact for a pull request in Markdown", { timeout: 60_000 }, async () => {
    const roles = (await service.call("GET", "/api/v1/applications/cli-model/roles")).body.roles as { roleId: string }[];
    for (const userId of ["ann", "bob"]) {
      await service.call("POST", `/api/v1/applications/cli-model/roles/${roles[0]!.roleId}/assignments`, { body: { userId } });
    }
    const file = join(dir, "less.yaml");
    await writeFile(file, MODEL_YAML.replace('permissions: ["invoice:read", "invoice:approve"]', 'permissions: ["invoice:read"]'));
    const planned = await cli(service, ["model", "plan", file, "--format", "markdown"], { key });
    expect(planned.code).toBe(0);
    expect(planned.stdout).toContain("| ✏️ changed | `approvers` |");
    expect(planned.stdout).toContain("| permission | gaining | losing |");
    expect(planned.stdout).toContain("| `invoice:approve` | 0 | 2 (ann, bob) |");
  });

  it.each([
    ["catalog: []\npolicies:\n\t- name: tabbed\n", /line 3: .*[Tt]ab/],
    ["- a list\n- not a model\n", /line 1: a model is a mapping/],
    ["catalog: []\ncatalog: []\n", /line 2/],
  ])("refuses a file it cannot parse, naming the line: %j", async (text, message) => {
    const file = join(dir, "bad.yaml");
    await writeFile(file, text);
    const run = await cli(service, ["model", "plan", file], { key });
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(message);
  });

  it("names the document path of a bad model (the service's 400)", async () => {
    const file = join(dir, "wrong.yaml");
    await writeFile(file, MODEL_YAML.replace('"invoice:approve"]', '"invoice:sign"]'));
    const run = await cli(service, ["model", "apply", file], { key });
    expect(run.code).toBe(3);
    expect(run.stderr).toContain("400 invalid_argument: policies[0].permissions[1]");
  });
});
