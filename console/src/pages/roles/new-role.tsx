/** A new role: its name, tenant, description and attached policies. */
import { useMutation } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import type { Policy } from "../../../../gen/authz/v1/policies_pb.js";
import { RoleService } from "../../../../gen/authz/v1/roles_pb.js";
import { ErrorNote } from "../../components/error-note";
import { LabelledInput } from "../../components/labelled-input";
import { PageLink } from "../../components/page-link";
import { apiProblem } from "../../lib/errors";
import { appPaths } from "../../lib/routes";
import { needsNote, PolicyChecklist, policyErrors, shownByForm } from "./shared";

export function NewRole({ appId, policies }: { appId: string; policies: Policy[] }) {
  const queryClient = useQueryClient();
  const create = useMutation(RoleService.method.createRole, { onSuccess: () => queryClient.invalidateQueries() });
  const [form, setForm] = useState({ name: "", description: "", tenantId: "" });
  const [policyIds, setPolicyIds] = useState<string[]>([]);
  const problem = create.error ? apiProblem(create.error) : undefined;
  const sent = (create.variables?.policyIds ?? []) as string[];
  const { list: policiesError, byPolicy } = policyErrors(problem, sent);
  const showsField = shownByForm(["name", "description", "tenantId", "policyIds"], new Set(policies.map((p) => p.policyId)), sent);
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
          <LabelledInput id="roles-new-name" label="Name" value={form.name} onChange={set("name")} reason={problem?.fields.get("name")} required maxLength={200} />
          <LabelledInput
            id="roles-new-tenant"
            label="Tenant (optional; empty for application-wide)"
            value={form.tenantId}
            onChange={set("tenantId")}
            reason={problem?.fields.get("tenantId")}
          />
        </div>
        <LabelledInput id="roles-new-description" label="Description" value={form.description} onChange={set("description")} reason={problem?.fields.get("description")} rows={2} />
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
