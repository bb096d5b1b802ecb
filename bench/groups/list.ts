/** The list group: listing an instance's grants over REST. */
import * as data from "../dataset.js";
import { rest, type Bench } from "../harness/bench.js";
import { row } from "../harness/drive.js";

export async function list(b: Bench): Promise<void> {
  const listPaths = data.grantChecks(b.grants, 500).map(
    (c) => `/api/v1/authorization/relationships?resource=${c.resource}&resourceId=${encodeURIComponent(c.resourceId)}`,
  );
  b.rows.push(row("REST list an instance's grants", await rest(b, listPaths, "list grants", "", "GET"), "req/s", 1, true));
}
