/**
 * The models group ("models as files"; docs/performance.md, "Models as
 * files"): an application of its own, `bench-models` (its data set:
 * bench/models.ts), whose whole model is one document, planned and applied
 * through the public REST API while checks run against it, and `portcullis
 * model test` of a file of 200 assertions from a cold start.
 */
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { LoadResult } from "../load.js";
import {
  flippingChecks,
  grantBatches,
  MODEL_CHANGE,
  MODEL_USERS,
  modelA,
  modelB,
  modelChecks,
  MODELS_APP_ID,
  modelTestFile,
  modelUser,
  rolesOfUser,
  TEST_ASSERTIONS,
  type CheckBody,
  type ModelDocument,
} from "../models.js";
import { ADMIN_KEY, api } from "../harness/api.js";
import { mark, type Bench } from "../harness/bench.js";
import { loadOnce } from "../harness/drive.js";
import { cpuMicros, eventLoopDelay } from "../harness/meters.js";
import { MODEL_CONNECTIONS, MODEL_CYCLES, MODEL_GRANTS, MODEL_TEST_RUNS, SECONDS } from "../harness/options.js";
import { progress, say } from "../harness/output.js";
import { ROOT } from "../harness/processes.js";

export async function models(b: Bench): Promise<void> {
  const figures = await measureModels({
    url: b.url,
    adminKey: ADMIN_KEY,
    api: (method, path, body, k) => api(b.url, method, path, body, k),
    load: (bodies, k, seconds, connections) =>
      loadOnce({ kind: "rest", url: b.url, method: "POST", path: "/api/v1/authorization/check", key: k, bodies }, seconds, connections, b.service.pid),
    progress,
    say,
    cpu: () => ({ service: cpuMicros(b.service.pid), postgres: b.postgresCpu?.postgres?.() }),
    eventLoopDelay: () => eventLoopDelay(b.url),
    root: ROOT,
    tmp: b.tmp,
    seconds: SECONDS,
    grants: MODEL_GRANTS,
    connections: MODEL_CONNECTIONS,
    cycles: MODEL_CYCLES,
    testRuns: MODEL_TEST_RUNS,
  });
  mark(b, "models");
  b.sections.set("models", { figures: () => figures, lines: () => modelLines(figures, b.engine) });
}

/** A load run's result with the service's CPU per request (harness/drive.ts's Measured). */
export type Measured = LoadResult & { serverCpuUs: number | undefined };

export interface EventLoopDelay {
  p99Ms: number;
  maxMs: number;
}

/** What the group needs of the harness. */
export interface ModelsHarness {
  url: string;
  adminKey: string;
  api: (method: string, path: string, body: unknown, key: string) => Promise<any>;
  /** The load generator (bench/load.ts) on REST checks, `connections` in flight for `seconds`. */
  load: (bodies: unknown[], key: string, seconds: number, connections: number) => Promise<Measured>;
  progress: (text: string) => void;
  say: (text: string) => void;
  /** CPU µs used so far by the service's process and by the Postgres server (undefined where not measurable: PGlite, another machine). */
  cpu: () => { service: number | undefined; postgres: number | undefined };
  /**
   * The service's event-loop delay since the last call, p99 and longest, in
   * ms (its /metrics: prom-client resets the histogram at each read);
   * undefined when metrics are off. A check that arrives while the loop runs
   * a plan's or an apply's JavaScript waits for it.
   */
  eventLoopDelay: () => Promise<EventLoopDelay | undefined>;
  /** The repository (bin/portcullis.mjs is under it) and a temporary folder. */
  root: string;
  tmp: string;
  seconds: number;
  grants: number;
  connections: number;
  /** Plan and apply cycles while the checks run (each: two plans, then an apply), at least. */
  cycles: number;
  testRuns: number;
}

export interface PlanSummary {
  policies: { created: number; changed: number; removed: number };
  roles: { changed: number };
  /** Permissions in the impact, and the most users gaining or losing one. */
  permissions: number;
  gaining: number;
  losing: number;
}

export interface ModelFigures {
  grants: number;
  assignments: number;
  users: number;
  /** Seconds: the first apply (empty → A), the role assignments, the grants. */
  firstApplySeconds: number;
  assignSeconds: number;
  grantSeconds: number;
  /**
   * Plans and applies one at a time with no checks running (two cycles):
   * their times, and the CPU each took, in ms, of the service and of
   * Postgres (the whole server), mean per call.
   */
  quiet: {
    plans: number[];
    applies: number[];
    planCpu: { service: number | undefined; postgres: number | undefined };
    applyCpu: { service: number | undefined; postgres: number | undefined };
  };
  /** The service's event-loop delay while the checks ran alone, and while plans and applies ran beside them. */
  eventLoopAlone: EventLoopDelay | undefined;
  eventLoopDuring: EventLoopDelay | undefined;
  /** Of the measured plans (made while the checks ran), in ms, in order. */
  plans: number[];
  /** Plans of a catalog edit that reaches grants (withCatalogEdit), one a cycle while the checks ran: ms, and what the impact said of document:list. */
  catalogPlans: { ms: number; losing: number; atLeast: boolean }[];
  /** Of the measured applies, in ms, in order, and which way each went. */
  applies: { ms: number; to: "A" | "B" }[];
  planAtoB: PlanSummary;
  planBtoA: PlanSummary;
  /** REST checks of the application, alone and while the plans and applies ran. */
  checksAlone: Measured;
  checksDuring: Measured;
  /** How long the plans and applies went on, and how long the checks ran. */
  opsSeconds: number;
  checksSeconds: number;
  /** Checks in flight, and the length of the run of checks alone. */
  connections: number;
  seconds: number;
  /** Each `model test` run's wall time (ms), its exit code and its last line. */
  testRuns: { ms: number; code: number | null; summary: string }[];
  testAssertions: number;
  testExpectedAllowed: number;
}

/** The median of a list of times (the mean of the middle two for an even count). */
export const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

interface PlanAnswer {
  version: string;
  policies: { created?: string[]; changed?: string[]; removed?: string[] };
  roles: { created?: string[]; changed?: string[]; removed?: string[] };
  impact?: { permission: string; gaining?: number; losing?: number; atLeast?: boolean }[];
}

/**
 * The model `doc` with a catalog edit that changes what grants imply: the
 * document's viewer redefined to imply read only (the built-in implies
 * read and list), so every holder of a document's viewer loses
 * document:list there, through grants alone (docs/models.md, "Plan").
 */
const withCatalogEdit = (doc: ModelDocument) => ({
  ...doc,
  catalog: doc.catalog.map((e) => (e.resource === "document" ? { ...e, relations: [{ name: "viewer", actions: ["read"] }] } : e)),
});

function summary(plan: PlanAnswer): PlanSummary {
  const impact = plan.impact ?? [];
  return {
    policies: { created: plan.policies.created?.length ?? 0, changed: plan.policies.changed?.length ?? 0, removed: plan.policies.removed?.length ?? 0 },
    roles: { changed: plan.roles.changed?.length ?? 0 },
    permissions: impact.length,
    gaining: Math.max(0, ...impact.map((p) => p.gaining ?? 0)),
    losing: Math.max(0, ...impact.map((p) => p.losing ?? 0)),
  };
}

/**
 * - Model A applied to a new application, its users assigned their roles,
 *   its grants loaded (each timed);
 * - one plan and apply each way unmeasured (the statements' plans and the
 *   service's JIT warm), each answer verified: the plan names the changes B
 *   makes and users both gaining and losing, and a check flips with each
 *   apply;
 * - the REST check of the application alone, then again while plans and
 *   applies run back to back (each cycle: the next model planned twice,
 *   then applied with the plan's version as expectedVersion, A → B, B → A),
 *   the check run's length set from the warm cycle's so that the cycles
 *   cover it, and the cycles going on until the checks end;
 * - `portcullis model test` of a generated file of 200 assertions, as its
 *   own process (bin/portcullis.mjs, as npx runs it), a few times: every
 *   run must exit 0 (all hold).
 */
export async function measureModels(h: ModelsHarness): Promise<ModelFigures> {
  const base = `/api/v1/applications/${MODELS_APP_ID}`;
  const a = modelA();
  const b = modelB();
  const docs = { A: a, B: b } as const;

  await h.api("POST", "/api/v1/applications", { appId: MODELS_APP_ID }, h.adminKey);
  const { key } = (await h.api("POST", `${base}/api-keys`, { name: "bench" }, h.adminKey)) as { key: string };
  let t = performance.now();
  await h.api("PUT", `${base}/model`, a, key);
  const firstApplySeconds = (performance.now() - t) / 1000;

  const { roles } = (await h.api("GET", `${base}/roles?pageSize=1000`, undefined, key)) as { roles: { roleId: string; name: string }[] };
  const roleIds = new Map(roles.map((r) => [r.name, r.roleId]));
  const assignments = Array.from({ length: MODEL_USERS }, (_, u) => rolesOfUser(u).map((role) => ({ userId: modelUser(u), roleId: roleIds.get(role)! }))).flat();
  t = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < assignments.length) {
        const { userId, roleId } = assignments[next++]!;
        await h.api("POST", `${base}/roles/${roleId}/assignments`, { userId }, key);
        if (next % 500 === 0) h.progress(`loading: the models' role assignments ${next}/${assignments.length}`);
      }
    }),
  );
  const assignSeconds = (performance.now() - t) / 1000;
  h.say(`models: model A applied in ${firstApplySeconds.toFixed(1)} s, ${assignments.length.toLocaleString("en-US")} role assignments in ${assignSeconds.toFixed(1)} s`);

  t = performance.now();
  let loaded = 0;
  for (const writes of grantBatches(h.grants)) {
    await h.api("POST", "/api/v1/authorization/relationships/bulk", { writes }, key);
    loaded += writes.length;
    h.progress(`loading: the models' grants ${loaded.toLocaleString("en-US")}/${h.grants.toLocaleString("en-US")} (${((performance.now() - t) / 1000).toFixed(0)} s)`);
  }
  const grantSeconds = (performance.now() - t) / 1000;
  h.say(`models: ${h.grants.toLocaleString("en-US")} grants loaded in ${grantSeconds.toFixed(1)} s`);

  // One cycle each way, unmeasured but verified.
  let at: "A" | "B" = "A";
  const plan = async (to: "A" | "B") => {
    const t0 = performance.now();
    const answer = (await h.api("POST", `${base}/model/plan`, docs[to], key)) as PlanAnswer;
    return { ms: performance.now() - t0, answer };
  };
  const apply = async (to: "A" | "B", version: string) => {
    const t0 = performance.now();
    await h.api("PUT", `${base}/model`, { ...docs[to], expectedVersion: version }, key);
    const ms = performance.now() - t0;
    at = to;
    return ms;
  };
  const flip = flippingChecks();
  const allowed = async (body: CheckBody) => ((await h.api("POST", "/api/v1/authorization/check", body, key)) as { allowed?: boolean }).allowed === true;
  const expectFlip = async (model: "A" | "B") => {
    const lost = await allowed(flip.lostInB);
    const gained = await allowed(flip.gainedInB);
    if (lost !== (model === "A") || gained !== (model === "B")) throw new Error(`models: after applying ${model}, the checks that flip answered ${lost} / ${gained}`);
  };
  await expectFlip("A");
  const warmAtoB = await plan("B");
  const planAtoB = summary(warmAtoB.answer);
  const expected = MODEL_CHANGE;
  if (planAtoB.policies.created !== 1 || planAtoB.policies.removed !== 1 || planAtoB.policies.changed < expected.policiesChanged || planAtoB.roles.changed < expected.rolesChanged) {
    throw new Error(`models: the plan A → B does not name the change B makes: ${JSON.stringify(planAtoB)}`);
  }
  if (planAtoB.gaining === 0 || planAtoB.losing === 0) throw new Error(`models: the plan A → B moves no user both ways: ${JSON.stringify(planAtoB)}`);
  const warmApplyB = await apply("B", warmAtoB.answer.version);
  await expectFlip("B");
  const warmBtoA = await plan("A");
  const planBtoA = summary(warmBtoA.answer);
  const warmApplyA = await apply("A", warmBtoA.answer.version);
  await expectFlip("A");
  h.say(`models: warm cycle: plan ${warmAtoB.ms.toFixed(0)} / ${warmBtoA.ms.toFixed(0)} ms, apply ${warmApplyB.toFixed(0)} / ${warmApplyA.toFixed(0)} ms`);

  // Two cycles with nothing else running: each call's time and the CPU it
  // took, of the service (its event loop: what checks would wait behind) and
  // of Postgres. /proc counts in 10 ms ticks, so the CPU is a mean over calls.
  const quiet = { plans: [] as number[], applies: [] as number[] };
  const spent = { plan: { service: 0, postgres: 0 }, apply: { service: 0, postgres: 0 } };
  const measurable = h.cpu();
  const charge = (to: { service: number; postgres: number }, before: ReturnType<ModelsHarness["cpu"]>) => {
    const after = h.cpu();
    to.service += (after.service ?? 0) - (before.service ?? 0);
    to.postgres += (after.postgres ?? 0) - (before.postgres ?? 0);
  };
  for (let cycle = 0; cycle < 2; cycle++) {
    const to = at === "A" ? "B" : "A";
    let version = "";
    for (let k = 0; k < 2; k++) {
      const before = h.cpu();
      const p = await plan(to);
      charge(spent.plan, before);
      quiet.plans.push(p.ms);
      version = p.answer.version;
    }
    const before = h.cpu();
    quiet.applies.push(await apply(to, version));
    charge(spent.apply, before);
    h.progress(`running: models: plans and applies alone (${cycle + 1}/2)`);
  }
  const perCall = (total: number, calls: number, known: number | undefined) => (known === undefined ? undefined : total / calls / 1000);
  const quietFigures = {
    ...quiet,
    planCpu: { service: perCall(spent.plan.service, quiet.plans.length, measurable.service), postgres: perCall(spent.plan.postgres, quiet.plans.length, measurable.postgres) },
    applyCpu: { service: perCall(spent.apply.service, quiet.applies.length, measurable.service), postgres: perCall(spent.apply.postgres, quiet.applies.length, measurable.postgres) },
  };
  // Two plans and an apply, as the cycles below make them.
  const cycleMs = median(quiet.plans) * 2 + median(quiet.applies);

  const bodies = modelChecks(h.grants, 1000);
  h.progress(`running: models: REST check alone (warm-up)`);
  await h.load(bodies, key, Math.min(3, h.seconds), h.connections);

  h.progress(`running: models: REST check alone (${h.seconds} s, ${h.connections} in flight)`);
  await h.eventLoopDelay();
  const checksAlone = await h.load(bodies, key, h.seconds, h.connections);
  const eventLoopAlone = await h.eventLoopDelay();

  // The checks run at least as long as the cycles should take (estimated from the
  // warm one, with a margin for the load's share of the machine), and the cycles
  // go on until the checks end, so no check of the run is without a plan or apply beside it.
  const checksSeconds = Math.max(h.seconds, Math.ceil((h.cycles * cycleMs * 1.5) / 1000));
  h.progress(`running: models: REST check while plans and applies run (${checksSeconds} s, ${h.connections} in flight)`);
  let checksDone = false;
  const during = h.load(bodies, key, checksSeconds, h.connections).finally(() => {
    checksDone = true;
  });
  // Give the load generator's process its start before the first plan.
  await new Promise((resolve) => setTimeout(resolve, 300));
  const plans: number[] = [];
  const applies: { ms: number; to: "A" | "B" }[] = [];
  const tOps = performance.now();
  const catalogPlans: ModelFigures["catalogPlans"] = [];
  for (let cycle = 0; cycle < h.cycles || !checksDone; cycle++) {
    const to = at === "A" ? "B" : "A";
    const t0 = performance.now();
    const edited = (await h.api("POST", `${base}/model/plan`, withCatalogEdit(docs[at]), key)) as PlanAnswer;
    const list = edited.impact?.find((i) => i.permission === "document:list");
    catalogPlans.push({ ms: performance.now() - t0, losing: list?.losing ?? 0, atLeast: list?.atLeast === true });
    plans.push((await plan(to)).ms);
    const second = await plan(to);
    plans.push(second.ms);
    applies.push({ ms: await apply(to, second.answer.version), to });
    h.progress(`running: models: plans and applies while checks run (${applies.length} applies)`);
  }
  const opsSeconds = (performance.now() - tOps) / 1000;
  const checksDuring = await during;
  const eventLoopDuring = await h.eventLoopDelay();
  await expectFlip(at);

  // model test: a file of 200 assertions, each run its own process from a cold start.
  const testFile = modelTestFile();
  const file = join(h.tmp, "models.test.json");
  writeFileSync(file, JSON.stringify(testFile));
  const testRuns: ModelFigures["testRuns"] = [];
  for (let k = 0; k < h.testRuns; k++) {
    h.progress(`running: models: portcullis model test, ${TEST_ASSERTIONS} assertions (${k + 1}/${h.testRuns})`);
    testRuns.push(await modelTest(join(h.root, "bin", "portcullis.mjs"), file, h.root));
  }

  return {
    grants: h.grants,
    assignments: assignments.length,
    users: MODEL_USERS,
    firstApplySeconds,
    assignSeconds,
    grantSeconds,
    plans,
    catalogPlans,
    applies,
    planAtoB,
    planBtoA,
    quiet: quietFigures,
    eventLoopAlone,
    eventLoopDuring,
    checksAlone,
    checksDuring,
    opsSeconds,
    checksSeconds,
    connections: h.connections,
    seconds: h.seconds,
    testRuns,
    testAssertions: TEST_ASSERTIONS,
    testExpectedAllowed: testFile.assertions.filter((x) => x.expect === "allowed").length,
  };
}

/** `node bin/portcullis.mjs model test FILE` as a user runs it: wall time from spawn to exit. */
async function modelTest(bin: string, file: string, cwd: string): Promise<{ ms: number; code: number | null; summary: string }> {
  const t = performance.now();
  const child = spawn(process.execPath, [bin, "model", "test", file], { cwd, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.on("data", (c: Buffer) => (out += c.toString()));
  child.stderr.on("data", (c: Buffer) => (out += c.toString()));
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  const ms = performance.now() - t;
  const lines = out.trim().split("\n");
  return { ms, code, summary: code === 0 ? lines[lines.length - 1]! : out.slice(-1500) };
}

/** The group's report: the figures, then the issue's targets, each met or not. */
export function modelLines(m: ModelFigures, engine: string): string[] {
  const ms = (x: number) => x.toFixed(0);
  const p = (x: number) => x.toFixed(2);
  const met = (ok: boolean) => (ok ? "met" : "**not met**");
  const cpuMs = (x: number | undefined) => (x === undefined ? "n/a" : `${x.toFixed(1)} ms`);
  const delay = (d: EventLoopDelay | undefined) => (d === undefined ? "n/a" : `${d.p99Ms.toFixed(1)} / ${d.maxMs.toFixed(1)} ms`);
  const plansSorted = [...m.plans].sort((x, y) => x - y);
  const planP50 = median(m.plans);
  const planMax = plansSorted[plansSorted.length - 1]!;
  const applyMs = m.applies.map((x) => x.ms);
  const applyMax = Math.max(...applyMs);
  const testMax = Math.max(...m.testRuns.map((r) => r.ms));
  const testsHeld = m.testRuns.every((r) => r.code === 0);
  const change = (s: PlanSummary) =>
    `policies ${s.policies.created} created, ${s.policies.changed} changed, ${s.policies.removed} removed; ${s.roles.changed} roles changed; ${s.permissions} permissions moved, up to ${s.gaining.toLocaleString("en-US")} users gaining and ${s.losing.toLocaleString("en-US")} losing one`;
  const checks = (name: string, r: Measured) =>
    `| REST check of the application, ${name} | ${Math.round(r.rps).toLocaleString("en-US")} req/s${r.errors > 0 ? ` (${r.errors} failed)` : ""} | ${p(r.p50)} | ${p(r.p99)} |`;
  return [
    "",
    `| models as files (${engine}): ${m.grants.toLocaleString("en-US")} grants, ${m.users.toLocaleString("en-US")} users, 20 resources, 200 policies, 50 roles | figure | p50 ms | p99 ms |`,
    "|---|---:|---:|---:|",
    `| loading: model A applied to an empty application | ${m.firstApplySeconds.toFixed(1)} s | | |`,
    `| loading: ${m.assignments.toLocaleString("en-US")} role assignments, 32 calls in flight | ${m.assignSeconds.toFixed(1)} s | | |`,
    `| loading: ${m.grants.toLocaleString("en-US")} grants, bulk writes of 5,000 one at a time | ${m.grantSeconds.toFixed(1)} s (${Math.round(m.grants / m.grantSeconds).toLocaleString("en-US")} grants/s) | | |`,
    `| plan A → B: ${change(m.planAtoB)} | | | |`,
    `| plan B → A: ${change(m.planBtoA)} | | | |`,
    `| plans while the checks ran (${m.plans.length}): ${m.plans.map(ms).join(", ")} ms | max ${ms(planMax)} ms | ${ms(planP50)} | |`,
    `| plans of a catalog edit reaching grants while the checks ran (${m.catalogPlans.length}; document.viewer implies read only: document:list lost by at least ${Math.min(...m.catalogPlans.map((c) => c.losing))} users, atLeast ${m.catalogPlans.every((c) => c.atLeast)}): ${m.catalogPlans.map((c) => ms(c.ms)).join(", ")} ms | max ${ms(Math.max(...m.catalogPlans.map((c) => c.ms)))} ms | ${ms(median(m.catalogPlans.map((c) => c.ms)))} | |`,
    `| applies while the checks ran (${m.applies.length}, alternated): ${m.applies.map((x) => `→${x.to} ${ms(x.ms)}`).join(", ")} ms | max ${ms(applyMax)} ms | ${ms(median(applyMs))} | |`,
    `| plans alone, one at a time (${m.quiet.plans.length}): ${m.quiet.plans.map(ms).join(", ")} ms; CPU per plan: service ${cpuMs(m.quiet.planCpu.service)}, Postgres ${cpuMs(m.quiet.planCpu.postgres)} | max ${ms(Math.max(...m.quiet.plans))} ms | ${ms(median(m.quiet.plans))} | |`,
    `| applies alone, one at a time (${m.quiet.applies.length}): ${m.quiet.applies.map(ms).join(", ")} ms; CPU per apply: service ${cpuMs(m.quiet.applyCpu.service)}, Postgres ${cpuMs(m.quiet.applyCpu.postgres)} | max ${ms(Math.max(...m.quiet.applies))} ms | ${ms(median(m.quiet.applies))} | |`,
    checks(`alone, ${m.connections} in flight (${m.seconds} s; the service's event-loop delay p99 / max ${delay(m.eventLoopAlone)})`, m.checksAlone),
    checks(`${m.connections} in flight, while plans and applies ran back to back (${m.checksSeconds} s of checks, ${m.opsSeconds.toFixed(1)} s of plans and applies; event-loop delay p99 / max ${delay(m.eventLoopDuring)})`, m.checksDuring),
    `| portcullis model test, ${m.testAssertions} assertions (${m.testExpectedAllowed} expected allowed), cold start, ${m.testRuns.length} runs: ${m.testRuns.map((r) => `${ms(r.ms)} ms (exit ${r.code})`).join(", ")} | max ${ms(testMax)} ms | ${ms(median(m.testRuns.map((r) => r.ms)))} | |`,
    "",
    "| models as files: the targets | figure | target | |",
    "|---|---:|---|---|",
    `| plan, p50 of ${m.plans.length} (while checks ran) | ${ms(planP50)} ms | < 500 ms | ${met(planP50 < 500)} |`,
    `| plan of a catalog edit reaching grants, p50 of ${m.catalogPlans.length} (while checks ran) | ${ms(median(m.catalogPlans.map((c) => c.ms)))} ms | < 500 ms | ${met(median(m.catalogPlans.map((c) => c.ms)) < 500)} |`,
    `| apply, each of ${m.applies.length} (max; median ${ms(median(applyMs))} ms) | ${ms(applyMax)} ms | < 1 s | ${met(applyMax < 1000)} |`,
    `| checks' p99 while plans and applies ran (alone: ${p(m.checksAlone.p99)} ms) | ${p(m.checksDuring.p99)} ms | < 20 ms | ${met(m.checksDuring.p99 < 20 && m.checksDuring.errors === 0)} |`,
    `| portcullis model test, ${m.testAssertions} assertions, cold start (max of ${m.testRuns.length}) | ${ms(testMax)} ms | < 5 s | ${met(testMax < 5000)} |`,
    `| every model test run: all ${m.testAssertions} assertions hold (exit 0) | ${testsHeld ? "yes" : "NO"} | exit 0 | ${met(testsHeld)} |`,
    ...m.testRuns.filter((r) => r.code !== 0).map((r) => `| (a failed run's output) ${r.summary.replace(/\n/g, " ").replace(/\|/g, "/")} | | | |`),
  ];
}
