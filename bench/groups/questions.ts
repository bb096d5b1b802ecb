/**
 * The questions group: permissions (one instance, and batches of 100),
 * explain and lookup (a user with 100,000 grants), each against a single
 * REST check allowed by a grant measured right before them, so every ratio
 * comes from one run on one machine state.
 */
import * as data from "../dataset.js";
import { api } from "../harness/api.js";
import { rest as restOf, type Bench } from "../harness/bench.js";
import { row } from "../harness/drive.js";
import { progress, say } from "../harness/output.js";

export async function questions(b: Bench): Promise<void> {
  const figures = await measureQuestions(b);
  b.sections.set("questions", { figures: () => figures, lines: () => questionLines(figures) });
}

/** The questions' figures as ratios to the single REST check, all measured in one run. */
interface QuestionFigures {
  permissions: number;
  permissionsBatch: number;
  explain: number;
  lookupP99: number;
  lookupGrants: number;
}

/** The user whose grants lookup pages through. */
const LOOKUP_USER = "lookup-user";
const LOOKUP_GRANTS = 100_000;

/**
 * Permissions (one instance, and batches of 100), explain and lookup, each
 * against a single REST check allowed by a grant measured right before them,
 * so every ratio comes from one run on one machine state.
 */
async function measureQuestions(b: Bench): Promise<QuestionFigures> {
  const { url, key, grants, rows } = b;
  const rest = (bodies: unknown[], label: string, path?: string) => restOf(b, bodies, label, path);
  const t0 = Date.now();
  const relations = ["viewer", "editor", "owner", "commenter"];
  for (let start = 0; start < LOOKUP_GRANTS; start += 5000) {
    const writes = Array.from({ length: 5000 }, (_, k) => ({
      userId: LOOKUP_USER,
      resource: "document",
      resourceId: `lookup-${String(start + k).padStart(6, "0")}`,
      relation: relations[(start + k) % relations.length]!,
    }));
    await api(url, "POST", "/api/v1/authorization/relationships/bulk", { writes }, key);
    progress(`loading: ${LOOKUP_USER}'s grants ${start + 5000}/${LOOKUP_GRANTS}`);
  }
  say(`loaded ${LOOKUP_GRANTS} grants of one user in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

  const checks = data.grantChecks(grants, 1000);
  const instances = checks.map(({ action: _, ...instance }) => instance);
  const mixed = [...data.grantChecks(grants, 400), ...data.roleChecks(300), ...data.deniedChecks(300)].map(({ action: _, ...instance }) => instance);
  const batches = Array.from({ length: 10 }, (_, b) => ({ requests: mixed.slice(b * 100, b * 100 + 100) }));

  const check = await rest(checks, "questions: REST check, allowed by a grant");
  const permissions = await rest(instances, "questions: permissions, one instance", "/api/v1/authorization/permissions");
  const batch = await rest(batches, "questions: permissions/batch of 100", "/api/v1/authorization/permissions/batch");
  const explain = await rest(checks, "questions: explain", "/api/v1/authorization/check/explain");
  const lookup = await rest(
    [{ userId: LOOKUP_USER, resource: "document", action: "read", pageSize: 100 }],
    "questions: lookup, first page of 100",
    "/api/v1/authorization/lookup",
  );
  rows.push(row("REST check, allowed by a grant (questions' reference)", check));
  rows.push(row("REST permissions, one instance", permissions));
  rows.push(row("REST permissions/batch of 100 (instances/s)", batch, "instances/s", 100));
  rows.push(row("REST explain", explain));
  rows.push(row(`REST lookup, first page of 100, a user with ${LOOKUP_GRANTS.toLocaleString("en-US")} grants`, lookup));
  return {
    permissions: permissions.rps / check.rps,
    permissionsBatch: (batch.rps * 100) / check.rps,
    explain: explain.rps / check.rps,
    lookupP99: lookup.p99,
    lookupGrants: LOOKUP_GRANTS,
  };
}


function questionLines(questions: QuestionFigures): string[] {
  const ratio = (name: string, value: number, target: string) => `| ${name} | ${value.toFixed(2)} | ${target} |`;
  return [
    "",
    "| questions, ratio to the single REST check of the same run | ratio | target |",
    "|---|---:|---|",
    ratio("permissions, one instance (req/s)", questions.permissions, "≥ 0.8"),
    ratio("permissions/batch of 100 (instances/s)", questions.permissionsBatch, "≥ 5"),
    ratio("explain (req/s)", questions.explain, "≥ 0.3"),
    `| lookup, first page of 100 of ${questions.lookupGrants.toLocaleString("en-US")} grants: p99 | ${questions.lookupP99.toFixed(2)} ms | < 20 ms |`,
  ];
}
