/**
 * The command line (src/cli/) as a real process (support/entry-points.ts)
 * against a real service (in this process, on Postgres, where the 50,000-row
 * import costs about half the CPU it costs on PGlite):
 * importing 50,000 grants with bad rows (unreadable, and refused by the
 * service) spread across batches writes every good row once and reports
 * every bad one by line, twice over with nothing changed the second time, in
 * CSV and NDJSON; an import killed midway resumes to the same grants and the
 * same report; a stop on a refused key, then a resume; export then import
 * into another application; grants held by subject sets and links (export
 * then import in NDJSON and CSV, a list answer imported as is, holder
 * errors and the service's refusals by line); check, explain, catalog, keys; usage errors name
 * their flag; a wrong key is refused and never printed.
 */
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, startTestService, type TestService } from "./support/service.js";
import { cli, type Run } from "./support/cli-process.js";
import { createApp } from "./helpers/authz.js";
import { ALL_USERS_CATALOG, everyone, GRAPH_CATALOG, set, user, type AnyGrant } from "./support/graph.js";

const CATALOG = {
  resources: [
    { resource: "document", description: "A document", actions: ["read", "update", "delete", "comment"], relations: [{ name: "reviewer", actions: ["read", "comment"] }] },
    { resource: "folder", description: "", actions: ["read", "list"] },
  ],
};
const FUTURE = "2099-01-01T00:00:00Z";

/* ------------------------------------------------------------------------ */
/* A data set with bad rows, and what importing it must give                 */
/* ------------------------------------------------------------------------ */

interface Dataset {
  text: string;
  /** The good rows' grants, as grantKey. */
  good: Set<string>;
  /** Bad rows: line → a fragment of the reason. */
  bad: Map<number, string>;
}

const grantKey = (g: { userId: string; resource: string; resourceId: string; relation: string; expiresAt?: string | null }) =>
  `${g.userId}|${g.resource}|${g.resourceId}|${g.relation}|${g.expiresAt ? new Date(g.expiresAt).toISOString() : ""}`;

type Cell = { userId: string; resource: string; resourceId: string; relation: string; expiresAt?: string };

/**
 * n rows; bad ones spread over every batch: unreadable (a missing value, a
 * bad date, a wrong field count or key), and refused by the service (a
 * relation or resource outside the catalog, an expiry in the past, a control
 * character in a quoted multi-line id, which also shifts every later line).
 */
function dataset(n: number, format: "csv" | "ndjson", tag: string, denseRefusals = false): Dataset {
  const good = new Set<string>();
  const bad = new Map<number, string>();
  const out: string[] = [];
  let line = 1;
  const columns = ["relation", "userId", "resource", "resourceId", "expiresAt"] as const;
  if (format === "csv") {
    out.push(columns.join(","));
    line++;
  }
  const emit = (cell: Cell, outcome: string | null, raw?: string, lines = 1) => {
    if (raw !== undefined) out.push(raw);
    else if (format === "csv") out.push(columns.map((c) => (c === "userId" && cell.userId.includes("\n") ? `"${cell.userId}"` : (cell[c] ?? ""))).join(","));
    else out.push(JSON.stringify(cell));
    if (outcome === null) good.add(grantKey(cell));
    else bad.set(line, outcome);
    line += lines;
  };
  for (let i = 0; i < n; i++) {
    const base: Cell = { userId: `${tag}u${i % 977}`, resource: "document", resourceId: `${tag}d${i}`, relation: "viewer" };
    if (i % 1000 === 7) emit({ ...base, resourceId: "" }, "missing resourceId");
    else if (i % 1000 === 500) emit({ ...base, expiresAt: "tomorrow" }, "expiresAt is not a date");
    else if (i % 2000 === 1234) emit(base, format === "csv" ? "3 fields, the header has 5" : "not JSON", format === "csv" ? `viewer,${base.userId},document` : `{"userId": "${base.userId}",`);
    else if (format === "ndjson" && i % 2000 === 1500) emit(base, 'unknown key "expires_at"', JSON.stringify({ ...base, expires_at: FUTURE }));
    else if (format === "ndjson" && i % 3000 === 2222) emit(base, "userId is not a string", JSON.stringify({ ...base, userId: 42 }));
    else if (i % 1000 === 250 || (denseRefusals && i % 40 === 5)) emit({ ...base, relation: "owner_x" }, "is not a relation of resource");
    else if (i % 1500 === 3) emit({ ...base, expiresAt: "2001-01-01T00:00:00Z" }, "is not in the future");
    else if (i % 5000 === 4999) emit({ ...base, resource: "spaceship" }, "is not a resource of the catalog");
    else if (format === "csv" && i % 3000 === 10) emit({ ...base, userId: `multi\nline${i}` }, "must not contain control characters", undefined, 2);
    else if (i % 100 === 42) emit({ ...base, expiresAt: FUTURE }, null);
    else if (i % 250 === 17) emit({ ...base, resource: "folder", relation: "owner", resourceId: `${tag}f${i}` }, null);
    else emit(base, null);
  }
  return { text: `${out.join("\n")}\n`, good, bad };
}

/** Every grant of the key's application, as grantKey, through the list route (every type, paged). */
async function grantsOf(service: TestService, key: string): Promise<Set<string>> {
  const all = new Set<string>();
  for (const resource of ["document", "folder"]) {
    let pageToken = "";
    do {
      const res = await service.call("GET", `/api/v1/authorization/relationships?resource=${resource}&pageSize=1000&pageToken=${encodeURIComponent(pageToken)}`, { key });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      for (const g of res.body.relationships) {
        const k = grantKey(g);
        expect(all.has(k), `listed twice: ${k}`).toBe(false);
        all.add(k);
      }
      pageToken = res.body.nextPageToken;
    } while (pageToken !== "");
  }
  return all;
}

interface ReportLine {
  line: number;
  reason: string;
  row: unknown;
}

async function report(file: string): Promise<ReportLine[]> {
  const text = await readFile(file, "utf8");
  return text === "" ? [] : text.trimEnd().split("\n").map((l) => JSON.parse(l) as ReportLine);
}

/** The report holds every bad row once, in line order, each with its reason. */
function expectReport(lines: ReportLine[], bad: Map<number, string>): void {
  expect(lines.map((l) => l.line)).toEqual([...bad.keys()].sort((a, b) => a - b));
  for (const l of lines) expect(l.reason, `line ${l.line}`).toContain(bad.get(l.line)!);
}

const summaryOf = (run: Run) => JSON.parse(run.stdout.trim().split("\n").at(-1)!) as Record<string, number | string | boolean>;

/* ------------------------------------------------------------------------ */
/* Grants held by subject sets and links (groups and hierarchy)              */
/* ------------------------------------------------------------------------ */

/** A grant as the list route returns it, with any holder. */
type Listed = AnyGrant & { expiresAt?: string | null; createdAt?: string; allUsers?: boolean };

/** A grant with any holder as one string: "team:eng#member|folder|runbooks|viewer|<expiry>", a link's subject as "folder:root#", every user as "*all*". */
const heldKey = (g: Listed) => {
  const holder =
    g.allUsers === true ? "*all*" : g.subject !== undefined && !g.userId ? `${g.subject.resource}:${g.subject.resourceId}#${g.subject.relation ?? ""}` : g.userId!;
  return `${holder}|${g.resource}|${g.resourceId}|${g.relation}|${g.expiresAt ? new Date(g.expiresAt).toISOString() : ""}`;
};

const GRAPH_TYPES = ["team", "folder", "document"];

/** Every grant of a GRAPH_CATALOG application, as heldKey, through the list route (every type, paged); and the raw entries. */
async function graphGrantsOf(service: TestService, key: string): Promise<{ keys: Set<string>; listed: Listed[] }> {
  const keys = new Set<string>();
  const listed: Listed[] = [];
  for (const resource of GRAPH_TYPES) {
    let pageToken = "";
    do {
      const res = await service.call("GET", `/api/v1/authorization/relationships?resource=${resource}&pageSize=1000&pageToken=${encodeURIComponent(pageToken)}`, { key });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      for (const g of res.body.relationships as Listed[]) {
        expect(keys.has(heldKey(g)), `listed twice: ${heldKey(g)}`).toBe(false);
        keys.add(heldKey(g));
        listed.push(g);
      }
      pageToken = res.body.nextPageToken;
    } while (pageToken !== "");
  }
  return { keys, listed };
}

const expiring = (g: AnyGrant): AnyGrant => ({ ...g, expiresAt: FUTURE });

/**
 * A hierarchy: nested teams, a folder tree, documents in folders, users,
 * subject sets and links, some expiring, ids a CSV must quote; over a page
 * of 1,000 per type, so the export pages across holders of both kinds.
 */
const HIERARCHY: AnyGrant[] = [
  user("alice", "team", "platform", "member"),
  expiring(set("team:platform#member", "team", "eng", "member")),
  user("bob", "team", "eng", "member"),
  set("team:eng#member", "folder", "runbooks", "viewer"),
  expiring(set("team:eng#member", "folder", "drafts", "editor")),
  set("folder:root", "folder", "runbooks", "parent"),
  set("folder:runbooks", "document", "42", "parent"),
  expiring(set("folder:drafts", "document", "43", "parent")),
  expiring(user("carol", "folder", "root", "editor")),
  user("dave", "document", "42", "viewer"),
  set('team:"ops", on call#member', "document", "42", "editor"),
  set('folder:a,"b"', "document", "44", "parent"),
  user('o"neil, jr', "team", 'x,"y"', "member"),
  ...Array.from({ length: 1200 }, (_, i) => user(`m${String(i).padStart(4, "0")}`, "team", "eng", "member")),
  ...Array.from({ length: 1100 }, (_, i) => (i % 3 === 0 ? expiring : (g: AnyGrant) => g)(set(`folder:f${i % 7}`, "document", `d${String(i).padStart(4, "0")}`, "parent"))),
  ...Array.from({ length: 300 }, (_, i) => set(`team:t${i % 5}#member`, "document", `d${String(i).padStart(4, "0")}`, "viewer")),
];

/** Grants every user holds (ALL_USERS_CATALOG): a public folder (on no path the tests explain), and a document's viewer until a given instant. */
const PUBLIC: Listed[] = [everyone("folder", "public", "viewer"), { ...everyone("document", "44", "viewer"), expiresAt: FUTURE }];

/* ------------------------------------------------------------------------ */

describe("portcullis, the command line", () => {
  let database: TestDatabase;
  let service: TestService;
  let dir: string;
  const keys: Record<string, string> = {};

  const app = async (appId: string, scopes?: string[]) => {
    expect((await service.call("POST", "/api/v1/applications", { body: { appId } })).status).toBe(201);
    expect((await service.call("PUT", `/api/v1/applications/${appId}/resources`, { body: CATALOG })).status).toBe(200);
    const key = await service.call("POST", `/api/v1/applications/${appId}/api-keys`, { body: { name: "cli", ...(scopes ? { scopes } : {}) } });
    expect(key.status).toBe(201);
    return key.body.key as string;
  };

  beforeAll(async () => {
    database = await createTestDatabase("postgres");
    service = await startTestService(database.db);
    dir = await mkdtemp(join(tmpdir(), "portcullis-cli-"));
    for (const appId of ["csv", "ndjson", "copy", "resume", "stop", "small"]) keys[appId] = await app(appId);
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  describe("grants import", () => {
    const formats = [
      { format: "csv" as const, rows: 50_000, denseRefusals: false, flags: [] },
      // Over 100 refusals a batch (the route names 100 an answer), two batches in flight.
      { format: "ndjson" as const, rows: 12_000, denseRefusals: true, flags: ["--concurrency", "2", "--batch", "4000"] },
    ];
    it.each(formats)(
      "$format, $rows rows: every good row written once, every bad row reported by line; a second run changes nothing",
      async ({ format, rows, denseRefusals, flags }) => {
        const data = dataset(rows, format, format[0]!, denseRefusals);
        const file = join(dir, `grants.${format}`);
        await writeFile(file, data.text);
        expect(data.bad.size).toBeGreaterThan(rows / 400);

        const first = await cli(service, ["grants", "import", file, "--json", ...flags], { key: keys[format]! });
        expect(first.code, first.stderr).toBe(1);
        expect(summaryOf(first)).toMatchObject({ rows, written: data.good.size, unchanged: 0, deleted: 0, refused: data.bad.size, errorsFile: `${file}.errors.ndjson` });
        expectReport(await report(`${file}.errors.ndjson`), data.bad);
        expect(await grantsOf(service, keys[format]!)).toEqual(data.good);
        expect(existsSync(`${file}.import-state.json`), "the state file is removed once done").toBe(false);

        const second = await cli(service, ["grants", "import", file, "--json", "--no-progress", ...flags], { key: keys[format]! });
        expect(second.code, second.stderr).toBe(1);
        expect(summaryOf(second)).toMatchObject({ rows, written: 0, unchanged: data.good.size, deleted: 0, refused: data.bad.size });
        expectReport(await report(`${file}.errors.ndjson`), data.bad);
        expect(await grantsOf(service, keys[format]!)).toEqual(data.good);
      },
      180_000,
    );

    it("a run killed midway resumes: the same grants, each bad row reported once", async () => {
      const data = dataset(20_000, "csv", "r");
      const file = join(dir, "resume.csv");
      const stateFile = `${file}.import-state.json`;
      await writeFile(file, data.text);
      let polling: NodeJS.Timeout | undefined;
      let killedAt: { line: number; rows: number } | undefined;
      const first = await cli(service, ["grants", "import", file, "--batch", "500"], {
        key: keys.resume!,
        onSpawn: (kill) => {
          polling = setInterval(() => {
            void readFile(stateFile, "utf8").then(
              (text) => {
                const state = JSON.parse(text) as { line: number; counts: { rows: number } };
                if (state.counts.rows >= 3_000 && killedAt === undefined) {
                  killedAt = { line: state.line, rows: state.counts.rows };
                  kill();
                }
              },
              () => undefined,
            );
          }, 10);
        },
      });
      clearInterval(polling);
      expect(first.signal, `the import finished before it could be killed: ${first.stdout}`).toBe("SIGKILL");
      expect(killedAt!.rows).toBeLessThan(20_000);

      const resumed = await cli(service, ["grants", "import", file, "--batch", "500", "--resume", "--json"], { key: keys.resume! });
      expect(resumed.code, resumed.stderr).toBe(1);
      const summary = summaryOf(resumed);
      expect(summary).toMatchObject({ rows: 20_000, refused: data.bad.size, resumed: true });
      // A batch written but not yet recorded when the kill came is sent again: it counts as unchanged.
      expect((summary.written as number) + (summary.unchanged as number)).toBe(data.good.size);
      expect(summary.unchanged as number).toBeLessThanOrEqual(500);
      expectReport(await report(`${file}.errors.ndjson`), data.bad);
      expect(await grantsOf(service, keys.resume!)).toEqual(data.good);
      expect(existsSync(stateFile)).toBe(false);
    }, 120_000);

    it("stops on a refusal that names no rows (a key without the write scope), and resumes with a key that has it", async () => {
      const data = dataset(3_000, "csv", "s");
      const file = join(dir, "stop.csv");
      await writeFile(file, data.text);
      const readOnly = (await service.call("POST", "/api/v1/applications/stop/api-keys", { body: { name: "read-only", scopes: ["check", "read"] } })).body.key as string;

      const stopped = await cli(service, ["grants", "import", file], { key: readOnly });
      expect(stopped.code).toBe(3);
      expect(stopped.stderr).toContain("403 permission_denied");
      expect(stopped.stderr).toContain('lacks the "write" scope');
      expect(stopped.stderr).toContain("--resume");
      expect(JSON.parse(await readFile(`${file}.import-state.json`, "utf8"))).toMatchObject({ line: 2, counts: { rows: 0 } });
      expect(await grantsOf(service, keys.stop!)).toEqual(new Set());

      const resumed = await cli(service, ["grants", "import", file, "--resume", "--json"], { key: keys.stop! });
      expect(resumed.code, resumed.stderr).toBe(1);
      expect(summaryOf(resumed)).toMatchObject({ rows: 3_000, written: data.good.size, refused: data.bad.size });
      expect(await grantsOf(service, keys.stop!)).toEqual(data.good);
    }, 60_000);
  });

  describe("grants export", () => {
    /** The csv application's grants through the list route, listed once: nothing writes to it after its imports above. */
    let csvGrants: Promise<Set<string>> | undefined;
    const csvGrantsOnce = () => (csvGrants ??= grantsOf(service, keys.csv!));

    it("export, then import into another application: the same grants, expiries included", async () => {
      const source = await csvGrantsOnce();
      expect(source.size).toBeGreaterThan(40_000);
      const file = join(dir, "export.ndjson");
      const exported = await cli(service, ["grants", "export", "--out", file], { key: keys.csv! });
      expect(exported.code, exported.stderr).toBe(0);
      expect(exported.stdout).toBe("");
      expect(exported.stderr).toContain(`exported ${source.size.toLocaleString("en-US")} grants`);
      const lines = (await readFile(file, "utf8")).trimEnd().split("\n").map((l) => JSON.parse(l) as Cell & { createdAt?: string });
      expect(new Set(lines.map(grantKey))).toEqual(source);
      expect(Object.keys(lines.find((l) => l.expiresAt !== undefined)!)).toEqual(["userId", "resource", "resourceId", "relation", "expiresAt", "createdAt"]);

      const imported = await cli(service, ["grants", "import", file, "--json"], { key: keys.copy! });
      expect(imported.code, imported.stderr).toBe(0);
      expect(summaryOf(imported)).toMatchObject({ written: source.size, refused: 0 });
      expect(existsSync(`${file}.errors.ndjson`), "no error report when no row is bad").toBe(false);
      expect(await grantsOf(service, keys.copy!)).toEqual(source);

      // Exported again from the copy, to stdout: the same lines but createdAt.
      const again = await cli(service, ["grants", "export"], { key: keys.copy! });
      expect(again.code, again.stderr).toBe(0);
      expect(new Set(again.stdout.trimEnd().split("\n").map((l) => grantKey(JSON.parse(l))))).toEqual(source);
    }, 120_000);

    it.concurrent.each([
      { args: ["--resource", "folder"], keep: (k: string[]) => k[1] === "folder" },
      { args: ["--resource", "document", "--resource-id", "cd42"], keep: (k: string[]) => k[1] === "document" && k[2] === "cd42" },
      { args: ["--user", "cu17"], keep: (k: string[]) => k[0] === "cu17" },
      { args: ["--user", "cu17", "--resource", "folder"], keep: (k: string[]) => k[0] === "cu17" && k[1] === "folder" },
      { args: ["--resource", "document", "--relation", "viewer"], keep: (k: string[]) => k[1] === "document" && k[3] === "viewer" },
    ])("a selection: $args", async ({ args, keep }) => {
      const expected = new Set([...(await csvGrantsOnce())].filter((k) => keep(k.split("|"))));
      expect(expected.size).toBeGreaterThan(0);
      const run = await cli(service, ["grants", "export", ...args], { key: keys.csv! });
      expect(run.code, run.stderr).toBe(0);
      expect(new Set(run.stdout.trimEnd().split("\n").map((l) => grantKey(JSON.parse(l))))).toEqual(expected);
    }, 60_000);
  });

  describe("grants held by subject sets and links", () => {
    /** A grant with a condition, whose text needs CSV's quotes and NDJSON's escapes. */
    const CONDITIONAL = { userId: "zed", resource: "document", resourceId: "42", relation: "viewer", condition: 'context.tags.exists(t, t == "a, b")\n  && context.ok' };
    const conditionOf = async (key: string) =>
      ((await service.call("GET", "/api/v1/authorization/relationships?userId=zed&resource=document", { key })).body.relationships as { condition?: string }[])[0]?.condition;
    let source: Set<string>;
    let sourceKey: string;
    beforeAll(async () => {
      sourceKey = await createApp(service, "hier-src", ALL_USERS_CATALOG);
      const res = await service.call("POST", "/api/v1/authorization/relationships/bulk", { key: sourceKey, body: { writes: [...HIERARCHY, CONDITIONAL, ...PUBLIC] } });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      source = (await graphGrantsOf(service, sourceKey)).keys;
      expect(source).toEqual(new Set([...HIERARCHY, CONDITIONAL, ...PUBLIC].map(heldKey)));
    });

    it.each(["ndjson", "csv"] as const)("export, then import into a fresh application (%s): the same grants, holders and expiries", async (format) => {
      const file = join(dir, `hierarchy.${format}`);
      const exported = await cli(service, ["grants", "export", "--out", file], { key: sourceKey });
      expect(exported.code, exported.stderr).toBe(0);
      expect(exported.stderr).toContain(`exported ${source.size.toLocaleString("en-US")} grants (3 resources)`);
      const text = await readFile(file, "utf8");
      if (format === "ndjson") {
        const lines = text.trimEnd().split("\n").map((l) => JSON.parse(l) as Record<string, string>);
        expect(lines).toHaveLength(source.size);
        // The holder first: userId, or the subject's flat keys (no subjectRelation for a link); a user's line has the user's keys only.
        const keysOf = (find: (l: Record<string, string>) => boolean) => Object.keys(lines.find(find)!);
        expect(keysOf((l) => l.userId === "carol")).toEqual(["userId", "resource", "resourceId", "relation", "expiresAt", "createdAt"]);
        expect(keysOf((l) => l.userId === "zed")).toEqual(["userId", "resource", "resourceId", "relation", "condition", "createdAt"]);
        expect(keysOf((l) => l.subjectResourceId === "platform")).toEqual([
          "subjectResource",
          "subjectResourceId",
          "subjectRelation",
          "resource",
          "resourceId",
          "relation",
          "expiresAt",
          "createdAt",
        ]);
        expect(keysOf((l) => l.subjectResourceId === "root")).toEqual(["subjectResource", "subjectResourceId", "resource", "resourceId", "relation", "createdAt"]);
        // Every user: allUsers, the boolean, as the API writes it.
        expect(lines.find((l) => (l as Record<string, unknown>).allUsers === true && l.resource === "folder")).toEqual({
          allUsers: true,
          resource: "folder",
          resourceId: "public",
          relation: "viewer",
          createdAt: expect.any(String),
        });
      } else {
        const records = text.split("\r\n");
        expect(records[0]).toBe("userId,allUsers,subjectResource,subjectResourceId,subjectRelation,resource,resourceId,relation,expiresAt,condition");
        expect(records).toContain(',,team,"""ops"", on call",member,document,42,editor,,');
        expect(records).toContain(',,folder,root,,folder,runbooks,parent,,');
        expect(records.find((r) => r.startsWith("carol,"))).toMatch(/^carol,,,,,folder,root,editor,2099-01-01T00:00:00(\.000)?Z,$/);
        // The condition's line break is inside quotes: one record, split here by CRLF only.
        expect(records).toContain('zed,,,,,document,42,viewer,,"context.tags.exists(t, t == ""a, b"")\n  && context.ok"');
        expect(records).toContain(",true,,,,folder,public,viewer,,");
        expect(records.find((r) => r.startsWith(",true,,,,document,44,"))).toMatch(/,viewer,2099-01-01T00:00:00(\.000)?Z,$/);
        expect(records).toHaveLength(source.size + 2); // the header, and nothing after the last CRLF
      }

      const copyKey = await createApp(service, `hier-${format}`, ALL_USERS_CATALOG);
      const imported = await cli(service, ["grants", "import", file, "--json", "--batch", "1000"], { key: copyKey });
      expect(imported.code, imported.stderr).toBe(0);
      expect(summaryOf(imported)).toMatchObject({ rows: source.size, written: source.size, refused: 0 });
      expect(existsSync(`${file}.errors.ndjson`)).toBe(false);
      expect((await graphGrantsOf(service, copyKey)).keys).toEqual(source);
      // The condition came across as written: a grant never loses its condition on the way.
      expect(await conditionOf(copyKey)).toBe(CONDITIONAL.condition);
      // The copy answers through the same teams and folders.
      const why = await cli(service, ["explain", "alice", "document:42", "read"], { key: copyKey });
      expect(why.code, why.stderr).toBe(0);
      expect(why.stdout).toContain("alice is member of team:platform → team:platform#member is member of team:eng → team:eng#member is viewer of folder:runbooks");

      // Exported again from the copy: the same grants.
      const again = join(dir, `hierarchy-again.${format}`);
      expect((await cli(service, ["grants", "export", "--out", again], { key: copyKey })).code).toBe(0);
      const reread = await cli(service, ["grants", "import", again, "--json"], { key: copyKey });
      expect(summaryOf(reread)).toMatchObject({ rows: source.size, written: 0, unchanged: source.size, refused: 0 });
    }, 120_000);

    it("the list route's answers, nested subject, userId \"\" and createdAt included, import as they are", async () => {
      const { listed } = await graphGrantsOf(service, sourceKey);
      expect(listed.filter((g) => g.subject !== undefined && g.userId === "").length).toBeGreaterThan(1000);
      const file = join(dir, "listed.jsonl");
      await writeFile(file, listed.map((g) => JSON.stringify(g)).join("\n"));
      const copyKey = await createApp(service, "hier-listed", ALL_USERS_CATALOG);
      const imported = await cli(service, ["grants", "import", file, "--json"], { key: copyKey });
      expect(imported.code, imported.stderr).toBe(0);
      expect(summaryOf(imported)).toMatchObject({ rows: source.size, written: source.size, refused: 0 });
      expect((await graphGrantsOf(service, copyKey)).keys).toEqual(source);
    }, 60_000);

    /**
     * Rows with holder problems, read or refused, spread over batches of
     * three: each reported on its own line (a quoted multi-line CSV field
     * shifts every later line), the good rows written, a delete by subject.
     */
    it.each(["csv", "ndjson"] as const)("%s: both holders, neither, and the service's refusals of subject rows, each reported by its line", async (format) => {
      const key = await createApp(service, `hier-bad-${format}`, GRAPH_CATALOG);
      const old = set("team:eng#member", "folder", "old", "editor");
      expect((await service.call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes: [old] } })).status).toBe(200);
      type Spec = { row: Record<string, string>; bad?: string; ndjson?: string; csvOnly?: boolean };
      const REFUSED_EVERYONE =
        'allUsers: folder#viewer is held by a userId, a subject set team#member (its subjects in the catalog), not allUsers: true (every user); a relation every user may hold lists "user:*"';
      const g = (resource: string, resourceId: string, relation: string, more: Record<string, string> = {}) => ({ resource, resourceId, relation, ...more });
      const specs: Spec[] = [
        { row: { userId: "alice", ...g("team", "eng", "member") } },
        { row: { userId: "alice", subjectResource: "team", subjectResourceId: "eng", subjectRelation: "member", ...g("folder", "f1", "viewer") }, bad: "exactly one: given userId and" },
        { row: g("folder", "f1", "viewer"), bad: "missing the holder: userId, allUsers, or subjectResource and subjectResourceId" },
        { row: { subjectResource: "team", subjectResourceId: "eng", subjectRelation: "member", ...g("folder", "f1", "viewer") } },
        { row: { subjectResource: "team", subjectResourceId: "eng", subjectRelation: "owner", ...g("folder", "f1", "viewer") }, bad: "subject: folder#viewer is held by a userId, a subject set team#member (its subjects in the catalog), not a subject set team#owner" },
        { row: { userId: "multi\nline", ...g("team", "eng", "member") }, bad: "userId: \"multi\\nline\" must not contain control characters", csvOnly: true },
        { row: { subjectResource: "folder", subjectResourceId: "f0", ...g("folder", "f1", "parent") } },
        { row: { subjectResource: "folder", subjectResourceId: "f0", ...g("folder", "f1", "viewer") }, bad: "not a linked folder" },
        { row: { subjectResource: "team", subjectResourceId: "x\u0000y", subjectRelation: "member", ...g("folder", "f2", "viewer") }, bad: "subject.resourceId: must not contain the control character NUL" },
        { row: { subjectResource: "folder", subjectResourceId: "f0", ...g("document", "d1", "parent", { expiresAt: "2001-01-01T00:00:00Z" }) }, bad: "expiresAt: 2001-01-01T00:00:00.000Z is not in the future" },
        { row: { subjectResource: "team", subjectResourceId: "eng", subjectRelation: "member", ...g("document", "d1", "viewer", { expiresAt: FUTURE }) } },
        { row: { subjectResource: "nebula", subjectResourceId: "n1", ...g("document", "d1", "parent") }, bad: "subject: document#parent is held by a linked folder (its subjects in the catalog), not a linked nebula" },
        { row: { subjectRelation: "member", ...g("folder", "f3", "viewer") }, bad: "missing subjectResource; missing subjectResourceId" },
        { row: { op: "delete", subjectResource: "team", subjectResourceId: "eng", subjectRelation: "member", ...g("folder", "old", "editor") } },
        {
          row: {},
          ndjson: JSON.stringify({ subject: { resource: "team", resourceId: "eng", relation: "member" }, subjectResourceId: "eng", ...g("folder", "f4", "viewer") }),
          bad: "two forms of the same holder",
        },
        { row: {}, ndjson: JSON.stringify({ userId: "carol", subject: { resource: "team", resourceId: "eng" }, ...g("folder", "f4", "viewer") }), bad: "exactly one: given userId and" },
        { row: {}, ndjson: JSON.stringify({ userId: "", subject: { resource: "folder", resourceId: "f0", relation: "" }, ...g("document", "d2", "parent") }) },
        // Every user: where the relation's subjects lack "user:*" the service refuses it; beside another holder, or not a boolean, the file does.
        { row: { allUsers: "true", ...g("folder", "f5", "viewer") }, bad: REFUSED_EVERYONE, csvOnly: true },
        { row: {}, ndjson: JSON.stringify({ allUsers: true, ...g("folder", "f5", "viewer") }), bad: REFUSED_EVERYONE },
        { row: { userId: "alice", allUsers: "TRUE", ...g("folder", "f5", "viewer") }, bad: "exactly one: given userId and allUsers", csvOnly: true },
        { row: {}, ndjson: JSON.stringify({ userId: "alice", allUsers: true, ...g("folder", "f5", "viewer") }), bad: "exactly one: given userId and allUsers" },
        { row: { allUsers: "maybe", ...g("folder", "f5", "viewer") }, bad: 'allUsers must be true or false (or empty), not "maybe"', csvOnly: true },
        { row: { userId: "erin", allUsers: "false", ...g("folder", "f5", "viewer") }, csvOnly: true },
        { row: {}, ndjson: JSON.stringify({ allUsers: "true", ...g("folder", "f5", "viewer") }), bad: "allUsers is not a boolean" },
        { row: {}, ndjson: JSON.stringify({ userId: "fay", allUsers: false, ...g("folder", "f5", "viewer") }) },
      ].filter((x) => (format === "csv" ? x.ndjson === undefined : !x.csvOnly));
      const columns = ["op", "userId", "allUsers", "subjectResource", "subjectResourceId", "subjectRelation", "resource", "resourceId", "relation", "expiresAt"];
      const cell = (v: string | undefined) => (v === undefined ? "" : /[",\n]/.test(v) ? `"${v.replaceAll('"', '""')}"` : v);
      const out: string[] = format === "csv" ? [columns.join(",")] : [];
      const bad = new Map<number, string>();
      const good = new Set<string>();
      let line = format === "csv" ? 2 : 1;
      for (const spec of specs) {
        out.push(format === "csv" ? columns.map((c) => cell(spec.row[c])).join(",") : (spec.ndjson ?? JSON.stringify(spec.row)));
        if (spec.bad !== undefined) bad.set(line, spec.bad);
        else if (spec.row.op !== "delete") {
          const r = spec.ndjson !== undefined ? (JSON.parse(spec.ndjson) as Listed) : ({ ...spec.row, allUsers: spec.row.allUsers === "true" } as unknown as Listed);
          const subject = r.subject ?? (spec.row.subjectResource ? { resource: spec.row.subjectResource, resourceId: spec.row.subjectResourceId!, relation: spec.row.subjectRelation } : undefined);
          good.add(heldKey({ ...r, ...(subject === undefined ? {} : { subject, userId: "" }) }));
        }
        line += format === "csv" ? (spec.row.userId ?? "").split("\n").length : 1;
      }
      const file = join(dir, `holders.${format}`);
      await writeFile(file, `${out.join("\n")}\n`);

      const run = await cli(service, ["grants", "import", file, "--json", "--batch", "3"], { key });
      expect(run.code, run.stderr).toBe(1);
      expect(summaryOf(run)).toMatchObject({ rows: specs.length, written: good.size, deleted: 1, refused: bad.size });
      const lines = await report(`${file}.errors.ndjson`);
      expectReport(lines, bad);
      // A refused subject row is shown as sent: its holder as subject.
      const refusedSet = lines.find((l) => l.reason.includes("team#owner"))!;
      expect(refusedSet.row).toEqual({ subject: { resource: "team", resourceId: "eng", relation: "owner" }, resource: "folder", resourceId: "f1", relation: "viewer" });
      expect((await graphGrantsOf(service, key)).keys).toEqual(good);
    }, 60_000);
  });

  // Each an application of its own: side by side, and within each, the calls that read at once.
  describe.concurrent("check, explain, catalog, keys", () => {
    it("explain prints the path through teams and folders; who-can lists every user, all pages", async () => {
      const key = await createApp(service, "cli-graph", GRAPH_CATALOG);
      const writes = [
        user("alice", "team", "platform", "member"),
        set("team:platform#member", "team", "eng", "member"),
        set("team:eng#member", "folder", "runbooks", "viewer"),
        set("folder:runbooks", "document", "42", "parent"),
        ...Array.from({ length: 1500 }, (_, i) => user(`m${String(i).padStart(4, "0")}`, "team", "eng", "member")),
      ];
      expect((await service.call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes } })).status).toBe(200);
      const [why, who, none] = await Promise.all([
        cli(service, ["explain", "alice", "document:42", "read"], { key }),
        cli(service, ["who-can", "document:42", "read"], { key }),
        cli(service, ["who-can", "document:43", "read", "--json"], { key }),
      ]);
      expect(why.code, why.stderr).toBe(0);
      expect(why.stdout).toContain(
        "  viewer through 3 hops: alice is member of team:platform → team:platform#member is member of team:eng → team:eng#member is viewer of folder:runbooks → folder:runbooks is parent of document:42\n",
      );
      expect(who.code, who.stderr).toBe(0);
      const ids = who.stdout.trim().split("\n");
      expect(ids).toHaveLength(1501); // two pages of 1,000
      expect(ids[0]).toBe("alice");
      expect(ids).toEqual([...ids].sort());
      expect([none.code, none.stdout]).toEqual([1, "[]\n"]);
    });

    it("an allUsers grant: explain says every user, who-can says so on stderr and exits 0, export --all-users selects them", async () => {
      const key = await createApp(service, "cli-everyone", ALL_USERS_CATALOG);
      const writes = [everyone("folder", "pub", "viewer"), set("folder:pub", "document", "7", "parent"), user("ann", "document", "7", "editor"), everyone("document", "8", "viewer")];
      expect((await service.call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes } })).status).toBe(200);
      const [why, direct, who, json, exported, mixed] = await Promise.all([
        cli(service, ["explain", "zed", "document:7", "read"], { key }),
        cli(service, ["explain", "zed", "document:8", "read"], { key }),
        cli(service, ["who-can", "document:7", "read"], { key }),
        cli(service, ["who-can", "document:8", "read", "--json"], { key }),
        cli(service, ["grants", "export", "--all-users"], { key }),
        cli(service, ["grants", "export", "--all-users", "--user", "ann"], { key }),
      ]);
      expect(why.code, why.stderr).toBe(0);
      expect(why.stdout).toContain("  viewer through 1 hop: every user is viewer of folder:pub → folder:pub is parent of document:7\n");
      expect(direct.stdout).toContain("  grant: every user (allUsers) is viewer of document:8");
      expect([who.code, who.stdout]).toEqual([0, "ann\n"]);
      expect(who.stderr).toContain("every user may: an allUsers grant gives document:7 a relation that implies read; the users listed may also");
      expect([json.code, json.stdout]).toEqual([0, "[]\n"]);
      expect(json.stderr).toContain("every user may");
      expect(exported.code, exported.stderr).toBe(0);
      expect(exported.stdout.trimEnd().split("\n").map((l) => { const { createdAt: _, ...g } = JSON.parse(l) as Record<string, unknown>; return g; })).toEqual([
        { allUsers: true, resource: "folder", resourceId: "pub", relation: "viewer" },
        { allUsers: true, resource: "document", resourceId: "8", relation: "viewer" },
      ]);
      expect(mixed.code).toBe(2);
      expect(mixed.stderr).toContain("--all-users goes with --resource and --relation only");
    });

    it("catalog put then get; keys create; check and explain with the new key", async () => {
      const catalogFile = join(dir, "catalog.json");
      const catalog = { resources: [{ resource: "report", description: "Quarterly reports", actions: ["read", "sign"], relations: [{ name: "signer", actions: ["read", "sign"] }] }] };
      await writeFile(catalogFile, JSON.stringify(catalog));
      const keyFile = join(dir, "operator.key");
      await writeFile(keyFile, `${ADMIN_KEY}\n`);

      const put = await cli(service, ["--key-file", keyFile, "catalog", "put", catalogFile, "--app", "small"], { key: null });
      expect(put.code, put.stderr).toBe(0);
      expect(put.stdout).toBe("catalog of small replaced: 1 resource (report)\n");
      const got = await cli(service, ["catalog", "get", "--app", "small", "--url", service.url]);
      expect(got.code, got.stderr).toBe(0);
      expect(JSON.parse(got.stdout)).toEqual((await service.call("GET", "/api/v1/applications/small/resources")).body);
      expect(JSON.parse(got.stdout).resources[0]).toMatchObject({ resource: "report", actions: ["read", "sign"] });

      const created = await cli(service, ["keys", "create", "--app", "small", "--name", "from-cli", "--scopes", "check,read,write"]);
      expect(created.code, created.stderr).toBe(0);
      expect(created.stdout).toMatch(/^pcl_[a-z2-7]+\n$/);
      expect(created.stderr).toContain('"from-cli" of application small, scopes check, read, write');
      const key = created.stdout.trim();
      // The application key reads its own catalog without --app.
      const own = await cli(service, ["catalog", "get"], { key });
      expect(JSON.parse(own.stdout)).toEqual(JSON.parse(got.stdout));

      await service.call("POST", "/api/v1/authorization/relationships", { key, body: { userId: "alice", resource: "report", resourceId: "q3", relation: "signer" } });
      const [allowed, denied, why, whyNot] = await Promise.all([
        cli(service, ["check", "alice", "report:q3", "sign"], { key }),
        cli(service, ["check", "bob", "report:q3", "sign", "--tenant", "acme"], { key }),
        cli(service, ["explain", "alice", "report:q3", "sign"], { key }),
        cli(service, ["explain", "bob", "report:q3", "sign", "--json"], { key }),
      ]);
      expect([allowed.code, allowed.stdout]).toEqual([0, "allowed: alice report:q3 sign\n"]);
      expect([denied.code, denied.stdout]).toEqual([1, "denied: bob report:q3 sign (tenant acme)\n"]);

      expect(why.code, why.stderr).toBe(0);
      expect(why.stdout).toContain("allowed: alice report:q3 sign\nbecause:\n  grant: alice is signer of report:q3 (granted ");
      expect(why.stdout).toContain("relations on report:q3: signer (read, sign)");
      expect(whyNot.code).toBe(1);
      expect(JSON.parse(whyNot.stdout)).toMatchObject({ allowed: false });

      // An import deletes too (op), and --format reads a file whose name does not say.
      const changes = join(dir, "changes.txt");
      await writeFile(
        changes,
        [
          { op: "delete", userId: "alice", resource: "report", resourceId: "q3", relation: "signer" },
          { userId: "bob", resource: "report", resourceId: "q3", relation: "signer", expiresAt: FUTURE },
        ]
          .map((g) => JSON.stringify(g))
          .join("\r\n"),
      );
      const applied = await cli(service, ["grants", "import", changes, "--format", "ndjson"], { key });
      expect(applied.code, applied.stderr).toBe(0);
      expect(applied.stdout).toMatch(/^imported .*changes\.txt: 2 rows; this run [\d.]+ s, [\d,]+ rows\/s\n  written +1\n  unchanged +0\n  deleted +1\n  refused +0\n$/);
      const after = await Promise.all([cli(service, ["check", "alice", "report:q3", "sign"], { key }), cli(service, ["check", "bob", "report:q3", "sign"], { key })]);
      expect(after.map((run) => run.code)).toEqual([1, 0]);
    }, 60_000);
  });

  // Each refused before or by the service's first answer: side by side.
  describe.concurrent("usage errors and keys", () => {
    // The tests above and below run the program in this process; its exit code is the process's own exit status.
    it("as real processes: exit statuses 0, 2 and 3, the key never printed", async () => {
      const wrong = "pcl_wrongwrongwrongwrongwrongwrong";
      const [ok, usage, refused] = await Promise.all([
        cli(service, ["catalog", "get", "--app", "small"], { process: true }),
        cli(service, ["frobnicate"], { process: true }),
        cli(service, ["check", "a", "document:d1", "read"], { key: wrong, process: true }),
      ]);
      expect([ok.code, usage.code, refused.code], ok.stderr + usage.stderr + refused.stderr).toEqual([0, 2, 3]);
      expect(JSON.parse(ok.stdout)).toHaveProperty("resources");
      expect(usage.stderr).toContain("unknown command 'frobnicate'");
      expect(refused.stderr).toContain("401 unauthenticated");
      expect(refused.stdout + refused.stderr).not.toContain(wrong);
    });

    it.each([
      { args: ["grants", "import"], says: "missing required argument 'FILE'" },
      { args: ["grants", "import", "nowhere.csv"], says: "FILE nowhere.csv: cannot read it (ENOENT)" },
      { args: ["grants", "import", "x.csv", "--batch", "5001"], says: "option '--batch <rows>' argument '5001' is invalid" },
      { args: ["grants", "import", "x.csv", "--concurrency", "0"], says: "option '--concurrency <calls>' argument '0' is invalid" },
      { args: ["grants", "import", "x.csv", "--format", "xml"], says: "option '--format <format>' argument 'xml' is invalid" },
      { args: ["grants", "import", "package.json", "--resume", "--state", "/nonexistent/state.json"], says: "--resume: no state file /nonexistent/state.json" },
      { args: ["grants", "export", "--resource-id", "d1"], says: "--resource-id needs --resource" },
      { args: ["grants", "export", "--bogus"], says: "unknown option '--bogus'" },
      { args: ["check", "alice", "document:d1"], says: "missing required argument 'ACTION'" },
      { args: ["check", "alice", "d1", "read"], says: 'RESOURCE:ID "d1"' },
      { args: ["keys", "create", "--name", "x"], says: "required option '--app <appId>' not specified" },
      { args: ["keys", "create", "--app", "small", "--name", "x", "--scopes", "check,,read"], says: "--scopes" },
      { args: ["catalog", "put", "--app", "small"], says: "missing required argument 'FILE'" },
      { args: ["--url", "ftp://example.com", "check", "a", "d:1", "read"], says: "--url ftp://example.com: not an http or https URL" },
      { args: ["--key-file", "/nonexistent/key", "check", "a", "d:1", "read"], says: "--key-file /nonexistent/key: cannot read it" },
      { args: ["frobnicate"], says: "unknown command 'frobnicate'" },
    ])("$args → exit 2: $says", async ({ args, says }) => {
      const run = await cli(service, args);
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toContain(says);
    });

    it("no key: exit 2 naming where a key comes from", async () => {
      const run = await cli(service, ["check", "a", "document:d1", "read"], { key: null });
      expect(run.code).toBe(2);
      expect(run.stderr).toContain("no API key: set PORTCULLIS_KEY, or pass --key-file FILE");
    });

    it("a key as an argument is refused without being echoed", async () => {
      const secret = "pcl_thisshouldneverbeprinted";
      const run = await cli(service, ["check", "a", "document:d1", "read", "--key", secret]);
      expect(run.code).toBe(2);
      expect(run.stderr).toContain("--key is not taken");
      expect(run.stdout + run.stderr).not.toContain(secret);
    });

    it.each([
      { name: "in PORTCULLIS_KEY", via: "env" },
      { name: "in --key-file", via: "file" },
    ])("a wrong key $name: exit 3 with the API's message, the key never printed", async ({ via }) => {
      const wrong = "pcl_wrongwrongwrongwrongwrongwrong";
      const keyFile = join(dir, `wrong-${via}.key`);
      await writeFile(keyFile, wrong);
      const commands = [["check", "a", "document:d1", "read"], ["grants", "export"], ["catalog", "get", "--app", "small"]];
      const runs = await Promise.all(commands.map((args) => cli(service, via === "env" ? args : ["--key-file", keyFile, ...args], { key: via === "env" ? wrong : null })));
      for (const run of runs) {
        expect(run.code, run.stderr).toBe(3);
        expect(run.stderr).toContain("401 unauthenticated");
        expect(run.stdout + run.stderr).not.toContain(wrong);
      }
    });
  });
});
