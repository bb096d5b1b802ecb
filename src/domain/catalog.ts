import type { AbortOptions, Db, Queryable } from "../store/db.js";
import { auditStore } from "../store/audit-store.js";
import { modelStore } from "../store/model-store.js";
import { catalogStore } from "../store/catalog-store.js";
import { lockApplication, requireApplication } from "./applications.js";
import {
  diffCatalog,
  effectiveCatalog,
  validateCatalog,
  type CatalogChange,
  type CatalogEntry,
  type CatalogEntryInput,
} from "./catalog-rules.js";
import { failedPrecondition, type JsonObject } from "./errors.js";
import type { Principal } from "./principal.js";

/** The resource catalog of an application. */
export class Catalog {
  constructor(private readonly db: Db) {}

  async get(appId: string): Promise<CatalogEntry[]> {
    await requireApplication(this.db, appId);
    return catalogStore.load(this.db, appId);
  }

  /**
   * Replaces the whole catalog in one transaction. Refused, changing nothing,
   * when the new catalog drops a permission a policy holds, or a resource or
   * relation a grant uses.
   */
  async replace(actor: Principal, appId: string, input: CatalogEntryInput[], options?: AbortOptions): Promise<CatalogEntry[]> {
    await requireApplication(this.db, appId);
    validateCatalog(input);
    const next = effectiveCatalog(input);
    return this.db.transaction(async (tx) => {
      // Serializes with other catalog replacements and with the writers of
      // policies and grants, which take this row FOR SHARE.
      await lockApplication(tx, appId, "update");
      const before = await catalogStore.load(tx, appId);
      const change = diffCatalog(before, next);

      await refuseStranding(tx, appId, change);

      await catalogStore.replace(tx, appId, next);
      await modelStore.bump(tx, appId);
      await auditStore.append(tx, {
        appId,
        type: "catalog.replaced",
        actorKeyId: actor.keyId,
        targetType: "catalog",
        targetId: appId,
        data: {
          resourceCount: next.length,
          resourcesAdded: change.resourcesAdded,
          resourcesRemoved: change.resourcesRemoved,
          permissionsAdded: change.permissionsAdded,
          permissionsRemoved: change.permissionsRemoved,
          // Every relation that exists after and not before (and the reverse),
          // those of added and removed resources included: diffCatalog's
          // relation lists cover only resources on both sides, which is what
          // the orphaned-grant check above needs, not what a reader of the
          // log needs.
          relationsAdded: relationsNotIn(next, before),
          relationsRemoved: relationsNotIn(before, next),
        },
      });
      return next;
    }, options);
  }
}

/**
 * Refuses (409, changing nothing) a catalog change that drops a permission
 * a policy holds, or a resource, relation or subject type a grant uses,
 * naming each. Call in the transaction that replaces the catalog, after
 * locking the application row FOR UPDATE.
 */
export async function refuseStranding(tx: Queryable, appId: string, change: CatalogChange): Promise<void> {
  const held = await catalogStore.policiesHolding(tx, appId, change.permissionsRemoved);
  const orphanedResources = await catalogStore.resourcesWithGrants(tx, appId, change.resourcesRemoved);
  const orphanedRelations = await catalogStore.relationsWithGrants(tx, appId, change.relationsRemoved);
  const orphanedSubjects = await catalogStore.subjectsWithGrants(tx, appId, change.subjectsRemoved);
  if (held.length > 0 || orphanedResources.length > 0 || orphanedRelations.length > 0 || orphanedSubjects.length > 0) {
    const details: JsonObject[] = [
      ...held.map((h) => ({ policyId: h.policyId, policyName: h.name, permission: h.permission })),
      ...orphanedResources.map((r) => ({ resource: r.resource, reason: usedBy(r.expiredOnly, "resource") })),
      ...orphanedRelations.map((r) => ({ resource: r.resource, relation: r.relation, reason: usedBy(r.expiredOnly, "relation") })),
      ...orphanedSubjects.map((r) => ({ resource: r.resource, relation: r.relation, subject: r.subject, reason: usedBy(r.expiredOnly, "subject") })),
    ];
    const parts: string[] = [];
    if (held.length > 0) {
      const permissions = [...new Set(held.map((h) => h.permission))];
      const policies = [...new Set(held.map((h) => `"${h.name}"`))];
      parts.push(`drops permission${permissions.length > 1 ? "s" : ""} ${permissions.join(", ")} held by polic${policies.length > 1 ? "ies" : "y"} ${policies.join(", ")}`);
    }
    if (orphanedResources.length > 0) {
      parts.push(`drops resource${orphanedResources.length > 1 ? "s" : ""} ${orphanedResources.map((r) => r.resource + expiredNote(r.expiredOnly)).join(", ")} used by grants`);
    }
    if (orphanedRelations.length > 0) {
      parts.push(
        `drops relation${orphanedRelations.length > 1 ? "s" : ""} ${orphanedRelations.map((r) => `${r.resource}#${r.relation}${expiredNote(r.expiredOnly)}`).join(", ")} used by grants`,
      );
    }
    if (orphanedSubjects.length > 0) {
      parts.push(
        `drops subject${orphanedSubjects.length > 1 ? "s" : ""} ${orphanedSubjects
          .map((r) => `"${r.subject}" of ${r.resource}#${r.relation}${expiredNote(r.expiredOnly)}`)
          .join(", ")} used by grants`,
      );
    }
    const hint = [...orphanedResources, ...orphanedRelations, ...orphanedSubjects].some((r) => r.expiredOnly)
      ? ". Expired grants block until the sweep deletes them; delete them now with POST /api/v1/authorization/relationships/delete"
      : "";
    throw failedPrecondition(`the new catalog ${parts.join("; it ")}${hint}`, details);
  }
}

/**
 * Expired grants still block: they are rows until the sweep deletes them,
 * and a catalog that dropped their relation would leave rows that name
 * nothing (listed with includeExpired, counted by a delete by filter). The
 * message says so, and how to clear them at once.
 */
const usedBy = (expiredOnly: boolean, what: "resource" | "relation" | "subject") =>
  expiredOnly ? `only expired grants, not yet swept, use this ${what}` : `grants use this ${what}`;
const expiredNote = (expiredOnly: boolean) => (expiredOnly ? " (expired grants only, not yet swept)" : "");

/** The relations of `from` that `to` does not have, as "resource#relation", in `from`'s order. */
function relationsNotIn(from: CatalogEntry[], to: CatalogEntry[]): string[] {
  const present = new Set(to.flatMap((e) => e.relations.map((r) => `${e.resource}#${r.name}`)));
  return from.flatMap((e) => e.relations.map((r) => `${e.resource}#${r.name}`)).filter((r) => !present.has(r));
}
