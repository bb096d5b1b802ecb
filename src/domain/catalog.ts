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

/** A resource, relation or subject type a catalog change drops while grants still use it. */
export interface StrandedUse {
  resource: string;
  /** Absent when the whole resource goes. */
  relation?: string;
  /** A subject type the relation stops taking ("team#member", "user:*"). */
  subject?: string;
  /** Every grant that uses it has expired (rows until the sweep deletes them). */
  expiredOnly: boolean;
  reason: string;
}

/** What a catalog change would strand, and the refusal that says so. */
export interface Stranding {
  /** The 409's message, word for word. */
  message: string;
  /** Policies holding a permission the change drops. */
  held: { policyId: string; name: string; permission: string }[];
  uses: StrandedUse[];
}

/**
 * What a catalog change would strand: a permission a policy holds, or a
 * resource, relation or subject type a grant uses, each named; undefined
 * when nothing. The one computation behind the catalog's PUT, the model's
 * apply (both refuse with it: refuseStranding) and the model's plan (which
 * reports it), so a plan never hides a refusal.
 */
export async function strandingOf(q: Queryable, appId: string, change: CatalogChange): Promise<Stranding | undefined> {
  const held = await catalogStore.policiesHolding(q, appId, change.permissionsRemoved);
  const orphanedResources = await catalogStore.resourcesWithGrants(q, appId, change.resourcesRemoved);
  const orphanedRelations = await catalogStore.relationsWithGrants(q, appId, change.relationsRemoved);
  const orphanedSubjects = await catalogStore.subjectsWithGrants(q, appId, change.subjectsRemoved);
  if (held.length === 0 && orphanedResources.length === 0 && orphanedRelations.length === 0 && orphanedSubjects.length === 0) return undefined;
  const uses: StrandedUse[] = [
    ...orphanedResources.map((r) => ({ resource: r.resource, expiredOnly: r.expiredOnly, reason: usedBy(r.expiredOnly, "resource") })),
    ...orphanedRelations.map((r) => ({ resource: r.resource, relation: r.relation, expiredOnly: r.expiredOnly, reason: usedBy(r.expiredOnly, "relation") })),
    ...orphanedSubjects.map((r) => ({ resource: r.resource, relation: r.relation, subject: r.subject, expiredOnly: r.expiredOnly, reason: usedBy(r.expiredOnly, "subject") })),
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
  const hint = uses.some((u) => u.expiredOnly)
    ? ". Expired grants block until the sweep deletes them; delete them now with POST /api/v1/authorization/relationships/delete"
    : "";
  return { message: `the new catalog ${parts.join("; it ")}${hint}`, held, uses };
}

/**
 * Refuses (409, changing nothing) a catalog change that would strand
 * something (strandingOf), naming each. Call in the transaction that
 * replaces the catalog, after locking the application row FOR UPDATE.
 */
export async function refuseStranding(tx: Queryable, appId: string, change: CatalogChange): Promise<void> {
  const stranding = await strandingOf(tx, appId, change);
  if (stranding !== undefined) throw strandingRefusal(stranding);
}

/** The 409 that refuses a stranding change: its message, and each thing stranded as a detail. */
export function strandingRefusal(stranding: Stranding): Error {
  const details: JsonObject[] = [
    ...stranding.held.map((h) => ({ policyId: h.policyId, policyName: h.name, permission: h.permission })),
    ...stranding.uses.map(({ expiredOnly: _, ...use }) => ({ ...use })),
  ];
  return failedPrecondition(stranding.message, details);
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
