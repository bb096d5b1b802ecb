/**
 * The upkeep group, keeping the model: the check with expiring and expired
 * grants in the data set, delete by filter of a user's grants, and the
 * impact preview of a policy's edit.
 */
import * as data from "../dataset.js";
import { ADMIN_KEY, api } from "../harness/api.js";
import { rest as restOf, type Bench } from "../harness/bench.js";
import { row, type Measured } from "../harness/drive.js";
import { progress } from "../harness/output.js";

export async function upkeep(b: Bench): Promise<void> {
  const figures = await measureUpkeep(b);
  b.sections.set("upkeep", { figures: () => figures, lines: () => upkeepLines(figures) });
}

/** Keeping the model: expiring grants, delete by filter, the impact preview. */
interface UpkeepFigures {
  /** The check's rate with expiring and expired grants in the data set, over its rate without (alternated, mean of 2 each). */
  expiringRatio: number;
  deleteUserMs: number;
  deleteUserGrants: number;
  previewP50: number;
  previewP99: number;
  previewUsers: number;
  previewRoles: number;
}

const DELETE_USER_GRANTS = 10_000;

/**
 * - The check, allowed by a grant, on the data set as loaded and on the same
 *   data set with an expiry a day ahead on every other grant and 10,000
 *   grants that expired (no sweep runs in the bench), alternated twice.
 * - Delete by filter of a user holding 10,000 grants: the median of 5 calls.
 * - The impact preview of an edit of a policy attached to all 50 roles (each
 *   user holds one role: every user is reached), one call at a time.
 */
async function measureUpkeep(b: Bench): Promise<UpkeepFigures> {
  const { url, key, grants, rows } = b;
  const rest = (bodies: unknown[], label: string) => restOf(b, bodies, label);
  const checks = data.grantChecks(grants, 1000);
  const rewrite = async (expiresAt: (i: number) => string | undefined) => {
    for (let start = 0; start < grants; start += 5000) {
      const writes = Array.from({ length: Math.min(5000, grants - start) }, (_, k) => {
        const at = expiresAt(start + k);
        return { ...data.grant(start + k), ...(at === undefined ? {} : { expiresAt: at }) };
      });
      await api(url, "POST", "/api/v1/authorization/relationships/bulk", { writes }, key);
    }
  };
  // 10,000 grants that expire in 2 s and stay, expired, for the rest of the run.
  const soon = new Date(Date.now() + 2_000).toISOString();
  for (let start = 0; start < 10_000; start += 5000) {
    const writes = Array.from({ length: 5000 }, (_, k) => ({ ...data.grant(grants + 1_000_000 + start + k), expiresAt: soon }));
    await api(url, "POST", "/api/v1/authorization/relationships/bulk", { writes }, key);
  }
  await new Promise((resolve) => setTimeout(resolve, 2_500));
  const tomorrow = new Date(Date.now() + 86_400_000).toISOString();
  const plain: Measured[] = [];
  const expiring: Measured[] = [];
  for (const round of [1, 2]) {
    await rewrite(() => undefined);
    plain.push(await rest(checks, `upkeep: REST check, no expiring grants (${round})`));
    await rewrite((i) => (i % 2 === 0 ? tomorrow : undefined));
    expiring.push(await rest(checks, `upkeep: REST check, expiring and expired grants (${round})`));
  }
  const mean = (rs: Measured[]) => rs.reduce((n, r) => n + r.rps, 0) / rs.length;
  rows.push(row("REST check, allowed by a grant, no expiring grants (1st of 2)", plain[0]!));
  rows.push(row("REST check, allowed by a grant, half expiring + 10,000 expired (1st of 2)", expiring[0]!));

  // Delete by filter: a user with 10,000 grants, five times.
  const deletes: number[] = [];
  for (let k = 0; k < 5; k++) {
    const userId = `leaver-${k}`;
    for (let start = 0; start < DELETE_USER_GRANTS; start += 5000) {
      const writes = Array.from({ length: 5000 }, (_, j) => ({ userId, resource: "document", resourceId: `leaver-doc-${start + j}`, relation: "viewer" }));
      await api(url, "POST", "/api/v1/authorization/relationships/bulk", { writes }, key);
    }
    const t = performance.now();
    const { deleted } = await api(url, "POST", "/api/v1/authorization/relationships/delete", { userId }, key);
    deletes.push(performance.now() - t);
    if (deleted !== DELETE_USER_GRANTS) throw new Error(`delete by filter removed ${deleted} grants, not ${DELETE_USER_GRANTS}`);
    progress(`running: delete by filter of ${DELETE_USER_GRANTS} grants (${k + 1}/5)`);
  }
  deletes.sort((a, b) => a - b);
  rows.push({ figure: `delete by filter, a user with ${DELETE_USER_GRANTS.toLocaleString("en-US")} grants (median of 5)`, rps: DELETE_USER_GRANTS / (deletes[2]! / 1000), unit: "grants/s", p50: deletes[2]!, p99: deletes[4]! });

  // The impact preview: a policy attached to every role.
  const base = `/api/v1/applications/${data.APP_ID}`;
  const permissions = data.catalog.resources.slice(0, 2).flatMap((r) => r.actions.slice(0, 2).map((a) => `${r.resource}:${a}`));
  const { policyId } = await api(url, "POST", `${base}/policies`, { name: "impact", permissions }, ADMIN_KEY);
  const { roles } = await api(url, "GET", `${base}/roles?pageSize=1000`, undefined, ADMIN_KEY);
  for (const role of roles as { roleId: string; policyIds: string[] }[]) {
    await api(url, "PATCH", `${base}/roles/${role.roleId}`, { policyIds: [...role.policyIds, policyId] }, ADMIN_KEY);
  }
  const edit = { permissions: [...permissions.slice(1), `${data.catalog.resources[2]!.resource}:${data.catalog.resources[2]!.actions[0]}`] };
  const times: number[] = [];
  let users = 0;
  for (let k = 0; k < 40; k++) {
    const t = performance.now();
    const answer = await api(url, "POST", `${base}/policies/${policyId}/preview`, edit, ADMIN_KEY);
    if (k >= 5) times.push(performance.now() - t); // the first ones warm the plans
    // Each user holds one role: the users the policy reaches are its roles' assignments.
    users = (answer.roles as { assignmentCount: number }[]).reduce((n, r) => n + r.assignmentCount, 0);
    if (answer.users.gaining + answer.users.losing === 0) throw new Error("the impact preview's edit changes no user's access");
    progress(`running: impact preview (${k + 1}/40)`);
  }
  times.sort((a, b) => a - b);
  const p50 = times[Math.floor(times.length / 2)]!;
  const p99 = times[times.length - 1]!;
  rows.push({ figure: `impact preview, a policy on ${roles.length} roles, ${users.toLocaleString("en-US")} users (one at a time)`, rps: 1000 / p50, unit: "calls/s", p50, p99 });
  return {
    expiringRatio: mean(expiring) / mean(plain),
    deleteUserMs: deletes[2]!,
    deleteUserGrants: DELETE_USER_GRANTS,
    previewP50: p50,
    previewP99: p99,
    previewUsers: users,
    previewRoles: roles.length,
  };
}

function upkeepLines(upkeep: UpkeepFigures): string[] {
  return [
    "",
    "| keeping the model | figure | target |",
    "|---|---:|---|",
    `| check with half the grants expiring and 10,000 expired, over without (req/s, alternated, mean of 2) | ${upkeep.expiringRatio.toFixed(2)} | within noise of 1 |`,
    `| delete by filter of a user with ${upkeep.deleteUserGrants.toLocaleString("en-US")} grants (median of 5) | ${upkeep.deleteUserMs.toFixed(1)} ms | < 500 ms |`,
    `| impact preview, policy on ${upkeep.previewRoles} roles, ${upkeep.previewUsers.toLocaleString("en-US")} users: p50 (p99) | ${upkeep.previewP50.toFixed(1)} ms (${upkeep.previewP99.toFixed(1)}) | p50 < 100 ms |`,
  ];
}
