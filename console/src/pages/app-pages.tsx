/**
 * An application's pages, under /apps/{appId}/. Each page is its own chunk,
 * loaded when first opened: the first paint needs only the frame.
 */
import { lazy, Suspense } from "react";
import { Route, Switch } from "wouter";
import type { GetCurrentKeyResponse } from "../../../gen/authz/v1/applications_pb.js";
import { Layout, type NavItem } from "../components/layout";
import { GoTo } from "../components/page-link";
import { appPaths, homePath } from "../lib/routes";

const AuditPage = lazy(() => import("./audit").then((m) => ({ default: m.AuditPage })));
const CatalogPage = lazy(() => import("./catalog").then((m) => ({ default: m.CatalogPage })));
const CheckPage = lazy(() => import("./check").then((m) => ({ default: m.CheckPage })));
const GrantsPage = lazy(() => import("./grants").then((m) => ({ default: m.GrantsPage })));
const ModelPage = lazy(() => import("./model").then((m) => ({ default: m.ModelPage })));
const KeysPage = lazy(() => import("./keys").then((m) => ({ default: m.KeysPage })));
const PoliciesPage = lazy(() => import("./policies").then((m) => ({ default: m.PoliciesPage })));
const RolesPage = lazy(() => import("./roles").then((m) => ({ default: m.RolesPage })));

export function AppPages({ appId, caller, onSignOut }: { appId: string; caller: GetCurrentKeyResponse; onSignOut: () => void }) {
  const to = appPaths(appId);
  const nav: NavItem[] = [
    ...(caller.kind === "operator" ? [{ to: homePath(), label: "Applications" }] : []),
    { to: to.catalog, label: "Catalog" },
    { to: to.policies, label: "Policies" },
    { to: to.roles, label: "Roles" },
    { to: to.grants, label: "Grants" },
    { to: to.model, label: "Model" },
    { to: to.audit, label: "Audit log" },
    { to: to.check, label: "Check" },
    { to: to.keys, label: "API keys" },
  ];
  return (
    <Layout title={`Application ${appId}`} nav={nav} onSignOut={onSignOut}>
      <Suspense fallback={<p role="status">Loading…</p>}>
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
          <Route path="/model">
            <ModelPage appId={appId} caller={caller} />
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
            <GoTo to={to.catalog} />
          </Route>
        </Switch>
      </Suspense>
    </Layout>
  );
}
