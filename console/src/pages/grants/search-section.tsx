/**
 * Finding grants (on one instance, a user's on one resource type, every
 * user's on one type, or a holder's), a page at a time, each with its delete.
 */
import { skipToken, useMutation, useQuery } from "@connectrpc/connect-query";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import type { CatalogResource } from "../../../../gen/authz/v1/catalog_pb.js";
import { RelationshipService, type Relationship } from "../../../../gen/authz/v1/relationships_pb.js";
import { ColumnHeads } from "../../components/column-heads";
import { DangerButton } from "../../components/danger-button";
import { ErrorNote } from "../../components/error-note";
import { PagerControls } from "../../components/pager";
import { When } from "../../components/timestamp";
import { apiProblem, reasonAt } from "../../lib/errors";
import { holderText } from "../../lib/holders";
import { usePager } from "../../lib/pager";
import { ChoiceField, OtherError, RadioChoices, relationsOf, TextField } from "./fields";

const PAGE_SIZE = 50;

/** A grant's holder as the single delete takes it: the userId, allUsers, or the subject as its three fields. */
const holderFields = (r: Relationship) =>
  r.allUsers
    ? { allUsers: true }
    : r.subject !== undefined && r.userId === ""
      ? { subjectResource: r.subject.resource, subjectResourceId: r.subject.resourceId, subjectRelation: r.subject.relation }
      : { userId: r.userId };

const isExpired = (r: Relationship, now: number) => r.expiresAt !== undefined && timestampDate(r.expiresAt).getTime() <= now;

type Mode = "instance" | "user" | "everyone" | "holder";
const SEARCH_MODES: { value: Mode; label: string }[] = [
  { value: "instance", label: "Instance: everyone with a relation on one resource instance" },
  { value: "user", label: "User: every instance of a resource type a user has a relation on" },
  { value: "everyone", label: "Every user: the allUsers grants on a resource type (its public instances)" },
  { value: "holder", label: "Holder: every grant a subject set (team:eng#member) or a linked instance (folder:runbooks) holds on a resource type" },
];
interface Search {
  mode: Mode;
  resource: string;
  resourceId: string;
  userId: string;
  /** Mode "holder": the subject set or linked instance holding the grants (relation empty for a link). */
  subjectResource: string;
  subjectResourceId: string;
  subjectRelation: string;
  relation: string;
  includeExpired: boolean;
}

/** What the list route takes for each way of searching. */
function listQuery(s: Search) {
  if (s.mode === "instance") return { resourceId: s.resourceId };
  if (s.mode === "user") return { userId: s.userId };
  if (s.mode === "everyone") return { allUsers: true };
  return { subjectResource: s.subjectResource, subjectResourceId: s.subjectResourceId, subjectRelation: s.subjectRelation };
}

export function SearchSection({ resources }: { resources: CatalogResource[] }) {
  const queryClient = useQueryClient();
  const pager = usePager();
  const [form, setForm] = useState<Search>({
    mode: "instance",
    resource: "",
    resourceId: "",
    userId: "",
    subjectResource: "",
    subjectResourceId: "",
    subjectRelation: "",
    relation: "",
    includeExpired: false,
  });
  const [searched, setSearched] = useState<Search | undefined>();
  const [confirming, setConfirming] = useState<string | undefined>();
  const list = useQuery(
    RelationshipService.method.listRelationships,
    searched === undefined
      ? skipToken
      : {
          resource: searched.resource,
          ...listQuery(searched),
          relation: searched.relation,
          includeExpired: searched.includeExpired,
          pageSize: PAGE_SIZE,
          pageToken: pager.token,
        },
  );
  const remove = useMutation(RelationshipService.method.deleteRelationship, { onSuccess: () => queryClient.invalidateQueries() });
  const problem = list.error ? apiProblem(list.error) : undefined;
  const set = <K extends keyof Search>(field: K) => (value: Search[K]) => setForm((f) => ({ ...f, [field]: value }));

  const submit = (event: FormEvent) => {
    event.preventDefault();
    pager.reset();
    setConfirming(undefined);
    setSearched({ ...form });
  };
  const rows = list.data?.relationships ?? [];
  const now = Date.now();

  return (
    <section aria-labelledby="grants-search-heading">
      <h2 id="grants-search-heading">Find grants</h2>
      <form onSubmit={submit}>
        <fieldset>
          <legend>Search by</legend>
          <RadioChoices name="grants-search-mode" choices={SEARCH_MODES} value={form.mode} onChange={set("mode")} />
        </fieldset>
        <div className="grid-form">
          {form.mode === "user" && (
            <TextField id="grants-search-userId" label="User" value={form.userId} onChange={set("userId")} reason={problem?.fields.get("userId")} required />
          )}
          {form.mode === "holder" && (
            <>
              <ChoiceField
                id="grants-search-subjectResource"
                label="Holder resource"
                value={form.subjectResource}
                onChange={(subjectResource) => setForm((f) => ({ ...f, subjectResource, subjectRelation: "" }))}
                options={resources.map((r) => r.resource)}
                reason={reasonAt(problem, "subjectResource") ?? reasonAt(problem, "subject.resource")}
                required
                anyLabel="Choose a resource"
              />
              <TextField
                id="grants-search-subjectResourceId"
                label="Holder instance"
                value={form.subjectResourceId}
                onChange={set("subjectResourceId")}
                reason={reasonAt(problem, "subjectResourceId") ?? reasonAt(problem, "subject.resourceId")}
                required
              />
              <ChoiceField
                id="grants-search-subjectRelation"
                label="Holder relation (none: a link)"
                value={form.subjectRelation}
                onChange={set("subjectRelation")}
                options={relationsOf(resources, form.subjectResource)}
                reason={reasonAt(problem, "subjectRelation") ?? reasonAt(problem, "subject.relation")}
                required={false}
                anyLabel="None: the instance itself (a link)"
              />
            </>
          )}
          <ChoiceField
            id="grants-search-resource"
            label="Resource"
            value={form.resource}
            onChange={(resource) => setForm((f) => ({ ...f, resource, relation: "" }))}
            options={resources.map((r) => r.resource)}
            reason={problem?.fields.get("resource")}
            required
            anyLabel="Choose a resource"
          />
          {form.mode === "instance" && (
            <TextField
              id="grants-search-resourceId"
              label="Instance"
              value={form.resourceId}
              onChange={set("resourceId")}
              reason={problem?.fields.get("resourceId")}
              required
            />
          )}
          <ChoiceField
            id="grants-search-relation"
            label="Relation (optional)"
            value={form.relation}
            onChange={set("relation")}
            options={relationsOf(resources, form.resource)}
            reason={problem?.fields.get("relation")}
            required={false}
            anyLabel="Any relation"
          />
          <div className="field">
            <label className="check" htmlFor="grants-search-expired">
              <input type="checkbox" id="grants-search-expired" checked={form.includeExpired} onChange={(e) => set("includeExpired")(e.target.checked)} />
              Include expired grants
            </label>
          </div>
          <button type="submit">Search</button>
        </div>
      </form>
      <OtherError
        error={list.error}
        problem={problem}
        fields={["userId", "allUsers", "resource", "resourceId", "relation", "subjectResource", "subjectResourceId", "subjectRelation", "subject.resource", "subject.resourceId", "subject.relation"]}
      />
      {remove.isError && <ErrorNote error={remove.error} title="The grant could not be deleted" />}
      {searched !== undefined && list.isFetching && <p role="status">Loading grants…</p>}
      {searched !== undefined && list.isSuccess && (
        <>
          {rows.length === 0 ? (
            <p role="status">No grants match.</p>
          ) : (
            <table>
              <caption className="visually-hidden">Grants found, page {pager.page}</caption>
              <ColumnHeads columns={["Holder", "Resource", "Instance", "Relation", "Created", "Expires", "Condition"]} actions />
              <tbody>
                {rows.map((r) => {
                  const holder = holderText(r);
                  const key = JSON.stringify([holder, r.resource, r.resourceId, r.relation]);
                  const what = `${r.relation} of ${holder} on ${r.resource} ${r.resourceId}`;
                  return (
                    <tr key={key}>
                      <td>{r.allUsers ? <em>{holder}</em> : r.subject !== undefined && r.userId === "" ? <code>{holder}</code> : holder}</td>
                      <td>{r.resource}</td>
                      <td>{r.resourceId}</td>
                      <td>{r.relation}</td>
                      <td>
                        <When ts={r.createdAt} />
                      </td>
                      <td>
                        {r.expiresAt === undefined ? (
                          "never"
                        ) : (
                          <>
                            <When ts={r.expiresAt} />
                            {isExpired(r, now) && <span className="grants-expired"> (expired)</span>}
                          </>
                        )}
                      </td>
                      <td>{r.condition === undefined ? "none" : <code className="grants-condition">{r.condition}</code>}</td>
                      <td>
                        {confirming === key ? (
                          <>
                            <DangerButton
                              disabled={remove.isPending}
                              onClick={() =>
                                remove.mutate(
                                  { ...holderFields(r), resource: r.resource, resourceId: r.resourceId, relation: r.relation },
                                  { onSettled: () => setConfirming(undefined) },
                                )
                              }
                              aria-label={`Delete the grant ${what} now`}
                            >
                              Delete now
                            </DangerButton>
                            <button type="button" className="secondary" onClick={() => setConfirming(undefined)}>
                              Cancel
                            </button>
                          </>
                        ) : (
                          <DangerButton onClick={() => setConfirming(key)} aria-label={`Delete the grant ${what}`}>
                            Delete
                          </DangerButton>
                        )}
                      </td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
          )}
          <PagerControls pager={pager} nextPageToken={list.data.nextPageToken} label="Grants found" />
        </>
      )}
    </section>
  );
}
