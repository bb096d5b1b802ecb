/**
 * The AuthZEN working group's Todo interop scenario, on each engine: the
 * model loaded by examples/authzen-todo/load.mjs (run as a process against
 * a real port, as a person would), then every decision of the working
 * group's vectors (test/data/authzen-todo, SOURCE.md there) asked over
 * REST with fetch and compared as its runner compares them: the JSON text
 * of the expected decision with that of the answer's `decision` (single),
 * or of its `evaluations` array (batches), so a batch item with any key
 * beyond `decision` fails.
 */
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, startTestService, type TestService } from "./support/service.js";

interface Vectors {
  evaluation: { request: object; expected: boolean }[];
  evaluations: { request: object; expected: { decision: boolean }[] }[];
}

const VECTORS = JSON.parse(readFileSync(new URL("./data/authzen-todo/decisions-1.1-preview.json", import.meta.url), "utf8")) as Vectors;
const LOADER = new URL("../examples/authzen-todo/load.mjs", import.meta.url).pathname;

describe.each(oneEngine(import.meta.url))("AuthZEN Todo interop, on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    const { stdout } = await promisify(execFile)(process.execPath, [LOADER, "--url", service.url, "--key", ADMIN_KEY, "--app", "todo"]);
    key = stdout.trim();
  }, 60_000);
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  /** As the interop runner posts: JSON, the key as a bearer token. */
  const post = async (path: string, request: object) => {
    const res = await fetch(`${service.url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify(request),
    });
    return { status: res.status, text: await res.text() };
  };

  it("the loader printed an application key with the check scope only", async () => {
    expect(key).toMatch(/^pcl_/);
    const res = await fetch(`${service.url}/api/v1/api-keys/current`, { headers: { "x-api-key": key } });
    expect(((await res.json()) as { scopes: string[] }).scopes).toEqual(["check"]);
  });

  it("holds 40 single and 3 batch vectors", () => {
    expect(VECTORS.evaluation).toHaveLength(40);
    expect(VECTORS.evaluations).toHaveLength(3);
  });

  it.each(VECTORS.evaluation.map((v, i) => [i, v] as const))("evaluation #%i answers as the vectors say", async (_, vector) => {
    const { status, text } = await post("/access/v1/evaluation", vector.request);
    expect(status, text).toBe(200);
    const data = JSON.parse(text) as { decision?: boolean };
    expect(JSON.stringify(data.decision || false), JSON.stringify(vector.request)).toBe(JSON.stringify(vector.expected));
    expect(text).toBe(JSON.stringify({ decision: vector.expected }));
  });

  it.each(VECTORS.evaluations.map((v, i) => [i, v] as const))("evaluations #%i answers each item exactly as the vectors say", async (_, vector) => {
    const { status, text } = await post("/access/v1/evaluations", vector.request);
    expect(status, text).toBe(200);
    const data = JSON.parse(text) as { evaluations: unknown };
    expect(JSON.stringify(data.evaluations)).toBe(JSON.stringify(vector.expected));
    expect(text).toBe(JSON.stringify({ evaluations: vector.expected }));
  });

  it("the decisions come out as the vectors count them (26 of 40 permitted; 3 of 6 batch items)", async () => {
    const singles = await Promise.all(VECTORS.evaluation.map((v) => post("/access/v1/evaluation", v.request)));
    expect(singles.filter((s) => JSON.parse(s.text).decision === true)).toHaveLength(26);
    const batches = await Promise.all(VECTORS.evaluations.map((v) => post("/access/v1/evaluations", v.request)));
    const items = batches.flatMap((b) => JSON.parse(b.text).evaluations as { decision: boolean }[]);
    expect(items.filter((d) => d.decision)).toHaveLength(3);
    expect(items).toHaveLength(6);
  });
});
