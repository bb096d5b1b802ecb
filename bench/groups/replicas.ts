/**
 * `--replicas 1`, instead of the usual groups: REST checks on a service over
 * a Postgres primary alone against a service sending checks to a hot
 * standby (a primary and a standby of its own: bench/pg-cluster.ts;
 * DATABASE_URL is not used), alternated, same data, same run, with the CPU
 * per check of the service and of each Postgres server.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as data from "../dataset.js";
import { clusterCpuSeconds, createDatabase, startPgCluster } from "../pg-cluster.js";
import { ADMIN_KEY, loadBase, loadGrants } from "../harness/api.js";
import { drive, type Measured } from "../harness/drive.js";
import { CONNECTIONS, GRANT_STEPS, OUT, REPLICAS, SECONDS, SERVICE_ENV } from "../harness/options.js";
import { micros, ms, progress, say } from "../harness/output.js";
import { EXT, ROOT, startOnFreePort, TREE } from "../harness/processes.js";

export async function replicas(): Promise<void> {
  if (REPLICAS !== 1) throw new Error("--replicas: the bench starts one standby; use --replicas 1");
  const cluster = await startPgCluster();
  const tmp = mkdtempSync(join(tmpdir(), "portcullis-bench-"));
  try {
    const db = await createDatabase(cluster, "portcullis_bench");
    const grants = GRANT_STEPS[GRANT_STEPS.length - 1]!;
    say(`portcullis bench: read replicas, ${grants} grants, ${SECONDS} s per figure, ${CONNECTIONS} in flight`);
    const start = (extra: Record<string, string>) =>
      startOnFreePort([join(TREE, `src/main${EXT}`)], { AUTHZ_ADMIN_KEY: ADMIN_KEY, LOG_LEVEL: "warn", DATABASE_URL: db.primaryUrl, ...SERVICE_ENV, ...extra });
    const alone = await start({});
    const replicated = await start({ DATABASE_READ_URLS: db.standbyUrl });
    const key = await loadBase(alone.url);
    await loadGrants(alone.url, key, 0, grants);
    say(`loaded ${grants} grants`);
    const pgCpu = (which: "primary" | "standby") => () => {
      const pid = cluster.pids()[which];
      return pid === undefined ? 0 : clusterCpuSeconds(pid) * 1e6;
    };
    const others = { primary: pgCpu("primary"), standby: pgCpu("standby") };
    const bodies = data.grantChecks(grants, 1000);
    const runs: { label: string; result: Measured }[] = [];
    for (const round of [1, 2]) {
      for (const [label, s] of [["primary alone", alone], ["primary + 1 standby", replicated]] as const) {
        const result = await drive({ kind: "rest", url: s.url, method: "POST", path: "/api/v1/authorization/check", key, bodies }, `${label}, round ${round}`, s.child.pid, others);
        if (result.errors > 0) say(`warning: ${label}: ${result.errors} failed requests`);
        runs.push({ label: `${label}, round ${round}`, result });
      }
    }
    const status = (await (await fetch(`${replicated.url}/readyz`)).json()) as { replicas: unknown[] };
    progress("");
    const lines = [
      "| REST check, allowed by a grant | checks/s | p50 ms | p99 ms | service CPU µs/check | primary Postgres CPU µs/check | standby Postgres CPU µs/check |",
      "|---|---:|---:|---:|---:|---:|---:|",
      ...runs.map(
        ({ label, result: r }) =>
          `| ${label} | ${Math.round(r.rps).toLocaleString("en-US")} | ${ms(r.p50)} | ${ms(r.p99)} | ${micros(r.serverCpuUs)} | ${micros(r.othersCpuUs?.primary)} | ${micros(r.othersCpuUs?.standby)} |`,
      ),
    ];
    const mean = (label: string) => {
      const rs = runs.filter((r) => r.label.startsWith(label)).map((r) => r.result.rps);
      return rs.reduce((a, b) => a + b, 0) / rs.length;
    };
    lines.push("", `primary + 1 standby ÷ primary alone, checks/s (mean of 2 rounds each): ${(mean("primary + 1 standby") / mean("primary alone")).toFixed(2)}`);
    lines.push(`standby as /readyz reports it: ${JSON.stringify(status.replicas)}`);
    lines.push("", "All servers, the services and the load generator share this machine's cores: the standby adds no CPU, so throughput cannot scale here; the CPU per check on each server shows where the work moved.");
    process.stdout.write(`\n${lines.join("\n")}\n`);
    mkdirSync(join(ROOT, "bench", "results"), { recursive: true });
    writeFileSync(OUT, JSON.stringify({ kind: "replicas", grants, seconds: SECONDS, connections: CONNECTIONS, runs, at: new Date().toISOString() }, null, 2));
    say(`figures written to ${OUT}`);
    for (const s of [alone, replicated]) {
      s.child.kill("SIGTERM");
      await new Promise((r) => s.child.once("exit", r));
    }
  } finally {
    await cluster.close();
    rmSync(tmp, { recursive: true, force: true });
  }
}
