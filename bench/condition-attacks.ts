/**
 * The conditions group (docs/conditions.md, "What one may cost"): one application ("attacker") asks checks through conditions
 * built to be dear, ATTACK_CONCURRENCY at a time, while another ("victim")
 * asks plain checks one after another; the victim's latencies (p50, p99,
 * max) are measured per attack against VICTIM_P99_MS, with the attacker's
 * requests and its slowest. The service is the one bench/run.ts started as
 * its own process (PGlite, or DATABASE_URL's Postgres).
 *
 * What it needs of the harness comes in as a ConditionHarness, which
 * groups/conditions.ts fills in from the run's state. Against
 * a service already running (to profile it, say), it also runs alone:
 *
 *   node --import tsx bench/condition-attacks.ts --url http://127.0.0.1:8080 --admin-key KEY [--seconds 4] [--attacks exists,batch]
 */
import { fileURLToPath } from "node:url";

const ATTACKER = "bench-cond-attacker";
const VICTIM = "bench-cond-victim";
const ATTACK_CONCURRENCY = 8;
/** The target: another application's checks keep their p99 under this during any one attack. */
export const VICTIM_P99_MS = 250;

const CATALOG = { resources: [{ resource: "doc", description: "", actions: ["read"], relations: [{ name: "viewer", actions: ["read"] }] }] };
const LIST = Array.from({ length: 30_000 }, (_, i) => i % 7);

interface Attack {
  /** A short name, for --attacks. */
  id: string;
  name: string;
  condition: string;
  context: object;
  /** Questions a batch (none: single checks). */
  batch?: number;
}

/** Each attack: a condition on the attacker's grant, and the context each question carries. */
export const ATTACKS: Attack[] = [
  { id: "replace", name: "replace by the context's string (2,500 chars)", condition: 'context.s.replace("a", context.s) == "x"', context: { s: "a".repeat(2_500) } },
  {
    id: "constant",
    name: "strongest constant accepted (replace chain)",
    condition: `'${"a".repeat(30)}'.replace('a','${"a".repeat(30)}').replace('a','${"a".repeat(30)}') == ''`,
    context: {},
  },
  { id: "exists", name: "exists over 30,000 comparing lists", condition: "context.l.exists(x, context.l == context.l)", context: { l: LIST } },
  { id: "join", name: "join with a 3,000-char separator", condition: "context.ss.join(context.s) == ''", context: { ss: Array(3_000).fill("a"), s: "b".repeat(3_000) } },
  { id: "matches", name: "matches '^(a+)+$' on 60,000 a's and a b", condition: "context.s.matches('^(a+)+$')", context: { s: "a".repeat(60_000) + "b" } },
  {
    id: "batch",
    name: "60,000-char path replace, 40 a batch",
    condition: 'context.path.replace(".", "/") == "docs/2024"',
    context: { path: "a.".repeat(30_000) },
    batch: 40,
  },
];

export interface ConditionHarness {
  url: string;
  adminKey: string;
  api: (method: string, path: string, body: unknown, key: string) => Promise<any>;
  progress: (text: string) => void;
  seconds: number;
  /** Ids of the attacks to run (default all). */
  only?: readonly string[];
}

export interface AttackFigures {
  attack: string;
  victim: { checks: number; p50: number; p99: number; max: number };
  attacker: { requests: number; slowestMs: number; failures: number };
}

export type ConditionFigures = AttackFigures[];

async function createApp(h: ConditionHarness, appId: string): Promise<string> {
  await h.api("POST", "/api/v1/applications", { appId }, h.adminKey);
  await h.api("PUT", `/api/v1/applications/${appId}/resources`, CATALOG, h.adminKey);
  return (await h.api("POST", `/api/v1/applications/${appId}/api-keys`, { name: "bench" }, h.adminKey)).key as string;
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))] ?? 0;

/** One POST of a body serialized beforehand (the attacker's are large: stringified once, not per request). */
async function post(url: string, key: string, body: string): Promise<{ status: number; json: any }> {
  const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json", "x-api-key": key }, body });
  return { status: res.status, json: await res.json() };
}

/** Every attack in turn (after a baseline with none), each for `seconds`. */
export async function measureConditionAttacks(h: ConditionHarness): Promise<ConditionFigures> {
  const victim = await createApp(h, VICTIM);
  const attacker = await createApp(h, ATTACKER);
  await h.api("POST", "/api/v1/authorization/relationships", { userId: "vic", resource: "doc", resourceId: "d1", relation: "viewer" }, victim);
  const victimBody = JSON.stringify({ userId: "vic", resource: "doc", resourceId: "d1", action: "read" });
  const chosen = ATTACKS.filter((a) => h.only === undefined || h.only.includes(a.id));
  const figures: ConditionFigures = [];
  for (const [i, attack] of [{ id: "none", name: "none (baseline)", condition: "", context: {} } as Attack, ...chosen].entries()) {
    h.progress(`running: conditions: ${attack.name}`);
    if (attack.condition !== "") {
      const grant = { userId: "eve", resource: "doc", resourceId: `a${i}`, relation: "viewer", condition: attack.condition };
      await h.api("POST", "/api/v1/authorization/relationships", grant, attacker);
    }
    const q = { userId: "eve", resource: "doc", resourceId: `a${i}`, action: "read", context: attack.context };
    const [path, body] =
      attack.batch === undefined
        ? ["/api/v1/authorization/check", JSON.stringify(q)]
        : ["/api/v1/authorization/check/batch", JSON.stringify({ checks: Array(attack.batch).fill(q) })];
    const end = Date.now() + h.seconds * 1000;
    const attackerFigures = { requests: 0, slowestMs: 0, failures: 0 };
    const attackers =
      attack.condition === ""
        ? []
        : Array.from({ length: ATTACK_CONCURRENCY }, async () => {
            while (Date.now() < end) {
              const started = performance.now();
              const answer = await post(h.url + path, attacker, body);
              attackerFigures.slowestMs = Math.max(attackerFigures.slowestMs, performance.now() - started);
              attackerFigures.requests += 1;
              if (answer.status !== 200) attackerFigures.failures += 1;
            }
          });
    const latencies: number[] = [];
    while (Date.now() < end) {
      const started = performance.now();
      const answer = await post(`${h.url}/api/v1/authorization/check`, victim, victimBody);
      latencies.push(performance.now() - started);
      if (answer.json.allowed !== true) throw new Error(`the victim's check: ${answer.status} ${JSON.stringify(answer.json)}`);
    }
    await Promise.all(attackers);
    latencies.sort((a, b) => a - b);
    figures.push({
      attack: attack.name,
      victim: { checks: latencies.length, p50: percentile(latencies, 50), p99: percentile(latencies, 99), max: latencies[latencies.length - 1] ?? 0 },
      attacker: attackerFigures,
    });
  }
  return figures;
}

/** Whether every attack kept the victim's p99 under VICTIM_P99_MS and the attacker's requests were answered. */
export function conditionAttacksMet(figures: ConditionFigures): boolean {
  return figures.every((f) => f.victim.p99 < VICTIM_P99_MS && f.attacker.failures === 0);
}

/** The group's table, one line an attack. */
export function conditionAttackLines(figures: ConditionFigures): string[] {
  const ms = (x: number) => x.toFixed(1).padStart(7);
  return [
    "",
    `conditions: another application's plain checks, one at a time, while one attacks with ${ATTACK_CONCURRENCY} requests in flight; target p99 < ${VICTIM_P99_MS} ms`,
    `  ${"attack".padEnd(46)} ${"checks".padStart(7)} ${"p50 ms".padStart(7)} ${"p99 ms".padStart(7)} ${"max ms".padStart(7)}   attacker requests, slowest ms, failed`,
    ...figures.map(
      (f) =>
        `  ${f.attack.padEnd(46)} ${String(f.victim.checks).padStart(7)} ${ms(f.victim.p50)} ${ms(f.victim.p99)} ${ms(f.victim.max)}   ${f.attacker.requests}, ${f.attacker.slowestMs.toFixed(0)}, ${f.attacker.failures}${f.victim.p99 < VICTIM_P99_MS && f.attacker.failures === 0 ? "" : "  MISSED"}`,
    ),
  ];
}

async function standalone(): Promise<void> {
  const arg = (name: string, fallback?: string) => {
    const i = process.argv.indexOf(`--${name}`);
    const value = i === -1 ? fallback : process.argv[i + 1];
    if (value === undefined) throw new Error(`--${name} is required`);
    return value;
  };
  const url = arg("url");
  const api = async (method: string, path: string, body: unknown, key: string) => {
    const res = await fetch(url + path, { method, headers: { "content-type": "application/json", "x-api-key": key }, body: JSON.stringify(body) });
    const text = await res.text();
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text.slice(0, 300)}`);
    return text === "" ? undefined : JSON.parse(text);
  };
  const only = arg("attacks", "");
  const figures = await measureConditionAttacks({
    url,
    adminKey: arg("admin-key"),
    api,
    progress: () => {},
    seconds: Number(arg("seconds", "4")),
    ...(only === "" ? {} : { only: only.split(",") }),
  });
  process.stdout.write(`${conditionAttackLines(figures).join("\n")}\n`);
  if (!conditionAttacksMet(figures)) process.exitCode = 1;
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) await standalone();
