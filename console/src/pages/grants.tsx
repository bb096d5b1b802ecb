/**
 * Direct grants of the calling key's application: find them (on one instance,
 * a user's on one resource type, every user's (allUsers) on one type, or a
 * holder's: a subject set or a linked instance), show an instance's parents
 * (components/parent-tree.tsx), add one (held by a user, every user, a
 * subject set or a linked instance, with an optional expiry), delete one or
 * every grant matching a filter (a holder's and every user's among them),
 * and import a CSV or NDJSON
 * file through the bulk route (src/lib/grant-import/, shared with the
 * command line, does the parsing, the chunking and the retries around bad
 * entries). The /authorization/* routes
 * act on the calling key's own application, so they take an application key.
 * Each section is a file of grants/.
 */
import { useQuery } from "@connectrpc/connect-query";
import type { GetCurrentKeyResponse } from "../../../gen/authz/v1/applications_pb.js";
import { CatalogService } from "../../../gen/authz/v1/catalog_pb.js";
import { ErrorNote } from "../components/error-note";
import { NeedsAppKey } from "../components/needs-app-key";
import { AddSection } from "./grants/add-section";
import { DeleteByFilterSection } from "./grants/delete-by-filter-section";
import { ImportSection } from "./grants/import-section";
import { ParentsSection } from "./grants/parents-section";
import { SearchSection } from "./grants/search-section";

export function GrantsPage({ appId, caller }: { appId: string; caller: GetCurrentKeyResponse }) {
  if (caller.kind === "operator") return <NeedsAppKey title="Grants" what="Grants" />;
  return <Grants appId={appId} />;
}

function Grants({ appId }: { appId: string }) {
  const catalog = useQuery(CatalogService.method.getCatalog, { appId });
  const resources = catalog.data?.resources ?? [];
  return (
    <>
      <h1>Grants</h1>
      <p className="grants-intro">
        A direct grant gives a relation on one resource instance, optionally until a given time, to a user; or to every user at once (a public instance,
        where the relation's holders include <code>user:*</code>); or to a subject set, everyone with a relation on one instance (<code>team:eng#member</code>);
        or to a linked instance (<code>folder:runbooks</code> as a document's parent), as the relation's holders in the catalog allow.
      </p>
      {catalog.isError && <ErrorNote error={catalog.error} title="The catalog could not be read" />}
      <SearchSection resources={resources} />
      <ParentsSection resources={resources} />
      <AddSection resources={resources} />
      <DeleteByFilterSection resources={resources} />
      <ImportSection />
    </>
  );
}
