/**
 * The catalog editor's form state and its translation to and from the API's
 * catalog. Built-in relations are not part of the draft: the service derives
 * them from the actions on every save. A custom relation's implied actions
 * are limited to the resource's current actions, so removing an action does
 * not leave a hidden, invalid one behind.
 */
export interface RelationDraft {
  /** React's key for the row; never sent. */
  key: string;
  name: string;
  actions: string[];
}

export interface ResourceDraft {
  key: string;
  resource: string;
  description: string;
  /** As typed: actions separated by commas or spaces. */
  actions: string;
  relations: RelationDraft[];
}

interface StoredResource {
  resource: string;
  description: string;
  actions: string[];
  relations: { name: string; actions: string[]; builtIn: boolean }[];
}

let counter = 0;
/** A key unique in this page's life (crypto.randomUUID needs a secure context, which a plain-HTTP deployment is not). */
export const nextKey = (): string => `k${++counter}`;

export const splitTokens = (text: string): string[] => text.split(/[\s,]+/).filter((t) => t !== "");

export function draftFromCatalog(resources: readonly StoredResource[]): ResourceDraft[] {
  return resources.map((r) => ({
    key: nextKey(),
    resource: r.resource,
    description: r.description,
    actions: r.actions.join(", "),
    relations: r.relations.filter((x) => !x.builtIn).map((x) => ({ key: nextKey(), name: x.name, actions: [...x.actions] })),
  }));
}

export function draftToRequest(draft: readonly ResourceDraft[]): StoredResource[] {
  return draft.map((r) => {
    const actions = splitTokens(r.actions);
    return {
      resource: r.resource.trim(),
      description: r.description,
      actions,
      relations: r.relations.map((x) => ({ name: x.name.trim(), actions: x.actions.filter((a) => actions.includes(a)), builtIn: false })),
    };
  });
}

/** Whether two catalogs, as draftToRequest gives them, would store the same thing (a save of one over the other changes nothing). */
export const sameCatalog = (a: readonly StoredResource[], b: readonly StoredResource[]): boolean => JSON.stringify(a) === JSON.stringify(b);
