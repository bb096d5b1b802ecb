/**
 * Policies: the list (each with its tenant, its condition and how many roles
 * it is attached to), creating one with the permission picker and an
 * optional CEL condition, and a policy's page: edit (the condition too; an
 * emptied one is removed) with the impact preview before saving, where
 * permissions held under a condition are told apart from those held
 * outright, and delete (a delete the API blocks shows the attached roles and
 * offers the forced delete behind a typed confirmation).
 */
import { Code } from "@connectrpc/connect";
import { useMutation, useQuery } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import { Route, Switch } from "wouter";
import type { GetCurrentKeyResponse } from "../../../gen/authz/v1/applications_pb.js";
import { CatalogService } from "../../../gen/authz/v1/catalog_pb.js";
import { PolicyService, type ConditionalPermission, type Policy, type PreviewPolicyUpdateResponse } from "../../../gen/authz/v1/policies_pb.js";
import { ConditionField, ConditionText, conditionInput } from "../components/condition-field";
import { DangerButton } from "../components/danger-button";
import { LabelledInput } from "../components/labelled-input";
import { ErrorNote, FieldError } from "../components/error-note";
import { useNotify } from "../components/notice";
import { PageLink, useGo } from "../components/page-link";
import { PagerControls } from "../components/pager";
import { PermissionPicker } from "../components/permission-picker";
import { When } from "../components/timestamp";
import { apiProblem, reasonAt } from "../lib/errors";
import { usePager } from "../lib/pager";
import { policyChanges } from "../lib/policy-changes";
import { appPaths } from "../lib/routes";

const count = (n: number, one: string, many = `${one}s`) => `${n.toLocaleString()} ${n === 1 ? one : many}`;

/** What a policy's condition does, beside its field (docs/conditions.md). */
const CONDITION_HINT =
  "Its permissions then hold, for every role it is attached to, only where the condition holds; empty: they always hold.";

export function PoliciesPage({ appId }: { appId: string; caller: GetCurrentKeyResponse }) {
  return (
    <Switch>
      <Route path="/">
        <PolicyList appId={appId} />
      </Route>
      <Route path="/:policyId">{(params) => <PolicyPage appId={appId} policyId={params.policyId} />}</Route>
    </Switch>
  );
}

function PolicyList({ appId }: { appId: string }) {
  const pager = usePager();
  const policies = useQuery(PolicyService.method.listPolicies, { appId, pageSize: 50, pageToken: pager.token });
  return (
    <>
      <h1>Policies</h1>
      <p>A policy is a named set of permissions; roles attach policies, and users are assigned roles.</p>
      {policies.isError && <ErrorNote error={policies.error} title="The policies could not be read" />}
      {policies.isPending && <p role="status">Loading policies…</p>}
      <table>
        <caption className="visually-hidden">Policies of this application</caption>
        <thead>
          <tr>
            <th scope="col">Name</th>
            <th scope="col">Description</th>
            <th scope="col">Tenant</th>
            <th scope="col">Permissions</th>
            <th scope="col">Condition</th>
            <th scope="col">Roles attached</th>
          </tr>
        </thead>
        <tbody>
          {(policies.data?.policies ?? []).map((p) => (
            <tr key={p.policyId}>
              <td>
                <PageLink to={appPaths(appId).policy(p.policyId)}>{p.name}</PageLink>
              </td>
              <td>{p.description}</td>
              <td>{p.tenantId ?? "Application-wide"}</td>
              <td>{p.permissions.length}</td>
              <td>
                <ConditionText condition={p.condition} />
              </td>
              <td>{p.roleCount}</td>
            </tr>
          ))}
          {policies.data?.policies.length === 0 && (
            <tr>
              <td colSpan={6}>No policies yet.</td>
            </tr>
          )}
        </tbody>
      </table>
      <PagerControls pager={pager} nextPageToken={policies.data?.nextPageToken} label="Policies" />
      <NewPolicy appId={appId} />
    </>
  );
}

function NewPolicy({ appId }: { appId: string }) {
  const queryClient = useQueryClient();
  const go = useGo();
  const catalog = useQuery(CatalogService.method.getCatalog, { appId });
  const createPolicy = useMutation(PolicyService.method.createPolicy, { onSuccess: () => queryClient.invalidateQueries() });
  const [form, setForm] = useState({ name: "", description: "", tenantId: "", permissions: [] as string[], condition: "" });
  const problem = createPolicy.error ? apiProblem(createPolicy.error) : undefined;
  const submit = (event: FormEvent) => {
    event.preventDefault();
    const condition = conditionInput(form.condition);
    createPolicy.mutate(
      {
        appId,
        name: form.name,
        description: form.description,
        permissions: form.permissions,
        ...(form.tenantId === "" ? {} : { tenantId: form.tenantId }),
        ...(condition === undefined ? {} : { condition }),
      },
      { onSuccess: (answer) => go(answer.policy === undefined ? appPaths(appId).policies : appPaths(appId).policy(answer.policy.policyId)) },
    );
  };
  return (
    <section aria-labelledby="new-policy">
      <h2 id="new-policy">New policy</h2>
      <form onSubmit={submit} noValidate>
        <div className="grid-form">
          <LabelledInput id="policy-new-name" label="Name" value={form.name} onChange={(name) => setForm({ ...form, name })} reason={reasonAt(problem, "name")} />
          <LabelledInput
            id="policy-new-description"
            label="Description"
            wide
            value={form.description}
            onChange={(description) => setForm({ ...form, description })}
            reason={reasonAt(problem, "description")}
          />
          <div className="field">
            <label htmlFor="policy-new-tenant">Tenant (empty: application-wide)</label>
            <input id="policy-new-tenant" value={form.tenantId} onChange={(e) => setForm({ ...form, tenantId: e.target.value })} aria-describedby="policy-new-tenant-error" />
            <FieldError id="policy-new-tenant-error" reason={reasonAt(problem, "tenantId")} />
          </div>
        </div>
        {catalog.isError && <ErrorNote error={catalog.error} title="The catalog could not be read" />}
        <PermissionPicker
          idPrefix="policy-new"
          resources={catalog.data?.resources ?? []}
          selected={form.permissions}
          onChange={(permissions) => setForm({ ...form, permissions })}
          error={reasonAt(problem, "permissions")}
        />
        <ConditionField
          id="policy-new-condition"
          label="Condition (optional, CEL)"
          hint={CONDITION_HINT}
          value={form.condition}
          onChange={(condition) => setForm({ ...form, condition })}
          reason={reasonAt(problem, "condition")}
        />
        <button type="submit" disabled={createPolicy.isPending}>
          Create policy
        </button>
        {problem !== undefined && problem.fields.size === 0 && <ErrorNote error={createPolicy.error} title="The policy was not created" />}
      </form>
    </section>
  );
}

function PolicyPage({ appId, policyId }: { appId: string; policyId: string }) {
  const policy = useQuery(PolicyService.method.getPolicy, { appId, policyId });
  if (policy.isPending) return <p role="status">Loading the policy…</p>;
  if (policy.isError) {
    return (
      <>
        <p>
          <PageLink to={appPaths(appId).policies}>All policies</PageLink>
        </p>
        <ErrorNote error={policy.error} title="The policy could not be read" />
      </>
    );
  }
  const stored = policy.data.policy;
  if (stored === undefined) return null;
  // Keyed by the stored version: a save (or another editor's) starts the form again from what is stored.
  return (
    <PolicyEditor
      key={`${stored.policyId}@${stored.updatedAt?.seconds ?? 0}.${stored.updatedAt?.nanos ?? 0}`}
      appId={appId}
      stored={stored}
    />
  );
}

function PolicyEditor({ appId, stored }: { appId: string; stored: Policy }) {
  const queryClient = useQueryClient();
  const notify = useNotify();
  const catalog = useQuery(CatalogService.method.getCatalog, { appId });
  const roles = useQuery(PolicyService.method.listPolicyRoles, { appId, policyId: stored.policyId, pageSize: 100 });
  const preview = useMutation(PolicyService.method.previewPolicyUpdate);
  const update = useMutation(PolicyService.method.updatePolicy, {
    onSuccess: (answer) => {
      // Here, not in mutate's own callback: the refetch remounts this editor, and a mutate callback does not outlive its component.
      notify(`Policy ${answer.policy?.name ?? stored.name} saved.`);
      void queryClient.invalidateQueries();
    },
  });
  const [form, setForm] = useState({ name: stored.name, description: stored.description, permissions: [...stored.permissions], condition: stored.condition ?? "" });
  const changes = policyChanges(stored, form);
  const problem = (update.error ?? preview.error) ? apiProblem(update.error ?? preview.error) : undefined;

  const edit = (change: Partial<typeof form>) => {
    // What was previewed no longer describes the form.
    preview.reset();
    update.reset();
    setForm((f) => ({ ...f, ...change }));
  };
  const request = { appId, policyId: stored.policyId, ...changes.fields, updateMask: { paths: changes.paths } };
  const review = (event: FormEvent) => {
    event.preventDefault();
    preview.mutate(request);
  };

  return (
    <>
      <p>
        <PageLink to={appPaths(appId).policies}>All policies</PageLink>
      </p>
      <h1>Policy {stored.name}</h1>
      <p className="muted">
        {stored.tenantId === undefined ? "Application-wide" : `Tenant ${stored.tenantId}`} · attached to {count(stored.roleCount, "role")} · updated{" "}
        <When ts={stored.updatedAt} />
      </p>
      <p>
        {stored.condition === undefined ? (
          "No condition: its permissions always hold."
        ) : (
          <>
            Condition: its permissions hold only where <ConditionText condition={stored.condition} /> holds.
          </>
        )}
      </p>
      <form onSubmit={review} noValidate>
        {/* Once saved, this editor gives way to one of the policy as read back (keyed by its update time): until then it takes no edit, which that one would drop. */}
        <fieldset className="bare" disabled={update.isSuccess}>
          <div className="grid-form">
            <LabelledInput id="policy-edit-name" label="Name" value={form.name} onChange={(name) => edit({ name })} reason={reasonAt(problem, "name")} />
            <LabelledInput
              id="policy-edit-description"
              label="Description"
              wide
              value={form.description}
              onChange={(description) => edit({ description })}
              reason={reasonAt(problem, "description")}
            />
          </div>
          {catalog.isError && <ErrorNote error={catalog.error} title="The catalog could not be read" />}
          <PermissionPicker
            idPrefix="policy-edit"
            resources={catalog.data?.resources ?? []}
            selected={form.permissions}
            onChange={(permissions) => edit({ permissions })}
            error={reasonAt(problem, "permissions")}
          />
          <ConditionField
            id="policy-edit-condition"
            label="Condition (optional, CEL)"
            hint={`${CONDITION_HINT} Emptying the field removes the condition.`}
            value={form.condition}
            onChange={(condition) => edit({ condition })}
            reason={reasonAt(problem, "condition")}
          />
          <button type="submit" disabled={changes.paths.length === 0 || preview.isPending}>
            Review changes
          </button>
        </fieldset>
        {problem !== undefined && problem.fields.size === 0 && <ErrorNote error={update.error ?? preview.error} />}
      </form>
      {preview.data !== undefined && (
        <Impact
          impact={preview.data}
          saving={update.isPending}
          onSave={() => update.mutate(request)}
          onCancel={() => preview.reset()}
        />
      )}
      <section aria-labelledby="policy-roles">
        <h2 id="policy-roles">Roles it is attached to</h2>
        {roles.isError && <ErrorNote error={roles.error} />}
        {roles.isPending && <p role="status">Loading roles…</p>}
        <ul>
          {(roles.data?.roles ?? []).map((r) => (
            <li key={r.roleId}>
              <PageLink to={appPaths(appId).role(r.roleId)}>{r.name}</PageLink> {r.tenantId !== undefined && <span className="muted">(tenant {r.tenantId})</span>}
            </li>
          ))}
          {roles.data?.roles.length === 0 && <li>None.</li>}
          {roles.data !== undefined && roles.data.nextPageToken !== "" && <li>… and more.</li>}
        </ul>
      </section>
      <DeletePolicy appId={appId} policy={stored} />
    </>
  );
}

/**
 * What saving would do to who may do what, in the words of the issue:
 * "removes document:delete from 1,204 users, 17 keep it". Permissions held
 * under a condition are listed apart from those held outright
 * (docs/conditions.md): a condition added, changed or removed takes the
 * permissions away under the old one and gives them under the new, which is
 * not gaining or losing them outright, and the user counts then cover both.
 */
function Impact({ impact, saving, onSave, onCancel }: { impact: PreviewPolicyUpdateResponse; saving: boolean; onSave: () => void; onCancel: () => void }) {
  const users = impact.users;
  const outright = impact.added.length > 0 || impact.removed.length > 0;
  const conditional = impact.conditionalAdded.length > 0 || impact.conditionalRemoved.length > 0;
  return (
    <section aria-labelledby="impact" className="impact" role="region">
      <h2 id="impact">Before you save</h2>
      {!outright && !conditional && <p>The permissions do not change: nobody gains or loses access.</p>}
      {conditional ? <ConditionalImpact impact={impact} /> : <OutrightImpact impact={impact} />}
      {(users?.losingSample.length ?? 0) > 0 && <p className="muted">Losing, for example: {users?.losingSample.join(", ")}</p>}
      {(users?.gainingSample.length ?? 0) > 0 && <p className="muted">Gaining, for example: {users?.gainingSample.join(", ")}</p>}
      {impact.roles.length > 0 && (
        <p>
          Through {impact.roles.length === 1 ? "its role" : `its ${impact.roles.length} roles`}:{" "}
          {impact.roles.map((r) => `${r.name}${r.tenantId === undefined ? "" : ` (tenant ${r.tenantId})`}, ${count(r.assignmentCount, "user")}`).join("; ")}.
        </p>
      )}
      <button type="button" onClick={onSave} disabled={saving}>
        Save changes
      </button>
      <button type="button" className="secondary" onClick={onCancel}>
        Keep editing
      </button>
    </section>
  );
}

/** Permissions gained and lost outright only: each change with the users it reaches, as one sentence. */
function OutrightImpact({ impact }: { impact: PreviewPolicyUpdateResponse }) {
  const users = impact.users;
  const reached = users?.reached ?? 0;
  const losing = users?.losing ?? 0;
  const gaining = users?.gaining ?? 0;
  return (
    <>
      {impact.removed.length > 0 && (
        <p>
          Removes <Perms list={impact.removed} /> from <strong>{count(losing, "user")}</strong>
          {reached - losing > 0 && (
            <>
              ; {count(reached - losing, "other user")} of its roles {reached - losing === 1 ? "keeps" : "keep"} {impact.removed.length === 1 ? "it" : "them"} through
              another role
            </>
          )}
          .
        </p>
      )}
      {impact.added.length > 0 && (
        <p>
          Adds <Perms list={impact.added} /> for <strong>{count(gaining, "user")}</strong>
          {reached - gaining > 0 && (
            <>
              ; {count(reached - gaining, "other user")} of its roles already {reached - gaining === 1 ? "holds" : "hold"} {impact.added.length === 1 ? "it" : "them"}
            </>
          )}
          .
        </p>
      )}
    </>
  );
}

/**
 * A change that touches permissions held under a condition: those held
 * outright and those under a condition in lists of their own, and the users
 * counted once for the whole change (the service counts them over both).
 */
function ConditionalImpact({ impact }: { impact: PreviewPolicyUpdateResponse }) {
  const users = impact.users;
  return (
    <>
      {(impact.added.length > 0 || impact.removed.length > 0) && (
        <>
          <h3 id="impact-outright">Held outright</h3>
          <ul aria-labelledby="impact-outright">
            {impact.removed.length > 0 && (
              <li>
                Removes <Perms list={impact.removed} />
              </li>
            )}
            {impact.added.length > 0 && (
              <li>
                Adds <Perms list={impact.added} />
              </li>
            )}
          </ul>
        </>
      )}
      <h3 id="impact-conditional">Under a condition</h3>
      <p className="muted" id="impact-conditional-hint">
        Held only where the condition holds, apart from the same permissions held outright.
      </p>
      <ul aria-labelledby="impact-conditional" aria-describedby="impact-conditional-hint">
        {byCondition(impact.conditionalRemoved).map(([condition, permissions]) => (
          <li key={`removed ${condition}`}>
            Removes <Perms list={permissions} /> where <code className="condition">{condition}</code> holds
          </li>
        ))}
        {byCondition(impact.conditionalAdded).map(([condition, permissions]) => (
          <li key={`added ${condition}`}>
            Adds <Perms list={permissions} /> where <code className="condition">{condition}</code> holds
          </li>
        ))}
      </ul>
      <p>
        <strong>{count(users?.losing ?? 0, "user")}</strong> would lose and <strong>{count(users?.gaining ?? 0, "user")}</strong> would gain a permission,
        outright or under a condition, of {count(users?.reached ?? 0, "user")} its roles are assigned to.
      </p>
    </>
  );
}

/** Conditional permissions grouped by their condition, in the order the service gave them. */
function byCondition(list: ConditionalPermission[]): [string, string[]][] {
  const groups = new Map<string, string[]>();
  for (const { permission, condition } of list) groups.set(condition, [...(groups.get(condition) ?? []), permission]);
  return [...groups];
}

/** Permissions as code, separated by commas. */
function Perms({ list }: { list: string[] }) {
  return (
    <>
      {list.map((p, i) => (
        <span key={p}>
          <code>{p}</code>
          {i === list.length - 1 ? "" : ", "}
        </span>
      ))}
    </>
  );
}

function DeletePolicy({ appId, policy }: { appId: string; policy: Policy }) {
  const queryClient = useQueryClient();
  const go = useGo();
  const remove = useMutation(PolicyService.method.deletePolicy, {
    onSuccess: () => {
      void queryClient.invalidateQueries();
      go(appPaths(appId).policies);
    },
  });
  const [typed, setTyped] = useState("");
  const problem = remove.error ? apiProblem(remove.error) : undefined;
  const blocked = problem?.code === Code.FailedPrecondition;
  const blockers = useQuery(PolicyService.method.listPolicyRoles, { appId, policyId: policy.policyId, pageSize: 100 }, { enabled: blocked });
  // The refusal's details name each attached role (the API's message speaks to API clients: "delete with force=true").
  const attached = problem?.details.filter((d) => typeof d.roleId === "string").length ?? 0;
  const roles = count(attached, "role");
  return (
    <section aria-labelledby="delete-policy">
      <h2 id="delete-policy">Delete</h2>
      {!blocked && (
        <DangerButton onClick={() => remove.mutate({ appId, policyId: policy.policyId })} disabled={remove.isPending}>
          Delete policy {policy.name}
        </DangerButton>
      )}
      {problem !== undefined && !blocked && <ErrorNote error={remove.error} />}
      {blocked && (
        <div role="alert" className="error-note">
          <p>
            Policy {policy.name} is attached to {roles}: deleting it detaches it from {attached === 1 ? "that role" : "them"}, and their users lose what it
            gave them.
          </p>
          <p>Attached to:</p>
          <ul>
            {(blockers.data?.roles ?? []).map((r) => (
              <li key={r.roleId}>
                {r.name}
                {r.tenantId !== undefined && ` (tenant ${r.tenantId})`}
              </li>
            ))}
            {blockers.data !== undefined && blockers.data.nextPageToken !== "" && <li>… and more.</li>}
          </ul>
          <form
            onSubmit={(event) => {
              event.preventDefault();
              remove.mutate({ appId, policyId: policy.policyId, force: true });
            }}
          >
            <div className="field">
              <label htmlFor="policy-delete-confirm">
                To detach it and delete it, type its name, <strong>{policy.name}</strong>
              </label>
              <input id="policy-delete-confirm" value={typed} onChange={(e) => setTyped(e.target.value)} autoComplete="off" />
            </div>
            <DangerButton type="submit" disabled={typed !== policy.name || remove.isPending}>
              Detach from {roles} and delete
            </DangerButton>
            <button type="button" className="secondary" onClick={() => remove.reset()}>
              Cancel
            </button>
          </form>
        </div>
      )}
    </section>
  );
}
