/**
 * Every scenario file, on each engine, asked over REST (single and batch)
 * and over gRPC (single and batch): each check gets its expected answer and
 * each invalid check a 400 / INVALID_ARGUMENT naming the field.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { grpcCaller, type GrpcCaller } from "./support/grpc-client.js";
import { applyScenario, checkOf, loadScenarios } from "./support/scenario.js";
import { startTestService, type TestService } from "./support/service.js";

const scenarios = loadScenarios();

describe.each(engines)("scenarios on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let grpc: GrpcCaller;
  const keys = new Map<string, string>();

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    grpc = grpcCaller(service.url);
    for (const [i, { file, scenario }] of scenarios.entries()) {
      keys.set(file, await applyScenario(service.call, `scenario-${i}`, scenario));
    }
  });
  afterAll(async () => {
    grpc?.close();
    await service?.close();
    await database?.dispose();
  });

  describe.each(scenarios)("$file", ({ file, scenario }) => {
    const cases = scenario.checks.map((c) => ({ ...c, label: `${c.userId} ${c.action} ${c.resource}:${c.resourceId}${c.tenantId ? ` @${c.tenantId}` : ""}` }));

    it.each(cases)("REST: $label → $allowed", async (c) => {
      const answer = await service.call("POST", "/api/v1/authorization/check", { key: keys.get(file)!, body: checkOf(c) });
      expect(answer.status).toBe(200);
      expect(answer.body).toEqual({ allowed: c.allowed });
    });

    it("REST batch: every answer in request order", async () => {
      const answer = await service.call("POST", "/api/v1/authorization/check/batch", {
        key: keys.get(file)!,
        body: { checks: scenario.checks.map(checkOf) },
      });
      expect(answer.status).toBe(200);
      expect(answer.body.results).toEqual(scenario.checks.map((c) => ({ allowed: c.allowed })));
    });

    it("gRPC: every check, single and batch", async () => {
      const key = keys.get(file)!;
      const singles = await Promise.all(scenario.checks.map((c) => grpc.call("CheckService", "Check", checkOf(c), key)));
      expect(singles.map((s) => s.allowed)).toEqual(scenario.checks.map((c) => c.allowed));
      const batch = await grpc.call("CheckService", "BatchCheck", { checks: scenario.checks.map(checkOf) }, key);
      expect(batch.results.map((r: { allowed: boolean }) => r.allowed)).toEqual(scenario.checks.map((c) => c.allowed));
    });

    it("explain, permissions and lookup agree with every expected answer (REST and gRPC)", async () => {
      const key = keys.get(file)!;
      for (const c of scenario.checks) {
        const q = checkOf(c);
        const label = `${JSON.stringify(q)}${c.why ? ` (${c.why})` : ""}`;
        const explained = await service.call("POST", "/api/v1/authorization/check/explain", { key, body: q });
        expect(explained.status, label).toBe(200);
        expect(explained.body.allowed, label).toBe(c.allowed);
        expect(explained.body.reasons.length > 0, label).toBe(c.allowed);
        const viaGrpc = await grpc.call("CheckService", "Explain", q, key);
        expect(viaGrpc.allowed, label).toBe(c.allowed);

        const { action, ...instance } = q;
        const permissions = await service.call("POST", "/api/v1/authorization/permissions", { key, body: instance });
        expect(permissions.status, label).toBe(200);
        expect(permissions.body.actions.includes(action), label).toBe(c.allowed);

        const { resourceId, ...which } = q;
        const lookup = await grpc.call("CheckService", "Lookup", { ...which, pageSize: 1000 }, key);
        expect(lookup.allInstances || lookup.resourceIds.includes(resourceId), label).toBe(c.allowed);
      }
    });

    it.runIf(scenario.invalid.length > 0)("invalid checks are refused, naming the field", async () => {
      for (const { check, field } of scenario.invalid) {
        const answer = await service.call("POST", "/api/v1/authorization/check", { key: keys.get(file)!, body: check });
        expect(answer.status, JSON.stringify(check)).toBe(400);
        expect(answer.body.code).toBe("invalid_argument");
        expect(answer.body.message).toContain(field);
        await expect(grpc.call("CheckService", "Check", check, keys.get(file)!)).rejects.toMatchObject({ code: 3 });
      }
    });
  });
});
