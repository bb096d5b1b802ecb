import type { Queryable } from "../store/db.js";
import { Violations } from "./errors.js";
import { NAME_TOKEN } from "./formats.js";

const PERMISSION = new RegExp(`^(${NAME_TOKEN.source.slice(1, -1)}):(${NAME_TOKEN.source.slice(1, -1)})$`);

/**
 * Checks a permission list against the application's catalog, naming each
 * malformed or unknown permission, and folds duplicates keeping first order.
 * Call inside the transaction that writes the list, after locking the
 * application row, so the catalog cannot change in between.
 */
export async function resolvePermissions(q: Queryable, appId: string, permissions: string[], field = "permissions"): Promise<string[]> {
  const { rows } = await q.query<{ resource: string; actions: string[] }>(
    "SELECT resource, actions FROM catalog_resources WHERE app_id = $1",
    [appId],
  );
  const catalog = new Map(rows.map((r) => [r.resource, new Set(r.actions)]));
  const v = new Violations();
  const folded: string[] = [];
  const seen = new Set<string>();
  permissions.forEach((permission, i) => {
    const at = `${field}[${i}]`;
    const match = PERMISSION.exec(permission);
    if (match === null) {
      v.add(at, `${JSON.stringify(permission)} is not a permission of the form resource:action`);
      return;
    }
    const [, resource, action] = match as unknown as [string, string, string];
    const actions = catalog.get(resource);
    if (actions === undefined) {
      v.add(at, `${JSON.stringify(permission)} is not in the catalog: there is no resource "${resource}"`);
      return;
    }
    if (!actions.has(action)) {
      v.add(at, `${JSON.stringify(permission)} is not in the catalog: resource "${resource}" has no action "${action}"`);
      return;
    }
    if (!seen.has(permission)) folded.push(permission);
    seen.add(permission);
  });
  v.throwIfAny();
  return folded;
}

/** The added and removed items between two lists, for audit events. */
export function listChange(before: string[], after: string[]): { added: string[]; removed: string[] } {
  const b = new Set(before);
  const a = new Set(after);
  return { added: after.filter((x) => !b.has(x)), removed: before.filter((x) => !a.has(x)) };
}
