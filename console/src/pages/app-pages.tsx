/** An application's pages, under /apps/{appId}/. */
import { Redirect, Route, Switch } from "wouter";
import type { GetCurrentKeyResponse } from "../../../gen/authz/v1/applications_pb.js";
import { Layout, type NavItem } from "../components/layout";
import { AuditPage } from "./audit";
import { CatalogPage } from "./catalog";
import { CheckPage } from "./check";
import { GrantsPage } from "./grants";
import { KeysPage } from "./keys";
import { PoliciesPage } from "./policies";
import { RolesPage } from "./roles";

export function AppPages({ appId, caller, onSignOut }: { appId: string; caller: GetCurrentKeyResponse; onSignOut: () => void }) {
  const nav: NavItem[] = [
    ...(caller.kind === "operator" ? [{ href: "~/", label: "Applications" }] : []),
    { href: "/catalog", label: "Catalog" },
    { href: "/policies", label: "Policies" },
    { href: "/roles", label: "Roles" },
    { href: "/grants", label: "Grants" },
    { href: "/audit", label: "Audit log" },
    { href: "/check", label: "Check" },
    { href: "/keys", label: "API keys" },
  ];
  return (
    <Layout title={`Application ${appId}`} nav={nav} onSignOut={onSignOut}>
      <Switch>
        <Route path="/catalog">
          <CatalogPage appId={appId} caller={caller} />
        </Route>
        <Route path="/policies" nest>
          <PoliciesPage appId={appId} caller={caller} />
        </Route>
        <Route path="/roles" nest>
          <RolesPage appId={appId} caller={caller} />
        </Route>
        <Route path="/grants">
          <GrantsPage appId={appId} caller={caller} />
        </Route>
        <Route path="/audit">
          <AuditPage appId={appId} caller={caller} />
        </Route>
        <Route path="/check">
          <CheckPage appId={appId} caller={caller} />
        </Route>
        <Route path="/keys">
          <KeysPage appId={appId} />
        </Route>
        <Route>
          <Redirect to="/catalog" replace />
        </Route>
      </Switch>
    </Layout>
  );
}
