/**
 * The bench's command line: every option, read once from process.argv, and
 * the usage `--help` prints.
 */
import { join, resolve } from "node:path";
import { MODEL_GRANTS as MODEL_GRANTS_DEFAULT } from "../models.js";
import { ROOT } from "./processes.js";

export const USAGE = `npm run bench -- [--grants 100000 | --grants 10000,1000000] [--seconds 10]
                 [--connections 50] [--profile] [--out FILE] [--keep]
                 [--only ceiling,rest,grpc,external,batch,list,hierarchy,exclusion,models,changes,isolation,conditions,bulk,questions,upkeep,telemetry]
                 [--ratio-rounds 3] [--hierarchy-rounds 2] [--hierarchy-pages 1000]
                 [--model-grants 1000000] [--model-connections 10] [--model-cycles 6] [--model-test-runs 3]
                 [--changes-rate 1000] [--changes-idle-seconds 20] [--changes-streams 100] [--changes-connections 32]
                 [--service-env NAME=VALUE]... (added to the service's environment)
                 [--compare NAME=VALUE[,NAME=VALUE...] [--compare-rounds 2]] [--compare-tree DIR]
                 [--replicas 1] [--citus [--statement-stats]]
(docs/performance.md describes each group and option)`;

export const HELP = process.argv.includes("--help") || process.argv.includes("-h");

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1]! : fallback;
}
export const GRANT_STEPS = arg("grants", "100000").split(",").map((x) => Number(x.replace(/_/g, "")));
export const SECONDS = Number(arg("seconds", "10"));
export const WARMUP = Math.min(3, Math.max(1, Math.round(SECONDS / 4)));
export const CONNECTIONS = Number(arg("connections", "50"));
/** How many times the figures of a ratio are driven in turn. */
export const ROUNDS = Number(arg("ratio-rounds", "3"));
export const PROFILE = process.argv.includes("--profile");
/** Keep the bench database afterwards (Postgres only), to look into it. */
export const KEEP = process.argv.includes("--keep");
/**
 * Figure groups to measure (default all): ceiling, rest, grpc, external (wrk
 * and h2load, when installed), batch, list, bulk, questions (permissions,
 * explain and lookup, as ratios to a single check measured in the same run),
 * hierarchy (groups and hierarchy: groups/hierarchy.ts), exclusion (requires
 * and unless: groups/exclusion.ts), models (models as
 * files: groups/models.ts), changes (the change feed: groups/changes.ts),
 * isolation, conditions, upkeep, telemetry.
 */
export const ONLY = new Set(arg("only", "ceiling,rest,grpc,external,batch,list,hierarchy,exclusion,models,changes,isolation,conditions,bulk,questions,upkeep,telemetry").split(","));
/**
 * Whether any group selected measures the bench application (its catalog,
 * roles, users and grants): the ceiling needs no data and the models,
 * changes, isolation and conditions groups load applications of their own,
 * so `--only models` skips minutes of loading.
 */
export const BENCH_APP = [...ONLY].some((g) => g !== "ceiling" && g !== "models" && g !== "changes" && g !== "isolation" && g !== "conditions");
/**
 * The models group's sizes: 1,000,000 grants of its own application
 * (`--model-grants N` to shrink it while developing), its checks at a
 * moderate 10 in flight (a service answering its usual load while someone
 * applies a model, not one saturated), and 6 cycles of two plans and an
 * apply while they run; `model test` run 3 times.
 */
export const MODEL_GRANTS = Number(arg("model-grants", String(MODEL_GRANTS_DEFAULT)).replace(/_/g, ""));
export const MODEL_CONNECTIONS = Number(arg("model-connections", "10"));
export const MODEL_CYCLES = Number(arg("model-cycles", "6"));
export const MODEL_TEST_RUNS = Number(arg("model-test-runs", "3"));
/**
 * The changes group's sizes: the Watch delay at 1,000 single writes a second
 * (open loop), 100 idle streams (10 per HTTP/2 connection) over windows of
 * 20 s with and without them (below the 52 s after which a Watch with
 * nothing to send ends), and single writes at 32 in flight for the feed on ÷
 * off ratio (a busy writer, not the checks' 50).
 */
export const CHANGES_RATE = Number(arg("changes-rate", "1000"));
export const CHANGES_IDLE_SECONDS = Number(arg("changes-idle-seconds", "20"));
export const CHANGES_STREAMS = Number(arg("changes-streams", "100"));
export const CHANGES_CONNECTIONS = Number(arg("changes-connections", "32"));
export const HIERARCHY_ROUNDS = Number(arg("hierarchy-rounds", "2"));
/** Page sizes of the pass through all of lookup's 100,000 documents (each a pass of its own). */
export const HIERARCHY_LOOKUP_PAGES = arg("hierarchy-pages", "1000").split(",").map(Number);
export const OUT = arg("out", join(ROOT, "bench", "results", `bench-${new Date().toISOString().replace(/[:.]/g, "-")}.json`));
/**
 * `--citus`: the service runs on a Citus cluster the bench starts
 * (bench/citus-cluster.ts: a coordinator and two workers on loopback ports)
 * and distributes (AUTHZ_DISTRIBUTE=citus), instead of on DATABASE_URL's
 * server or PGlite: the same groups on the distributed engine.
 */
export const CITUS = process.argv.includes("--citus");
/**
 * `--statement-stats`, with `--citus`: the cluster's three servers load
 * pg_stat_statements (planning tracked too), and the run ends with each
 * server's costliest statements: calls, plans, mean planning and execution
 * time (docs/scale-out.md, "What a statement costs on Citus").
 */
export const STATEMENT_STATS = process.argv.includes("--statement-stats");
/** Hot standbys to measure checks on (0: the usual figures). */
export const REPLICAS = Number(arg("replicas", "0"));
/**
 * `--service-env NAME=VALUE`, repeatable: set in the service's environment
 * (the services the telemetry, compare and replica runs start too), to
 * measure a setting against the defaults, e.g. PGLITE_SHARED_BUFFERS_MB or
 * NODE_OPTIONS.
 */
export const SERVICE_ENV: Record<string, string> = Object.fromEntries(
  process.argv.flatMap((a, i) => {
    if (a !== "--service-env") return [];
    const pair = process.argv[i + 1] ?? "";
    const eq = pair.indexOf("=");
    if (eq <= 0) throw new Error(`--service-env takes NAME=VALUE, got "${pair}"`);
    return [[pair.slice(0, eq), pair.slice(eq + 1)]];
  }),
);

/** `--compare NAME=VALUE[,NAME=VALUE...]`: the variables the compare group adds (undefined: no compare group). */
export const COMPARE: Record<string, string> | undefined = (() => {
  const spec = arg("compare", "");
  if (spec === "") return undefined;
  return Object.fromEntries(
    spec.split(",").map((pair) => {
      const eq = pair.indexOf("=");
      if (eq <= 0) throw new Error(`--compare takes NAME=VALUE[,NAME=VALUE...], got "${pair}"`);
      return [pair.slice(0, eq), pair.slice(eq + 1)];
    }),
  );
})();

/**
 * `--compare-tree DIR`: the compare group runs the service built in DIR (a
 * checkout of another commit, `npm run build` done there) instead of this
 * tree's, on the same data: before/after figures alternated in one run.
 */
export const COMPARE_TREE: string | undefined = arg("compare-tree", "") === "" ? undefined : resolve(arg("compare-tree", ""));

export const COMPARE_ROUNDS = Number(arg("compare-rounds", "2"));

export const SERVICE_ENV_TEXT = Object.entries(SERVICE_ENV)
  .map(([k, v]) => `${k}=${v}`)
  .join(" ");
