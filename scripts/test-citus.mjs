#!/usr/bin/env node
// `npm run test:citus`: the storage tests on a real Citus cluster, the Citus
// leg, which `npm test` runs beside its `together` room (scripts/test.mjs). Runs the store suite, the SQL rules, the model's API (a plan's impact, a plan racing a catalog write), the change feed (its storage, its API and
// the ordering and replay proofs), conditions on grants (their writes and the check's statement), conditions on
// policies (role_permissions derived with them, the preview's sources), allUsers grants (their writes
// and every question's statement), AuthZEN's searches (lookup's and who can's merged pages, the known
// instances and users), statements with their parameters as literals (a statement sent with BEGIN and
// COMMIT, a transaction's last statements with COMMIT), requires and unless (the decision's statement
// through every question), contextual grants (lookup's, who can's and explain's statements with them), every question's reads
// explained as router queries (citus-router), the service on the coordinator beside a plain
// Postgres with every answer compared (citus) and every test/graph-*.test.ts
// with PORTCULLIS_TEST_ENGINES=citus; vitest's global setup
// (test/support/global-setup.ts) starts a coordinator and two workers on free
// loopback ports in a temporary folder and stops them when the run ends,
// failed or not. With PORTCULLIS_TEST_CITUS_URL (and _WORKERS) set, it uses
// that cluster instead. Arguments go on to vitest.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const files = [
  "test/store-suite.test.ts",
  "test/sql-rules.test.ts",
  "test/model-api.test.ts",
  "test/plan-impact-model.test.ts",
  "test/plan-retry.test.ts",
  "test/changes-store.test.ts",
  "test/changes-api.test.ts",
  "test/changes-order.test.ts",
  "test/changes-replay.test.ts",
  "test/conditions-api.test.ts",
  "test/policy-conditions-api.test.ts",
  "test/all-users-api.test.ts",
  "test/authzen-search.test.ts",
  "test/sql-literals.test.ts",
  "test/exclusion-api.test.ts",
  "test/contextual-pages.test.ts",
  "test/contextual-explain.test.ts",
  "test/citus-router.test.ts",
  "test/citus.test.ts",
  ...readdirSync(join(root, "test"))
    .filter((f) => /^graph-.*\.test\.ts$/.test(f))
    .sort()
    .map((f) => `test/${f}`),
];
const args = process.argv.slice(2);
console.log(`citus leg: ${files.join(" ")}`);
const started = Date.now();
const run = spawnSync(join(root, "node_modules", ".bin", "vitest"), ["run", ...files, ...args], {
  cwd: root,
  stdio: "inherit",
  env: { ...process.env, PORTCULLIS_TEST_ENGINES: "citus" },
});
console.log(`citus leg: ${run.status === 0 ? "passed" : "failed"} in ${((Date.now() - started) / 1000).toFixed(0)} s`);
if (run.error) throw run.error;
process.exit(run.status ?? 1);
