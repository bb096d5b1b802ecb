/** Deleting every grant that matches a filter (a user's, an instance's, a holder's), after a confirmation. */
import { useMutation } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import type { CatalogResource } from "../../../../gen/authz/v1/catalog_pb.js";
import { RelationshipService } from "../../../../gen/authz/v1/relationships_pb.js";
import { DangerButton } from "../../components/danger-button";
import { FieldError } from "../../components/error-note";
import { apiProblem } from "../../lib/errors";
import { allRelations, ChoiceField, errorProps, OtherError, relationsOf, TextField } from "./fields";

interface Filter {
  userId: string;
  /** "true": the allUsers grants, in the user's place ("" otherwise: the fields are text). */
  allUsers: string;
  resource: string;
  resourceId: string;
  relation: string;
  /** A holder instance (a team, a folder): alone, every grant it holds as a subject set or a link. */
  subjectResource: string;
  subjectResourceId: string;
}
const FILTER_LABELS: Record<keyof Filter, string> = {
  userId: "user",
  allUsers: "every user (allUsers)",
  resource: "resource",
  resourceId: "instance",
  relation: "relation",
  subjectResource: "holder resource",
  subjectResourceId: "holder instance",
};
const NO_FILTER: Filter = { userId: "", allUsers: "", resource: "", resourceId: "", relation: "", subjectResource: "", subjectResourceId: "" };

/** The filters the route accepts (relation may narrow each but the holder's), as src/domain/relationships.ts checks them. */
function filterProblem(f: Filter): string | undefined {
  const given = (["userId", "allUsers", "resource", "resourceId", "subjectResource", "subjectResourceId"] as const).filter((k) => f[k] !== "");
  // allUsers stands where a user does.
  const accepted = [["userId"], ["allUsers"], ["resource", "resourceId"], ["userId", "resource"], ["allUsers", "resource"], ["subjectResource", "subjectResourceId"]];
  const ok = accepted.some((a) => a.length === given.length && a.every((k) => (given as string[]).includes(k)));
  const holderAlone = f.subjectResource === "" || f.relation === "";
  return ok && holderAlone
    ? undefined
    : "Give a user (or every user) alone, a resource and an instance, or a user (or every user) and a resource (a relation may narrow any of them); or a holder resource and instance alone.";
}

export function DeleteByFilterSection({ resources }: { resources: CatalogResource[] }) {
  const queryClient = useQueryClient();
  const removeAll = useMutation(RelationshipService.method.deleteRelationships, { onSuccess: () => queryClient.invalidateQueries() });
  const [form, setForm] = useState<Filter>(NO_FILTER);
  const [confirming, setConfirming] = useState<Filter | undefined>();
  const [localProblem, setLocalProblem] = useState<string | undefined>();
  const problem = removeAll.error ? apiProblem(removeAll.error) : undefined;
  const set = (field: keyof Filter) => (value: string) => {
    setConfirming(undefined);
    setForm((f) => ({ ...f, [field]: value }));
  };
  const reason = (field: string) => problem?.fields.get(field);

  const submit = (event: FormEvent) => {
    event.preventDefault();
    removeAll.reset();
    const p = filterProblem(form);
    setLocalProblem(p);
    setConfirming(p === undefined ? { ...form } : undefined);
  };
  const described = (f: Filter) =>
    (Object.keys(FILTER_LABELS) as (keyof Filter)[])
      .filter((k) => f[k] !== "")
      .map((k) => (k === "allUsers" ? FILTER_LABELS[k] : `${FILTER_LABELS[k]} “${f[k]}”`))
      .join(", ");
  const relations = form.resource === "" ? allRelations(resources) : relationsOf(resources, form.resource);

  return (
    <section aria-labelledby="grants-filter-heading">
      <h2 id="grants-filter-heading">Delete by filter</h2>
      <p className="grants-hint" id="grants-filter-hint">
        Deletes every grant matching all the fields given, expired or not: a user alone (offboarding), a resource and an instance (the instance is gone), or a
        user and a resource; every user (the allUsers grants) may stand where a user does. A relation may narrow any of them. Or a holder resource and instance alone: every grant that team or folder holds, as a subject set
        or a link (the team or the folder is gone).
      </p>
      <form onSubmit={submit} className="grid-form" aria-describedby="grants-filter-hint">
        <TextField id="grants-filter-userId" label="User" value={form.userId} onChange={set("userId")} reason={reason("userId")} required={false} />
        <div className="field">
          <label className="check" htmlFor="grants-filter-allUsers">
            <input
              type="checkbox"
              id="grants-filter-allUsers"
              checked={form.allUsers !== ""}
              onChange={(e) => set("allUsers")(e.target.checked ? "true" : "")}
              {...errorProps("grants-filter-allUsers", reason("allUsers"))}
            />
            Every user: the allUsers grants
          </label>
          <FieldError id="grants-filter-allUsers-error" reason={reason("allUsers")} />
        </div>
        <ChoiceField
          id="grants-filter-resource"
          label="Resource"
          value={form.resource}
          onChange={(resource) => {
            setConfirming(undefined);
            setForm((f) => ({ ...f, resource, relation: "" }));
          }}
          options={resources.map((r) => r.resource)}
          reason={reason("resource")}
          required={false}
          anyLabel="Any resource"
        />
        <TextField id="grants-filter-resourceId" label="Instance" value={form.resourceId} onChange={set("resourceId")} reason={reason("resourceId")} required={false} />
        <ChoiceField
          id="grants-filter-relation"
          label="Relation"
          value={form.relation}
          onChange={set("relation")}
          options={relations}
          reason={reason("relation")}
          required={false}
          anyLabel="Any relation"
        />
        <ChoiceField
          id="grants-filter-subjectResource"
          label="Holder resource"
          value={form.subjectResource}
          onChange={set("subjectResource")}
          options={resources.map((r) => r.resource)}
          reason={reason("subject.resource") ?? reason("subject")}
          required={false}
          anyLabel="No holder"
        />
        <TextField
          id="grants-filter-subjectResourceId"
          label="Holder instance"
          value={form.subjectResourceId}
          onChange={set("subjectResourceId")}
          reason={reason("subject.resourceId")}
          required={false}
        />
        <DangerButton type="submit" disabled={removeAll.isPending}>
          Delete matching grants…
        </DangerButton>
      </form>
      {localProblem !== undefined && (
        <div role="alert" className="error-note">
          {localProblem}
        </div>
      )}
      <OtherError
        error={removeAll.error}
        problem={problem}
        fields={["userId", "allUsers", "resource", "resourceId", "relation", "subject", "subject.resource", "subject.resourceId"]}
      />
      {confirming !== undefined && (
        <div className="grants-confirm" role="alert">
          <p>Delete every grant matching {described(confirming)}?</p>
          <DangerButton
            disabled={removeAll.isPending}
            onClick={() =>
              removeAll.mutate(
                {
                  userId: confirming.userId,
                  allUsers: confirming.allUsers !== "",
                  resource: confirming.resource,
                  resourceId: confirming.resourceId,
                  relation: confirming.relation,
                  ...(confirming.subjectResource === "" ? {} : { subject: { resource: confirming.subjectResource, resourceId: confirming.subjectResourceId } }),
                },
                { onSettled: () => setConfirming(undefined) },
              )
            }
          >
            Delete them
          </DangerButton>
          <button type="button" className="secondary" onClick={() => setConfirming(undefined)}>
            Cancel
          </button>
        </div>
      )}
      <div aria-live="polite">
        {removeAll.isSuccess && (
          <p className="grants-done">
            Deleted {removeAll.data.deleted} grant{removeAll.data.deleted === 1 ? "" : "s"}.
          </p>
        )}
      </div>
    </section>
  );
}
