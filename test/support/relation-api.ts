/**
 * The worlds of relation-model.ts as the API takes them: a catalog in which
 * each relation implies one action of its own (`do_<relation>`, so a check
 * asks exactly one relation), and the grants, each row's truth as a
 * condition that holds with CONTEXT, is false, or cannot be decided (a
 * missing key).
 */
import { isLink, T, U, type Truth, type World } from "./relation-model.js";

export const CONTEXT = { x: 1 };
/** A condition that holds with CONTEXT, one that is false, one that errs (a missing key): the model's T, F and U. */
export const conditionFor = (truth: Truth): string | undefined => (truth === T ? undefined : truth === U ? "context.missing == 1" : "context.x == 2");
export const action = (relation: string) => `do_${relation}`;

export function catalogOf(world: World) {
  return Object.entries(world.catalog).map(([resource, relations]) => ({
    resource,
    description: "",
    actions: Object.entries(relations)
      .filter(([, rel]) => !isLink(rel))
      .map(([name]) => action(name)),
    relations: Object.entries(relations).map(([name, rel]) => ({
      name,
      actions: isLink(rel) ? [] : [action(name)],
      subjects: rel.subjects,
      inherits: rel.inherits,
      requires: rel.requires,
      unless: rel.unless,
    })),
  }));
}

export function grantsOf(world: World) {
  const split = (k: string) => k.split("\0") as [string, string, string];
  const withCondition = (truth: Truth) => {
    const condition = conditionFor(truth);
    return condition === undefined ? {} : { condition };
  };
  return [
    ...[...world.held].flatMap(([k, grants]) => {
      const [resource, resourceId, relation] = split(k);
      return grants.map((g) => ({ ...(g.user === "" ? { allUsers: true } : { userId: g.user }), resource, resourceId, relation, ...withCondition(g.truth) }));
    }),
    ...[...world.sets].flatMap(([k, sets]) => {
      const [resource, resourceId, relation] = split(k);
      return sets.map((s) => ({ subject: { resource: s.resource, resourceId: s.id, relation: s.relation }, resource, resourceId, relation, ...withCondition(s.truth) }));
    }),
    ...[...world.links].flatMap(([k, links]) => {
      const [resource, resourceId, relation] = split(k);
      return links.map((l) => ({ subject: { resource: l.resource, resourceId: l.id }, resource, resourceId, relation, ...withCondition(l.truth) }));
    }),
  ];
}

