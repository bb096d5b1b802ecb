/** The roles page: the list (paged), a new role's form, and a user's roles. */
import { useQuery } from "@connectrpc/connect-query";
import { RoleService } from "../../../../gen/authz/v1/roles_pb.js";
import { ErrorNote } from "../../components/error-note";
import { PagerControls } from "../../components/pager";
import { usePager } from "../../lib/pager";
import { NewRole } from "./new-role";
import { PAGE_SIZE, RolesTable, usePolicies } from "./shared";
import { UserRoles } from "./user-roles";

export function RoleList({ appId, canWrite }: { appId: string; canWrite: boolean }) {
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
