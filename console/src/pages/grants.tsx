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
 */
import { Code, createClient } from "@connectrpc/connect";
import { skipToken, useMutation, useQuery, useTransport } from "@connectrpc/connect-query";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { useQueryClient } from "@tanstack/react-query";
import { useMemo, useRef, useState, type ChangeEvent, type FormEvent } from "react";
import type { GetCurrentKeyResponse } from "../../../gen/authz/v1/applications_pb.js";
import { CatalogService, type CatalogResource } from "../../../gen/authz/v1/catalog_pb.js";
import { RelationshipService, type Relationship } from "../../../gen/authz/v1/relationships_pb.js";
import { DangerButton } from "../components/danger-button";
import { ErrorNote, FieldError } from "../components/error-note";
import { NeedsAppKey } from "../components/needs-app-key";
import { PagerControls } from "../components/pager";
import { MAX_PARENT_DEPTH, ParentTree } from "../components/parent-tree";
import { When } from "../components/timestamp";
import { apiProblem, reasonAt, type ApiProblem } from "../lib/errors";
import { ALL_USERS_SUBJECT, effectiveSubjects, holderText, parseSubjectType } from "../lib/holders";
import {
  BULK_LIMIT,
  holderEntry,
  importGrants,
  lineRanges,
  parseGrantFile,
  type BulkChunk,
  type ErrorDetail,
  type GrantRow,
  type ImportProgress,
  type ImportReport,
  type LineIssue,
  type ParseResult,
  type Rejection,
} from "../../../src/lib/grant-import/index.js";
import { usePager } from "../lib/pager";

const PAGE_SIZE = 50;
/** Rows of an issue table drawn at most (a file can have thousands of bad lines). */
const SHOWN_ISSUES = 500;

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

/* ------------------------------------------------------------------------ */
/* Shared bits                                                               */
/* ------------------------------------------------------------------------ */

const relationsOf = (resources: CatalogResource[], resource: string): string[] =>
  resources.find((r) => r.resource === resource)?.relations.map((r) => r.name) ?? [];

/** Every relation any resource has (for a relation chosen without a resource). */
const allRelations = (resources: CatalogResource[]): string[] => [...new Set(resources.flatMap((r) => r.relations.map((x) => x.name)))].sort();

/** Props tying an input to its field error, only when there is one. */
const errorProps = (id: string, reason: string | undefined) =>
  reason === undefined ? {} : { "aria-describedby": `${id}-error`, "aria-invalid": true as const };

/** A select of names (resources or relations), with a first "any"/"choose" option. */
function ChoiceField({
  id,
  label,
  value,
  onChange,
  options,
  reason,
  required,
  anyLabel,
}: {
  id: string;
  label: string;
  value: string;
  onChange: (value: string) => void;
  options: string[];
  reason: string | undefined;
  required: boolean;
  anyLabel: string;
}) {
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      <select id={id} value={value} onChange={(e) => onChange(e.target.value)} required={required} {...errorProps(id, reason)}>
        <option value="">{anyLabel}</option>
        {options.map((o) => (
          <option key={o} value={o}>
            {o}
          </option>
        ))}
      </select>
      <FieldError id={`${id}-error`} reason={reason} />
    </div>
  );
}

function TextField({
  id,
  label,
  value,
  onChange,
  reason,
  required,
}: {
  id: string;
  label: string;
  value: string;
  onChange: (value: string) => void;
  reason: string | undefined;
  required: boolean;
}) {
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      <input id={id} value={value} onChange={(e) => onChange(e.target.value)} required={required} autoComplete="off" {...errorProps(id, reason)} />
      <FieldError id={`${id}-error`} reason={reason} />
    </div>
  );
}

/** The error of a call: next to its fields when the details name them, else as a note. */
function OtherError({ error, problem, fields }: { error: unknown; problem: ApiProblem | undefined; fields: readonly string[] }) {
  if (problem === undefined) return null;
  if ([...problem.fields.keys()].some((f) => fields.includes(f))) return null;
  return <ErrorNote error={error} />;
}

/** A grant's holder as the single delete takes it: the userId, allUsers, or the subject as its three fields. */
const holderFields = (r: Relationship) =>
  r.allUsers
    ? { allUsers: true }
    : r.subject !== undefined && r.userId === ""
      ? { subjectResource: r.subject.resource, subjectResourceId: r.subject.resourceId, subjectRelation: r.subject.relation }
      : { userId: r.userId };

const isExpired = (r: Relationship, now: number) => r.expiresAt !== undefined && timestampDate(r.expiresAt).getTime() <= now;

/* ------------------------------------------------------------------------ */
/* Search                                                                    */
/* ------------------------------------------------------------------------ */

type Mode = "instance" | "user" | "everyone" | "holder";
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

function SearchSection({ resources }: { resources: CatalogResource[] }) {
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
          <label className="check" htmlFor="grants-search-mode-instance">
            <input
              type="radio"
              id="grants-search-mode-instance"
              name="grants-search-mode"
              checked={form.mode === "instance"}
              onChange={() => set("mode")("instance")}
            />
            Instance: everyone with a relation on one resource instance
          </label>
          <label className="check" htmlFor="grants-search-mode-user">
            <input type="radio" id="grants-search-mode-user" name="grants-search-mode" checked={form.mode === "user"} onChange={() => set("mode")("user")} />
            User: every instance of a resource type a user has a relation on
          </label>
          <label className="check" htmlFor="grants-search-mode-everyone">
            <input
              type="radio"
              id="grants-search-mode-everyone"
              name="grants-search-mode"
              checked={form.mode === "everyone"}
              onChange={() => set("mode")("everyone")}
            />
            Every user: the allUsers grants on a resource type (its public instances)
          </label>
          <label className="check" htmlFor="grants-search-mode-holder">
            <input
              type="radio"
              id="grants-search-mode-holder"
              name="grants-search-mode"
              checked={form.mode === "holder"}
              onChange={() => set("mode")("holder")}
            />
            Holder: every grant a subject set (team:eng#member) or a linked instance (folder:runbooks) holds on a resource type
          </label>
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
              <thead>
                <tr>
                  <th scope="col">Holder</th>
                  <th scope="col">Resource</th>
                  <th scope="col">Instance</th>
                  <th scope="col">Relation</th>
                  <th scope="col">Created</th>
                  <th scope="col">Expires</th>
                  <th scope="col">Condition</th>
                  <th scope="col">
                    <span className="visually-hidden">Actions</span>
                  </th>
                </tr>
              </thead>
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

/* ------------------------------------------------------------------------ */
/* Parents                                                                   */
/* ------------------------------------------------------------------------ */

function ParentsSection({ resources }: { resources: CatalogResource[] }) {
  const [form, setForm] = useState({ resource: "", resourceId: "" });
  const [shown, setShown] = useState<{ resource: string; resourceId: string } | undefined>();
  const submit = (event: FormEvent) => {
    event.preventDefault();
    setShown({ ...form });
  };
  return (
    <section aria-labelledby="grants-parents-heading">
      <h2 id="grants-parents-heading">Parents of an instance</h2>
      <p className="grants-hint" id="grants-parents-hint">
        The instances one is linked to by its link relations (a document's parent folder), theirs, and so on upward, {MAX_PARENT_DEPTH} levels at most; an
        instance met again on the way (a cycle in the data) is marked and not followed.
      </p>
      <form onSubmit={submit} className="grid-form" aria-describedby="grants-parents-hint">
        <ChoiceField
          id="grants-parents-resource"
          label="Resource"
          value={form.resource}
          onChange={(resource) => setForm((f) => ({ ...f, resource }))}
          options={resources.map((r) => r.resource)}
          reason={undefined}
          required
          anyLabel="Choose a resource"
        />
        <TextField
          id="grants-parents-resourceId"
          label="Instance"
          value={form.resourceId}
          onChange={(resourceId) => setForm((f) => ({ ...f, resourceId }))}
          reason={undefined}
          required
        />
        <button type="submit">Show parents</button>
      </form>
      {shown !== undefined && <ParentTree key={`${shown.resource}:${shown.resourceId}`} root={shown} resources={resources} />}
    </section>
  );
}

/* ------------------------------------------------------------------------ */
/* Add one                                                                   */
/* ------------------------------------------------------------------------ */

type HolderKind = "user" | "all-users" | "set" | "link";
const HOLDER_KINDS: { kind: HolderKind; label: string }[] = [
  { kind: "user", label: "A user" },
  { kind: "all-users", label: "Every user at once (allUsers: public)" },
  { kind: "set", label: "A subject set: everyone with a relation on one instance (team:eng#member)" },
  { kind: "link", label: "A linked instance (folder:runbooks as a document's parent)" },
];

/** What a relation's grants may name as holder (its subjects; users only when the catalog says nothing), or every choice when no relation is chosen. */
function holderChoices(resources: CatalogResource[], resource: string, relation: string): string[] {
  const stored = resources.find((r) => r.resource === resource)?.relations.find((r) => r.name === relation);
  if (stored !== undefined) return effectiveSubjects(stored.subjects);
  return ["user", ALL_USERS_SUBJECT, ...resources.flatMap((r) => [r.resource, ...r.relations.map((x) => `${r.resource}#${x.name}`)])];
}

const kindOf = (subject: string): HolderKind => parseSubjectType(subject).kind;

function AddSection({ resources }: { resources: CatalogResource[] }) {
  const queryClient = useQueryClient();
  const write = useMutation(RelationshipService.method.writeRelationship, { onSuccess: () => queryClient.invalidateQueries() });
  const [form, setForm] = useState({ kind: "user" as HolderKind, userId: "", holderType: "", holderId: "", resource: "", resourceId: "", relation: "", expiresAt: "", condition: "" });
  const [expiryProblem, setExpiryProblem] = useState<string | undefined>();
  const problem = write.error ? apiProblem(write.error) : undefined;
  const set = (field: keyof typeof form) => (value: string) => setForm((f) => ({ ...f, [field]: value }));
  const reason = (field: string) => problem?.fields.get(field);

  // The holder kinds and types the chosen relation allows (its subjects in the catalog).
  const choices = holderChoices(resources, form.resource, form.relation);
  const kinds = HOLDER_KINDS.filter((k) => choices.some((c) => kindOf(c) === k.kind));
  const kind = kinds.some((k) => k.kind === form.kind) ? form.kind : (kinds[0]?.kind ?? "user");
  const types = choices.filter((c) => kindOf(c) === kind);
  const holderType = types.includes(form.holderType) ? form.holderType : types.length === 1 ? types[0]! : "";
  const holderError = (kind === "user" ? undefined : reason("userId")) ?? reason("subject") ?? reason("allUsers");

  const submit = (event: FormEvent) => {
    event.preventDefault();
    setExpiryProblem(undefined);
    // datetime-local is the reader's local time, without a zone: new Date reads it as such.
    const expiry = form.expiresAt === "" ? undefined : new Date(form.expiresAt);
    if (expiry !== undefined && Number.isNaN(expiry.getTime())) {
      setExpiryProblem("not a date and time");
      write.reset();
      return;
    }
    const type = kind === "user" || kind === "all-users" ? undefined : parseSubjectType(holderType);
    write.mutate({
      ...(kind === "all-users"
        ? { allUsers: true }
        : type === undefined || type.kind === "user" || type.kind === "all-users"
          ? { userId: form.userId }
          : { subject: { resource: type.resource, resourceId: form.holderId, relation: type.kind === "set" ? type.relation : "" } }),
      resource: form.resource,
      resourceId: form.resourceId,
      relation: form.relation,
      ...(expiry === undefined ? {} : { expiresAt: timestampFromDate(expiry) }),
      ...(form.condition.trim() === "" ? {} : { condition: form.condition }),
    });
  };
  const written = write.isSuccess ? write.data : undefined;
  return (
    <section aria-labelledby="grants-add-heading">
      <h2 id="grants-add-heading">Add a grant</h2>
      <form onSubmit={submit}>
        <div className="grid-form">
          <ChoiceField
            id="grants-add-resource"
            label="Resource"
            value={form.resource}
            onChange={(resource) => setForm((f) => ({ ...f, resource, relation: "" }))}
            options={resources.map((r) => r.resource)}
            reason={reason("resource")}
            required
            anyLabel="Choose a resource"
          />
          <TextField id="grants-add-resourceId" label="Instance" value={form.resourceId} onChange={set("resourceId")} reason={reason("resourceId")} required />
          <ChoiceField
            id="grants-add-relation"
            label="Relation"
            value={form.relation}
            onChange={set("relation")}
            options={relationsOf(resources, form.resource)}
            reason={reason("relation")}
            required
            anyLabel="Choose a relation"
          />
        </div>
        <fieldset className="holder-kind" aria-describedby="grants-add-holder-error">
          <legend>Holder</legend>
          {kinds.map((k) => (
            <label key={k.kind} className="check" htmlFor={`grants-add-kind-${k.kind}`}>
              <input
                type="radio"
                id={`grants-add-kind-${k.kind}`}
                name="grants-add-kind"
                checked={kind === k.kind}
                onChange={() => setForm((f) => ({ ...f, kind: k.kind }))}
              />
              {k.label}
            </label>
          ))}
          <div className="grid-form">
            {kind === "all-users" ? (
              <p className="muted">Every user holds this grant, now and later: no user to name.</p>
            ) : kind === "user" ? (
              <TextField id="grants-add-userId" label="User" value={form.userId} onChange={set("userId")} reason={reason("userId")} required />
            ) : (
              <>
                <ChoiceField
                  id="grants-add-holderType"
                  label={kind === "set" ? "Subject set" : "Linked resource"}
                  value={holderType}
                  onChange={set("holderType")}
                  options={types}
                  reason={reason("subject.resource") ?? reason("subject.relation")}
                  required
                  anyLabel={kind === "set" ? "Choose a subject set" : "Choose a resource"}
                />
                <TextField
                  id="grants-add-holderId"
                  label={kind === "set" ? "Instance of the set" : "Linked instance"}
                  value={form.holderId}
                  onChange={set("holderId")}
                  reason={reason("subject.resourceId")}
                  required
                />
              </>
            )}
          </div>
          <FieldError id="grants-add-holder-error" reason={holderError} />
        </fieldset>
        <div className="grid-form">
          <div className="field">
            <label htmlFor="grants-add-expiresAt">Expires (optional, your local time)</label>
            <input
              id="grants-add-expiresAt"
              type="datetime-local"
              value={form.expiresAt}
              onChange={(e) => set("expiresAt")(e.target.value)}
              {...errorProps("grants-add-expiresAt", expiryProblem ?? reason("expiresAt"))}
            />
            <FieldError id="grants-add-expiresAt-error" reason={expiryProblem ?? reason("expiresAt")} />
          </div>
          <div className="field">
            <label htmlFor="grants-add-condition">Condition (optional, CEL: it must hold for the grant to count)</label>
            <textarea
              id="grants-add-condition"
              rows={2}
              spellCheck={false}
              placeholder="resource.properties.ownerID == subject.id"
              value={form.condition}
              onChange={(e) => set("condition")(e.target.value)}
              {...errorProps("grants-add-condition", reason("condition"))}
            />
            <FieldError id="grants-add-condition-error" reason={reason("condition")} />
          </div>
          <button type="submit" disabled={write.isPending}>
            Add grant
          </button>
        </div>
      </form>
      <OtherError
        error={write.error}
        problem={problem}
        fields={["userId", "allUsers", "resource", "resourceId", "relation", "expiresAt", "condition", "subject", "subject.resource", "subject.resourceId", "subject.relation"]}
      />
      <div aria-live="polite">
        {written !== undefined && written.relationship !== undefined && (
          <p className="grants-done">
            {written.created ? "Grant added" : "Already existed (expiry replaced)"}: {holderText(written.relationship)} is {written.relationship.relation} of {written.relationship.resource}{" "}
            {written.relationship.resourceId}
            {written.relationship.expiresAt === undefined ? ", with no expiry" : <>, until <When ts={written.relationship.expiresAt} /></>}
            {written.relationship.condition === undefined ? "." : <>, where <code>{written.relationship.condition}</code> holds.</>}
          </p>
        )}
      </div>
    </section>
  );
}

/* ------------------------------------------------------------------------ */
/* Delete by filter                                                          */
/* ------------------------------------------------------------------------ */

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

function DeleteByFilterSection({ resources }: { resources: CatalogResource[] }) {
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

/* ------------------------------------------------------------------------ */
/* Import                                                                    */
/* ------------------------------------------------------------------------ */

/** A row as a bulk entry: its holder as userId, or as subject (a subject set, or a link with relation ""). */
const toTuple = (r: GrantRow) => ({
  ...holderEntry(r),
  resource: r.resource,
  resourceId: r.resourceId,
  relation: r.relation,
  ...(r.expiresAt === undefined ? {} : { expiresAt: timestampFromDate(r.expiresAt) }),
  ...(r.condition === undefined ? {} : { condition: r.condition }),
});

/** A ConnectError as importGrants reads a refusal: the details as {field, reason}, all of them (not one per field). */
function describeConnectError(error: unknown): Rejection {
  const problem = apiProblem(error);
  const details = problem.details.filter((d): d is Record<string, unknown> & ErrorDetail => typeof d.field === "string" && typeof d.reason === "string");
  return { invalidArgument: problem.code === Code.InvalidArgument, message: problem.message, details };
}

function ImportSection() {
  const queryClient = useQueryClient();
  const transport = useTransport();
  const client = useMemo(() => createClient(RelationshipService, transport), [transport]);
  const [file, setFile] = useState<{ name: string; parsed: ParseResult } | undefined>();
  const [readProblem, setReadProblem] = useState<string | undefined>();
  const [running, setRunning] = useState(false);
  const [progress, setProgress] = useState<ImportProgress | undefined>();
  const [report, setReport] = useState<ImportReport | undefined>();
  const stopper = useRef<AbortController | undefined>(undefined);

  const choose = async (event: ChangeEvent<HTMLInputElement>) => {
    const chosen = event.target.files?.[0];
    setFile(undefined);
    setReport(undefined);
    setProgress(undefined);
    setReadProblem(undefined);
    if (chosen === undefined) return;
    try {
      // Bytes, not text: a row that is not UTF-8 is reported, never read as U+FFFD.
      const bytes = new Uint8Array(await chosen.arrayBuffer());
      setFile({ name: chosen.name, parsed: parseGrantFile(bytes, chosen.name) });
    } catch (error) {
      setReadProblem(`The file could not be read: ${error instanceof Error ? error.message : String(error)}`);
    }
  };

  const run = async () => {
    if (file === undefined || running) return;
    const controller = new AbortController();
    stopper.current = controller;
    setRunning(true);
    setReport(undefined);
    try {
      const send = async (c: BulkChunk) => {
        const answer = await client.bulkWriteRelationships({ writes: c.writes.map(toTuple), deletes: c.deletes.map(toTuple) });
        return { written: answer.written, unchanged: answer.unchanged, deleted: answer.deleted };
      };
      setReport(await importGrants(file.parsed.rows, send, setProgress, { describe: describeConnectError, signal: controller.signal }));
    } finally {
      stopper.current = undefined;
      setRunning(false);
      void queryClient.invalidateQueries();
    }
  };

  const parsed = file?.parsed;
  return (
    <section aria-labelledby="grants-import-heading">
      <h2 id="grants-import-heading">Import</h2>
      <p className="grants-hint" id="grants-import-hint">
        A CSV file with a header row naming the columns userId, resource, resourceId, relation, and optionally expiresAt (RFC 3339 with a zone, e.g.
        2030-01-31T12:00:00Z) and op (write or delete; write when empty); or NDJSON, one JSON object per line with those keys. A row held by a subject set
        or a linked instance gives subjectResource, subjectResourceId and subjectRelation (empty for a link) instead of userId; in NDJSON also as a subject
        object, as the list returns it. Rows are sent{" "}
        {BULK_LIMIT.toLocaleString()} at a time; rows the service refuses are listed below and the others are still written.
      </p>
      <div className="field">
        <label htmlFor="grants-import-file">Grants file (CSV or NDJSON)</label>
        <input
          id="grants-import-file"
          type="file"
          accept=".csv,.ndjson,.jsonl,text/csv,application/x-ndjson"
          aria-describedby="grants-import-hint"
          onChange={(e) => void choose(e)}
          disabled={running}
        />
      </div>
      {readProblem !== undefined && (
        <div role="alert" className="error-note">
          {readProblem}
        </div>
      )}
      {parsed !== undefined && (
        <>
          <p role="status">
            {file!.name}: {parsed.format === "csv" ? "CSV" : "NDJSON"}, {parsed.rows.length.toLocaleString()} row{parsed.rows.length === 1 ? "" : "s"} ready
            {parsed.errors.length > 0 && (
              <>
                , {parsed.errors.length.toLocaleString()} line{parsed.errors.length === 1 ? "" : "s"} with problems (not sent)
              </>
            )}
            .
          </p>
          {parsed.errors.length > 0 && <IssueTable caption="Lines with problems in the file" issues={parsed.errors} />}
          <button type="button" onClick={() => void run()} disabled={running || parsed.rows.length === 0}>
            {running ? "Importing…" : `Import ${parsed.rows.length.toLocaleString()} row${parsed.rows.length === 1 ? "" : "s"}`}
          </button>
          {running && (
            <button type="button" onClick={() => stopper.current?.abort()}>
              Stop after this call
            </button>
          )}
        </>
      )}
      {progress !== undefined && progress.total > 0 && (
        <div className="field grants-progress">
          <label htmlFor="grants-import-progress">Import progress</label>
          <progress id="grants-import-progress" max={progress.total} value={progress.done}>
            {progress.done} of {progress.total} rows
          </progress>
          <span aria-live="polite">
            {progress.done.toLocaleString()} of {progress.total.toLocaleString()} rows
          </span>
        </div>
      )}
      {report !== undefined && <ImportSummary report={report} />}
    </section>
  );
}

function ImportSummary({ report }: { report: ImportReport }) {
  return (
    <div className="grants-summary">
      <h3>{report.stoppedReason === undefined ? "Import finished" : "Import stopped"}</h3>
      <p role="status" className="visually-hidden">
        Import {report.stoppedReason === undefined ? "finished" : "stopped"}: {report.written} written, {report.unchanged} unchanged, {report.deleted} deleted,{" "}
        {report.failed.length} refused.
      </p>
      <dl>
        <dt>Written</dt>
        <dd>{report.written.toLocaleString()}</dd>
        <dt>Unchanged</dt>
        <dd>{report.unchanged.toLocaleString()}</dd>
        <dt>Deleted</dt>
        <dd>{report.deleted.toLocaleString()}</dd>
        <dt>Refused</dt>
        <dd>{report.failed.length.toLocaleString()}</dd>
      </dl>
      {report.stoppedReason !== undefined && (
        <div className="error-note">
          The import stopped: {report.stoppedReason}.{" "}
          {report.notSent.length > 0 && (
            <>
              {report.notSent.length.toLocaleString()} row{report.notSent.length === 1 ? " was" : "s were"} not sent (line{report.notSent.length === 1 ? "" : "s"}{" "}
              {lineRanges(report.notSent)}).
            </>
          )}
        </div>
      )}
      {report.failed.length > 0 && <IssueTable caption="Rows the service refused" issues={report.failed} />}
    </div>
  );
}

function IssueTable({ caption, issues }: { caption: string; issues: LineIssue[] }) {
  const shown = issues.slice(0, SHOWN_ISSUES);
  return (
    <div className="grants-issues" tabIndex={0} role="region" aria-label={caption}>
      <table>
        <caption>{caption}</caption>
        <thead>
          <tr>
            <th scope="col">Line</th>
            <th scope="col">Reason</th>
          </tr>
        </thead>
        <tbody>
          {shown.map((issue, i) => (
            <tr key={`${issue.line}-${i}`}>
              <td>{issue.line}</td>
              <td>{issue.reason}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {issues.length > shown.length && (
        <p>
          And {(issues.length - shown.length).toLocaleString()} more (lines {lineRanges(issues.slice(SHOWN_ISSUES).map((x) => x.line))}).
        </p>
      )}
    </div>
  );
}
