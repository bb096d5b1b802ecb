/**
 * What an edit of a policy changes, as an update request: the fields changed
 * and the update mask naming them (a mask, so that emptying the permissions
 * is a change and not "left alone", and so that a condition cleared is sent
 * as "" under "condition", which the service reads as "remove it").
 */
export const sameSet = (a: readonly string[], b: readonly string[]): boolean => a.length === b.length && a.every((x) => b.includes(x));

interface PolicyFields {
  name: string;
  description: string;
  permissions: readonly string[];
}

/** The policy as stored: no condition is absent. */
interface StoredPolicy extends PolicyFields {
  condition?: string | undefined;
}

/** The form: the condition as typed, "" (or blank) for none. */
interface PolicyForm extends PolicyFields {
  condition: string;
}

export interface PolicyChanges {
  paths: string[];
  fields: { name?: string; description?: string; permissions?: string[]; condition?: string };
}

export function policyChanges(stored: StoredPolicy, form: PolicyForm): PolicyChanges {
  const paths: string[] = [];
  const fields: PolicyChanges["fields"] = {};
  if (form.name !== stored.name) {
    paths.push("name");
    fields.name = form.name;
  }
  if (form.description !== stored.description) {
    paths.push("description");
    fields.description = form.description;
  }
  if (!sameSet(form.permissions, stored.permissions)) {
    paths.push("permissions");
    fields.permissions = [...form.permissions];
  }
  // A blank field is no condition: "" removes the stored one, and is no change when there is none.
  const condition = form.condition.trim() === "" ? "" : form.condition;
  if (condition !== (stored.condition ?? "")) {
    paths.push("condition");
    fields.condition = condition;
  }
  return { paths, fields };
}
