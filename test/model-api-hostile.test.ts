/**
 * Deeply nested JSON bodies to the model's routes (plan and apply), over
 * REST and Connect JSON: a 400 `invalid_argument` with a short message
 * (over REST naming the top-level field that is too deep), never a 5xx, and
 * the model unchanged.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";
import { createApp } from "./helpers/authz.js";

const APP = "model-deep";
const nested = (depth: number, inner = "") => `${"[".repeat(depth)}${inner}${"]".repeat(depth)}`;
const deepObject = (depth: number) => `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`;

/** Bodies nested past 64 levels in each place a model document nests. */
const BODIES: [string, (depth: number) => string][] = [
  ["catalog", (d) => `{"catalog": ${nested(d)}}`],
  ["catalog[0].relations[0].inherits", (d) => `{"catalog": [{"resource": "doc", "actions": [], "relations": [{"name": "r", "actions": [], "inherits": ${nested(d)}}]}]}`],
  ["policies[0].permissions", (d) => `{"catalog": [], "policies": [{"name": "p", "permissions": ${nested(d, '"x"')}}]}`],
  ["an unknown key", (d) => `{"catalog": [], "surprise": ${deepObject(d)}}`],
];

describe("deep JSON bodies to the model routes", () => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;

  beforeAll(async () => {
    database = await createTestDatabase("pglite");
    service = await startTestService(database.db);
    key = await createApp(service, APP, []);
  }, 60_000);
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  const routes = [
    ["plan", "POST", `/api/v1/applications/${APP}/model/plan`],
    ["apply", "PUT", `/api/v1/applications/${APP}/model`],
  ] as const;

  for (const [name, method, path] of routes) {
    it.each(BODIES.flatMap(([where, body]) => [65, 5_000, 100_000].map((depth) => [where, depth, body(depth)] as const)))(
      `REST ${name}: %s nested %i deep → 400`,
      async (where, _depth, rawBody) => {
        const res = await service.call(method, path, { key, rawBody });
        expect(res.status, JSON.stringify(res.body).slice(0, 300)).toBe(400);
        expect(res.body.code).toBe("invalid_argument");
        expect(res.body.message).toContain("nested deeper than 64 levels");
        // The top-level field that is too deep, named as a field.
        const field = where === "an unknown key" ? "surprise" : where.split(/[.[]/)[0]!;
        expect(res.body.message).toMatch(new RegExp(`^${field}: is nested deeper than 64 levels`));
        expect(res.body.details).toEqual([{ field, reason: "is nested deeper than 64 levels" }]);
        expect(res.body.message.length).toBeLessThan(300);
      },
    );
  }

  it.each([
    ["PlanModel", "authz.v1.ModelService/PlanModel"],
    ["ApplyModel", "authz.v1.ModelService/ApplyModel"],
  ])("Connect JSON %s: catalog nested 10,000 deep → invalid_argument with a short message", async (_name, procedure) => {
    const res = await fetch(`${service.url}/${procedure}`, {
      method: "POST",
      headers: { "content-type": "application/json", "connect-protocol-version": "1", "x-api-key": key },
      body: `{"appId": "${APP}", "catalog": ${nested(10_000)}}`,
    });
    expect(res.status).toBe(400);
    const answer = (await res.json()) as { code: string; message: string };
    expect(answer.code).toBe("invalid_argument");
    expect(answer.message.length).toBeLessThan(300);
  });

  it("leaves the model as it was", async () => {
    const res = await service.call("GET", `/api/v1/applications/${APP}/model`, { key });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ catalog: [], policies: [], roles: [] });
  });
});
