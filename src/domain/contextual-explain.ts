/**
 * Explain with a question's contextual grants (contextual-grants.ts; API.md,
 * "Contextual grants"): counted exactly as the check counts them. Explain's
 * walk follows their subject sets and links beside the stored ones
 * (explain-store.ts, ContextualStep), the user's own and the allUsers ones
 * are laid beside the user's stored grants, and each is the row explain
 * reads for a stored grant, marked contextual (PathGrantRow's last field)
 * and with no creation time, since it is never stored.
 */
import { ALL_USERS_ID } from "../store/all-users.js";
import type { ContextualStep, ExplainRow, PathGrantRow } from "../store/explain-store.js";
import { edgeOf, liveAt, type ContextualGrant } from "./contextual-grants.js";

/** A contextual grant as explain's rows carry a grant. */
export function contextualRow(g: ContextualGrant): PathGrantRow {
  const s = g.subject;
  return [
    g.resource,
    g.resourceId,
    g.relation,
    s !== undefined || g.allUsers === true ? ALL_USERS_ID : g.userId,
    s?.resource ?? null,
    s?.resourceId ?? null,
    s?.relation ?? null,
    null,
    g.expiresAt ?? null,
    g.condition === undefined || g.condition === "" ? null : g.condition,
    true,
  ];
}

/** The grants' subject sets and links, the steps explain's walk follows besides the stored ones. */
export function contextualSteps(grants: readonly ContextualGrant[] | undefined): ContextualStep[] {
  return (grants ?? []).flatMap((g) => (g.subject === undefined ? [] : [{ ...edgeOf(g, g.subject), g: contextualRow(g) }]));
}

/**
 * The statement's rows with the question's contextual grants counted as the
 * check counts them (withContextual): the user's own and the allUsers ones
 * beside the user's stored grants; a grant whose expiry the statement's
 * clock has passed counts not at all, so its steps are dropped too.
 */
export function withContextualRows(row: ExplainRow, userId: string, grants: readonly ContextualGrant[] | undefined): ExplainRow {
  const live = liveAt(grants, row.nowMs);
  const held = live.filter((g) => g.subject === undefined && (g.allUsers === true || g.userId === userId)).map(contextualRow);
  const expired = (g: PathGrantRow | null) => g !== null && g[10] === true && g[8] !== null && g[8] <= row.nowMs;
  return { ...row, grants: [...row.grants, ...held], edges: row.edges.filter((e) => !expired(e[1])) };
}
