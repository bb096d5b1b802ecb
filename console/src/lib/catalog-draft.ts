/**
 * The catalog editor's form state and its translation to and from the API's
 * catalog. Built-in relations are not part of the draft: the service derives
 * them from the actions on every save (a custom relation of a built-in's name
 * redefines it, and is in the draft). A custom relation's implied actions are
 * limited to the resource's current actions, so removing an action does not
 * leave a hidden, invalid one behind; a link relation (its holders are
 * instances only) implies none, so its hidden actions are dropped the same way.
 */
import { effectiveSubjects, isLinkSubjects, parseSubjectType } from "./holders";

/** The relations every resource has, derived from its actions unless redefined. */
export const BUILT_IN_RELATIONS: readonly string[] = ["owner", "editor", "viewer", "commenter"];

export interface InheritDraft {
  /** React's key for the row; never sent. */
  key: string;
  /** A link relation of the same resource; "" for this same instance. */
  through: string;
  /** A relation of the resources `through` links to; with `through` "", another relation of this resource. */
  relation: string;
}

export interface RelationDraft {
  /** React's key for the row; never sent. */
  key: string;
  name: string;
  actions: string[];
  /** Who may hold it: "user", "team#member" (a subject set), "folder" (a link). */
  subjects: string[];
  inherits: InheritDraft[];
  /** Intersection: each must be held too (API.md, "Relations within an instance, intersection and exclusion"). */
  requires: InheritDraft[];
  /** Exclusion: none may be held. */
  unless: InheritDraft[];
}

/** A relation's rule lists, each edited alike. */
export type RuleListName = "inherits" | "requires" | "unless";

export interface ResourceDraft {
  key: string;
  resource: string;
  description: string;
  /** As typed: actions separated by commas or spaces. */
  actions: string;
  relations: RelationDraft[];
}

interface StoredRelation {
  name: string;
  actions: string[];
  builtIn: boolean;
  subjects?: string[];
  inherits?: { through: string; relation: string }[];
  requires?: { through: string; relation: string }[];
  unless?: { through: string; relation: string }[];
}

interface StoredResource {
  resource: string;
  description: string;
  actions: string[];
  relations: StoredRelation[];
}

let counter = 0;
/** A key unique in this page's life (crypto.randomUUID needs a secure context, which a plain-HTTP deployment is not). */
export const nextKey = (): string => `k${++counter}`;

export const splitTokens = (text: string): string[] => text.split(/[\s,]+/).filter((t) => t !== "");

export const newRelation = (): RelationDraft => ({ key: nextKey(), name: "", actions: [], subjects: ["user"], inherits: [], requires: [], unless: [] });

const ruleDrafts = (rules: { through: string; relation: string }[] | undefined): InheritDraft[] =>
  (rules ?? []).map((i) => ({ key: nextKey(), through: i.through, relation: i.relation }));
const ruleRequests = (rules: InheritDraft[]) => rules.map((i) => ({ through: i.through, relation: i.relation }));

export function draftFromCatalog(resources: readonly StoredResource[]): ResourceDraft[] {
  return resources.map((r) => ({
    key: nextKey(),
    resource: r.resource,
    description: r.description,
    actions: r.actions.join(", "),
    relations: r.relations
      .filter((x) => !x.builtIn)
      .map((x) => ({
        key: nextKey(),
        name: x.name,
        actions: [...x.actions],
        subjects: effectiveSubjects(x.subjects),
        inherits: ruleDrafts(x.inherits),
        requires: ruleDrafts(x.requires),
        unless: ruleDrafts(x.unless),
      })),
  }));
}

/** A catalog entry as the PUT takes it: every relation with its subjects and inherits spelled out. */
export type RequestResource = Omit<StoredResource, "relations"> & { relations: Required<StoredRelation>[] };

export function draftToRequest(draft: readonly ResourceDraft[]): RequestResource[] {
  return draft.map((r) => {
    const actions = splitTokens(r.actions);
    return {
      resource: r.resource.trim(),
      description: r.description,
      actions,
      relations: r.relations.map((x) => ({
        name: x.name.trim(),
        actions: isLinkSubjects(x.subjects) ? [] : x.actions.filter((a) => actions.includes(a)),
        builtIn: false,
        // None chosen is the API's default: users.
        subjects: effectiveSubjects(x.subjects),
        inherits: ruleRequests(x.inherits),
        requires: ruleRequests(x.requires),
        unless: ruleRequests(x.unless),
      })),
    };
  });
}

/** Whether two catalogs, as draftToRequest gives them, would store the same thing (a save of one over the other changes nothing). */
export const sameCatalog = (a: readonly StoredResource[], b: readonly StoredResource[]): boolean => JSON.stringify(a) === JSON.stringify(b);

/* The choices the editors offer, from the draft (so a resource or relation added but not saved yet is offered too). */

const named = (draft: readonly ResourceDraft[]) => draft.filter((r) => r.resource.trim() !== "");

/** Every relation a resource of the draft has: the built-ins and its custom ones. */
export function relationNamesOf(draft: readonly ResourceDraft[], resource: string): string[] {
  const r = draft.find((x) => x.resource.trim() === resource);
  if (r === undefined) return [];
  const custom = r.relations.map((x) => x.name.trim()).filter((n) => n !== "");
  return [...new Set([...BUILT_IN_RELATIONS, ...custom])];
}

/**
 * Every subjects entry the draft allows besides "user" and "user:*": a link
 * to each resource, a set of each resource's each relation. No link to a
 * resource named user: in subjects "user" means user ids.
 */
export function subjectChoices(draft: readonly ResourceDraft[]): { resource: string; choices: string[] }[] {
  return named(draft).map((r) => {
    const resource = r.resource.trim();
    return { resource, choices: [...(resource === "user" ? [] : [resource]), ...relationNamesOf(draft, resource).map((n) => `${resource}#${n}`)] };
  });
}

/** The link relations of a resource in the draft (what an inheritance rule goes through), by name. */
export const linkRelationsOf = (resource: ResourceDraft): RelationDraft[] =>
  resource.relations.filter((x) => x.name.trim() !== "" && isLinkSubjects(x.subjects));

/**
 * The relations a rule within the instance (no `through`) may name: the
 * resource's others (built-ins included), not itself and not a link (a
 * link holds instances, not users).
 */
export function sameInstanceRelations(resource: ResourceDraft, relation: RelationDraft): string[] {
  const links = new Set(linkRelationsOf(resource).map((x) => x.name.trim()));
  const own = relation.name.trim();
  const custom = resource.relations.map((x) => x.name.trim()).filter((n) => n !== "");
  return [...new Set([...BUILT_IN_RELATIONS, ...custom])].filter((n) => n !== own && !links.has(n));
}

/**
 * The relations a rule through `through` may name: those every resource the
 * link reaches has (a link to folders and drives: a relation of both).
 */
export function inheritableRelations(draft: readonly ResourceDraft[], resource: ResourceDraft, through: string): string[] {
  const link = linkRelationsOf(resource).find((x) => x.name.trim() === through);
  if (link === undefined) return [];
  const targets = link.subjects.map((s) => parseSubjectType(s)).flatMap((t) => (t.kind === "link" ? [t.resource] : []));
  const [first, ...rest] = targets.map((t) => relationNamesOf(draft, t));
  return (first ?? []).filter((n) => rest.every((names) => names.includes(n)));
}
