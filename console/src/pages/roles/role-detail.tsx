/** A role's own page: its facts, and (with the write scope) its edit, assignments and delete. */
import { useQuery } from "@connectrpc/connect-query";
import { RoleService } from "../../../../gen/authz/v1/roles_pb.js";
import { ErrorNote } from "../../components/error-note";
import { PageLink } from "../../components/page-link";
import { When } from "../../components/timestamp";
import { appPaths } from "../../lib/routes";
import { Assignments } from "./assignments";
import { DeleteRole } from "./delete-role";
import { EditRole } from "./edit-role";
import { PolicyNames, scopeText, usePolicies } from "./shared";

export function RoleDetail({ appId, roleId, canWrite }: { appId: string; roleId: string; canWrite: boolean }) {
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
