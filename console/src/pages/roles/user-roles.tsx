/** A user's roles, paged, and offboarding: removing them all after a confirmation. */
import { skipToken, useMutation, useQuery } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import { RoleService } from "../../../../gen/authz/v1/roles_pb.js";
import { DangerButton } from "../../components/danger-button";
import { ErrorNote } from "../../components/error-note";
import { LabelledInput } from "../../components/labelled-input";
import { PagerControls } from "../../components/pager";
import { apiProblem } from "../../lib/errors";
import { usePager } from "../../lib/pager";
import { needsNote, PAGE_SIZE, RolesTable, type PolicyNameMap } from "./shared";

export function UserRoles({ appId, canWrite, names }: { appId: string; canWrite: boolean; names: PolicyNameMap }) {
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
        <LabelledInput id="roles-user-id" label="User id" value={draft} onChange={setDraft} reason={problem?.fields.get("userId")} required />
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
