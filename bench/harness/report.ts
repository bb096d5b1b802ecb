/**
 * The report: the main table of rows, the REST check's p50 across the grant
 * steps, each group's table in a fixed order, the service's memory, printed
 * on stdout; the same figures written as JSON (--out); then what the groups
 * print last and the failures that set the exit code.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Bench } from "./bench.js";
import { CONNECTIONS, GRANT_STEPS, OUT, SECONDS, SERVICE_ENV, SERVICE_ENV_TEXT } from "./options.js";
import { micros, ms, progress, say } from "./output.js";
import { ROOT } from "./processes.js";

/** The groups' tables in the order they are printed, each with the key of its figures in the JSON file. */
const TABLES: readonly (readonly [group: string, key: string])[] = [
  ["external", "externalRatio"],
  ["questions", "questions"],
  ["upkeep", "upkeep"],
  ["telemetry", "telemetry"],
  ["hierarchy", "hierarchy"],
  ["exclusion", "exclusion"],
  ["models", "models"],
  ["changes", "changes"],
  ["compare", "compare"],
];

/** The groups whose lines come after the figures file, and whose failures are told, in this order. */
const LAST = ["isolation", "conditions", "changes"] as const;

/** Prints the report and writes the figures; then each group's last lines and failures (exit code 1). */
export function report(b: Bench): void {
  const ceilingRps = b.ceilings.reduce((sum, c) => sum + c.rps, 0) / b.ceilings.length;
  for (const r of b.rows) {
    if (r.versusCeiling && b.ceilings.length > 0) r.ofCeiling = r.rps / ceilingRps;
  }
  progress("");
  const lines = [
    `| figure | throughput | p50 ms | p99 ms | share of ceiling | server CPU µs | generator CPU µs |`,
    `|---|---:|---:|---:|---:|---:|---:|`,
    ...b.rows.map(
      (r) =>
        `| ${r.figure} | ${Math.round(r.rps).toLocaleString("en-US")} ${r.unit} | ${ms(r.p50)} | ${ms(r.p99)} | ${r.ofCeiling === undefined ? "" : `${Math.round(r.ofCeiling * 100)}%`} | ${micros(r.serverUs)} | ${micros(r.generatorUs)} |`,
    ),
  ];
  const scale = b.scale;
  if (scale.length > 1) {
    const first = scale[0]!;
    const last = scale[scale.length - 1]!;
    lines.push("", `| REST check p50 (ms) | ${scale.map((s) => `${s.grants.toLocaleString("en-US")} grants`).join(" | ")} | last ÷ first |`);
    lines.push(`|---|${scale.map(() => "---:").join("|")}|---:|`);
    for (const [name, k] of [["allowed by a grant", "grantP50"], ["allowed by a role", "roleP50"], ["denied", "deniedP50"]] as const) {
      lines.push(`| ${name} | ${scale.map((s) => s[k].toFixed(2)).join(" | ")} | ${(last[k] / first[k]).toFixed(2)} |`);
    }
  }
  for (const [group] of TABLES) lines.push(...(b.sections.get(group)?.lines?.() ?? []));
  const mb = (value: number | undefined) => (value === undefined || Number.isNaN(value) ? "n/a" : `${Math.round(value)} MB`);
  lines.push("", `service peak RSS: ${mb(b.peak)} (${b.engine}; over the whole run, the start and the loading included)`);
  if (b.memory.length > 0) lines.push(`  peak (RSS) at the end of each phase: ${b.memory.map((m) => `${m.phase} ${mb(m.peakMb)} (${mb(m.rssMb)})`).join("; ")}`);
  if (SERVICE_ENV_TEXT !== "") lines.push(`  service environment added: ${SERVICE_ENV_TEXT}`);
  const split = b.nodeSplit;
  if (split !== undefined) {
    lines.push(
      `  at the end, from its /metrics: RSS ${mb(split.rssMb)}, V8 heap ${mb(split.heapUsedMb)} used of ${mb(split.heapTotalMb)} (young generation ${mb(split.newSpaceMb)}), external ${mb(split.externalMb)} (WebAssembly memory included)`,
    );
  }
  process.stdout.write(`\n${lines.join("\n")}\n`);
  mkdirSync(join(ROOT, "bench", "results"), { recursive: true });
  const figures = Object.fromEntries(TABLES.map(([group, key]) => [key, b.sections.get(group)?.figures()]));
  writeFileSync(
    OUT,
    JSON.stringify(
      {
        engine: b.engine,
        grants: GRANT_STEPS,
        seconds: SECONDS,
        connections: CONNECTIONS,
        serviceEnv: SERVICE_ENV,
        rows: b.rows,
        scale,
        ...figures,
        peakRssMb: b.peak,
        memory: b.memory,
        nodeMemory: split,
        at: new Date().toISOString(),
      },
      null,
      2,
    ),
  );
  say(`figures written to ${OUT}`);
  for (const group of LAST) {
    const section = b.sections.get(group);
    const after = section?.after?.();
    if (after !== undefined) process.stdout.write(`${after.join("\n")}\n`);
    const failure = section?.failure?.();
    if (failure !== undefined) {
      say(`FAILED: ${failure}`);
      process.exitCode = 1;
    }
  }
}
