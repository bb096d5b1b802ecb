/**
 * `--statement-stats` (with `--citus`): what each of the cluster's servers
 * spent on the run's statements, read from pg_stat_statements before the
 * cluster stops. On Citus a question's statement is planned twice, by the
 * coordinator and by the worker it is routed to (docs/scale-out.md, "What a
 * statement costs on Citus"): `plans` against `calls` shows whether a
 * server kept a plan, and the mean planning time beside the mean execution
 * what each call costs where. Parsing and analysis are in neither.
 */
import { withDatabase, type CitusCluster } from "../citus-cluster.js";
import { pgQuery } from "../pg-server.js";
import { say } from "./output.js";

/** The statements shown a server: the costliest by planning and execution together. */
const SHOWN = 8;

interface Stat {
  calls: string;
  plans: string;
  plan_ms: string;
  exec_ms: string;
  total_s: string;
  chars: number;
  query: string;
}

const STATS_SQL = `
  SELECT calls::text, plans::text, round(mean_plan_time::numeric, 3)::text AS plan_ms, round(mean_exec_time::numeric, 3)::text AS exec_ms,
         round(((total_plan_time + total_exec_time) / 1000)::numeric, 1)::text AS total_s, length(query) AS chars,
         left(regexp_replace(query, '\\s+', ' ', 'g'), 90) AS query
  FROM pg_stat_statements
  WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  ORDER BY total_plan_time + total_exec_time DESC
  LIMIT ${SHOWN}`;

/** Prints, for the coordinator and each worker, its costliest statements of database `url` (the coordinator's URL). */
export async function reportStatementStats(cluster: CitusCluster, url: string): Promise<void> {
  const name = new URL(url).pathname.slice(1);
  const nodes: [string, string][] = [["coordinator", url], ...cluster.workers.map((w, i): [string, string] => [`worker ${i + 1}`, withDatabase(w.url(), name)])];
  for (const [node, at] of nodes) {
    const rows = await pgQuery<Stat>(at, STATS_SQL);
    say(`\n| ${node}: statement (first 90 characters) | characters | calls | plans | plan ms (mean) | execution ms (mean) | total s |`);
    say("|---|---:|---:|---:|---:|---:|---:|");
    for (const r of rows) say(`| \`${r.query.replace(/\|/g, "\\|").replace(/`/g, "'")}\` | ${r.chars} | ${r.calls} | ${r.plans} | ${r.plan_ms} | ${r.exec_ms} | ${r.total_s} |`);
  }
}
