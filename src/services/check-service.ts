import { fromJson } from "@bufbuild/protobuf";
import { timestampFromDate, ValueSchema } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type { JsonObject } from "@bufbuild/protobuf";
import { CheckService } from "../../gen/authz/v1/check_pb.js";
import type { RelationshipTuple } from "../../gen/authz/v1/relationships_pb.js";
import type { CheckQuestion, Checker, PermissionsQuestion } from "../domain/check.js";
import type { QuestionFacts } from "../domain/question-facts.js";
import type { ExplainedGrant, ExplainedRuleEntry, Explainer, ExplainReason } from "../domain/explain.js";
import type { Lookup } from "../domain/lookup.js";
import type { WhoCan } from "../domain/who-can.js";
import { Metrics } from "../lib/metrics.js";
import { callerKeyOf } from "./call-values.js";
import { grantInputOf } from "./grant-inputs.js";

/** A question's objects for conditions, when it carries any (most carry none: nothing to build). */
interface FactFields {
  context?: JsonObject | undefined;
  subjectProperties?: JsonObject | undefined;
  resourceProperties?: JsonObject | undefined;
  actionProperties?: JsonObject | undefined;
}

function factsOf(c: FactFields): QuestionFacts | undefined {
  if (c.context === undefined && c.subjectProperties === undefined && c.resourceProperties === undefined && c.actionProperties === undefined) {
    return undefined;
  }
  return {
    context: c.context ?? {},
    subjectProperties: c.subjectProperties ?? {},
    resourceProperties: c.resourceProperties ?? {},
    actionProperties: c.actionProperties ?? {},
  };
}

type Contextual = { contextualGrants: RelationshipTuple[] };

/** A question's contextual grants, when it carries any. */
const contextualOf = (c: Contextual) => (c.contextualGrants.length === 0 ? undefined : c.contextualGrants.map(grantInputOf));

const question = (c: Omit<CheckQuestion, "tenantId" | "facts" | "contextualGrants"> & { tenantId?: string } & FactFields & Contextual): CheckQuestion => ({
  userId: c.userId,
  resource: c.resource,
  resourceId: c.resourceId,
  action: c.action,
  tenantId: c.tenantId,
  facts: factsOf(c),
  contextualGrants: contextualOf(c),
});

const instance = (c: Omit<PermissionsQuestion, "tenantId" | "facts" | "contextualGrants"> & { tenantId?: string } & FactFields & Contextual): PermissionsQuestion => ({
  userId: c.userId,
  resource: c.resource,
  resourceId: c.resourceId,
  tenantId: c.tenantId,
  facts: factsOf(c),
  contextualGrants: contextualOf(c),
});

const explainGrant = (grant: ExplainedGrant) => ({
  userId: grant.userId,
  allUsers: grant.allUsers === true,
  resource: grant.resource,
  resourceId: grant.resourceId,
  relation: grant.relation,
  ...(grant.subject === undefined ? {} : { subject: grant.subject }),
  ...(grant.createdAt === null ? {} : { createdAt: timestampFromDate(grant.createdAt) }),
  ...(grant.expiresAt === null ? {} : { expiresAt: timestampFromDate(grant.expiresAt) }),
  ...(grant.condition === null ? {} : { condition: grant.condition }),
  ...(grant.contextual === true ? { contextual: true } : {}),
});

const ruleEntry = (e: ExplainedRuleEntry) => ({ ...e, path: e.path.map(explainGrant) });

const reason = (r: ExplainReason) => {
  if (r.kind !== "relation") return r;
  return { kind: r.kind, relation: r.relation, grant: explainGrant(r.grant), path: r.path.map(explainGrant), requires: (r.requires ?? []).map(ruleEntry) };
};

export interface Questions {
  checker: Checker;
  explainer: Explainer;
  lookup: Lookup;
  whoCan: WhoCan;
}

/**
 * The questions about access; each acts on the calling key's own
 * application. The answers of checks and batch checks are counted (allowed
 * or denied) in the metrics.
 */
export function checkService({ checker, explainer, lookup, whoCan }: Questions, metrics: Metrics = Metrics.off): ServiceImpl<typeof CheckService> {
  return {
    async check(req, ctx) {
      const allowed = await checker.check(callerKeyOf(ctx), question(req));
      metrics.checkAnswered(allowed);
      return { allowed };
    },
    async batchCheck(req, ctx) {
      const results = await checker.batch(callerKeyOf(ctx), req.checks.map(question));
      metrics.batchAnswered(results);
      return { results: results.map((allowed) => ({ allowed })) };
    },
    async explain(req, ctx) {
      const answer = await explainer.explain(callerKeyOf(ctx), question(req));
      return {
        allowed: answer.allowed,
        reasons: answer.reasons.map(reason),
        blocked: answer.blocked.map((b) => ({ relation: b.relation, entry: ruleEntry(b.entry) })),
        considered: answer.considered,
        conditions: answer.conditions.map((c) => ({
          ...c,
          reads: c.reads.map((r) => ({ path: r.path, found: r.found, ...(r.found ? { value: fromJson(ValueSchema, r.value ?? null) } : {}) })),
          now: c.now === undefined ? undefined : timestampFromDate(c.now),
        })),
      };
    },
    async permissions(req, ctx) {
      return { actions: await checker.permissions(callerKeyOf(ctx), instance(req)) };
    },
    async batchPermissions(req, ctx) {
      const results = await checker.batchPermissions(callerKeyOf(ctx), req.requests.map(instance));
      return { results: results.map((actions) => ({ actions })) };
    },
    async lookup(req, ctx) {
      const answer = await lookup.lookup(callerKeyOf(ctx), {
        userId: req.userId,
        resource: req.resource,
        action: req.action,
        tenantId: req.tenantId,
        pageSize: req.pageSize,
        pageToken: req.pageToken,
        facts: factsOf(req),
        contextualGrants: contextualOf(req),
      });
      return {
        allInstances: answer.allInstances,
        resourceIds: answer.resourceIds,
        nextPageToken: answer.nextPageToken,
        conditional: answer.conditional.map((c) => ({ resourceId: c.id, conditions: c.conditions })),
        allInstancesConditions: answer.allInstancesConditions,
      };
    },
    async whoCan(req, ctx) {
      const answer = await whoCan.whoCan(callerKeyOf(ctx), {
        resource: req.resource,
        resourceId: req.resourceId,
        action: req.action,
        tenantId: req.tenantId,
        pageSize: req.pageSize,
        pageToken: req.pageToken,
        facts: factsOf(req),
        contextualGrants: contextualOf(req),
      });
      return {
        userIds: answer.userIds,
        nextPageToken: answer.nextPageToken,
        allUsers: answer.allUsers,
        conditional: answer.conditional.map((c) => ({ userId: c.id, conditions: c.conditions })),
        allUsersConditions: answer.allUsersConditions,
      };
    },
  };
}
