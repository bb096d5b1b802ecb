/**
 * Roles: the list (paged) with a form for a new one, a role's own page (edit
 * its name, description and attached policies, delete it, and the users it
 * is assigned to, each with the CEL condition the assignment may carry),
 * and a user's roles with offboarding (remove them all).
 * Mounted with `nest` under /apps/{appId}/roles, so "/" and "/:roleId" here
 * are relative to it.
 */
import { skipToken, useMutation, useQuery } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import { Route, Switch } from "wouter";
import type { GetCurrentKeyResponse } from "../../../gen/authz/v1/applications_pb.js";
import { PolicyService, type Policy } from "../../../gen/authz/v1/policies_pb.js";
import { RoleService, type Role } from "../../../gen/authz/v1/roles_pb.js";
import { ConditionField, ConditionText, conditionInput } from "../components/condition-field";
import { DangerButton } from "../components/danger-button";
import { ErrorNote, FieldError } from "../components/error-note";
import { useNotify } from "../components/notice";
import { PageLink, useGo } from "../components/page-link";
import { PagerControls } from "../components/pager";
import { When } from "../components/timestamp";
import { apiProblem, type ApiProblem } from "../lib/errors";
import { usePager } from "../lib/pager";
import { sameSet } from "../lib/policy-changes";
import { appPaths } from "../lib/routes";

const PAGE_SIZE = 50;

export function RolesPage({ appId, caller }: { appId: string; caller: GetCurrentKeyResponse }) {
  const canWrite = caller.kind === "operator" || caller.scopes.includes("write");
  return (
    <Switch>
      <Route path="/">
        <RoleList appId={appId} canWrite={canWrite} />
      </Route>
      <Route path="/:roleId">{(params) => <RoleDetail key={params.roleId} appId={appId} roleId={params.roleId} canWrite={canWrite} />}</Route>
    </Switch>
  );
}

// ---------------------------------------------------------------------------
// Shared pieces

/**
 * Every policy of the application (one page of 1,000), and their names by id;
 * the names are undefined until the list has come (so a role is never shown
 * with its policies' ids first and their names a moment later).
 */
function usePolicies(appId: string) {
  const policies = useQuery(PolicyService.method.listPolicies, { appId, pageSize: 1000 });
  const list = policies.data?.policies ?? [];
  const names: PolicyNameMap = policies.isPending ? undefined : new Map(list.map((p) => [p.policyId, p.name]));
  return { query: policies, list, names };
}

/** Policy names by id; undefined while they load. */
type PolicyNameMap = ReadonlyMap<string, string> | undefined;

const scopeText = (tenantId: string | undefined) => (tenantId === undefined ? "Application-wide" : `Tenant ${tenantId}`);

/** A tenant-scoped policy attaches only to a role of the same tenant. */
const attachable = (policy: Policy, roleTenant: string | undefined) => policy.tenantId === undefined || policy.tenantId === roleTenant;

function PolicyNames({ ids, names }: { ids: string[]; names: PolicyNameMap }) {
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

/**
 * The field errors of a failed create or update about policyIds: "policyIds"
 * itself, and "policyIds[i]" mapped back to the policy id sent at index i.
 */
function policyErrors(problem: ApiProblem | undefined, sent: string[] | undefined): { list: string | undefined; byPolicy: Map<string, string> } {
  const byPolicy = new Map<string, string>();
  let list: string | undefined;
  for (const [field, reason] of problem?.fields ?? []) {
    if (field === "policyIds") list = reason;
    const m = /^policyIds\[(\d+)\]$/.exec(field);
    const id = m === null ? undefined : sent?.[Number(m[1])];
    if (id !== undefined && !byPolicy.has(id)) byPolicy.set(id, reason);
  }
  return { list, byPolicy };
}

/** Whether the error needs the general note: no field errors, or one no field shows. */
function needsNote(problem: ApiProblem | undefined, shown: (field: string) => boolean): boolean {
  if (problem === undefined) return false;
  if (problem.fields.size === 0) return true;
  return [...problem.fields.keys()].some((f) => !shown(f));
}

/** Checkboxes of policies, each with its name, tenant and description; errors next to each. */
function PolicyChecklist({
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

function RolesTable({ appId, roles, names, caption }: { appId: string; roles: Role[]; names: PolicyNameMap; caption: string }) {
  return (
    <table>
      <caption className="visually-hidden">{caption}</caption>
      <thead>
        <tr>
          <th scope="col">Name</th>
          <th scope="col">Description</th>
          <th scope="col">Scope</th>
          <th scope="col">Policies</th>
        </tr>
      </thead>
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

// ---------------------------------------------------------------------------
// The list, a new role, and a user's roles

function RoleList({ appId, canWrite }: { appId: string; canWrite: boolean }) {
  const pager = usePager();
  const roles = useQuery(RoleService.method.listRoles, { appId, pageSize: PAGE_SIZE, pageToken: pager.token });
  const policies = usePolicies(appId);
  const list = roles.data?.roles ?? [];
  return (
    <>
      <h1>Roles</h1>
      {policies.query.isError && <ErrorNote error={policies.query.error} title="The policies could not be read" />}
      {canWrite ? (
        <NewRole appId={appId} policies={policies.list} />
      ) : (
        <p className="muted">This API key lacks the write scope: it can read roles but not change them.</p>
      )}
      <section aria-labelledby="roles-all">
        <h2 id="roles-all">All roles</h2>
        {roles.isError && <ErrorNote error={roles.error} />}
        {roles.isPending && <p role="status">Loading roles…</p>}
        {roles.isSuccess && list.length === 0 && pager.page === 1 ? (
          <p>No roles yet.</p>
        ) : (
          roles.isSuccess && <RolesTable appId={appId} roles={list} names={policies.names} caption="All roles" />
        )}
        <PagerControls pager={pager} nextPageToken={roles.data?.nextPageToken} label="Roles" />
      </section>
      <UserRoles appId={appId} canWrite={canWrite} names={policies.names} />
    </>
  );
}

function NewRole({ appId, policies }: { appId: string; policies: Policy[] }) {
  const queryClient = useQueryClient();
  const create = useMutation(RoleService.method.createRole, { onSuccess: () => queryClient.invalidateQueries() });
  const [form, setForm] = useState({ name: "", description: "", tenantId: "" });
  const [policyIds, setPolicyIds] = useState<string[]>([]);
  const problem = create.error ? apiProblem(create.error) : undefined;
  const { list: policiesError, byPolicy } = policyErrors(problem, create.variables?.policyIds as string[] | undefined);
  const shownPolicies = new Set(policies.map((p) => p.policyId));
  const sent = (create.variables?.policyIds ?? []) as string[];
  const showsField = (f: string) => {
    if (f === "name" || f === "description" || f === "tenantId" || f === "policyIds") return true;
    const m = /^policyIds\[(\d+)\]$/.exec(f);
    const id = m === null ? undefined : sent[Number(m[1])];
    return id !== undefined && shownPolicies.has(id);
  };
  const created = create.data?.role;
  const set = (field: keyof typeof form) => (value: string) => setForm((f) => ({ ...f, [field]: value }));
  const tenant = form.tenantId === "" ? undefined : form.tenantId;

  const submit = (event: FormEvent) => {
    event.preventDefault();
    create.mutate(
      { appId, name: form.name, description: form.description, policyIds, ...(tenant === undefined ? {} : { tenantId: tenant }) },
      {
        onSuccess: () => {
          setForm({ name: "", description: "", tenantId: "" });
          setPolicyIds([]);
        },
      },
    );
  };
  return (
    <section aria-labelledby="roles-new">
      <h2 id="roles-new">New role</h2>
      <form onSubmit={submit}>
        <div className="grid-form">
          <div className="field">
            <label htmlFor="roles-new-name">Name</label>
            <input id="roles-new-name" value={form.name} onChange={(e) => set("name")(e.target.value)} required maxLength={200} aria-describedby="roles-new-name-error" />
            <FieldError id="roles-new-name-error" reason={problem?.fields.get("name")} />
          </div>
          <div className="field">
            <label htmlFor="roles-new-tenant">Tenant (optional; empty for application-wide)</label>
            <input id="roles-new-tenant" value={form.tenantId} onChange={(e) => set("tenantId")(e.target.value)} aria-describedby="roles-new-tenant-error" />
            <FieldError id="roles-new-tenant-error" reason={problem?.fields.get("tenantId")} />
          </div>
        </div>
        <div className="field">
          <label htmlFor="roles-new-description">Description</label>
          <textarea
            id="roles-new-description"
            value={form.description}
            onChange={(e) => set("description")(e.target.value)}
            rows={2}
            aria-describedby="roles-new-description-error"
          />
          <FieldError id="roles-new-description-error" reason={problem?.fields.get("description")} />
        </div>
        <PolicyChecklist
          idPrefix="roles-new"
          legend="Attached policies"
          policies={policies}
          selected={policyIds}
          onChange={setPolicyIds}
          roleTenant={tenant}
          errors={byPolicy}
          listError={policiesError}
          note="A tenant's policy attaches only to a role of the same tenant."
        />
        <button type="submit" disabled={create.isPending}>
          Create role
        </button>
      </form>
      {needsNote(problem, showsField) && <ErrorNote error={create.error} />}
      {created !== undefined && !create.isError && (
        <p role="status" className="ra-notice">
          Role <PageLink to={appPaths(appId).role(created.roleId)}>{created.name}</PageLink> created.
        </p>
      )}
    </section>
  );
}

function UserRoles({ appId, canWrite, names }: { appId: string; canWrite: boolean; names: PolicyNameMap }) {
  const queryClient = useQueryClient();
  const pager = usePager();
  const [draft, setDraft] = useState("");
  const [userId, setUserId] = useState("");
  const [confirming, setConfirming] = useState(false);
  const roles = useQuery(RoleService.method.listUserRoles, userId === "" ? skipToken : { appId, userId, pageSize: PAGE_SIZE, pageToken: pager.token });
  const removeAll = useMutation(RoleService.method.deleteUserRoles, { onSuccess: () => queryClient.invalidateQueries() });
  const problem = roles.error ? apiProblem(roles.error) : undefined;
  const list = roles.data?.roles ?? [];
  const removed = removeAll.data !== undefined && removeAll.variables?.userId === userId ? removeAll.data : undefined;

  const submit = (event: FormEvent) => {
    event.preventDefault();
    setUserId(draft);
    setConfirming(false);
    removeAll.reset();
    pager.reset();
  };
  return (
    <section aria-labelledby="roles-user">
      <h2 id="roles-user">A user's roles</h2>
      <form onSubmit={submit} className="inline-form">
        <div className="field">
          <label htmlFor="roles-user-id">User id</label>
          <input id="roles-user-id" value={draft} onChange={(e) => setDraft(e.target.value)} required aria-describedby="roles-user-id-error" />
          <FieldError id="roles-user-id-error" reason={problem?.fields.get("userId")} />
        </div>
        <button type="submit">Show roles</button>
      </form>
      {needsNote(problem, (f) => f === "userId") && <ErrorNote error={roles.error} />}
      {userId !== "" && roles.isPending && <p role="status">Loading the roles of {userId}…</p>}
      {userId !== "" && roles.isSuccess && (
        <>
          {list.length === 0 && pager.page === 1 ? (
            <p>
              User <strong>{userId}</strong> has no roles.
            </p>
          ) : (
            <>
              <p>
                Roles of user <strong>{userId}</strong>:
              </p>
              <RolesTable appId={appId} roles={list} names={names} caption={`Roles of user ${userId}`} />
            </>
          )}
          <PagerControls pager={pager} nextPageToken={roles.data.nextPageToken} label={`Roles of ${userId}`} />
          {canWrite && (list.length > 0 || pager.page > 1) && (
            <div className="ra-confirm">
              {confirming ? (
                <>
                  <span>Remove every role assignment of {userId}?</span>
                  <DangerButton
                    onClick={() => removeAll.mutate({ appId, userId }, { onSettled: () => setConfirming(false), onSuccess: () => pager.reset() })}
                    disabled={removeAll.isPending}
                  >
                    Remove all roles of {userId} now
                  </DangerButton>
                  <button type="button" className="secondary" onClick={() => setConfirming(false)}>
                    Cancel
                  </button>
                </>
              ) : (
                <DangerButton onClick={() => setConfirming(true)}>Remove all of this user's roles</DangerButton>
              )}
            </div>
          )}
        </>
      )}
      {removeAll.isError && <ErrorNote error={removeAll.error} />}
      {removed !== undefined && (
        <p role="status" className="ra-notice">
          Removed {removed.deleted} role assignment{removed.deleted === 1 ? "" : "s"} from user {userId}.
        </p>
      )}
    </section>
  );
}

// ---------------------------------------------------------------------------
// A role's page

function RoleDetail({ appId, roleId, canWrite }: { appId: string; roleId: string; canWrite: boolean }) {
  const role = useQuery(RoleService.method.getRole, { appId, roleId });
  const policies = usePolicies(appId);
  const r = role.data?.role;
  return (
    <>
      <p>
        <PageLink to={appPaths(appId).roles}>← All roles</PageLink>
      </p>
      {role.isPending && (
        <>
          <h1>Role</h1>
          <p role="status">Loading the role…</p>
        </>
      )}
      {role.isError && (
        <>
          <h1>Role</h1>
          <ErrorNote error={role.error} />
        </>
      )}
      {r !== undefined && (
        <>
          <h1>{r.name}</h1>
          {policies.query.isError && <ErrorNote error={policies.query.error} title="The policies could not be read" />}
          <dl className="ra-facts">
            <dt>Id</dt>
            <dd>
              <code>{r.roleId}</code>
            </dd>
            <dt>Scope</dt>
            <dd>{scopeText(r.tenantId)}</dd>
            <dt>Description</dt>
            <dd>{r.description === "" ? <span className="muted">None</span> : r.description}</dd>
            <dt>Policies</dt>
            <dd>
              <PolicyNames ids={r.policyIds} names={policies.names} />
            </dd>
            <dt>Created</dt>
            <dd>
              <When ts={r.createdAt} />
            </dd>
            <dt>Updated</dt>
            <dd>
              <When ts={r.updatedAt} />
            </dd>
          </dl>
          {canWrite && <EditRole appId={appId} role={r} policies={policies.list} />}
          <Assignments appId={appId} role={r} canWrite={canWrite} />
          {canWrite && <DeleteRole appId={appId} role={r} />}
        </>
      )}
    </>
  );
}

function EditRole({ appId, role, policies }: { appId: string; role: Role; policies: Policy[] }) {
  const queryClient = useQueryClient();
  const [name, setName] = useState(role.name);
  const [description, setDescription] = useState(role.description);
  const [policyIds, setPolicyIds] = useState<string[]>(role.policyIds);
  const notify = useNotify();
  const update = useMutation(RoleService.method.updateRole, { onSuccess: () => queryClient.invalidateQueries() });
  const problem = update.error ? apiProblem(update.error) : undefined;
  // The policies this role can attach: application-wide ones and its tenant's, and any attached now.
  const choices = policies.filter((p) => attachable(p, role.tenantId) || role.policyIds.includes(p.policyId));
  const choiceIds = new Set(choices.map((p) => p.policyId));
  // An attached policy the list does not know (more than 1,000 policies): keep it, unnamed.
  const unknownAttached = policyIds.filter((id) => !choiceIds.has(id));
  const sent = (update.variables?.policyIds ?? []) as string[];
  const { list: policiesError, byPolicy } = policyErrors(problem, sent);
  const showsField = (f: string) => {
    if (f === "name" || f === "description" || f === "policyIds") return true;
    const m = /^policyIds\[(\d+)\]$/.exec(f);
    const id = m === null ? undefined : sent[Number(m[1])];
    return id !== undefined && choiceIds.has(id);
  };

  const paths = [
    ...(name !== role.name ? ["name"] : []),
    ...(description !== role.description ? ["description"] : []),
    ...(!sameSet(policyIds, role.policyIds) ? ["policy_ids"] : []),
  ];
  const submit = (event: FormEvent) => {
    event.preventDefault();
    if (paths.length === 0) return;
    update.mutate(
      {
        appId,
        roleId: role.roleId,
        updateMask: { paths },
        ...(paths.includes("name") ? { name } : {}),
        ...(paths.includes("description") ? { description } : {}),
        ...(paths.includes("policy_ids") ? { policyIds } : {}),
      },
      {
        onSuccess: (res) => {
          if (res.role !== undefined) {
            setName(res.role.name);
            setDescription(res.role.description);
            setPolicyIds(res.role.policyIds);
          }
          notify(`Role ${res.role?.name ?? name} saved.`);
        },
      },
    );
  };
  const discard = () => {
    setName(role.name);
    setDescription(role.description);
    setPolicyIds(role.policyIds);
    update.reset();
  };
  return (
    <section aria-labelledby="roles-edit">
      <h2 id="roles-edit">Edit role</h2>
      <form onSubmit={submit}>
        <div className="field">
          <label htmlFor="roles-edit-name">Name</label>
          <input id="roles-edit-name" value={name} onChange={(e) => setName(e.target.value)} required maxLength={200} aria-describedby="roles-edit-name-error" />
          <FieldError id="roles-edit-name-error" reason={problem?.fields.get("name")} />
        </div>
        <div className="field">
          <label htmlFor="roles-edit-description">Description</label>
          <textarea id="roles-edit-description" value={description} onChange={(e) => setDescription(e.target.value)} rows={2} aria-describedby="roles-edit-description-error" />
          <FieldError id="roles-edit-description-error" reason={problem?.fields.get("description")} />
        </div>
        <p className="field">
          <strong>Scope:</strong> {scopeText(role.tenantId)} <span className="muted">(fixed when the role was created)</span>
        </p>
        <PolicyChecklist
          idPrefix="roles-edit"
          legend="Attached policies"
          policies={choices}
          selected={policyIds}
          onChange={setPolicyIds}
          roleTenant={role.tenantId}
          errors={byPolicy}
          listError={policiesError}
          note={role.tenantId === undefined ? "Only application-wide policies attach to an application-wide role." : `Application-wide policies and those of tenant ${role.tenantId}.`}
        />
        {unknownAttached.length > 0 && (
          <p className="muted">
            Also attached (not in the first 1,000 policies): {unknownAttached.map((id) => <code key={id}>{id} </code>)}
          </p>
        )}
        {/* Nothing to save until something changed; a save makes the form the stored role again. */}
        <button type="submit" disabled={paths.length === 0 || update.isPending}>
          Save changes
        </button>
        <button type="button" className="secondary" onClick={discard} disabled={paths.length === 0 && !update.isError}>
          Discard changes
        </button>
      </form>
      {needsNote(problem, showsField) && <ErrorNote error={update.error} />}
    </section>
  );
}

function Assignments({ appId, role, canWrite }: { appId: string; role: Role; canWrite: boolean }) {
  const queryClient = useQueryClient();
  const pager = usePager();
  const assignments = useQuery(RoleService.method.listRoleAssignments, { appId, roleId: role.roleId, pageSize: PAGE_SIZE, pageToken: pager.token });
  const assign = useMutation(RoleService.method.assignRole, { onSuccess: () => queryClient.invalidateQueries() });
  const unassign = useMutation(RoleService.method.unassignRole, { onSuccess: () => queryClient.invalidateQueries() });
  const [userId, setUserId] = useState("");
  const [condition, setCondition] = useState("");
  const notify = useNotify();
  const problem = assign.error ? apiProblem(assign.error) : undefined;
  const list = assignments.data?.assignments ?? [];

  const submit = (event: FormEvent) => {
    event.preventDefault();
    const user = userId;
    const sent = conditionInput(condition);
    assign.mutate(
      { appId, roleId: role.roleId, userId: user, ...(sent === undefined ? {} : { condition: sent }) },
      {
        onSuccess: () => {
          setUserId("");
          setCondition("");
          notify(sent === undefined ? `Assigned ${role.name} to ${user}.` : `Assigned ${role.name} to ${user}, where ${sent} holds.`);
        },
      },
    );
  };
  const remove = (user: string) => {
    unassign.mutate({ appId, roleId: role.roleId, userId: user }, { onSuccess: (res) => notify(res.deleted ? `Removed ${role.name} from ${user}.` : `${user} did not have ${role.name}.`) });
  };
  return (
    <section aria-labelledby="roles-assignments">
      <h2 id="roles-assignments">Assigned users</h2>
      {canWrite && (
        <form onSubmit={submit} className="inline-form">
          <div className="field">
            <label htmlFor="roles-assign-user">User id</label>
            <input id="roles-assign-user" value={userId} onChange={(e) => setUserId(e.target.value)} required aria-describedby="roles-assign-user-error" />
            <FieldError id="roles-assign-user-error" reason={problem?.fields.get("userId")} />
          </div>
          <ConditionField
            id="roles-assign-condition"
            label="Condition (optional, CEL)"
            hint="The role then counts for the user only where it holds. Assigning a user again replaces their condition; with none, removes it."
            example="has(context.ticket)"
            value={condition}
            onChange={setCondition}
            reason={problem?.fields.get("condition")}
          />
          <button type="submit" disabled={assign.isPending}>
            Assign role
          </button>
        </form>
      )}
      {needsNote(problem, (f) => f === "userId" || f === "condition") && <ErrorNote error={assign.error} />}
      {unassign.isError && <ErrorNote error={unassign.error} />}
      {assignments.isError && <ErrorNote error={assignments.error} />}
      {assignments.isPending && <p role="status">Loading the assignments…</p>}
      {assignments.isSuccess &&
        (list.length === 0 && pager.page === 1 ? (
          <p>No user has this role.</p>
        ) : (
          <table>
            <caption className="visually-hidden">Users assigned {role.name}</caption>
            <thead>
              <tr>
                <th scope="col">User</th>
                <th scope="col">Assigned</th>
                <th scope="col">Condition</th>
                {canWrite && (
                  <th scope="col">
                    <span className="visually-hidden">Actions</span>
                  </th>
                )}
              </tr>
            </thead>
            <tbody>
              {list.map((a) => (
                <tr key={a.userId}>
                  <td>{a.userId}</td>
                  <td>
                    <When ts={a.createdAt} />
                  </td>
                  <td>
                    <ConditionText condition={a.condition} />
                  </td>
                  {canWrite && (
                    <td>
                      <DangerButton onClick={() => remove(a.userId)} disabled={unassign.isPending} aria-label={`Remove ${a.userId}`}>
                        Remove
                      </DangerButton>
                    </td>
                  )}
                </tr>
              ))}
            </tbody>
          </table>
        ))}
      <PagerControls pager={pager} nextPageToken={assignments.data?.nextPageToken} label="Assigned users" />
    </section>
  );
}

function DeleteRole({ appId, role }: { appId: string; role: Role }) {
  const queryClient = useQueryClient();
  const go = useGo();
  const [confirming, setConfirming] = useState(false);
  const remove = useMutation(RoleService.method.deleteRole, {
    onSuccess: () => {
      go(appPaths(appId).roles);
      void queryClient.invalidateQueries();
    },
  });
  return (
    <section aria-labelledby="roles-delete">
      <h2 id="roles-delete">Delete role</h2>
      <p>Deleting the role also removes every assignment of it: its users lose what it allowed them.</p>
      {confirming ? (
        <div className="ra-confirm">
          <span>Delete {role.name}?</span>
          <DangerButton onClick={() => remove.mutate({ appId, roleId: role.roleId }, { onError: () => setConfirming(false) })} disabled={remove.isPending}>
            Delete {role.name} now
          </DangerButton>
          <button type="button" className="secondary" onClick={() => setConfirming(false)}>
            Cancel
          </button>
        </div>
      ) : (
        <DangerButton onClick={() => setConfirming(true)}>Delete role</DangerButton>
      )}
      {remove.isError && <ErrorNote error={remove.error} />}
    </section>
  );
}
