/**
 * The bulk group: bulk writes of 5,000 new grants, one call at a time (the
 * median of 7), and the same route through the command line's import.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import * as data from "../dataset.js";
import { api } from "../harness/api.js";
import type { Bench } from "../harness/bench.js";
import type { Row } from "../harness/drive.js";
import { progress } from "../harness/output.js";
import { EXT, firstLine, node, TREE } from "../harness/processes.js";

export async function bulk(b: Bench): Promise<void> {
  const times: number[] = [];
  for (let k = 0; k < 7; k++) {
    const start = b.grants + k * 5000;
    const writes = Array.from({ length: 5000 }, (_, j) => data.grant(start + j));
    const t = performance.now();
    await api(b.url, "POST", "/api/v1/authorization/relationships/bulk", { writes }, b.key);
    times.push(performance.now() - t);
    progress(`running: bulk write of 5,000 (${k + 1}/7)`);
  }
  times.sort((x, y) => x - y);
  b.rows.push({ figure: "bulk write of 5,000 (median of 7 calls)", rps: 5000 / (times[3]! / 1000), unit: "grants/s", p50: times[3]!, p99: times[6]! });
  b.rows.push(await measureCliImport(b.url, b.key, b.grants + 2_000_000, b.tmp));
}

/** Grants the CLI import figure writes. */
const CLI_IMPORT_ROWS = 50_000;

/**
 * The bulk route through the command line, next to the route's own figure:
 * a generated CSV file of new grants imported by the CLI as its own process
 * (compiled, as `npx portcullis` runs it), in its default batches of 5,000,
 * one call at a time. Wall time from the process's start to its exit, so the
 * figure includes starting Node, reading the file and writing the state file.
 */
async function measureCliImport(url: string, key: string, first: number, tmp: string): Promise<Row> {
  const file = join(tmp, "cli-import.csv");
  const lines = Array.from({ length: CLI_IMPORT_ROWS }, (_, j) => {
    const g = data.grant(first + j);
    return `${g.userId},${g.resource},${g.resourceId},${g.relation}`;
  });
  writeFileSync(file, `userId,resource,resourceId,relation\n${lines.join("\n")}\n`);
  progress(`running: import of ${CLI_IMPORT_ROWS.toLocaleString("en-US")} grants through the CLI`);
  const t = performance.now();
  const cli = node([join(TREE, `src/cli/main${EXT}`), "grants", "import", file, "--json", "--no-progress"], { PORTCULLIS_KEY: key, PORTCULLIS_URL: url });
  let stderr = "";
  cli.stderr!.on("data", (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<number | null>((resolve) => cli.once("exit", resolve));
  const summary = JSON.parse(await firstLine(cli)) as { rows: number; refused: number };
  const code = await exited;
  const wallMs = performance.now() - t;
  if (code !== 0 || summary.rows !== CLI_IMPORT_ROWS || summary.refused !== 0) {
    throw new Error(`the CLI import ended with ${code}: ${JSON.stringify(summary)} ${stderr.slice(-500)}`);
  }
  return {
    figure: `import of ${CLI_IMPORT_ROWS.toLocaleString("en-US")} grants through the CLI (a CSV file, one process; p50: its wall time)`,
    rps: CLI_IMPORT_ROWS / (wallMs / 1000),
    unit: "grants/s",
    p50: wallMs,
    p99: Number.NaN,
  };
}
