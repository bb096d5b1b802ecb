/**
 * Issue 38's attacks on conditions, measured (docs/conditions.md, "What one
 * may cost"): one application ("attacker") asks checks through conditions
 * built to be dear, CONCURRENCY at a time, while another ("victim") asks
 * plain checks one after another; the victim's latencies (p50, p99, max)
 * are printed per attack, on each engine. The service runs in this process,
 * as the tests start it, over a real port.
 *
 *   node --import tsx bench/condition-attacks.ts [--seconds 5] [--engines pglite,postgres]
 */
import { createTestDatabase, type EngineName } from "../test/support/engines.js";
import { startTestService, type TestService } from "../test/support/service.js";

const arg = (name: string, fallback: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? fallback : process.argv[i + 1]!;
};
const SECONDS = Number(arg("seconds", "5"));
const ENGINES = arg("engines", "pglite,postgres").split(",") as EngineName[];
const CONCURRENCY = 8;

const CATALOG = [{ resource: "doc", description: "", actions: ["read"], relations: [{ name: "viewer", actions: ["read"] }] }];
const list = Array.from({ length: 30_000 }, (_, i) => i % 7);

/** Each attack: a condition on the attacker's grant, and the context each question carries (a batch of `batch`). */
const ATTACKS: { name: string; condition: string; context: object; batch?: number }[] = [
  { name: "replace by the context's string (2,500 chars)", condition: 'context.s.replace("a", context.s) == "x"', context: { s: "a".repeat(2_500) } },
  { name: "strongest constant accepted (replace chain)", condition: `'${"a".repeat(30)}'.replace('a','${"a".repeat(30)}').replace('a','${"a".repeat(30)}') == ''`, context: {} },
  { name: "exists over 30,000 comparing lists", condition: "context.l.exists(x, context.l == context.l)", context: { l: list } },
  { name: "join with a long separator", condition: "context.ss.join(context.s) == ''", context: { ss: Array(3_000).fill("a"), s: "b".repeat(3_000) } },
  { name: "matches '^(a+)+$' on 'aaaa…b' (60,000)", condition: "context.s.matches('^(a+)+$')", context: { s: "a".repeat(60_000) + "b" } },
  { name: "60,000-char path replace, 40 a batch", condition: 'context.path.replace(".", "/") == "docs/2024"', context: { path: "a.".repeat(30_000) }, batch: 40 },
];

async function app(service: TestService, appId: string): Promise<string> {
  await service.call("POST", "/api/v1/applications", { body: { appId } });
  const key = (await service.call("POST", `/api/v1/applications/${appId}/api-keys`, { body: { name: "bench" } })).body.key as string;
  const catalog = await service.call("PUT", `/api/v1/applications/${appId}/resources`, { body: { resources: CATALOG } });
  if (catalog.status >= 300) throw new Error(`catalog: ${JSON.stringify(catalog.body)}`);
  return key;
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))]!;

async function measure(engine: EngineName): Promise<void> {
  const database = await createTestDatabase(engine);
  const service = await startTestService(database.db);
  try {
    const victim = await app(service, "victim");
    const attacker = await app(service, "attacker");
    await service.call("POST", "/api/v1/authorization/relationships", { key: victim, body: { userId: "vic", resource: "doc", resourceId: "d1", relation: "viewer" } });
    for (const [i, attack] of [{ name: "none (baseline)", condition: "", context: {} }, ...ATTACKS].entries()) {
      if (attack.condition !== "") {
        const written = await service.call("POST", "/api/v1/authorization/relationships", {
          key: attacker,
          body: { userId: "eve", resource: "doc", resourceId: `a${i}`, relation: "viewer", condition: attack.condition },
        });
        if (written.status !== 201) throw new Error(`${attack.name}: ${JSON.stringify(written.body)}`);
      }
      const q = { userId: "eve", resource: "doc", resourceId: `a${i}`, action: "read", context: attack.context };
      const end = Date.now() + SECONDS * 1000;
      let attacks = 0;
      let slowest = 0;
      const attackers = attack.condition === "" ? [] : Array.from({ length: CONCURRENCY }, async () => {
        while (Date.now() < end) {
          const started = performance.now();
          if (attack.batch === undefined) await service.call("POST", "/api/v1/authorization/check", { key: attacker, body: q });
          else await service.call("POST", "/api/v1/authorization/check/batch", { key: attacker, body: { checks: Array(attack.batch).fill(q) } });
          slowest = Math.max(slowest, performance.now() - started);
          attacks += 1;
        }
      });
      const latencies: number[] = [];
      while (Date.now() < end) {
        const started = performance.now();
        const answer = await service.call("POST", "/api/v1/authorization/check", { key: victim, body: { userId: "vic", resource: "doc", resourceId: "d1", action: "read" } });
        latencies.push(performance.now() - started);
        if (answer.body.allowed !== true) throw new Error(`victim's check: ${JSON.stringify(answer.body)}`);
      }
      await Promise.all(attackers);
      latencies.sort((a, b) => a - b);
      console.log(
        `${engine.padEnd(8)} ${attack.name.padEnd(48)} victim checks ${String(latencies.length).padStart(6)}  p50 ${percentile(latencies, 50).toFixed(1)} ms  p99 ${percentile(latencies, 99).toFixed(1)} ms  max ${latencies[latencies.length - 1]!.toFixed(1)} ms | attacker requests ${attacks}, slowest ${slowest.toFixed(0)} ms`,
      );
    }
  } finally {
    await service.close();
    await database.dispose();
  }
}

for (const engine of ENGINES) await measure(engine);
