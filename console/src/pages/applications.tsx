/** The operator's home: every application (paged), and a form to create one. */
import { useInfiniteQuery, useMutation } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import { ApplicationService } from "../../../gen/authz/v1/applications_pb.js";
import { ErrorNote, FieldError } from "../components/error-note";
import { Layout } from "../components/layout";
import { PageLink } from "../components/page-link";
import { appPaths } from "../lib/routes";
import { apiProblem } from "../lib/errors";

export function ApplicationsPage({ onSignOut }: { onSignOut: () => void }) {
  const apps = useInfiniteQuery(
    ApplicationService.method.listApplications,
    { pageToken: "", pageSize: 50 },
    { pageParamKey: "pageToken", getNextPageParam: (last) => last.nextPageToken || undefined },
  );
  const queryClient = useQueryClient();
  const create = useMutation(ApplicationService.method.createApplication, {
    onSuccess: () => queryClient.invalidateQueries(),
  });
  const [appId, setAppId] = useState("");
  const [name, setName] = useState("");
  const problem = create.error ? apiProblem(create.error) : undefined;
  const submit = (event: FormEvent) => {
    event.preventDefault();
    create.mutate({ appId, name }, { onSuccess: () => (setAppId(""), setName("")) });
  };
  const rows = apps.data?.pages.flatMap((p) => p.applications) ?? [];
  return (
    <Layout title="Applications" nav={[]} onSignOut={onSignOut}>
      <h1>Applications</h1>
      <section aria-labelledby="new-app">
        <h2 id="new-app">New application</h2>
        <form onSubmit={submit} className="inline-form">
          <div className="field">
            <label htmlFor="app-id">Application id</label>
            <input id="app-id" value={appId} onChange={(e) => setAppId(e.target.value)} required aria-describedby="app-id-error" />
            <FieldError id="app-id-error" reason={problem?.fields.get("appId")} />
          </div>
          <div className="field">
            <label htmlFor="app-name">Name</label>
            <input id="app-name" value={name} onChange={(e) => setName(e.target.value)} aria-describedby="app-name-error" />
            <FieldError id="app-name-error" reason={problem?.fields.get("name")} />
          </div>
          <button type="submit" disabled={create.isPending}>
            Create application
          </button>
        </form>
        {problem !== undefined && problem.fields.size === 0 && <ErrorNote error={create.error} />}
      </section>
      <section aria-labelledby="all-apps">
        <h2 id="all-apps">All applications</h2>
        {apps.isError && <ErrorNote error={apps.error} />}
        {apps.isPending && <p role="status">Loading applications…</p>}
        <table>
          <thead>
            <tr>
              <th scope="col">Id</th>
              <th scope="col">Name</th>
              <th scope="col">Created</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((app) => (
              <tr key={app.appId}>
                <td>
                  <PageLink to={appPaths(app.appId).keys}>{app.appId}</PageLink>
                </td>
                <td>{app.name}</td>
                <td>{app.createdAt ? new Date(Number(app.createdAt.seconds) * 1000).toLocaleString() : ""}</td>
              </tr>
            ))}
          </tbody>
        </table>
        {apps.hasNextPage && (
          <button type="button" onClick={() => apps.fetchNextPage()} disabled={apps.isFetchingNextPage}>
            Load more
          </button>
        )}
      </section>
    </Layout>
  );
}
