import { Coalescer } from "../lib/coalescer.js";
import { NO_TELEMETRY, type Telemetry } from "../lib/telemetry.js";
import type { Db } from "../store/db.js";
import { explainStore, type ExplainInput, type ExplainRow } from "../store/explain-store.js";
import type { ReadReplicas } from "../store/read-replicas.js";
import type { Caller, CheckQuestion } from "./check.js";
import { validateQuestion } from "./check.js";
import { unauthenticated, Violations } from "./errors.js";
import { exactRead } from "./exact-read.js";

export type ExplainReason =
  | {
      kind: "relation";
      relation: string;
      grant: { userId: string; resource: string; resourceId: string; relation: string; createdAt: Date; expiresAt: Date | null };
    }
  | {
      kind: "role";
      roleId: string;
      roleName: string;
      tenantId: string | undefined;
      policyId: string;
      policyName: string;
      permission: string;
    };

export interface Explanation {
  allowed: boolean;
  reasons: ExplainReason[];
  considered: {
    relations: { relation: string; actions: string[] }[];
    roles: { roleId: string; roleName: string; tenantId: string | undefined }[];
  };
}

/**
 * Why the check answers as it does, for people: every grant whose relation
 * implies the action, then every (role, policy) that holds the permission,
 * roles by name; and what the user holds that could count. Read in one
 * statement from the tables the check's own data derives from, so on the
 * same state `allowed` (some reason exists) equals the check's answer; the
 * differential tests hold the two together. Questions asked together share
 * one statement per application (see Coalescer).
 */
export class Explainer {
  private readonly coalesced: Coalescer<ExplainInput, ExplainRow>;

  constructor(db: Db, replicas?: ReadReplicas, telemetry: Telemetry = NO_TELEMETRY) {
    this.coalesced = new Coalescer(
      (inputs) =>
        exactRead(db, replicas, async (q, onReplica) => {
          const read = await explainStore.explain(q, inputs, { replayed: onReplica });
          return { value: read.rows, replayed: read.replayed };
        }),
      { ...db.reads, maxBatch: 100, reads: "explain", telemetry },
    );
  }

  async explain(caller: Caller, q: CheckQuestion): Promise<Explanation> {
    const v = new Violations();
    validateQuestion(v, q, (field) => field);
    v.throwIfAny();
    const row = await this.coalesced.call({ appId: caller.appId, keyHash: caller.keyHash, ...q });
    if (!row.keyValid) throw unauthenticated("the API key is not valid: it is unknown or revoked");
    if (row.actions === null) v.add("resource", `"${q.resource}" is not a resource of the catalog`);
    else if (!row.actions.includes(q.action)) v.add("action", `"${q.action}" is not an action of resource "${q.resource}"`);
    v.throwIfAny();
    return explanation(q, row);
  }
}

function explanation(q: CheckQuestion, row: ExplainRow): Explanation {
  const reasons: ExplainReason[] = [];
  for (const g of row.grants) {
    if (g.actions?.includes(q.action) !== true) continue;
    reasons.push({
      kind: "relation",
      relation: g.relation,
      grant: { userId: q.userId, resource: q.resource, resourceId: q.resourceId, relation: g.relation, createdAt: g.createdAt, expiresAt: g.expiresAt },
    });
  }
  for (const role of row.roles) {
    for (const policy of role.policies) {
      reasons.push({
        kind: "role",
        roleId: role.roleId,
        roleName: role.name,
        tenantId: role.tenantId ?? undefined,
        policyId: policy.policyId,
        policyName: policy.name,
        permission: `${q.resource}:${q.action}`,
      });
    }
  }
  return {
    allowed: reasons.length > 0,
    reasons,
    considered: {
      relations: row.grants.map((g) => ({ relation: g.relation, actions: g.actions ?? [] })),
      roles: row.roles.map((r) => ({ roleId: r.roleId, roleName: r.name, tenantId: r.tenantId ?? undefined })),
    },
  };
}
