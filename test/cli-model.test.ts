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

  it("plans a document that strands grants: the plan names them and exits 1, and apply is still refused with 409", { timeout: 60_000 }, async () => {
    const strandKey = await createApp(service, "cli-model-strand", []);
    const file = join(dir, "strand.yaml");
    await writeFile(file, MODEL_YAML);
    expect((await cli(service, ["model", "apply", file], { key: strandKey })).code).toBe(0);
    for (const userId of ["ann", "bob", "cid"]) {
      const res = await service.call("POST", "/api/v1/authorization/relationships", { key: strandKey, body: { userId, resource: "invoice", resourceId: "i1", relation: "approver" } });
      expect(res.status).toBe(201);
    }
    // The approver relation dropped while three grants use it.
    const dropped = MODEL_YAML.replace("    relations:\n      - name: approver\n        actions: [read, approve]\n", "");
    expect(dropped).not.toContain("approver\n");
    await writeFile(file, dropped);

    const text = await cli(service, ["model", "plan", file], { key: strandKey });
    expect(text.stderr).toBe("");
    expect(text.code).toBe(1);
    expect(text.stdout).toMatch(/^plan of .*strand\.yaml against cli-model-strand, version \d+\napply would be refused \(409 failed_precondition\): the new catalog drops relation invoice#approver used by grants\n/);
    expect(text.stdout).toContain("  ! invoice#approver: grants use this relation\n");
    expect(text.stdout).toContain("catalog:\n  ~ invoice\n");

    const markdown = await cli(service, ["model", "plan", file, "--format", "markdown"], { key: strandKey });
    expect(markdown.code).toBe(1);
    expect(markdown.stdout).toContain("> [!WARNING]\n> **Apply would be refused** (409 failed_precondition): the new catalog drops relation invoice#approver used by grants\n");
    expect(markdown.stdout).toContain("> - `invoice#approver`: grants use this relation\n");

    // The API's answer: a 200 that carries the refusal the apply will give.
    const json = await cli(service, ["model", "plan", file, "--format", "json"], { key: strandKey });
    expect(json.code).toBe(1);
    const stranding = (JSON.parse(json.stdout) as { stranding: { message: string; uses: unknown[] } }).stranding;
    expect(stranding.uses).toEqual([{ resource: "invoice", relation: "approver", subject: "", expiredOnly: false, reason: "grants use this relation" }]);

    const applied = await cli(service, ["model", "apply", file], { key: strandKey });
    expect(applied.code).toBe(3);
    expect(applied.stderr).toContain(`409 failed_precondition: ${stranding.message}`);
    const rest = await service.call("PUT", "/api/v1/applications/cli-model-strand/model", { key: strandKey, body: parse(dropped) as unknown });
    expect(rest.status).toBe(409);
    expect(rest.body.message).toBe(stranding.message);
    expect(rest.body.details).toEqual([{ resource: "invoice", relation: "approver", reason: "grants use this relation" }]);

    // The grants gone, the same document plans clean and applies.
    const deleted = await service.call("POST", "/api/v1/authorization/relationships/delete", { key: strandKey, body: { resource: "invoice", resourceId: "i1", relation: "approver" } });
    expect(deleted.status, JSON.stringify(deleted.body)).toBe(200);
    const clean = await cli(service, ["model", "plan", file], { key: strandKey });
    expect(clean.code, clean.stdout).toBe(0);
    expect(clean.stdout).not.toContain("refused");
    expect((await cli(service, ["model", "apply", file], { key: strandKey })).code).toBe(0);
  });

  it("names the document path of a bad model (the service's 400)", async () => {
    const file = join(dir, "wrong.yaml");
    await writeFile(file, MODEL_YAML.replace('"invoice:approve"]', '"invoice:sign"]'));
    const run = await cli(service, ["model", "apply", file], { key });
    expect(run.code).toBe(3);
    expect(run.stderr).toContain("400 invalid_argument: policies[0].permissions[1]");
  });
});
