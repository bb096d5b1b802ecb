import type { ServiceImpl } from "@connectrpc/connect";
import type { CatalogResource } from "../../gen/authz/v1/catalog_pb.js";
import { ModelService, type ModelPolicy, type ModelRole } from "../../gen/authz/v1/model_pb.js";
import type { ModelDocument, ModelInput, ModelPlan, Models, ModelStranding } from "../domain/models.js";
import { principalOf } from "./call-values.js";
import { catalogFromProto } from "./catalog-service.js";
import { callLimits } from "./call-limits.js";

/** The document's catalog entries: custom relations only, so `builtIn` is left out. */
const catalogToProto = (doc: ModelDocument["catalog"]) =>
  doc.map((e) => ({
    resource: e.resource,
    description: e.description,
    actions: e.actions,
    relations: e.relations.map((r) => ({
      name: r.name,
      actions: r.actions,
      subjects: r.subjects ?? [],
      inherits: r.inherits ?? [],
      requires: r.requires ?? [],
      unless: r.unless ?? [],
    })),
  }));

const inputOf = (req: { catalog: CatalogResource[]; policies: ModelPolicy[]; roles: ModelRole[] }): ModelInput => ({
  catalog: catalogFromProto(req.catalog),
  policies: req.policies.map((p) => ({ name: p.name, description: p.description, permissions: p.permissions, tenantId: p.tenantId, condition: p.condition })),
  roles: req.roles.map((r) => ({ name: r.name, description: r.description, tenantId: r.tenantId, policies: r.policies })),
});

const planToProto = (plan: ModelPlan) => ({
  version: plan.version,
  catalog: plan.catalog,
  policies: plan.policies,
  roles: plan.roles,
  impact: plan.impact,
});

/** What apply would strand; a relation or subject absent is "" in the message. */
const strandingToProto = (stranding: ModelStranding) => ({
  message: stranding.message,
  uses: stranding.uses.map((u) => ({ resource: u.resource, relation: u.relation ?? "", subject: u.subject ?? "", expiredOnly: u.expiredOnly, reason: u.reason })),
});

export function modelService(models: Models): ServiceImpl<typeof ModelService> {
  return {
    async getModel(req, ctx) {
      const doc = await models.export(req.appId, callLimits(ctx));
      return { version: doc.version, catalog: catalogToProto(doc.catalog), policies: doc.policies, roles: doc.roles };
    },
    async planModel(req, ctx) {
      const plan = await models.plan(req.appId, inputOf(req), callLimits(ctx));
      return { ...planToProto(plan), ...(plan.stranding === undefined ? {} : { stranding: strandingToProto(plan.stranding) }) };
    },
    async applyModel(req, ctx) {
      return planToProto(await models.apply(principalOf(ctx), req.appId, inputOf(req), req.expectedVersion, callLimits(ctx)));
    },
  };
}
