/** The batch group: REST batch checks of 100 (grants, roles and denials mixed), in checks/s. */
import * as data from "../dataset.js";
import { rest, type Bench } from "../harness/bench.js";
import { row } from "../harness/drive.js";

export async function batch(b: Bench): Promise<void> {
  const mixed = [...data.grantChecks(b.grants, 400), ...data.roleChecks(300), ...data.deniedChecks(300)];
  const batches = Array.from({ length: 10 }, (_, k) => ({ checks: mixed.slice(k * 100, k * 100 + 100) }));
  const result = await rest(b, batches, "batch check of 100", "/api/v1/authorization/check/batch");
  b.rows.push(row("REST batch check of 100 (checks/s)", result, "checks/s", 100));
}
