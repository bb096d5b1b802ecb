import type { CatalogResource } from "../../../gen/authz/v1/catalog_pb.js";

/**
 * Permissions ("resource:action") picked from the catalog, grouped by
 * resource, each group with the resource's description (what the spec's
 * descriptions are for). A permission the catalog no longer has cannot be
 * held by a policy (the catalog refuses to drop it), so every held one is here.
 */
export function PermissionPicker({
  idPrefix,
  resources,
  selected,
  onChange,
  error,
}: {
  idPrefix: string;
  resources: readonly CatalogResource[];
  selected: readonly string[];
  onChange: (permissions: string[]) => void;
  error: string | undefined;
}) {
  const toggle = (permission: string, on: boolean) =>
    onChange(on ? [...selected.filter((p) => p !== permission), permission] : selected.filter((p) => p !== permission));
  return (
    <fieldset className="picker" aria-describedby={`${idPrefix}-permissions-error`}>
      <legend>Permissions</legend>
      {resources.length === 0 && <p>The catalog has no resources yet: add them on the Catalog page.</p>}
      {resources.map((r) => {
        const all = r.actions.map((a) => `${r.resource}:${a}`);
        const held = all.filter((p) => selected.includes(p)).length;
        return (
          <fieldset key={r.resource} className="picker-group" aria-describedby={`${idPrefix}-${r.resource}-description`}>
            <legend>
              {r.resource} <span className="muted">({held} of {all.length})</span>
            </legend>
            <p id={`${idPrefix}-${r.resource}-description`} className="muted">
              {r.description === "" ? "No description." : r.description}
            </p>
            <div className="picker-actions">
              {r.actions.map((a) => {
                const permission = `${r.resource}:${a}`;
                return (
                  <label key={a} className="check">
                    <input type="checkbox" checked={selected.includes(permission)} onChange={(e) => toggle(permission, e.target.checked)} />
                    {a}
                  </label>
                );
              })}
            </div>
          </fieldset>
        );
      })}
      <span id={`${idPrefix}-permissions-error`} className="field-error">
        {error}
      </span>
    </fieldset>
  );
}
