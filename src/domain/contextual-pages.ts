/**
 * What lookup's and who can's candidate statements start from for a
 * question's contextual grants (store/contextual-pages-store.ts,
 * docs/contextual-grants.md), and how a question carrying them is checked
 * before they are read further: its grants counted before anything is read,
 * then each checked as a write would be against the model the page's
 * statement read, by the database's clock.
 */
import type { Queryable } from "../store/db.js";
import type { Seed, UserSeed } from "../store/contextual-pages-store.js";
import { relationshipsStore } from "../store/relationships-store.js";
import type { GraphLookupInput } from "../store/graph-store.js";
import type { LookupInput } from "../store/lookup-store.js";
import type { AccessModel } from "./access-model.js";
import { checkContextualGrants, type ContextualGrant } from "./contextual-grants.js";
import { Violations } from "./errors.js";

/** A 400 naming `contextualGrants[i].field` for each grant the model refuses, by the database's clock; nothing else is read before. */
export async function requireContextualGrants(db: Queryable, model: AccessModel, grants: readonly ContextualGrant[]): Promise<void> {
  const v = new Violations();
  checkContextualGrants(v, grants, model, await relationshipsStore.clock(db), (field) => field);
  v.throwIfAny();
}

/**
 * The relations a node of `resource` has through a link grant of
 * `through`: each relation with an inherits rule through it (its holders
 * are the linked instance's holders of the rule's relation).
 */
function throughLink(model: AccessModel, resource: string, through: string): string[] {
  const relations = [...(model.grantSubjects.get(resource)?.keys() ?? [])];
  return relations.filter((relation) => model.decisionRules.shape(resource, relation)?.inherits.some((rule) => rule.through === through) === true);
}

/**
 * Lookup's seeds: the nodes whose holders a contextual grant adds (a path
 * through contextual grants is, above its last one, stored rows from the
 * node that grant gives). The user's own grants and the allUsers ones give
 * their node; another user's gives nothing the user holds. A subject set
 * gives its node; a link gives each relation inheriting through it.
 */
export function lookupSeeds(model: AccessModel, userId: string, grants: readonly ContextualGrant[]): Seed[] {
  const out = new Map<string, Seed>();
  const add = (r: string, i: string, l: string) => out.set(JSON.stringify([r, i, l]), { r, i, l });
  for (const g of grants) {
    if (g.subject === undefined) {
      if (g.allUsers === true || g.userId === userId) add(g.resource, g.resourceId, g.relation);
    } else if (g.subject.relation !== "") add(g.resource, g.resourceId, g.relation);
    else for (const relation of throughLink(model, g.resource, g.relation)) add(g.resource, g.resourceId, relation);
  }
  return [...out.values()];
}

/** The graph's lookup question for a model (flat or not): the answers, and the edges up to them (AccessModel.inward). */
export function graphLookupOf(model: AccessModel, input: LookupInput): GraphLookupInput {
  const answers = model.withinInstance(input.resource, model.relationsImplying(input.resource, input.action));
  return { ...input, answers, ...model.inward(input.resource, answers) };
}

/** Who can's users besides the stored holders: each user a contextual grant names, with its node (allUsers grants name none). */
export function whoCanUsers(grants: readonly ContextualGrant[]): UserSeed[] {
  return grants.flatMap((g) => (g.subject === undefined && g.allUsers !== true ? [{ r: g.resource, i: g.resourceId, l: g.relation, u: g.userId }] : []));
}
