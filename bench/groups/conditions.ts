/**
 * The conditions group (bench/condition-attacks.ts): one application attacks
 * with dear conditions while another's checks are measured on the bench
 * service.
 */
import { conditionAttackLines, conditionAttacksMet, measureConditionAttacks } from "../condition-attacks.js";
import { ADMIN_KEY, api } from "../harness/api.js";
import { mark, type Bench } from "../harness/bench.js";
import { SECONDS } from "../harness/options.js";
import { progress } from "../harness/output.js";

export async function conditions(b: Bench): Promise<void> {
  const figures = await measureConditionAttacks({
    url: b.url,
    adminKey: ADMIN_KEY,
    api: (method, path, body, k) => api(b.url, method, path, body, k),
    progress,
    seconds: SECONDS,
  });
  mark(b, "conditions");
  b.sections.set("conditions", {
    figures: () => figures,
    after: () => conditionAttackLines(figures),
    failure: () =>
      conditionAttacksMet(figures)
        ? undefined
        : "conditions: another application's checks passed their p99 target during an attack, or an attacker's request failed (the table above says which)",
  });
}
