/** Deleting a role (and so every assignment of it), after a confirmation. */
import { useMutation } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { RoleService, type Role } from "../../../../gen/authz/v1/roles_pb.js";
import { DangerButton } from "../../components/danger-button";
import { ErrorNote } from "../../components/error-note";
import { useGo } from "../../components/page-link";
import { appPaths } from "../../lib/routes";

export function DeleteRole({ appId, role }: { appId: string; role: Role }) {
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
