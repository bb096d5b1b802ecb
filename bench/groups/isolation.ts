/**
 * The isolation group (bench/isolation.ts): one application attacks through
 * the feed while another's checks are measured on the bench service.
 */
import { isolationLines, isolationMet, measureIsolation } from "../isolation.js";
import { ADMIN_KEY, api } from "../harness/api.js";
import { mark, type Bench } from "../harness/bench.js";
import { loadOnce } from "../harness/drive.js";
import { nodeMemory, statusMb } from "../harness/meters.js";
import { COMPARE_ROUNDS, SECONDS } from "../harness/options.js";
import { progress } from "../harness/output.js";

export async function isolation(b: Bench): Promise<void> {
  const figures = await measureIsolation({
    url: b.url,
    adminKey: ADMIN_KEY,
    api: (method, path, body, k) => api(b.url, method, path, body, k),
    load: (spec, seconds, connections) => loadOnce(spec, seconds, connections, b.service.pid),
    rssMb: () => (b.service.pid === undefined ? undefined : statusMb(b.service.pid, "VmRSS")),
    heapMb: async () => (await nodeMemory(b.url))?.heapUsedMb,
    progress,
    seconds: SECONDS,
    rounds: COMPARE_ROUNDS,
  });
  mark(b, "isolation");
  b.sections.set("isolation", {
    figures: () => figures,
    after: () => isolationLines(figures),
    failure: () =>
      isolationMet(figures)
        ? undefined
        : "isolation: another application's checks passed their p99 target, or a revoked key's stream did not end unauthenticated (the tables above say which)",
  });
}
