/**
 * Contextual grants (API.md, "Contextual grants"; docs/exclusion.md): up to
 * 100 grants a question carries, in the bulk write's shape, counted for
 * that question alone as if stored. Nothing is written and the feed sees
 * nothing. A question that carries them is answered by the decision's path
 * (operator-answers.ts): its statement's walk also follows their subject
 * sets and links (ContextEdge), and the decision reads them beside the
 * stored rows it returns (withContextual).
 */
import type { ContextEdge, DecisionRows } from "../store/decision-store.js";
import type { AccessModel } from "./access-model.js";
import type { Violations } from "./errors.js";
import type { Subject } from "./subjects.js";
import { checkGrantAgainst, checkGrantForm, type GrantInput } from "./relationships.js";

export const CONTEXTUAL_LIMITS = {
  /** Contextual grants a question may carry. */
  grants: 100,
} as const;

/** A question's contextual grants, as the caller sent them. */
export type ContextualGrant = GrantInput;

/** Whether a question carries contextual grants. */
export const hasContextual = (q: { contextualGrants?: readonly ContextualGrant[] | undefined }): boolean => (q.contextualGrants?.length ?? 0) > 0;

/**
 * Checks the grants' number (CONTEXTUAL_LIMITS.grants at most) and each
 * one's form, before anything is read: so no id a write would refuse
 * reaches a statement. Fields are named `contextualGrants[3].userId` under
 * `at`.
 */
export function checkContextualForm(v: Violations, grants: readonly ContextualGrant[] | undefined, at: (field: string) => string): void {
  if (grants === undefined) return;
  if (grants.length > CONTEXTUAL_LIMITS.grants) {
    v.add(at("contextualGrants"), `at most ${CONTEXTUAL_LIMITS.grants} contextual grants per question, got ${grants.length}`);
    return;
  }
  grants.forEach((g, i) => checkGrantForm(v, at(`contextualGrants[${i}].`), g));
}

/**
 * Checks each contextual grant, its form already checked
 * (checkContextualForm), as a write would be checked (relationships.ts):
 * against the catalog of the model the question is answered by, and its
 * expiry ahead of the question's statement's clock (`nowMs`).
 */
export function checkContextualGrants(
  v: Violations,
  grants: readonly ContextualGrant[] | undefined,
  model: AccessModel,
  nowMs: number,
  at: (field: string) => string,
): void {
  grants?.forEach((g, i) => checkGrantAgainst(v, at(`contextualGrants[${i}].`), g, model.grantSubjects, nowMs));
}

/** A contextual grant to a subject set or a link, as the walks step along it. */
export const edgeOf = (g: ContextualGrant, subject: Subject): ContextEdge => ({
  r: g.resource,
  i: g.resourceId,
  l: g.relation,
  sr: subject.resource,
  si: subject.resourceId,
  sl: subject.relation,
});

/** The grants' subject sets and links, the steps the decision's walk follows besides the stored ones. */
export function contextEdges(grants: readonly ContextualGrant[] | undefined): ContextEdge[] {
  return (grants ?? []).flatMap((g) => (g.subject === undefined ? [] : [edgeOf(g, g.subject)]));
}

/** The grants that count by the statement's clock: a stored grant whose expiry has passed counts not at all, and neither does a contextual one. */
export const liveAt = (grants: readonly ContextualGrant[] | undefined, nowMs: number): ContextualGrant[] =>
  (grants ?? []).filter((g) => g.expiresAt === undefined || g.expiresAt > nowMs);

/**
 * The decision's rows with a question's contextual grants laid beside the
 * stored ones: its user's grants (and allUsers ones) as held, subject sets
 * and links as such; a grant whose expiry the statement's clock has passed
 * counts as a stored one would, not at all.
 */
export function withContextual(rows: DecisionRows, userId: string, grants: readonly ContextualGrant[] | undefined): DecisionRows {
  const live = liveAt(grants, rows.nowMs);
  if (live.length === 0) return rows;
  const condition = (g: ContextualGrant) => (g.condition === undefined || g.condition === "" ? null : g.condition);
  const held = [...rows.held];
  const sets = [...rows.sets];
  const links = [...rows.links];
  for (const g of live) {
    if (g.subject === undefined) {
      if (g.allUsers === true || g.userId === userId) held.push([g.resource, g.resourceId, g.relation, condition(g)]);
    } else if (g.subject.relation === "") {
      links.push([g.resource, g.resourceId, g.relation, g.subject.resource, g.subject.resourceId, condition(g)]);
    } else {
      sets.push([g.resource, g.resourceId, g.relation, g.subject.resource, g.subject.resourceId, g.subject.relation, condition(g)]);
    }
  }
  return { ...rows, held, sets, links };
}
