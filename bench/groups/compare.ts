/**
 * The compare group (--compare NAME=VALUE,... or --compare-tree DIR), last of
 * all: the service restarted on the loaded data as it was started and with
 * those variables added (or the other tree's service), alternated, the three
 * REST checks driven at each: on a shared machine whose speed drifts, a
 * setting's cost in checks/s is read from one run, minutes apart at most.
 */
import * as data from "../dataset.js";
import { otherTreeEnv, stopService, type Bench } from "../harness/bench.js";
import { drive, type Measured } from "../harness/drive.js";
import { peakRssMb, postgresCpuOf } from "../harness/meters.js";
import { COMPARE, COMPARE_ROUNDS, COMPARE_TREE } from "../harness/options.js";
import { micros } from "../harness/output.js";
import { startOnFreePort, stopProcess } from "../harness/processes.js";

export async function compare(b: Bench): Promise<void> {
  await stopService(b);
  const runs = await measureCompare(b, { ...(await otherTreeEnv(b)), ...COMPARE });
  b.sections.set("compare", { figures: () => ({ variables: COMPARE, tree: COMPARE_TREE, runs }), lines: () => compareLines(runs) });
}

/** One service process of the compare group: the three REST checks, and its peak RSS. */
interface CompareRun {
  variant: "as started" | "compared";
  round: number;
  grant: Measured;
  role: Measured;
  denied: Measured;
  /** Of this process, restarted on the loaded data: the loading is not in it. */
  peakMb: number | undefined;
}

/**
 * Starts the service on the data set loaded by the main run as it was
 * started, then with `extra` added, alternated COMPARE_ROUNDS times, and
 * drives the three REST checks at each, the order flipped every other round.
 * With --compare-tree the compared service is the other tree's (otherArgs).
 */
async function measureCompare({ env, serviceArgs, otherArgs, key, grants }: Bench, extra: Record<string, string>): Promise<CompareRun[]> {
  const runs: CompareRun[] = [];
  // The Postgres server's CPU too (both databases are on it): a change that
  // moves work into or out of the statement shows there, not in the service's.
  const postgres = env.DATABASE_URL === undefined ? undefined : await postgresCpuOf(env.DATABASE_URL);
  const check = (url: string, bodies: unknown[], label: string, pid: number | undefined) =>
    drive({ kind: "rest", url, method: "POST", path: "/api/v1/authorization/check", key, bodies }, label, pid, postgres);
  const variants = [["as started", {}], ["compared", extra]] as const;
  for (let round = 1; round <= COMPARE_ROUNDS; round++) {
    // ABBA: each variant goes first in every other round, so neither always
    // runs just after the machine's other work or always second.
    for (const [variant, added] of round % 2 === 1 ? variants : [...variants].reverse()) {
      const { child, url } = await startOnFreePort(variant === "compared" ? otherArgs : serviceArgs, { ...env, ...added });
      try {
        const grant = await check(url, data.grantChecks(grants, 1000), `compare: REST check, allowed by a grant, ${variant} (${round})`, child.pid);
        const role = await check(url, data.roleChecks(1000), `compare: REST check, allowed by a role, ${variant} (${round})`, child.pid);
        const denied = await check(url, data.deniedChecks(1000), `compare: REST check, denied, ${variant} (${round})`, child.pid);
        runs.push({ variant, round, grant, role, denied, peakMb: peakRssMb(child.pid!) });
      } finally {
        await stopProcess(child);
      }
    }
  }
  return runs;
}

/** The compare group's table: every run, then the compared variant over the started one. */
function compareLines(compared: CompareRun[]): string[] {
  const settings = Object.entries(COMPARE ?? {}).map(([k, v]) => `${k}=${v}`);
  const other = [...(COMPARE_TREE === undefined ? [] : [`the service of ${COMPARE_TREE}`]), ...(settings.length === 0 ? [] : [settings.join(" ")])].join(", ");
  const name = (variant: CompareRun["variant"]) => (variant === "as started" ? "as started" : `with ${other}`);
  const rate = (r: Measured) => Math.round(r.rps).toLocaleString("en-US");
  const mean = (variant: CompareRun["variant"], pick: (c: CompareRun) => Measured) => {
    const rs = compared.filter((c) => c.variant === variant).map((c) => pick(c).rps);
    return rs.reduce((a, b) => a + b, 0) / rs.length;
  };
  const ratio = (pick: (c: CompareRun) => Measured) => (mean("compared", pick) / mean("as started", pick)).toFixed(2);
  const cpu = (c: CompareRun) => [c.grant, c.role, c.denied].map((r) => micros(r.serverCpuUs)).join(" / ");
  const pgCpu = (c: CompareRun) => [c.grant, c.role, c.denied].map((r) => micros(r.othersCpuUs?.postgres)).join(" / ");
  const meanPg = (variant: CompareRun["variant"]) => {
    const us = compared.filter((c) => c.variant === variant).flatMap((c) => [c.grant, c.role, c.denied].map((r) => r.othersCpuUs?.postgres ?? Number.NaN));
    return us.reduce((a, b) => a + b, 0) / us.length;
  };
  const meanCpu = (variant: CompareRun["variant"]) => {
    const us = compared.filter((c) => c.variant === variant).flatMap((c) => [c.grant, c.role, c.denied].map((r) => r.serverCpuUs ?? Number.NaN));
    return us.reduce((a, b) => a + b, 0) / us.length;
  };
  return [
    "",
    "| REST checks/s, the service restarted on the loaded data each way in turn (order flipped every other round) | allowed by a grant | allowed by a role | denied | service CPU µs/check (grant / role / denied) | Postgres CPU µs/check (grant / role / denied) | that process's peak RSS |",
    "|---|---:|---:|---:|---:|---:|---:|",
    ...compared.map(
      (c) =>
        `| ${name(c.variant)} (${c.round}) | ${rate(c.grant)} | ${rate(c.role)} | ${rate(c.denied)} | ${cpu(c)} | ${pgCpu(c)} | ${c.peakMb === undefined ? "n/a" : `${Math.round(c.peakMb)} MB`} |`,
    ),
    `| ${name("compared")} ÷ as started (mean of the rounds) | ${ratio((c) => c.grant)} | ${ratio((c) => c.role)} | ${ratio((c) => c.denied)} | ${(meanCpu("compared") / meanCpu("as started")).toFixed(2)} | ${(meanPg("compared") / meanPg("as started")).toFixed(2)} | |`,
  ];
}
