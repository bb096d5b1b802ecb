/**
 * What the roles pages share: the application's policies and their names, a
 * role's scope in words, the checklist of policies a role attaches (with the
 * errors of a create or update next to each), and the table of roles.
 */
import { useQuery } from "@connectrpc/connect-query";
import { PolicyService, type Policy } from "../../../../gen/authz/v1/policies_pb.js";
import type { Role } from "../../../../gen/authz/v1/roles_pb.js";
import { ColumnHeads } from "../../components/column-heads";
import { FieldError } from "../../components/error-note";
import { PageLink } from "../../components/page-link";
import type { ApiProblem } from "../../lib/errors";
import { appPaths } from "../../lib/routes";

export const PAGE_SIZE = 50;

/**
 * Every policy of the application (one page of 1,000), and their names by id;
 * the names are undefined until the list has come (so a role is never shown
 * with its policies' ids first and their names a moment later).
 */
export function usePolicies(appId: string) {
  const policies = useQuery(PolicyService.method.listPolicies, { appId, pageSize: 1000 });
  const list = policies.data?.policies ?? [];
  const names: PolicyNameMap = policies.isPending ? undefined : new Map(list.map((p) => [p.policyId, p.name]));
  return { query: policies, list, names };
}

/** Policy names by id; undefined while they load. */
export type PolicyNameMap = ReadonlyMap<string, string> | undefined;

export const scopeText = (tenantId: string | undefined) => (tenantId === undefined ? "Application-wide" : `Tenant ${tenantId}`);

/** A tenant-scoped policy attaches only to a role of the same tenant. */
export const attachable = (policy: Policy, roleTenant: string | undefined) => policy.tenantId === undefined || policy.tenantId === roleTenant;

export function PolicyNames({ ids, names }: { ids: string[]; names: PolicyNameMap }) {
  if (ids.length === 0) return <span className="muted">None</span>;
  if (names === undefined) return <span className="muted">Loading…</span>;
  return (
    <ul className="ra-inline-list">
      {ids.map((id) => (
        <li key={id}>{names.has(id) ? names.get(id) : <code>{id}</code>}</li>
      ))}
    </ul>
  );
}

/** The policy id a "policyIds[i]" field names: the one sent at index i. */
const policyAt = (field: string, sent: readonly string[]): string | undefined => {
  const m = /^policyIds\[(\d+)\]$/.exec(field);
  return m === null ? undefined : sent[Number(m[1])];
};

/**
 * The field errors of a failed create or update about policyIds: "policyIds"
 * itself, and "policyIds[i]" mapped back to the policy id sent at index i.
 */
export function policyErrors(problem: ApiProblem | undefined, sent: readonly string[]): { list: string | undefined; byPolicy: Map<string, string> } {
  const byPolicy = new Map<string, string>();
  let list: string | undefined;
  for (const [field, reason] of problem?.fields ?? []) {
    if (field === "policyIds") list = reason;
    const id = policyAt(field, sent);
    if (id !== undefined && !byPolicy.has(id)) byPolicy.set(id, reason);
  }
  return { list, byPolicy };
}

/** Which field errors a role's form shows: its own fields, and those of the policies it lists (by the ids sent). */
export const shownByForm =
  (own: readonly string[], listed: ReadonlySet<string>, sent: readonly string[]) =>
  (field: string): boolean => {
    if (own.includes(field)) return true;
    const id = policyAt(field, sent);
    return id !== undefined && listed.has(id);
  };

/** Whether the error needs the general note: no field errors, or one no field shows. */
export function needsNote(problem: ApiProblem | undefined, shown: (field: string) => boolean): boolean {
  if (problem === undefined) return false;
  if (problem.fields.size === 0) return true;
  return [...problem.fields.keys()].some((f) => !shown(f));
}

/** Checkboxes of policies, each with its name, tenant and description; errors next to each. */
export function PolicyChecklist({
  idPrefix,
  legend,
  policies,
  selected,
  onChange,
  roleTenant,
  errors,
  listError,
  note,
}: {
  idPrefix: string;
  legend: string;
  policies: Policy[];
  selected: string[];
  onChange: (next: string[]) => void;
  roleTenant: string | undefined;
  errors: Map<string, string>;
  listError: string | undefined;
  note?: string;
}) {
  const toggle = (policyId: string, on: boolean) => onChange(on ? (selected.includes(policyId) ? selected : [...selected, policyId]) : selected.filter((id) => id !== policyId));
  return (
    <fieldset aria-describedby={`${idPrefix}-policies-error`}>
      <legend>{legend}</legend>
      {note !== undefined && <p className="muted">{note}</p>}
      {policies.length === 0 && <p className="muted">This application has no policies yet.</p>}
      <ul className="ra-policy-choices">
        {policies.map((p, i) => {
          const id = `${idPrefix}-policy-${i}`;
          const error = errors.get(p.policyId);
          const mismatch = selected.includes(p.policyId) && !attachable(p, roleTenant);
          return (
            <li key={p.policyId}>
              <input
                type="checkbox"
                id={id}
                checked={selected.includes(p.policyId)}
                onChange={(e) => toggle(p.policyId, e.target.checked)}
                aria-describedby={`${id}-about ${id}-error`}
              />
              <div>
                <label htmlFor={id} className="ra-policy-name">
                  {p.name}
                </label>
                <span id={`${id}-about`} className="muted ra-small">
                  {scopeText(p.tenantId)}
                  {p.description !== "" && <> · {p.description}</>}
                  {mismatch && <> · attaches only to roles of tenant {p.tenantId}</>}
                </span>
                <FieldError id={`${id}-error`} reason={error} />
              </div>
            </li>
          );
        })}
      </ul>
      <FieldError id={`${idPrefix}-policies-error`} reason={listError} />
    </fieldset>
  );
}

export function RolesTable({ appId, roles, names, caption }: { appId: string; roles: Role[]; names: PolicyNameMap; caption: string }) {
  return (
    <table>
      <caption className="visually-hidden">{caption}</caption>
      <ColumnHeads columns={["Name", "Description", "Scope", "Policies"]} />
      <tbody>
        {roles.map((r) => (
          <tr key={r.roleId}>
            <td>
              <PageLink to={appPaths(appId).role(r.roleId)}>{r.name}</PageLink>
            </td>
            <td>{r.description === "" ? <span className="muted">—</span> : r.description}</td>
            <td>{scopeText(r.tenantId)}</td>
            <td>
              <PolicyNames ids={r.policyIds} names={names} />
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
