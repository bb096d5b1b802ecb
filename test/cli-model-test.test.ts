/**
 * `portcullis model test FILE` as a new user runs it: the compiled command
 * line (bin/portcullis.mjs; most cases run its program in this process, the
 * same code without a process's start-up), no service, no database, no key; test files of
 * its own in YAML and JSON. What holds exits 0; a failed assertion exits 1
 * and is printed with its line and its explain; a file that cannot be read
 * or used exits 2 naming its line. A generated file of 200 assertions is
 * checked against an independent model of the rules (direct grants and
 * roles), and one flipped expectation is the only failure it reports.
 */
import { spawnSync } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { cli, portcullis } from "./support/cli-process.js";
import { ROOT } from "./support/entry-points.js";
import type { TestService } from "./support/service.js";

const MODEL = `model:
  catalog:
    - resource: team
      actions: []
      relations:
        - name: member
          actions: []
          subjects: [user, "team#member"]
    - resource: document
      actions: [read, edit, delete]
      relations:
        - name: viewer
          actions: [read]
          subjects: [user, "team#member"]
        - name: editor
          actions: [read, edit]
  policies:
    - name: readers
      permissions: ["document:read"]
    - name: cleaners
      permissions: ["document:delete"]
      tenantId: acme
  roles:
    - name: auditor
      policies: [readers]
    - name: janitor
      tenantId: acme
      policies: [cleaners]
grants:
  - { userId: alice, resource: team, resourceId: eng, relation: member }
  - { subject: { resource: team, resourceId: eng, relation: member }, resource: team, resourceId: staff, relation: member }
  - { subject: { resource: team, resourceId: staff, relation: member }, resource: document, resourceId: d1, relation: viewer }
  - { userId: bob, resource: document, resourceId: d1, relation: editor }
assignments:
  - { role: auditor, userId: carol }
  - { role: janitor, userId: dan, tenantId: acme }
`;

const PASSING = `${MODEL}assertions:
  - name: alice reads d1 through two teams
    check: { userId: alice, resource: document, resourceId: d1, action: read }
    expect: allowed
  - check: { userId: alice, resource: document, resourceId: d1, action: edit }
    expect: denied
  - check: { userId: carol, resource: document, resourceId: d42, action: read }
    expect: allowed
  - check: { userId: dan, resource: document, resourceId: d1, action: delete, tenantId: acme }
    expect: allowed
  - check: { userId: dan, resource: document, resourceId: d1, action: delete }
    expect: denied
  - lookup: { userId: alice, resource: document, action: read, resourceId: d1 }
    expect: allowed
  - lookup: { userId: bob, resource: document, action: edit, resourceId: d2 }
    expect: denied
  - whoCan: { resource: document, resourceId: d1, action: edit, userId: bob }
    expect: allowed
  - whoCan: { resource: document, resourceId: d1, action: edit, userId: alice }
    expect: denied
`;

/** The line of the first line after MODEL. */
const AFTER = MODEL.split("\n").length;

/** The line (1-based) of the first line of `text` that contains `needle`, after line `after`. */
const lineOf = (text: string, needle: string, after = 0) => text.split("\n").findIndex((l, i) => i >= after && l.includes(needle)) + 1;

// The tests run side by side, each its own processes and files: most of a run is the process starting its database.
/** The program run in this process (support/cli-process.ts): the runs left as processes keep bin/portcullis.mjs covered. */
const IN_PROCESS = { process: false };
/**
 * Each case's bound: the cases run side by side, and those in this process
 * share its thread, so a case's time is near the file's (about 40 s alone,
 * twice that on a loaded run).
 */
const TIMEOUT = 240_000;

describe.concurrent("portcullis model test", () => {
  let dir: string;
  const file = async (name: string, text: string) => {
    const path = join(dir, name);
    await writeFile(path, text);
    return path;
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "portcullis-model-test-"));
    // What bin/portcullis.mjs does first, done once here: the runs side by side then find dist/ current, none building it.
    expect(spawnSync(process.execPath, ["scripts/build.mjs", "--if-stale"], { cwd: ROOT, stdio: "inherit" }).status).toBe(0);
  });
  afterAll(async () => {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  it("runs a YAML file's assertions with no server and exits 0 when all hold", { timeout: TIMEOUT }, async () => {
    const run = await portcullis(["model", "test", await file("passing.yaml", PASSING)]);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^model test .*passing\.yaml: 4 grants, 2 assignments, 9 assertions\nok: all 9 assertions hold \(\d+ ms\)\n$/);
  });

  it("conditions: on a policy, an assignment and a grant, asked with context and properties", { timeout: TIMEOUT }, async () => {
    const conditional = `model:
  catalog:
    - resource: todo
      actions: [read, update]
      relations:
        - { name: owner, actions: [read, update] }
  policies:
    - { name: own-todos, permissions: ["todo:update"], condition: "resource.properties.ownerID == subject.id" }
    - { name: readers, permissions: ["todo:read"] }
  roles:
    - { name: editor, policies: [own-todos] }
    - { name: reader, policies: [readers] }
grants:
  - { userId: ann, resource: todo, resourceId: t1, relation: owner, condition: "context.mfa == true" }
assignments:
  - { role: editor, userId: bob }
  - { role: reader, userId: cat, condition: "has(context.ticket)" }
assertions:
  - check: { userId: bob, resource: todo, resourceId: t2, action: update, resourceProperties: { ownerID: bob } }
    expect: allowed
  - check: { userId: bob, resource: todo, resourceId: t2, action: update, resourceProperties: { ownerID: ann } }
    expect: denied
  - check: { userId: ann, resource: todo, resourceId: t1, action: update, context: { mfa: true } }
    expect: allowed
  - check: { userId: ann, resource: todo, resourceId: t1, action: update }
    expect: denied
  - check: { userId: cat, resource: todo, resourceId: t1, action: read, context: { ticket: T-1 } }
    expect: allowed
  - check: { userId: cat, resource: todo, resourceId: t1, action: read }
    expect: denied
  - check: { userId: dan, resource: todo, resourceId: t3, action: read, contextualGrants: [{ userId: dan, resource: todo, resourceId: t3, relation: owner, condition: "context.mfa == true" }], context: { mfa: true } }
    expect: allowed
  - check: { userId: dan, resource: todo, resourceId: t3, action: read }
    expect: denied
`;
    // A condition that does not type-check is refused the same way as one that does not parse, naming its line and position.
    const illTyped = conditional.replace('condition: "has(context.ticket)"', 'condition: "subject.id > 5"');
    // A failed assertion's explain is asked with the question's context and contextual grants, and shows the one it used.
    const contextualFails = conditional.replace('condition: "context.mfa == true" }], context: { mfa: true } }\n    expect: allowed', 'condition: "context.mfa == true" }], context: { mfa: true } }\n    expect: denied');
    expect(contextualFails).not.toBe(conditional);
    const [run, bad, typed, fails] = await Promise.all([
      portcullis(["model", "test", await file("conditional.yaml", conditional)], IN_PROCESS),
      portcullis(["model", "test", await file("bad-condition.yaml", conditional.replace('condition: "has(context.ticket)"', 'condition: "has("'))], IN_PROCESS),
      portcullis(["model", "test", await file("ill-typed.yaml", illTyped)], IN_PROCESS),
      portcullis(["model", "test", await file("contextual-fails.yaml", contextualFails)], IN_PROCESS),
    ]);
    expect(run.stderr).toBe("");
    expect(run.stdout).toMatch(/1 grant, 2 assignments, 8 assertions\nok: all 8 assertions hold/);
    expect(fails.code).toBe(1);
    expect(fails.stdout).toContain("check dan todo:t3 read: expected denied, got allowed");
    expect(fails.stdout).toContain("grant: dan is owner of todo:t3 (contextual)");
    expect(run.code).toBe(0);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/assignments\[1\]\.condition/);
    expect(typed.code).toBe(2);
    expect(typed.stderr).toContain(`line ${lineOf(illTyped, "subject.id > 5")}: assignments[1].condition: at 1:12: found no matching overload for '_>_' applied to '(string, int)'`);
  });

  it("prints each failed assertion with its line and its explain, and exits 1", { timeout: TIMEOUT }, async () => {
    const wrong = PASSING.replace(
      "action: edit }\n    expect: denied\n  - check: { userId: carol",
      "action: edit }\n    expect: allowed\n  - check: { userId: carol",
    ).replace("action: edit, userId: bob }\n    expect: allowed", "action: edit, userId: bob }\n    expect: denied");
    expect(wrong).not.toBe(PASSING);
    const path = await file("failing.yaml", wrong);
    const [run, json] = await Promise.all([portcullis(["model", "test", path], IN_PROCESS), portcullis(["model", "test", path, "--format", "json"], IN_PROCESS)]);
    expect(run.code).toBe(1);
    const checkLine = lineOf(wrong, "resourceId: d1, action: edit }");
    const whoLine = lineOf(wrong, "whoCan: { resource: document, resourceId: d1, action: edit, userId: bob }");
    const out = run.stdout.split("\n");
    expect(out[1]).toBe(`FAIL assertions[1] (line ${checkLine}): check alice document:d1 edit: expected allowed, got denied`);
    // The explain names the user and the instance, and what the user holds there.
    expect(out[2]).toBe("    denied: alice document:d1 edit");
    expect(run.stdout).toContain("    considered:\n      relations on document:d1: viewer (read)");
    expect(run.stdout).toContain(`FAIL assertions[7] (line ${whoLine}): who-can document:d1 edit lists bob: expected denied, got allowed\n    allowed: bob document:d1 edit\n    because:\n      grant: bob is editor of document:d1`);
    expect(run.stdout).toMatch(/\n2 of 9 assertions failed \(\d+ ms\)\n$/);

    expect(json.code).toBe(1);
    const report = JSON.parse(json.stdout) as { passed: number; failed: number; results: { index: number; line: number; holds: boolean; got: string; explain?: { allowed?: boolean; reasons?: unknown[] } }[] };
    expect(report).toMatchObject({ assertions: 9, passed: 7, failed: 2 });
    const failed = report.results.filter((r) => !r.holds);
    expect(failed.map((r) => [r.index, r.line, r.got])).toEqual([
      [1, checkLine, "denied"],
      [7, whoLine, "allowed"],
    ]);
    expect(failed[1]!.explain).toMatchObject({ allowed: true, reasons: [{ kind: "relation", relation: "editor" }] });
  });

  it("an allUsers grant: check, lookup and who can hold for a user no grant names", { timeout: TIMEOUT }, async () => {
    const everyone = `model:
  catalog:
    - resource: document
      actions: [read, edit]
      relations:
        - name: viewer
          actions: [read]
          subjects: [user, "user:*"]
grants:
  - { allUsers: true, resource: document, resourceId: handbook, relation: viewer }
  - { userId: bob, resource: document, resourceId: handbook, relation: owner }
assertions:
  - check: { userId: stranger, resource: document, resourceId: handbook, action: read }
    expect: allowed
  - check: { userId: stranger, resource: document, resourceId: handbook, action: edit }
    expect: denied
  - lookup: { userId: stranger, resource: document, action: read, resourceId: handbook }
    expect: allowed
  - whoCan: { resource: document, resourceId: handbook, action: read, userId: stranger }
    expect: allowed
  - whoCan: { resource: document, resourceId: handbook, action: edit, userId: stranger }
    expect: denied
`;
    const run = await portcullis(["model", "test", await file("everyone.yaml", everyone)], IN_PROCESS);
    expect(run.stderr).toBe("");
    expect(run.stdout).toMatch(/ok: all 5 assertions hold/);
    expect(run.code).toBe(0);
  });

  it("a rule within an instance: a team's admins are its members, for a subject set team#member too", { timeout: TIMEOUT }, async () => {
    const admins = `model:
  catalog:
    - resource: team
      actions: [read, manage]
      relations:
        - { name: admin, actions: [read, manage] }
        - name: member
          actions: [read]
          subjects: [user, "team#member"]
          inherits: [{ relation: admin }]
    - resource: document
      actions: [read, edit]
      relations:
        - { name: viewer, actions: [read], subjects: [user, "team#member"] }
grants:
  - { userId: ann, resource: team, resourceId: eng, relation: admin }
  - { userId: bob, resource: team, resourceId: eng, relation: member }
  - { subject: { resource: team, resourceId: eng, relation: member }, resource: document, resourceId: d1, relation: viewer }
assertions:
  - name: an admin reads what the team's members read
    check: { userId: ann, resource: document, resourceId: d1, action: read }
    expect: allowed
  - check: { userId: bob, resource: document, resourceId: d1, action: read }
    expect: allowed
  - name: a member is not an admin
    check: { userId: bob, resource: team, resourceId: eng, action: manage }
    expect: denied
  - lookup: { userId: ann, resource: document, action: read, resourceId: d1 }
    expect: allowed
  - whoCan: { resource: document, resourceId: d1, action: read, userId: ann }
    expect: allowed
  - check: { userId: cid, resource: document, resourceId: d1, action: read }
    expect: denied
`;
    const run = await portcullis(["model", "test", await file("admins.yaml", admins)], IN_PROCESS);
    expect(run.stderr).toBe("");
    expect(run.stdout).toMatch(/ok: all 6 assertions hold/);
    expect(run.code).toBe(0);
  });

  it("takes JSON, and stdin for -", { timeout: TIMEOUT }, async () => {
    const { parse } = await import("yaml");
    const json = JSON.stringify(parse(PASSING));
    const [fromFile, fromStdin] = await Promise.all([portcullis(["model", "test", await file("passing.json", json)], IN_PROCESS), portcullis(["model", "test", "-"], { ...IN_PROCESS, stdin: json })]);
    expect(fromFile.code).toBe(0);
    expect(fromStdin.code).toBe(0);
    expect(fromStdin.stdout).toContain("ok: all 9 assertions hold");
  });

  it("counts a question the API refuses as a failed assertion, with the API's words", { timeout: TIMEOUT }, async () => {
    const text = `${MODEL}assertions:\n  - check: { userId: alice, resource: document, resourceId: d1, action: fly }\n    expect: denied\n`;
    const run = await portcullis(["model", "test", await file("refused.yaml", text)], IN_PROCESS);
    expect(run.code).toBe(1);
    expect(run.stdout).toContain(`FAIL assertions[0] (line ${lineOf(text, "action: fly")}): check alice document:d1 fly: expected denied, got an error`);
    expect(run.stdout).toMatch(/400 invalid_argument: .*fly/);
    // Said once, with no request id of the in-process instance.
    const said = run.stdout.split("\n").find((l) => l.includes("400 invalid_argument"))!;
    expect(said.split("fly").length - 1, said).toBe(1);
    expect(run.stdout).not.toContain("request id");
  });

  const cases: [string, string, RegExp][] = [
    ["a YAML syntax error", `${MODEL}assertions:\n\t- check: {}\n`, new RegExp(`line ${AFTER + 1}: .*[Tt]ab`)],
    ["a part a test file has not", `${MODEL}asserts: []\n`, new RegExp(`line ${AFTER}: asserts: is not a part of a test file`)],
    ["an assertion asking two questions", `${MODEL}assertions:\n  - check: { userId: a, resource: document, resourceId: d1, action: read }\n    whoCan: { userId: a, resource: document, resourceId: d1, action: read }\n    expect: allowed\n`, /line \d+: assertions\[0\]: must ask exactly one of check, lookup and whoCan/],
    ["an expectation that is neither", `${MODEL}assertions:\n  - check: { userId: a, resource: document, resourceId: d1, action: read }\n    expect: yes\n`, new RegExp(`line ${AFTER + 2}: assertions\\[0\\]\\.expect: must be allowed or denied`)],
    ["a question missing its user", `${MODEL}assertions:\n  - lookup: { resource: document, resourceId: d1, action: read }\n    expect: allowed\n`, /assertions\[0\]\.lookup\.userId: is required/],
    ["an assignment of a role the model lacks", MODEL.replace("role: auditor, userId: carol", "role: auditors, userId: carol") + "assertions: []\n", new RegExp(`line ${lineOf(MODEL, "role: auditor, userId")}: assignments\\[0\\]\\.role: names no role of the model \\(an application-wide role\\): auditors`)],
    ["a tenant role assigned without its tenant", MODEL.replace("role: janitor, userId: dan, tenantId: acme", "role: janitor, userId: dan") + "assertions: []\n", /assignments\[1\]\.role: names no role of the model/],
    ["a policy naming a permission the catalog lacks", MODEL.replace('"document:delete"', '"document:shred"') + "assertions: []\n", new RegExp(`the model is refused:\\n  line ${lineOf(MODEL, '"document:delete"')}: model\\.policies\\[1\\]\\.permissions\\[0\\]: `)],
    ["a grant of a relation the catalog lacks", MODEL.replace("resourceId: d1, relation: editor", "resourceId: d1, relation: approver") + "assertions: []\n", new RegExp(`a grant is refused:\\n  line ${lineOf(MODEL, "relation: editor }")}: grants\\[3\\]`)],
    ["no model", "assertions: []\n", /line 1: model: is required/],
  ];
  it.each(cases.map((c, i) => [...c, i] as const))("exits 2 naming the line for %s", { timeout: TIMEOUT }, async (_, text, message, i) => {
    const run = await portcullis(["model", "test", await file(`bad-${i}.yaml`, text)], IN_PROCESS);
    expect(run.stderr).toMatch(message);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe("");
  });

  it("holds 200 generated assertions that an independent model of the rules decides, and reports the one flipped", { timeout: TIMEOUT }, async () => {
    // A world of 30 users, 12 documents, direct grants and an application-wide role, and its answers by hand.
    let seed = 27;
    const random = () => ((seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648) / 2_147_483_648);
    const users = Array.from({ length: 30 }, (_, i) => `u${i}`);
    const docs = Array.from({ length: 12 }, (_, i) => `d${i}`);
    const implies: Record<string, string[]> = { viewer: ["read"], editor: ["read", "edit"] };
    const grants = users.flatMap((userId) =>
      docs.filter(() => random() < 0.15).map((resourceId) => ({ userId, resource: "document", resourceId, relation: random() < 0.5 ? "viewer" : "editor" })),
    );
    const auditors = users.filter(() => random() < 0.2);
    const allowed = (userId: string, doc: string, action: string) =>
      (action === "read" && auditors.includes(userId)) || grants.some((g) => g.userId === userId && g.resourceId === doc && implies[g.relation]!.includes(action));
    const assertions = Array.from({ length: 200 }, (_, i) => {
      const userId = users[Math.floor(random() * users.length)]!;
      const resourceId = docs[Math.floor(random() * docs.length)]!;
      const action = random() < 0.5 ? "read" : "edit";
      const body = { userId, resource: "document", resourceId, action };
      const expectation = allowed(userId, resourceId, action) ? "allowed" : "denied";
      const kind = ["check", "lookup", "whoCan"][i % 3]!;
      return { [kind]: body, expect: expectation };
    });
    const model = (await import("yaml")).parse(MODEL).model as unknown;
    const doc = { model, grants, assignments: auditors.map((userId) => ({ role: "auditor", userId })), assertions };
    expect(assertions.filter((a) => a.expect === "allowed").length).toBeGreaterThan(20);

    const flipped = { ...doc, assertions: assertions.map((a, i) => (i === 137 ? { ...a, expect: a.expect === "allowed" ? "denied" : "allowed" } : a)) };
    const [run, failing] = await Promise.all([
      portcullis(["model", "test", await file("generated.yaml", stringify(doc))], IN_PROCESS),
      portcullis(["model", "test", await file("flipped.json", JSON.stringify(flipped)), "--format", "json"], IN_PROCESS),
    ]);
    expect(run.stdout).toContain("ok: all 200 assertions hold");
    expect(run.code).toBe(0);

    expect(failing.code).toBe(1);
    const report = JSON.parse(failing.stdout) as { failed: number; results: { index: number; holds: boolean }[] };
    expect(report.failed).toBe(1);
    expect(report.results.filter((r) => !r.holds).map((r) => r.index)).toEqual([137]);
  });

  it("runs without the build's template database too (from initdb), with the same answers", { timeout: TIMEOUT }, async () => {
    // Under tsx, from src/: the template is made beside the compiled module only.
    const run = await cli({ url: "http://127.0.0.1:9" } as TestService, ["model", "test", await file("passing-from-source.yaml", PASSING)], { key: null, fromSource: true });
    expect(run.stderr).toBe("");
    expect(run.stdout).toContain("ok: all 9 assertions hold");
    expect(run.code).toBe(0);
  });
});
