/**
 * The rest group: REST checks allowed by a grant, by a role, and denied, at
 * each grant step (their p50 across the steps: the scale table); at the last
 * step, also the AuthZEN evaluation and the check through one condition as
 * ratios to the check by a grant, driven in turn.
 */
import * as data from "../dataset.js";
import { api } from "../harness/api.js";
import { rest, type Bench } from "../harness/bench.js";
import { drive, row, type Measured } from "../harness/drive.js";
import { ROUNDS } from "../harness/options.js";
import { say } from "../harness/output.js";

export async function restChecks(b: Bench, grants: number, last: boolean): Promise<void> {
  const byGrant = await rest(b, data.grantChecks(grants, 1000), `REST check, allowed by a grant (${grants} grants)`);
  const byRole = await rest(b, data.roleChecks(1000), `REST check, allowed by a role (${grants} grants)`);
  const denied = await rest(b, data.deniedChecks(1000), `REST check, denied (${grants} grants)`);
  b.scale.push({ grants, grantP50: byGrant.p50, roleP50: byRole.p50, deniedP50: denied.p50 });
  if (!last) return;
  b.rows.push(row(`REST check, allowed by a grant`, byGrant, "req/s", 1, true));
  b.rows.push(row(`REST check, allowed by a role`, byRole, "req/s", 1, true));
  b.rows.push(row(`REST check, denied`, denied, "req/s", 1, true));
  // Two ratios: AuthZEN's evaluation of the very questions of the check by a
  // grant (target ≥ 0.9 of its rate), and a check whose answer passes one
  // condition (target ≥ 0.7). A ratio of two windows minutes apart measures
  // the machine's drift as much as the service, so the three are driven in
  // turn, ROUNDS times, and each ratio is of their means (rates, and service
  // CPU per request).
  const authzen = data.grantChecks(grants, 1000).map((c) => ({
    subject: { type: "user", id: c.userId },
    resource: { type: c.resource, id: c.resourceId },
    action: { name: c.action },
  }));
  const writes = Array.from({ length: data.CONDITIONAL_GRANTS }, (_, i) => data.conditionalGrant(i));
  await api(b.url, "POST", "/api/v1/authorization/relationships/bulk", { writes }, b.key);
  // The check by a grant measured again in each round: the figure above came first after the
  // loading, with the caches of the service and of Postgres still filling.
  const turns = { grant: [] as Measured[], authzen: [] as Measured[], condition: [] as Measured[] };
  for (let round = 1; round <= ROUNDS; round++) {
    turns.grant.push(await rest(b, data.grantChecks(grants, 1000), `REST check, allowed by a grant (round ${round})`));
    turns.authzen.push(
      await drive(
        { kind: "rest", url: b.url, method: "POST", path: "/access/v1/evaluation", key: b.key, bodies: authzen },
        `AuthZEN evaluation, allowed by a grant (round ${round})`,
        b.service.pid,
      ),
    );
    turns.condition.push(await rest(b, data.conditionChecks(1000), `REST check, allowed through one condition (round ${round})`));
  }
  const mean = (ms: Measured[], key: "rps" | "serverCpuUs") => ms.reduce((sum, m) => sum + (m[key] ?? Number.NaN), 0) / ms.length;
  const meanOf = (ms: Measured[]): Measured => ({ ...ms[0]!, rps: mean(ms, "rps"), serverCpuUs: mean(ms, "serverCpuUs") });
  b.rows.push(row(`AuthZEN evaluation, allowed by a grant (mean of ${ROUNDS})`, meanOf(turns.authzen), "req/s", 1, true));
  b.rows.push(row(`REST check, allowed through one condition (mean of ${ROUNDS})`, meanOf(turns.condition), "req/s", 1, true));
  const ratio = (of: Measured[], target: number, what: string) => {
    const rate = mean(of, "rps") / mean(turns.grant, "rps");
    const cpu = mean(of, "serverCpuUs") / mean(turns.grant, "serverCpuUs");
    const rounds = of.map((m, i) => (m.rps / turns.grant[i]!.rps).toFixed(2)).join(", ");
    say(`${what} ÷ REST check by a grant, ${ROUNDS} alternated rounds: rate ${rate.toFixed(2)} (rounds ${rounds}; target ≥ ${target}), service CPU per request ${cpu.toFixed(2)}`);
  };
  ratio(turns.authzen, 0.9, "AuthZEN evaluation");
  ratio(turns.condition, 0.7, "REST check through one condition");
}
