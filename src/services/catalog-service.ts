import type { ServiceImpl } from "@connectrpc/connect";
import { CatalogService, type CatalogResource } from "../../gen/authz/v1/catalog_pb.js";
import type { Catalog } from "../domain/catalog.js";
import type { CatalogEntry } from "../domain/catalog-rules.js";
import { principalOf } from "./call-values.js";
import { callLimits } from "./call-limits.js";

const toProto = (entries: CatalogEntry[]) =>
  entries.map((e) => ({
    resource: e.resource,
    description: e.description,
    actions: e.actions,
    relations: e.relations.map((r) => ({
      name: r.name,
      actions: r.actions,
      builtIn: r.builtIn,
      subjects: r.subjects,
      inherits: r.inherits,
      requires: r.requires,
      unless: r.unless,
    })),
  }));

/** A catalog in a request, as the domain takes it (the model document's catalog too). */
export const catalogFromProto = (resources: CatalogResource[]) =>
  resources.map((r) => ({
    resource: r.resource,
    description: r.description,
    actions: r.actions,
    relations: r.relations.map((x) => ({
      name: x.name,
      actions: x.actions,
      builtIn: x.builtIn,
      subjects: x.subjects,
      inherits: x.inherits.map((i) => ({ through: i.through, relation: i.relation })),
      requires: x.requires.map((i) => ({ through: i.through, relation: i.relation })),
      unless: x.unless.map((i) => ({ through: i.through, relation: i.relation })),
    })),
  }));

export function catalogService(catalog: Catalog): ServiceImpl<typeof CatalogService> {
  return {
    async putCatalog(req, ctx) {
      return { resources: toProto(await catalog.replace(principalOf(ctx), req.appId, catalogFromProto(req.resources), callLimits(ctx))) };
    },
    async getCatalog(req) {
      return { resources: toProto(await catalog.get(req.appId)) };
    },
  };
}
