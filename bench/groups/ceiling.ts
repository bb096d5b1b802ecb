/**
 * The ceiling: a bare Fastify route (bench/ceiling-server.ts) taking the same
 * body as the check, measured right before and right after the last step's
 * REST checks; the REST rows' shares are of the mean of the two: on a shared
 * machine a ceiling taken minutes apart from the figures drifts with them.
 */
import * as data from "../dataset.js";
import type { Bench } from "../harness/bench.js";
import { drive, row } from "../harness/drive.js";
import { ONLY } from "../harness/options.js";

export async function ceiling(b: Bench, when: string): Promise<void> {
  if (!ONLY.has("ceiling")) return;
  const label = `ceiling: bare Fastify, same body (${when})`;
  const result = await drive(
    { kind: "rest", url: b.ceilingUrl, method: "POST", path: "/api/v1/authorization/check", key: b.key, bodies: data.deniedChecks(1000) },
    label,
    b.ceilingServer.pid,
  );
  b.ceilings.push(result);
  b.rows.push(row(label, result, "req/s", 1, true));
}
