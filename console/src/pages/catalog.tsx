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
import { CatalogResourceSchema, CatalogService, InheritSchema, RelationSchema, type CatalogResource } from "../../../gen/authz/v1/catalog_pb.js";
import { DangerButton } from "../components/danger-button";
import { ErrorNote, FieldError } from "../components/error-note";
import { useNotify } from "../components/notice";
import { apiProblem, reasonAt, type ApiProblem } from "../lib/errors";
import {
  draftFromCatalog,
  draftToRequest,
  linkRelationsOf,
  newRelation,
  nextKey,
  sameCatalog,
  splitTokens,
  subjectChoices,
  type RelationDraft,
  type ResourceDraft,
} from "../lib/catalog-draft";
import { ALL_USERS_SUBJECT, describeSubjectType, isLinkSubjects } from "../lib/holders";
import { RuleList } from "./catalog/rule-list";

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
    save.mutate({
      appId,
      resources: draftToRequest(draft).map((r) =>
        create(CatalogResourceSchema, {
          ...r,
          relations: r.relations.map((x) =>
            create(RelationSchema, {
              ...x,
              inherits: x.inherits.map((i) => create(InheritSchema, i)),
              requires: x.requires.map((i) => create(InheritSchema, i)),
              unless: x.unless.map((i) => create(InheritSchema, i)),
            }),
          ),
        }),
      ),
    });
  };

  return (
    <>
      <h1>Catalog</h1>
      <p>
        Resources, their actions, and the relations a grant can give. Built-in relations (owner, editor, viewer, commenter) imply the
        actions of theirs that the resource has; a custom relation implies the actions you pick, and says who may hold it (users, everyone
        with a relation on a group such as <code>team#member</code>, or one instance of a resource: a link, such as a document's parent
        folder) and what it inherits: another relation on the same instance (every editor a viewer too), or a relation on the instance a
        link reaches. A custom relation named like a built-in redefines it. Saving replaces the whole catalog.
      </p>
      <form onSubmit={submit} noValidate>
        {draft.map((r, i) => (
          <ResourceEditor
            key={r.key}
            index={i}
            draft={r}
            catalog={draft}
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
                  <code>{d.relation === undefined ? String(d.resource) : `${String(d.resource)}#${String(d.relation)}`}</code>
                  {typeof d.subject === "string" && (
                    <>
                      {" "}
                      held by <code>{d.subject}</code>
                    </>
                  )}
                  : {String(d.reason)}
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
  catalog,
  stored,
  problem,
  onChange,
  onRemove,
}: {
  index: number;
  draft: ResourceDraft;
  /** The whole draft: the resources and relations a holder or an inheritance rule may name. */
  catalog: readonly ResourceDraft[];
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
      {draft.relations.map((relation, k) => (
        <RelationEditor
          key={relation.key}
          idPrefix={`${id}-relation-${relation.key}`}
          at={`${at}.relations[${k}]`}
          relation={relation}
          resource={draft}
          catalog={catalog}
          actions={actions}
          problem={problem}
          onChange={(change) => onChange({ relations: draft.relations.map((x, j) => (j === k ? { ...x, ...change } : x)) })}
          onRemove={() => onChange({ relations: draft.relations.filter((_, j) => j !== k) })}
        />
      ))}
      <button
        type="button"
        className="secondary"
        onClick={() => onChange({ relations: [...draft.relations, newRelation()] })}
      >
        Add a custom relation
      </button>
      <DangerButton onClick={onRemove}>Remove resource {draft.resource}</DangerButton>
    </fieldset>
  );
}

/**
 * One custom relation: its name; who may hold it (its subjects); the actions
 * it implies (none for a link); and its rules (catalog/rule-list.tsx): what
 * it inherits, requires and is taken away by, each a relation of the same
 * instance or through a link of the same resource. Each part shows the API's field errors beside it.
 */
function RelationEditor({
  idPrefix: rid,
  at: rat,
  relation,
  resource,
  catalog,
  actions,
  problem,
  onChange,
  onRemove,
}: {
  idPrefix: string;
  at: string;
  relation: RelationDraft;
  resource: ResourceDraft;
  catalog: readonly ResourceDraft[];
  actions: string[];
  problem: ApiProblem | undefined;
  onChange: (change: Partial<RelationDraft>) => void;
  onRemove: () => void;
}) {
  const [adding, setAdding] = useState("");
  const nameError = reasonAt(problem, `${rat}.name`) ?? reasonAt(problem, `${rat}.builtIn`);
  const actionsError = reasonAt(problem, `${rat}.actions`);
  const link = isLinkSubjects(relation.subjects);
  const label = relation.name.trim() === "" ? "the new relation" : relation.name.trim();
  const choices = subjectChoices(catalog).map((g) => ({ ...g, choices: g.choices.filter((c) => !relation.subjects.includes(c)) }));
  const links = linkRelationsOf(resource).filter((x) => x.key !== relation.key);
  const addHolder = () => {
    if (adding === "" || relation.subjects.includes(adding)) return;
    onChange({ subjects: [...relation.subjects, adding] });
    setAdding("");
  };
  return (
    <div className="relation" role="group" aria-label={`Relation ${label}`}>
      <div className="field">
        <label htmlFor={`${rid}-name`}>Custom relation</label>
        <input id={`${rid}-name`} value={relation.name} onChange={(e) => onChange({ name: e.target.value })} aria-describedby={`${rid}-name-error`} />
        <FieldError id={`${rid}-name-error`} reason={nameError} />
      </div>
      <fieldset className="holders" aria-describedby={`${rid}-subjects-error`}>
        <legend>Who may hold it</legend>
        {relation.subjects.length === 0 && <p className="muted">None chosen: its grants name users (the default).</p>}
        <ul className="holder-list">
          {relation.subjects.map((subject, n) => (
            <li key={subject}>
              <span>
                <code>{subject}</code> <span className="muted">{describeSubjectType(subject)}</span>
              </span>
              <DangerButton
                aria-label={`Remove holder ${subject} from ${label}`}
                onClick={() => onChange({ subjects: relation.subjects.filter((s) => s !== subject) })}
              >
                Remove
              </DangerButton>
              <FieldError id={`${rid}-subject-${n}-error`} reason={problem?.fields.get(`${rat}.subjects[${n}]`)} />
            </li>
          ))}
        </ul>
        <div className="inline-form">
          <div className="field">
            <label htmlFor={`${rid}-holder`}>Add a holder</label>
            <select id={`${rid}-holder`} value={adding} onChange={(e) => setAdding(e.target.value)}>
              <option value="">Choose who may hold it</option>
              {!relation.subjects.includes("user") && <option value="user">user: a user id</option>}
              {!relation.subjects.includes(ALL_USERS_SUBJECT) && <option value={ALL_USERS_SUBJECT}>user:*: every user at once (public, by an allUsers grant)</option>}
              {choices.map((g) => (
                <optgroup key={g.resource} label={g.resource}>
                  {g.choices.map((c) => (
                    <option key={c} value={c}>
                      {c.includes("#") ? `${c}: everyone with ${c.slice(c.indexOf("#") + 1)} on a ${g.resource}` : `${c}: one ${c} (a link)`}
                    </option>
                  ))}
                </optgroup>
              ))}
            </select>
          </div>
          <button type="button" className="secondary" onClick={addHolder} disabled={adding === ""}>
            Add holder
          </button>
        </div>
        <FieldError id={`${rid}-subjects-error`} reason={problem?.fields.get(`${rat}.subjects`)} />
      </fieldset>
      {link ? (
        <p className="muted" id={`${rid}-link-note`}>
          A link: its grants name one instance ({relation.subjects.join(", ")}), it implies no actions, and other relations of {resource.resource || "this resource"} can
          inherit through it.
          <FieldError id={`${rid}-actions-error`} reason={actionsError} />
        </p>
      ) : (
        <fieldset className="implies">
          <legend>Actions it implies</legend>
          {actions.length === 0 && <span>Give the resource actions first.</span>}
          {actions.map((action) => (
            <label key={action} className="check">
              <input
                type="checkbox"
                checked={relation.actions.includes(action)}
                onChange={(e) => onChange({ actions: e.target.checked ? [...relation.actions, action] : relation.actions.filter((a) => a !== action) })}
              />
              {action}
            </label>
          ))}
          <FieldError id={`${rid}-actions-error`} reason={actionsError} />
        </fieldset>
      )}
      {(["inherits", "requires", "unless"] as const).map(
        (list) =>
          (!link || relation[list].length > 0) && (
            <RuleList
              key={list}
              list={list}
              idPrefix={rid}
              at={rat}
              label={label}
              relation={relation}
              resource={resource}
              catalog={catalog}
              links={links}
              problem={problem}
              onChange={onChange}
            />
          ),
      )}
      <DangerButton onClick={onRemove}>Remove relation {relation.name}</DangerButton>
    </div>
  );
}

