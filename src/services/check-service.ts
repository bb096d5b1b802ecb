import type { ServiceImpl } from "@connectrpc/connect";
import { CheckService } from "../../gen/authz/v1/check_pb.js";
import type { CheckQuestion, Checker } from "../domain/check.js";
import { callerKeyOf } from "../transport/auth.js";

const input = (c: Omit<CheckQuestion, "tenantId"> & { tenantId?: string }): CheckQuestion => ({
  userId: c.userId,
  resource: c.resource,
  resourceId: c.resourceId,
  action: c.action,
  tenantId: c.tenantId,
});

export function checkService(checker: Checker): ServiceImpl<typeof CheckService> {
  return {
    async check(req, ctx) {
      return { allowed: await checker.check(callerKeyOf(ctx), input(req)) };
    },
    async batchCheck(req, ctx) {
      const results = await checker.batch(callerKeyOf(ctx), req.checks.map(input));
      return { results: results.map((allowed) => ({ allowed })) };
    },
  };
}
