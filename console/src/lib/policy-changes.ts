/**
 * What an edit of a policy changes, as an update request: the fields changed
 * and the update mask naming them (a mask, so that emptying the permissions
 * is a change and not "left alone").
 */
export const sameSet = (a: readonly string[], b: readonly string[]): boolean => a.length === b.length && a.every((x) => b.includes(x));

interface PolicyForm {
  name: string;
  description: string;
  permissions: readonly string[];
}

export function policyChanges(stored: PolicyForm, form: PolicyForm): { paths: string[]; fields: { name?: string; description?: string; permissions?: string[] } } {
  const paths: string[] = [];
  const fields: { name?: string; description?: string; permissions?: string[] } = {};
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
  return { paths, fields };
}
