/**
 * `npm run bench`: starts the service as its own process (on the Postgres of
 * DATABASE_URL, in a fresh database there; else on embedded PGlite in a fresh
 * data folder), loads the data set through the public API, drives it from a
 * separate load-generator process, and measures the same way a bare Fastify
 * route (the ceiling). Prints a table and writes the figures as JSON
 * (`--help` prints the options; docs/performance.md describes the groups).
 *
 * The grant steps come first: at each, the bench application's grants are
 * loaded up to the step's count and the REST checks measured (with the
 * ceiling right before and after them at the last step). Then, at the last
 * step's data, each group of GROUPS that `--only` selects (all by default),
 * in order: each a function in bench/groups/, on the service this run
 * started; last, the groups that stop it and start others on its data
 * (PGlite's data folder takes one process). What the groups share (the
 * options, the processes, the meters, the load generator's runs, the
 * report) is in bench/harness/.
 *
 * It reports the service's peak RSS over the whole run (the kernel's
 * high-water mark, which covers the start and the loading too), with the
 * peak and the resident size read at each phase's end, and Node's own split
 * (heap, external) from the service's /metrics at the end.
 */
import * as data from "./dataset.js";
import { batch } from "./groups/batch.js";
import { bulk } from "./groups/bulk.js";
import { ceiling } from "./groups/ceiling.js";
import { changesDelay, changesRestarted } from "./groups/changes.js";
import { compare } from "./groups/compare.js";
import { conditions } from "./groups/conditions.js";
import { external } from "./groups/external.js";
import { grpc } from "./groups/grpc.js";
import { hierarchy } from "./groups/hierarchy.js";
import { exclusion } from "./groups/exclusion.js";
import { isolation } from "./groups/isolation.js";
import { list } from "./groups/list.js";
import { models } from "./groups/models.js";
import { questions } from "./groups/questions.js";
import { replicas } from "./groups/replicas.js";
import { restChecks } from "./groups/rest.js";
import { telemetry } from "./groups/telemetry.js";
import { upkeep } from "./groups/upkeep.js";
import { loadBase, loadGrants } from "./harness/api.js";
import { mark, startBench, stopBench, type Bench } from "./harness/bench.js";
import { BENCH_APP, COMPARE, COMPARE_TREE, GRANT_STEPS, HELP, ONLY, REPLICAS, USAGE } from "./harness/options.js";
import { say } from "./harness/output.js";
import { report } from "./harness/report.js";

interface Group {
  /** Its name in --only. */
  name: string;
  /** On the service this run started, at the last step's data. */
  run?: (b: Bench) => Promise<void>;
  /** After every group's run: stops that service and starts others on its data. */
  restarted?: (b: Bench) => Promise<void>;
  /** Whether the run measures it (default: --only names it). */
  selected?: () => boolean;
}

const GROUPS: readonly Group[] = [
  { name: "grpc", run: grpc },
  { name: "external", run: external },
  { name: "batch", run: batch },
  { name: "list", run: list },
  { name: "hierarchy", run: hierarchy },
  { name: "exclusion", run: exclusion },
  { name: "models", run: models },
  { name: "changes", run: changesDelay, restarted: changesRestarted },
  { name: "isolation", run: isolation },
  { name: "conditions", run: conditions },
  { name: "questions", run: questions },
  { name: "upkeep", run: upkeep },
  { name: "bulk", run: bulk },
  { name: "telemetry", restarted: telemetry },
  // The compare group drives the bench application's checks: not when no group loaded it (--only models, changes).
  { name: "compare", restarted: compare, selected: () => (COMPARE !== undefined || COMPARE_TREE !== undefined) && BENCH_APP },
];

const selected = (g: Group) => (g.selected === undefined ? ONLY.has(g.name) : g.selected());

/** Loads the bench application's grants up to `grants` (when a group selected measures it). */
async function loadStep(b: Bench, grants: number): Promise<void> {
  if (!BENCH_APP) return;
  const t = Date.now();
  await loadGrants(b.url, b.key, b.grants, grants);
  say(`loaded ${grants} grants in ${((Date.now() - t) / 1000).toFixed(1)} s`);
  mark(b, `loaded ${grants} grants`);
}

async function main(): Promise<void> {
  const b = await startBench();
  try {
    const t0 = Date.now();
    // No group measures the bench application: no key is needed (the ceiling ignores it).
    if (BENCH_APP) {
      b.key = await loadBase(b.url);
      say(`loaded catalog, 200 policies, 50 roles, ${data.USERS} users in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      mark(b, "loaded the catalog, roles and users");
    }
    for (const [step, grants] of GRANT_STEPS.entries()) {
      await loadStep(b, grants);
      b.grants = grants;
      const last = step === GRANT_STEPS.length - 1;
      if (last) await ceiling(b, "before");
      if (ONLY.has("rest")) {
        await restChecks(b, grants, last);
        if (last) await ceiling(b, "after");
        mark(b, `REST checks at ${grants} grants`);
      }
    }
    for (const g of GROUPS) if (g.run !== undefined && selected(g)) await g.run(b);
    for (const g of GROUPS) if (g.restarted !== undefined && selected(g)) await g.restarted(b);
  } finally {
    // The service ended on its own (a crash): its last words go with the report.
    const died = !b.stoppedOnPurpose && (b.service.exitCode !== null || b.service.signalCode !== null);
    await stopBench(b);
    report(b);
    if (died) say(`the service exited early (${b.service.exitCode ?? b.service.signalCode}):\n${b.serviceLog.slice(-2000)}`);
    else if (b.serviceLog.includes('"level":50')) say(`the service logged errors:\n${b.serviceLog.slice(-2000)}`);
  }
}

if (HELP) process.stdout.write(`${USAGE}\n`);
else if (REPLICAS > 0) await replicas();
else await main();
// Without a code: a group that failed (hierarchy's pages, changes' deliveries) set process.exitCode.
process.exit();
