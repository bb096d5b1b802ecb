/** The grpc group: the three checks over gRPC, at the bench service. */
import * as data from "../dataset.js";
import type { Bench } from "../harness/bench.js";
import { drive, row } from "../harness/drive.js";

export async function grpc(b: Bench): Promise<void> {
  const check = (bodies: unknown[], label: string) =>
    drive({ kind: "grpc", url: b.url, method: "CheckService/Check", path: "", key: b.key, bodies }, label, b.service.pid);
  b.rows.push(row("gRPC check, allowed by a grant", await check(data.grantChecks(b.grants, 1000), "gRPC check, grant")));
  b.rows.push(row("gRPC check, allowed by a role", await check(data.roleChecks(1000), "gRPC check, role")));
  b.rows.push(row("gRPC check, denied", await check(data.deniedChecks(1000), "gRPC check, denied")));
}
