/**
 * The resource catalog: every resource with its description, actions and
 * relations (built-in ones derived from the actions, custom ones with the
 * actions each implies). The whole catalog is edited and saved at once, as
 * the API replaces it at once; a field error appears next to its field, and
 * a refusal (409) lists the policies and grants in the way.
 */
import { create } from "@bufbuild/protobuf";
import { useMutation, useQuery } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { useEffect, useState, type FormEvent } from "react";
import { Code } from "@connectrpc/connect";
import type { GetCurrentKeyResponse } from "../../../gen/authz/v1/applications_pb.js";
import { CatalogResourceSchema, CatalogService, RelationSchema, type CatalogResource } from "../../../gen/authz/v1/catalog_pb.js";
import { DangerButton } from "../components/danger-button";
import { ErrorNote, FieldError } from "../components/error-note";
import { useNotify } from "../components/notice";
import { apiProblem, reasonAt, type ApiProblem } from "../lib/errors";
import { draftFromCatalog, draftToRequest, nextKey, sameCatalog, splitTokens, type ResourceDraft } from "../lib/catalog-draft";

export function CatalogPage({ appId }: { appId: string; caller: GetCurrentKeyResponse }) {
  const queryClient = useQueryClient();
  const catalog = useQuery(CatalogService.method.getCatalog, { appId });
  const notify = useNotify();
  const save = useMutation(CatalogService.method.putCatalog, {
    onSuccess: () => {
      notify("Catalog saved.");
      return queryClient.invalidateQueries();
    },
  });
  const [draft, setDraft] = useState<ResourceDraft[] | undefined>();

  // The form starts from the stored catalog, and again after each save.
  useEffect(() => {
    if (catalog.data !== undefined) setDraft(draftFromCatalog(catalog.data.resources));
  }, [catalog.data]);

  if (catalog.isPending) return <p role="status">Loading the catalog…</p>;
  if (catalog.isError) return <ErrorNote error={catalog.error} title="The catalog could not be read" />;
  if (draft === undefined) return null;

  const problem = save.error ? apiProblem(save.error) : undefined;
  // What a save would send, against what is stored: nothing to save (or discard) until they differ.
  const changed = !sameCatalog(draftToRequest(draft), draftToRequest(draftFromCatalog(catalog.data.resources)));
  const update = (i: number, change: Partial<ResourceDraft>) => setDraft((d) => d?.map((r, j) => (j === i ? { ...r, ...change } : r)));
  const submit = (event: FormEvent) => {
    event.preventDefault();
    if (!changed) return;
    save.mutate({ appId, resources: draftToRequest(draft).map((r) => create(CatalogResourceSchema, { ...r, relations: r.relations.map((x) => create(RelationSchema, x)) })) });
  };

  return (
    <>
      <h1>Catalog</h1>
      <p>
        Resources, their actions, and the relations a grant can give. Built-in relations (owner, editor, viewer, commenter) imply the
        actions of theirs that the resource has; a custom relation implies the actions you pick. Saving replaces the whole catalog.
      </p>
      <form onSubmit={submit} noValidate>
        {draft.map((r, i) => (
          <ResourceEditor
            key={r.key}
            index={i}
            draft={r}
            stored={catalog.data.resources.find((s) => s.resource === r.resource)}
            problem={problem}
            onChange={(change) => update(i, change)}
            onRemove={() => setDraft((d) => d?.filter((_, j) => j !== i))}
          />
        ))}
        <button
          type="button"
          className="secondary"
          onClick={() => setDraft((d) => [...(d ?? []), { key: nextKey(), resource: "", description: "", actions: "", relations: [] }])}
        >
          Add a resource
        </button>
        <div className="form-actions">
          <button type="submit" disabled={!changed || save.isPending}>
            Save the catalog
          </button>
          <button
            type="button"
            className="secondary"
            onClick={() => {
              setDraft(draftFromCatalog(catalog.data.resources));
              save.reset();
            }}
            disabled={!changed || save.isPending}
          >
            Discard changes
          </button>
        </div>
        {problem !== undefined && <SaveProblem problem={problem} error={save.error} />}
      </form>
    </>
  );
}

/** Why the save was refused: the field errors are next to their fields; a 409 lists what is in the way. */
function SaveProblem({ problem, error }: { problem: ApiProblem; error: unknown }) {
  if (problem.code === Code.FailedPrecondition) {
    const policies = problem.details.filter((d) => typeof d.policyId === "string");
    const grants = problem.details.filter((d) => typeof d.policyId !== "string" && typeof d.resource === "string");
    return (
      <div role="alert" className="error-note">
        <p>
          <strong>The catalog was not saved: </strong>
          {problem.message}
        </p>
        {policies.length > 0 && (
          <>
            <p>Policies holding a permission the new catalog drops:</p>
            <ul>
              {policies.map((d, i) => (
                <li key={i}>
                  <strong>{String(d.policyName)}</strong> holds <code>{String(d.permission)}</code>
                </li>
              ))}
            </ul>
          </>
        )}
        {grants.length > 0 && (
          <>
            <p>Grants on what the new catalog drops:</p>
            <ul>
              {grants.map((d, i) => (
                <li key={i}>
                  <code>{d.relation === undefined ? String(d.resource) : `${String(d.resource)}#${String(d.relation)}`}</code>: {String(d.reason)}
                </li>
              ))}
            </ul>
          </>
        )}
      </div>
    );
  }
  if (problem.fields.size > 0) {
    return (
      <div role="alert" className="error-note">
        The catalog was not saved: {problem.fields.size === 1 ? "a field needs" : `${problem.fields.size} fields need`} fixing (shown next to
        each).
      </div>
    );
  }
  return <ErrorNote error={error} title="The catalog was not saved" />;
}

function ResourceEditor({
  index,
  draft,
  stored,
  problem,
  onChange,
  onRemove,
}: {
  index: number;
  draft: ResourceDraft;
  stored: CatalogResource | undefined;
  problem: ApiProblem | undefined;
  onChange: (change: Partial<ResourceDraft>) => void;
  onRemove: () => void;
}) {
  const at = `resources[${index}]`;
  const id = `catalog-${draft.key}`;
  const actions = splitTokens(draft.actions);
  const builtIns = (stored?.relations ?? []).filter((r) => r.builtIn && !draft.relations.some((c) => c.name === r.name));
  const errors = {
    resource: reasonAt(problem, `${at}.resource`),
    description: reasonAt(problem, `${at}.description`),
    actions: reasonAt(problem, `${at}.actions`),
  };
  return (
    <fieldset className="resource">
      <legend>{draft.resource === "" ? `New resource ${index + 1}` : draft.resource}</legend>
      <div className="grid-form">
        <div className="field">
          <label htmlFor={`${id}-name`}>Resource</label>
          <input
            id={`${id}-name`}
            value={draft.resource}
            onChange={(e) => onChange({ resource: e.target.value })}
            aria-invalid={errors.resource !== undefined}
            aria-describedby={`${id}-name-error`}
          />
          <FieldError id={`${id}-name-error`} reason={errors.resource} />
        </div>
        <div className="field wide">
          <label htmlFor={`${id}-description`}>Description</label>
          <input
            id={`${id}-description`}
            value={draft.description}
            onChange={(e) => onChange({ description: e.target.value })}
            aria-invalid={errors.description !== undefined}
            aria-describedby={`${id}-description-error`}
          />
          <FieldError id={`${id}-description-error`} reason={errors.description} />
        </div>
        <div className="field wide">
          <label htmlFor={`${id}-actions`}>Actions (separated by commas or spaces)</label>
          <input
            id={`${id}-actions`}
            value={draft.actions}
            onChange={(e) => onChange({ actions: e.target.value })}
            aria-invalid={errors.actions !== undefined}
            aria-describedby={`${id}-actions-error`}
          />
          <FieldError id={`${id}-actions-error`} reason={errors.actions} />
        </div>
      </div>
      <h3>Relations</h3>
      {builtIns.length > 0 && (
        <ul className="relations">
          {builtIns.map((r) => (
            <li key={r.name}>
              <strong>{r.name}</strong> (built-in) implies {r.actions.length === 0 ? "no action" : r.actions.join(", ")}
            </li>
          ))}
        </ul>
      )}
      {draft.relations.map((relation, k) => {
        const rid = `${id}-relation-${relation.key}`;
        const rat = `${at}.relations[${k}]`;
        const nameError = reasonAt(problem, `${rat}.name`) ?? reasonAt(problem, `${rat}.builtIn`);
        const actionsError = reasonAt(problem, `${rat}.actions`);
        const setRelation = (change: Partial<ResourceDraft["relations"][number]>) =>
          onChange({ relations: draft.relations.map((x, j) => (j === k ? { ...x, ...change } : x)) });
        return (
          <div key={relation.key} className="relation">
            <div className="field">
              <label htmlFor={`${rid}-name`}>Custom relation</label>
              <input id={`${rid}-name`} value={relation.name} onChange={(e) => setRelation({ name: e.target.value })} aria-describedby={`${rid}-name-error`} />
              <FieldError id={`${rid}-name-error`} reason={nameError} />
            </div>
            <fieldset className="implies">
              <legend>Actions it implies</legend>
              {actions.length === 0 && <span>Give the resource actions first.</span>}
              {actions.map((action) => (
                <label key={action} className="check">
                  <input
                    type="checkbox"
                    checked={relation.actions.includes(action)}
                    onChange={(e) =>
                      setRelation({ actions: e.target.checked ? [...relation.actions, action] : relation.actions.filter((a) => a !== action) })
                    }
                  />
                  {action}
                </label>
              ))}
              <FieldError id={`${rid}-actions-error`} reason={actionsError} />
            </fieldset>
            <DangerButton onClick={() => onChange({ relations: draft.relations.filter((_, j) => j !== k) })}>Remove relation {relation.name}</DangerButton>
          </div>
        );
      })}
      <button
        type="button"
        className="secondary"
        onClick={() => onChange({ relations: [...draft.relations, { key: nextKey(), name: "", actions: [] }] })}
      >
        Add a custom relation
      </button>
      <DangerButton onClick={onRemove}>Remove resource {draft.resource}</DangerButton>
    </fieldset>
  );
}
