/**
 * Roles: the list (paged) with a form for a new one, a role's own page (edit
 * its name, description and attached policies, delete it, and the users it
 * is assigned to, each with the CEL condition the assignment may carry),
 * and a user's roles with offboarding (remove them all).
 * Mounted with `nest` under /apps/{appId}/roles, so "/" and "/:roleId" here
 * are relative to it. The pages and their sections are files of roles/.
 */
import { Route, Switch } from "wouter";
import type { GetCurrentKeyResponse } from "../../../gen/authz/v1/applications_pb.js";
import { RoleDetail } from "./roles/role-detail";
import { RoleList } from "./roles/role-list";

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
