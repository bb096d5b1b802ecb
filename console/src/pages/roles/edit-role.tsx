/** Editing a role's name, description and attached policies (its scope is fixed). */
import { useMutation } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import type { Policy } from "../../../../gen/authz/v1/policies_pb.js";
import { RoleService, type Role } from "../../../../gen/authz/v1/roles_pb.js";
import { ErrorNote } from "../../components/error-note";
import { LabelledInput } from "../../components/labelled-input";
import { useNotify } from "../../components/notice";
import { apiProblem } from "../../lib/errors";
import { sameSet } from "../../lib/policy-changes";
import { attachable, needsNote, PolicyChecklist, policyErrors, scopeText, shownByForm } from "./shared";

export function EditRole({ appId, role, policies }: { appId: string; role: Role; policies: Policy[] }) {
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
  const showsField = shownByForm(["name", "description", "policyIds"], choiceIds, sent);

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
        <LabelledInput id="roles-edit-name" label="Name" value={name} onChange={setName} reason={problem?.fields.get("name")} required maxLength={200} />
        <LabelledInput id="roles-edit-description" label="Description" value={description} onChange={setDescription} reason={problem?.fields.get("description")} rows={2} />
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
