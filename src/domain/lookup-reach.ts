/**
 * How lookup's candidates are reached, where the catalog has `requires` or
 * `unless` and the check's own walk decides them (AccessModel.quickRules):
 * which relation implying the action reaches a candidate decides what its
 * check must walk. The page's statement says, for each id of its plain
 * page, the answer relations through which the walk reached it
 * (graph-store.ts, REACHED_BY); each gives the relations implying the
 * action that hold it within the instance (AccessModel.withinInstance).
 *
 * An id reached through a relation with no entries is allowed as read:
 * nothing below such a relation has entries (quickRules), so holding it
 * plainly is holding it. Any other is checked walking only from the
 * relations that reach it and the action's entries (CheckQuestion.roots),
 * not from every relation implying the action. Where anything conditional
 * lies in the way (a conditional row that could lie on a path: the page's
 * flag; a conditional candidate), or the page was read with another model
 * version, nothing is known and the id is checked from every relation, as
 * the check asks it.
 */
import type { AccessModel } from "./access-model.js";
import type { Reach } from "./operator-pages.js";
import { splitPage } from "../store/conditional-candidates.js";

/** What a page's statement read: its ids (candidates marked), the model version, the conditional flag and the relations reaching each id. */
export interface ReachedPage {
  resourceIds: readonly string[];
  version: string | null;
  pathsPossible: boolean;
  reachedBy?: Readonly<Record<string, readonly string[]>> | undefined;
}

/** How each plain id of the page is reached; undefined when nothing is known (above). */
export function reachOf(model: AccessModel, resource: string, action: string, page: ReachedPage): Reach | undefined {
  if (page.reachedBy === undefined || page.version !== model.version || page.pathsPossible) return undefined;
  const rules = model.quickRules(resource, action);
  if (rules === undefined) return undefined;
  const through = rules.map((r) => ({ relation: r.relation, plain: r.requires.length === 0 && r.unless.length === 0, from: new Set(model.withinInstance(resource, [r.relation])) }));
  const reach = new Map<string, true | string[]>();
  for (const { id, candidate } of splitPage(page.resourceIds)) {
    // Own keys only: an id may be any string, "constructor" and "__proto__" included.
    const relations = Object.hasOwn(page.reachedBy, id) ? page.reachedBy[id] : undefined;
    if (candidate || relations === undefined) continue;
    const held = through.filter((t) => relations.some((g) => t.from.has(g)));
    if (held.some((t) => t.plain)) reach.set(id, true);
    else if (held.length > 0) reach.set(id, held.map((t) => t.relation));
  }
  return reach;
}
