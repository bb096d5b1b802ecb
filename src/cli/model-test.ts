/**
 * `portcullis model test FILE`: a model, fixture grants and role
 * assignments, and assertions about them (API.md, "Models as files"), run
 * on an embedded in-memory instance (embedded.ts): no server, no database,
 * the same REST API and the same answers as a running service.
 *
 * Every failed assertion is printed with the explain of its question (who,
 * what, and the grants and roles behind the answer), named by its place in
 * the file and its line. Exit 0 when all hold, 1 when one fails, 2 when the
 * file cannot be read or used (its line named).
 */
import { LineCounter, type Document } from "yaml";
import type { Embedded } from "../embedded.js";
import { Api, ApiError } from "./client.js";
import { EXIT, usageError } from "./errors.js";
import { count } from "./model.js";
import { readYamlMap } from "./yaml-file.js";
import { explainLines, type ExplainAnswer, type Question } from "./questions.js";

export type TestFormat = "text" | "json";

type Path = (string | number)[];
type Json = Record<string, unknown>;

const APP_ID = "model-test";
/** The bulk write's limit: the fixture's grants go in batches of it. */
const BATCH = 5_000;
/** Assertions asked at once. */
const IN_FLIGHT = 16;
/** Lookup and who can are paged until the instance or user shows, or the list ends. */
const PAGE = 1_000;

const KINDS = ["check", "lookup", "whoCan"] as const;
type Kind = (typeof KINDS)[number];
/** What every kind's body must name (lookup's resourceId and who can's userId are the assertion's own); the API checks the rest. */
const NEEDS = ["userId", "resource", "resourceId", "action"] as const;
const EXPECTS = ["allowed", "denied"] as const;
type Expect = (typeof EXPECTS)[number];

interface Assertion {
  index: number;
  kind: Kind;
  body: Json;
  expect: Expect;
  name: string | undefined;
}

interface Outcome {
  index: number;
  line: number | undefined;
  name?: string;
  kind: Kind;
  question: Question;
  expect: Expect;
  /** What the instance answered; "error" when it refused the question. */
  got: Expect | "error";
  holds: boolean;
  error?: string;
  explain?: ExplainAnswer;
}

/** The test file, parsed, with the way back from a place in it to its line. */
class TestFile {
  constructor(
    readonly name: string,
    private readonly doc: Document,
    private readonly lines: LineCounter,
  ) {}

  /** The line of the node at `path`, or of its nearest ancestor that exists. */
  lineOf(path: Path): number | undefined {
    for (let n = path.length; n >= 0; n--) {
      const node = (n === 0 ? this.doc.contents : this.doc.getIn(path.slice(0, n), true)) as { range?: [number, number, number] } | undefined;
      if (node?.range !== undefined) return this.lines.linePos(node.range[0]).line;
    }
    return undefined;
  }

  /** "FILE: line 12: model.policies[3]: …", the way a usage error names a place. */
  problem(path: Path, reason: string): Error {
    const line = this.lineOf(path);
    return usageError(`FILE ${this.name}: ${line === undefined ? "" : `line ${line}: `}${pathText(path)}: ${reason}`);
  }
}

const pathText = (path: Path) => path.map((p, i) => (typeof p === "number" ? `[${p}]` : i === 0 ? p : `.${p}`)).join("");

/** "policies[3].permissions[1]", as the API names a place in a body, back to a path. */
export function parsePath(field: string): Path {
  const path: Path = [];
  for (const part of field.matchAll(/([^.[\]]+)|\[(\d+)\]/g)) path.push(part[2] === undefined ? part[1]! : Number(part[2]));
  return path;
}

const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

async function readTestFile(file: string, stdin: NodeJS.ReadableStream): Promise<{ file: TestFile; value: Json }> {
  const lines = new LineCounter();
  const { doc, value } = await readYamlMap(file, stdin, "a test file is a mapping with model, grants, assignments and assertions", {
    lineCounter: lines,
    maxAliases: 1_000, // anchors for repeated bodies are fine
  });
  return { file: new TestFile(file, doc, lines), value };
}

interface Fixture {
  model: Json;
  grants: Json[];
  assignments: { role: string; userId: string; tenantId: string | undefined; condition: string | undefined }[];
  assertions: Assertion[];
}

/** The file's shape, checked before anything runs; the API checks what the bodies say. */
function fixtureOf(file: TestFile, value: Json): Fixture {
  for (const key of Object.keys(value)) {
    if (!["model", "grants", "assignments", "assertions"].includes(key)) {
      throw file.problem([key], "is not a part of a test file (model, grants, assignments, assertions)");
    }
  }
  const { model, grants = [], assignments = [], assertions } = value;
  if (!isObject(model)) throw file.problem(["model"], "is required: the model document, as model export prints it");
  const { version: _, ...document } = model; // the version exported with it is not an input
  if (!Array.isArray(grants) || !grants.every(isObject)) throw file.problem(["grants"], "must be a list of grants, as the bulk write takes them");
  if (!Array.isArray(assignments)) throw file.problem(["assignments"], "must be a list of {role, userId, tenantId?, condition?}");
  if (!Array.isArray(assertions)) throw file.problem(["assertions"], "is required: a list of {check|lookup|whoCan: ..., expect: allowed|denied}");

  const roles = assignments.map((a: unknown, i) => {
    const at = ["assignments", i];
    if (!isObject(a)) throw file.problem(at, "must be {role, userId, tenantId?, condition?}");
    for (const key of Object.keys(a)) {
      if (!["role", "userId", "tenantId", "condition"].includes(key)) throw file.problem([...at, key], "is not a field of an assignment (role, userId, tenantId, condition)");
    }
    for (const key of ["role", "userId"]) if (typeof a[key] !== "string" || a[key] === "") throw file.problem([...at, key], "is required: a non-empty string");
    for (const key of ["tenantId", "condition"]) if (a[key] !== undefined && typeof a[key] !== "string") throw file.problem([...at, key], "must be a string");
    return { role: a.role as string, userId: a.userId as string, tenantId: a.tenantId as string | undefined, condition: a.condition as string | undefined };
  });

  const asserted = assertions.map((a: unknown, index): Assertion => {
    const at = ["assertions", index];
    if (!isObject(a)) throw file.problem(at, "must be {check|lookup|whoCan: ..., expect: allowed|denied}");
    const kinds = KINDS.filter((k) => k in a);
    for (const key of Object.keys(a)) {
      if (!(KINDS as readonly string[]).includes(key) && key !== "expect" && key !== "name") {
        throw file.problem([...at, key], "is not a field of an assertion (check, lookup, whoCan, expect, name)");
      }
    }
    if (kinds.length !== 1) throw file.problem(at, "must ask exactly one of check, lookup and whoCan");
    const kind = kinds[0]!;
    const body = a[kind];
    if (!isObject(body)) throw file.problem([...at, kind], `must be the ${kind} question's body`);
    for (const key of NEEDS) {
      if (typeof body[key] !== "string" || body[key] === "") throw file.problem([...at, kind, key], "is required: a non-empty string");
    }
    for (const key of ["pageSize", "pageToken"]) if (key in body) throw file.problem([...at, kind, key], "is not taken: the test reads every page");
    if (!(EXPECTS as readonly unknown[]).includes(a.expect)) throw file.problem([...at, "expect"], "must be allowed or denied");
    if (a.name !== undefined && typeof a.name !== "string") throw file.problem([...at, "name"], "must be a string");
    return { index, kind, body, expect: a.expect as Expect, name: a.name as string | undefined };
  });
  return { model: document, grants: grants as Json[], assignments: roles, assertions: asserted };
}

/** The API refused a part of the file (a 400): the usage error names each place it named, with its line. */
function refused(file: TestFile, error: unknown, prefix: (field: string) => Path, what: string): never {
  if (!(error instanceof ApiError) || error.status !== 400) throw error;
  const places = error.details.map((d) => {
    const path = prefix(d.field);
    const line = file.lineOf(path);
    return `\n  ${line === undefined ? "" : `line ${line}: `}${pathText(path)}: ${d.reason}`;
  });
  // The places say what the message says, in the file's terms (its paths and lines) rather than the request's.
  throw usageError(`FILE ${file.name}: ${what} is refused${places.length === 0 ? `: ${error.message}` : `:${places.join("")}`}`);
}

export async function modelTest(file: string, options: { format: TestFormat }, io: { out: NodeJS.WritableStream; stdin: NodeJS.ReadableStream }): Promise<number> {
  const read = await readTestFile(file, io.stdin);
  const fixture = fixtureOf(read.file, read.value);
  const started = performance.now();
  // Loaded here, not with the command line: the other commands are clients and need none of the service.
  const { openEmbedded } = await import("../embedded.js");
  const embedded = await openEmbedded();
  try {
    const outcomes = await runFixture(embedded, read.file, fixture);
    const ms = Math.round(performance.now() - started);
    io.out.write(options.format === "json" ? `${JSON.stringify(report(file, fixture, outcomes, ms), null, 2)}\n` : renderText(file, fixture, outcomes, ms));
    return outcomes.every((o) => o.holds) ? EXIT.ok : EXIT.negative;
  } finally {
    await embedded.close();
  }
}

/** The base URL the embedded API's paths are resolved against; nothing listens there. */
const EMBEDDED_URL = "http://embedded.portcullis.invalid/";

async function runFixture(embedded: Embedded, file: TestFile, fixture: Fixture): Promise<Outcome[]> {
  const operator = new Api(EMBEDDED_URL, embedded.operatorKey, embedded.fetch);
  await operator.post("/api/v1/applications", { appId: APP_ID, name: "model test" });
  const app = `/api/v1/applications/${APP_ID}`;
  const created = await operator.post<{ key: string }>(`${app}/api-keys`, { name: "model test", scopes: ["check", "read", "write"] });
  const api = new Api(EMBEDDED_URL, created.key, embedded.fetch);

  await api.put(`${app}/model`, fixture.model).catch((error: unknown) => refused(file, error, (f) => ["model", ...parsePath(f)], "the model"));

  for (let from = 0; from < fixture.grants.length; from += BATCH) {
    const writes = fixture.grants.slice(from, from + BATCH);
    await api.post("/api/v1/authorization/relationships/bulk", { writes }).catch((error: unknown) =>
      refused(
        file,
        error,
        (f) => {
          const path = parsePath(f);
          return path[0] === "writes" && typeof path[1] === "number" ? ["grants", path[1] + from, ...path.slice(2)] : ["grants", ...path];
        },
        "a grant",
      ),
    );
  }

  const roleIds = await rolesByName(api, app, fixture);
  for (const [i, a] of fixture.assignments.entries()) {
    const roleId = roleIds.get(roleKey(a.role, a.tenantId));
    if (roleId === undefined) {
      throw file.problem(["assignments", i, "role"], `names no role of the model${a.tenantId === undefined ? " (an application-wide role)" : ` in tenant ${a.tenantId}`}: ${a.role}`);
    }
    await api
      .post(`${app}/roles/${encodeURIComponent(roleId)}/assignments`, { userId: a.userId, ...(a.condition === undefined ? {} : { condition: a.condition }) })
      .catch((error: unknown) => refused(file, error, (f) => ["assignments", i, ...parsePath(f)], "an assignment"));
  }

  // Several questions in flight: the embedded instance gathers concurrent checks into one statement
  // (PGlite is one connection), as the service does. The outcomes keep the file's order.
  const outcomes: Outcome[] = new Array<Outcome>(fixture.assertions.length);
  let next = 0;
  const worker = async () => {
    while (next < fixture.assertions.length) {
      const assertion = fixture.assertions[next++]!;
      outcomes[assertion.index] = await assess(api, file, assertion);
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  return outcomes;
}

const roleKey = (name: string, tenantId: string | undefined) => `${tenantId ?? ""}/${name}`;

/** Every role of the model by tenant and name: the application-wide ones and those of the tenants assignments name. */
async function rolesByName(api: Api, app: string, fixture: Fixture): Promise<Map<string, string>> {
  const ids = new Map<string, string>();
  const tenants = new Set<string | undefined>([undefined, ...fixture.assignments.map((a) => a.tenantId)]);
  for (const tenantId of tenants) {
    let pageToken = "";
    do {
      const page = await api.get<{ roles?: { roleId: string; name: string; tenantId?: string }[]; nextPageToken?: string }>(`${app}/roles`, {
        tenantId,
        pageSize: 1000,
        pageToken,
      });
      for (const r of page.roles ?? []) ids.set(roleKey(r.name, r.tenantId), r.roleId);
      pageToken = page.nextPageToken ?? "";
    } while (pageToken !== "");
  }
  return ids;
}

/** What an assertion's body may carry beside the ids that its explain takes too. */
const EXPLAIN_CARRIES = ["context", "subjectProperties", "resourceProperties", "actionProperties", "contextualGrants"] as const;

async function assess(api: Api, file: TestFile, a: Assertion): Promise<Outcome> {
  const b = a.body;
  const question: Question = {
    userId: b.userId as string,
    resource: b.resource as string,
    resourceId: b.resourceId as string,
    action: b.action as string,
    ...(typeof b.tenantId === "string" ? { tenantId: b.tenantId } : {}),
  };
  const base = { index: a.index, line: file.lineOf(["assertions", a.index]), ...(a.name === undefined ? {} : { name: a.name }), kind: a.kind, question, expect: a.expect };
  let allowed: boolean;
  try {
    allowed = await answer(api, a);
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 400) throw error;
    // The instance is this process's own: a request id names nothing anyone can look up, and a
    // detail the message already says is not said twice.
    const fields = error.details.map((d) => `${d.field}: ${d.reason}`).filter((f) => !error.message.includes(f));
    return { ...base, got: "error", holds: false, error: `${error.status} ${error.code}: ${error.message}${fields.length === 0 ? "" : ` (${fields.join("; ")})`}` };
  }
  const got: Expect = allowed ? "allowed" : "denied";
  if (got === a.expect) return { ...base, got, holds: true };
  // The why of the answer that surprised: the grants and roles behind it, or what the user holds.
  // Asked with what the question carried for conditions and its contextual grants, as the assertion was.
  const carried = Object.fromEntries(EXPLAIN_CARRIES.filter((k) => b[k] !== undefined).map((k) => [k, b[k]]));
  const explain = await api.post<ExplainAnswer>("/api/v1/authorization/check/explain", { ...question, ...carried });
  return { ...base, got, holds: false, explain };
}

async function answer(api: Api, a: Assertion): Promise<boolean> {
  const { resourceId, userId, ...rest } = a.body;
  if (a.kind === "check") return (await api.post<{ allowed?: boolean }>("/api/v1/authorization/check", a.body)).allowed === true;
  let pageToken = "";
  do {
    if (a.kind === "lookup") {
      const page = await api.post<{ allInstances?: boolean; resourceIds?: string[]; nextPageToken?: string }>("/api/v1/authorization/lookup", {
        ...rest,
        userId,
        pageSize: PAGE,
        pageToken,
      });
      if (page.allInstances === true || (page.resourceIds ?? []).includes(resourceId as string)) return true;
      pageToken = page.nextPageToken ?? "";
    } else {
      const page = await api.post<{ userIds?: string[]; nextPageToken?: string; allUsers?: boolean }>("/api/v1/authorization/subjects", {
        ...rest,
        resourceId,
        pageSize: PAGE,
        pageToken,
      });
      // An allUsers grant lets every user, listed or not (as allInstances does for lookup).
      if (page.allUsers === true || (page.userIds ?? []).includes(userId as string)) return true;
      pageToken = page.nextPageToken ?? "";
    }
  } while (pageToken !== "");
  return false;
}

const asked = (o: Outcome) => {
  const q = o.question;
  const tenant = q.tenantId === undefined ? "" : ` (tenant ${q.tenantId})`;
  if (o.kind === "lookup") return `lookup ${q.userId} ${q.resource} ${q.action} lists ${q.resourceId}${tenant}`;
  if (o.kind === "whoCan") return `who-can ${q.resource}:${q.resourceId} ${q.action} lists ${q.userId}${tenant}`;
  return `check ${q.userId} ${q.resource}:${q.resourceId} ${q.action}${tenant}`;
};

function renderText(file: string, fixture: Fixture, outcomes: Outcome[], ms: number): string {
  const lines = [`model test ${file}: ${count(fixture.grants.length, "grant")}, ${count(fixture.assignments.length, "assignment")}, ${count(outcomes.length, "assertion")}`];
  for (const o of outcomes.filter((x) => !x.holds)) {
    const where = `assertions[${o.index}]${o.line === undefined ? "" : ` (line ${o.line})`}${o.name === undefined ? "" : ` "${o.name}"`}`;
    lines.push(`FAIL ${where}: ${asked(o)}: expected ${o.expect}, got ${o.got === "error" ? "an error" : o.got}`);
    if (o.error !== undefined) lines.push(`    ${o.error}`);
    if (o.explain !== undefined) lines.push(...explainLines(o.question, o.explain).map((l) => `    ${l}`));
  }
  const failed = outcomes.filter((o) => !o.holds).length;
  lines.push(failed === 0 ? `ok: all ${outcomes.length} assertions hold (${ms} ms)` : `${failed} of ${outcomes.length} assertions failed (${ms} ms)`);
  return `${lines.join("\n")}\n`;
}

function report(file: string, fixture: Fixture, outcomes: Outcome[], ms: number) {
  const failed = outcomes.filter((o) => !o.holds).length;
  return { file, grants: fixture.grants.length, assignments: fixture.assignments.length, assertions: outcomes.length, passed: outcomes.length - failed, failed, ms, results: outcomes };
}
