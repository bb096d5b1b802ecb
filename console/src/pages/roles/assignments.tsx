/** The users a role is assigned to (paged), each with its condition; assigning and unassigning. */
import { useMutation, useQuery } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import { RoleService, type Role } from "../../../../gen/authz/v1/roles_pb.js";
import { ColumnHeads } from "../../components/column-heads";
import { ConditionField, ConditionText, conditionInput } from "../../components/condition-field";
import { DangerButton } from "../../components/danger-button";
import { ErrorNote } from "../../components/error-note";
import { LabelledInput } from "../../components/labelled-input";
import { useNotify } from "../../components/notice";
import { PagerControls } from "../../components/pager";
import { When } from "../../components/timestamp";
import { apiProblem } from "../../lib/errors";
import { usePager } from "../../lib/pager";
import { needsNote, PAGE_SIZE } from "./shared";

export function Assignments({ appId, role, canWrite }: { appId: string; role: Role; canWrite: boolean }) {
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
          <LabelledInput id="roles-assign-user" label="User id" value={userId} onChange={setUserId} reason={problem?.fields.get("userId")} required />
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
            <ColumnHeads columns={["User", "Assigned", "Condition"]} actions={canWrite} />
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
