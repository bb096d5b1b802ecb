/**
 * The model as a file (API.md, "Models as files"): download the whole model
 * (catalog, policies, roles by name) as YAML or JSON, what `portcullis model
 * plan|apply` and this page take back; upload a changed file to see its plan
 * (what would be created, changed and removed, each change as a diff of the
 * stored and the uploaded item, and who would gain or lose which
 * permission, one held under a condition apart from the same held outright)
 * before the apply button; apply it at the plan's version, so a
 * model changed meanwhile is refused rather than overwritten.
 *
 * The file is read in the browser (`yaml`, which reads JSON too); a line
 * that cannot be parsed is named, and so is the line of each place the
 * API's 400 names (`policies[3].permissions[1]`).
 */
import { fromJson, toJson, type JsonObject } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { useMutation, useQuery } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { diffLines } from "diff";
import { useId, useRef, useState, type ChangeEvent } from "react";
import { LineCounter, parseDocument, stringify, type Document } from "yaml";
import type { GetCurrentKeyResponse } from "../../../gen/authz/v1/applications_pb.js";
import {
  ApplyModelRequestSchema,
  GetModelResponseSchema,
  ModelService,
  PlanModelRequestSchema,
  type GetModelResponse,
  type ModelChanges,
  type ModelStranding,
  type PermissionImpact,
  type PlanModelResponse,
  type StrandedUse,
} from "../../../gen/authz/v1/model_pb.js";
import { ErrorNote } from "../components/error-note";
import { useNotify } from "../components/notice";
import { apiProblem } from "../lib/errors";
import { fileForm, fileRelation } from "../../../src/lib/model-file.js";

/** The REST export's JSON: every field, empty lists and strings included (a rule's empty `through` aside: fileForm), so a download equals `model export`. */
const EXPORT_JSON = { alwaysEmitImplicit: true } as const;

type Json = Record<string, unknown>;

/** An uploaded file, parsed, with the way from a place in it back to its line. */
interface Upload {
  name: string;
  document: Json;
  lineOf: (field: string) => number | undefined;
}

export function ModelPage({ appId }: { appId: string; caller: GetCurrentKeyResponse }) {
  const queryClient = useQueryClient();
  const notify = useNotify();
  const model = useQuery(ModelService.method.getModel, { appId });
  const plan = useMutation(ModelService.method.planModel);
  const apply = useMutation(ModelService.method.applyModel, {
    onSuccess: (applied) => {
      notify(`Model applied: now version ${applied.version}.`);
      return queryClient.invalidateQueries();
    },
  });
  const [upload, setUpload] = useState<Upload | undefined>();
  const [unreadable, setUnreadable] = useState<string | undefined>();
  const fileInput = useRef<HTMLInputElement>(null);
  const fileId = useId();

  if (model.isPending) return <p role="status">Loading the model…</p>;
  if (model.isError) return <ErrorNote error={model.error} title="The model could not be read" />;
  const stored = model.data;

  const planFile = async (event: ChangeEvent<HTMLInputElement>) => {
    const file = event.target.files?.[0];
    plan.reset();
    apply.reset();
    setUpload(undefined);
    setUnreadable(undefined);
    if (file === undefined) return;
    const read = readModel(file.name, await file.text());
    if (typeof read === "string") {
      setUnreadable(read);
      return;
    }
    setUpload(read);
    let request;
    try {
      request = planRequest(read);
    } catch (error) {
      // A field the model has not (the API would name it too; the message of the reader is as clear).
      setUnreadable(`${file.name}: not a model document: ${error instanceof Error ? error.message.replace(/^cannot decode message [\w.]+ from JSON: /, "") : String(error)}`);
      return;
    }
    plan.mutate(request);
  };

  /** The plan's request for an uploaded document; throws for a field the model has not. */
  const planRequest = (u: Upload) => fromJson(PlanModelRequestSchema, { ...(u.document as JsonObject), appId });

  const applyPlan = (planned: PlanModelResponse) => {
    if (upload === undefined) return;
    // At the plan's version: a model changed since the plan is refused (409), not overwritten.
    apply.mutate(fromJson(ApplyModelRequestSchema, { ...(upload.document as JsonObject), appId, expectedVersion: planned.version }));
  };

  const planned = plan.data;
  const applied = apply.data;
  const stale = apply.error !== null && apiProblem(apply.error).code === Code.FailedPrecondition;

  return (
    <>
      <h1>Model</h1>
      <p>
        The whole model of this application as one file: the catalog with its relations, the policies and the roles, each by name. Keep it in
        git, review a change as a diff, and apply it here or with <code>portcullis model plan</code> and <code>portcullis model apply</code>{" "}
        (<code>portcullis model test</code> runs a file&apos;s assertions with no server).
      </p>

      <h2>Export</h2>
      <p>
        Version {stored.version}: {count(stored.catalog.length, "resource")}, {count(stored.policies.length, "policy", "policies")},{" "}
        {count(stored.roles.length, "role")}.
      </p>
      <button type="button" onClick={() => download(`${appId}.model.yaml`, exportYaml(stored), "application/yaml")}>
        Download as YAML
      </button>
      <button type="button" className="secondary" onClick={() => download(`${appId}.model.json`, `${JSON.stringify(exportJson(stored), null, 2)}\n`, "application/json")}>
        Download as JSON
      </button>

      <h2>Plan and apply a change</h2>
      <div className="field">
        <label htmlFor={fileId}>Model file (YAML or JSON)</label>
        <input id={fileId} ref={fileInput} type="file" accept=".yaml,.yml,.json,application/json,application/yaml" onChange={(e) => void planFile(e)} />
        <span className="muted"> Nothing changes until you apply the plan.</span>
      </div>
      {unreadable !== undefined && (
        <div role="alert" className="error-note">
          <p>
            <strong>The file cannot be planned: </strong>
            {unreadable}
          </p>
        </div>
      )}
      {plan.isPending && <p role="status">Planning…</p>}
      {plan.error !== null && upload !== undefined && <Refusal title="The model was not planned" error={plan.error} upload={upload} />}
      {planned !== undefined && upload !== undefined && applied === undefined && (
        <section aria-labelledby="model-plan-heading">
          <h3 id="model-plan-heading">
            Plan of {upload.name} against version {planned.version}
          </h3>
          {planned.stranding !== undefined && <StrandingNote stranding={planned.stranding} />}
          <PlanView plan={planned} stored={stored} upload={upload.document} />
          {apply.error !== null &&
            (stale ? (
              <div role="alert" className="error-note">
                <p>
                  <strong>Not applied: </strong>
                  {apiProblem(apply.error).message}
                </p>
                <p>The model changed since this plan, or applying it would strand grants. Nothing was applied.</p>
                <button type="button" className="secondary" onClick={() => {
                  apply.reset();
                  void model.refetch();
                  plan.mutate(planRequest(upload));
                }}>
                  Plan again
                </button>
              </div>
            ) : (
              <Refusal title="The model was not applied" error={apply.error} upload={upload} />
            ))}
          <div className="form-actions">
            {isEmpty(planned) ? (
              <p>Nothing to apply: the file is the model as it is.</p>
            ) : planned.stranding !== undefined ? (
              <p>Nothing to apply until the grants above are deleted or the file keeps what they use: apply would be refused.</p>
            ) : (
              <>
                {removes(planned) && (
                  <p>
                    <strong>This plan takes something away</strong> (a part of the model, or a permission some users hold): read it before you apply.
                  </p>
                )}
                <button type="button" disabled={apply.isPending} onClick={() => applyPlan(planned)}>
                  Apply this model (version {planned.version})
                </button>
              </>
            )}
          </div>
        </section>
      )}
      {applied !== undefined && upload !== undefined && (
        <section aria-labelledby="model-applied-heading">
          <h3 id="model-applied-heading">
            Applied {upload.name}: now version {applied.version}
          </h3>
          <PlanView plan={applied} stored={undefined} upload={upload.document} />
          <button
            type="button"
            className="secondary"
            onClick={() => {
              apply.reset();
              plan.reset();
              setUpload(undefined);
              if (fileInput.current !== null) fileInput.current.value = "";
            }}
          >
            Plan another file
          </button>
        </section>
      )}
    </>
  );
}

const count = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

function exportJson(stored: GetModelResponse): Json {
  return fileForm(toJson(GetModelResponseSchema, stored, EXPORT_JSON) as Json);
}

/** As `portcullis model export` prints it: the schema's line for editors, then the document. */
function exportYaml(stored: GetModelResponse): string {
  return `# yaml-language-server: $schema=${window.location.origin}/model.schema.json\n${stringify(exportJson(stored), { lineWidth: 0 })}`;
}

/** Saves `text` as a file named `name`, through a link the page never shows. */
function download(name: string, text: string, type: string) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  a.click();
  // The download has its copy once the click is handled.
  setTimeout(() => URL.revokeObjectURL(url), 0);
}

/** The file as a model document, or why it cannot be (its line named). */
function readModel(name: string, text: string): Upload | string {
  const lines = new LineCounter();
  let doc: Document;
  try {
    doc = parseDocument(text, { uniqueKeys: true, prettyErrors: true, lineCounter: lines });
  } catch (error) {
    return `${name}: ${error instanceof Error ? error.message : String(error)}`;
  }
  const problem = doc.errors[0];
  if (problem !== undefined) {
    const line = problem.linePos?.[0].line;
    return `${name}: ${line === undefined ? "" : `line ${line}: `}${problem.message.split("\n")[0]!.replace(/ at line \d+, column \d+:?$/, "")}`;
  }
  let value: unknown;
  try {
    value = doc.toJS({ maxAliasCount: 100 });
  } catch (error) {
    return `${name}: ${error instanceof Error ? error.message : String(error)}`;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return `${name}: line 1: a model is a mapping with catalog, policies and roles (what the download gives)`;
  }
  const lineOf = (field: string) => {
    const path: (string | number)[] = [];
    for (const part of field.matchAll(/([^.[\]]+)|\[(\d+)\]/g)) path.push(part[2] === undefined ? part[1]! : Number(part[2]));
    for (let n = path.length; n > 0; n--) {
      const node = doc.getIn(path.slice(0, n), true) as { range?: [number, number, number] } | undefined;
      if (node?.range !== undefined) return lines.linePos(node.range[0]).line;
    }
    return undefined;
  };
  return { name, document: value as Json, lineOf };
}

/** A 400 with the places the API named, each with its line in the file. */
function Refusal({ title, error, upload }: { title: string; error: unknown; upload: Upload }) {
  const problem = apiProblem(error);
  const places = problem.details.filter((d): d is { field: string; reason: string } => typeof d.field === "string" && typeof d.reason === "string");
  return (
    <div role="alert" className="error-note">
      <p>
        <strong>{title}: </strong>
        {places.length === 0 ? problem.message : "the file has these problems; nothing changed."}
      </p>
      {places.length > 0 && (
        <ul>
          {places.map((d, i) => {
            const line = upload.lineOf(d.field);
            return (
              <li key={i}>
                {line !== undefined && <>line {line}: </>}
                <code>{d.field}</code>: {d.reason}
              </li>
            );
          })}
        </ul>
      )}
    </div>
  );
}

/**
 * What apply would strand (the plan's `stranding`): apply's refusal word for
 * word and each resource, relation or subject type grants still use, so a
 * plan never shows an apply button for a model the service will refuse.
 */
function StrandingNote({ stranding }: { stranding: ModelStranding }) {
  const nameOf = (u: StrandedUse) =>
    u.relation === "" ? u.resource : u.subject === "" ? `${u.resource}#${u.relation}` : `"${u.subject}" of ${u.resource}#${u.relation}`;
  return (
    <div role="alert" className="error-note" aria-label="Apply would be refused">
      <p>
        <strong>Apply would be refused: </strong>
        {stranding.message}
      </p>
      <ul>
        {stranding.uses.map((u) => (
          <li key={`${u.resource}#${u.relation}@${u.subject}`}>
            <code>{nameOf(u)}</code>: {u.reason}
          </li>
        ))}
      </ul>
    </div>
  );
}

/** A plan, or the plan apply carried out: the same fields. */
type Plan = Omit<PlanModelResponse, "$typeName" | "$unknown">;

const isEmpty = (p: Plan) => [p.catalog, p.policies, p.roles].every((c) => c === undefined || c.created.length + c.changed.length + c.removed.length === 0);
const removes = (p: Plan) => [p.catalog, p.policies, p.roles].some((c) => (c?.removed.length ?? 0) > 0) || p.impact.some((i) => i.losing > 0);

const PARTS = [
  { key: "catalog", title: "Catalog", nameOf: (item: Json) => String(item.resource) },
  { key: "policies", title: "Policies", nameOf: (item: Json) => String(item.name) },
  // Roles are named within their scope, as the plan names them: "tenant/name" for a tenant's role.
  { key: "roles", title: "Roles", nameOf: (item: Json) => (typeof item.tenantId === "string" && item.tenantId !== "" ? `${item.tenantId}/${String(item.name)}` : String(item.name)) },
] as const;

/** What the plan creates, changes and removes (each with its diff when the stored model is known), and its impact. */
function PlanView({ plan, stored, upload }: { plan: Plan; stored: GetModelResponse | undefined; upload: Json }) {
  const before = stored === undefined ? undefined : exportJson(stored);
  if (isEmpty(plan)) return <p>No changes: the file is the model as it is.</p>;
  return (
    <>
      {PARTS.map(({ key, title, nameOf }) => {
        const changes: ModelChanges | undefined = plan[key];
        const rows = [
          ...(changes?.created ?? []).map((name) => ({ name, kind: "created" as const })),
          ...(changes?.changed ?? []).map((name) => ({ name, kind: "changed" as const })),
          ...(changes?.removed ?? []).map((name) => ({ name, kind: "removed" as const })),
        ];
        if (rows.length === 0) return null;
        const find = (doc: Json | undefined, name: string) => ((doc?.[key] ?? []) as Json[]).find((item) => nameOf(item) === name);
        return (
          <section key={key} aria-label={`${title}: changes`}>
            <h4>{title}</h4>
            <ul className="model-changes">
              {rows.map(({ name, kind }) => (
                <li key={`${kind}-${name}`}>
                  <span className={`model-${kind}`}>{kind === "created" ? "+ created" : kind === "removed" ? "− removed" : "~ changed"}</span> <code>{name}</code>
                  {before !== undefined && <ItemDiff label={`${title} ${name}`} before={find(before, name)} after={find(upload, name)} />}
                </li>
              ))}
            </ul>
          </section>
        );
      })}
      <Impact impact={plan.impact} />
    </>
  );
}

/** One item as stored and as uploaded, line by line: added lines marked +, removed −, in words as well as colour. */
function ItemDiff({ label, before, after }: { label: string; before: Json | undefined; after: Json | undefined }) {
  const text = (item: Json | undefined) => (item === undefined ? "" : stringify(normalise(item), { lineWidth: 0 }));
  const parts = diffLines(text(before), text(after));
  return (
    <pre className="model-diff" aria-label={`Diff of ${label}`}>
      {parts.flatMap((part, i) =>
        part.value
          .replace(/\n$/, "")
          .split("\n")
          .map((line, j) => (
            <span key={`${i}-${j}`} className={part.added ? "diff-added" : part.removed ? "diff-removed" : "diff-same"}>
              {part.added ? "+ " : part.removed ? "− " : "  "}
              {line}
              {"\n"}
            </span>
          )),
      )}
    </pre>
  );
}

/** The fields an upload may leave out, spelled out as the export spells them, so that only real changes show in a diff. */
function normalise(item: Json): Json {
  const out: Json = { ...item };
  if (out.description === undefined) out.description = "";
  for (const list of ["actions", "relations", "permissions", "policies"]) if (list in out && out[list] === undefined) out[list] = [];
  if (Array.isArray(out.relations)) {
    out.relations = (out.relations as Json[])
      .filter((r) => r.builtIn !== true)
      .map((r) => fileRelation({ ...r, builtIn: undefined, subjects: r.subjects ?? [], inherits: r.inherits ?? [] }));
  }
  return JSON.parse(JSON.stringify(out)) as Json;
}

function Impact({ impact }: { impact: PermissionImpact[] }) {
  if (impact.length === 0) return <p>Access: no user gains or loses a permission.</p>;
  return (
    <>
      <h4>Access</h4>
      <ImpactTable impact={impact} />
    </>
  );
}

function ImpactTable({ impact }: { impact: PermissionImpact[] }) {
  const sample = (ids: string[], n: number, atLeast: boolean) =>
    ids.length === 0 ? "" : ` (${ids.join(", ")}${atLeast ? ", and maybe more" : n > ids.length ? `, and ${n - ids.length} more` : ""})`;
  /** Who gains or loses it on which instance, through grants: "alice on 42". */
  const pairs = (list: PermissionImpact["gainingPairs"], what: string) =>
    list.length === 0 ? null : (
      <ul className="impact-pairs" aria-label={what}>
        {list.map((p) => (
          <li key={`${p.userId}\n${p.resourceId}`}>
            {p.userId} on <code>{p.resourceId}</code>
          </li>
        ))}
      </ul>
    );
  const lowerBounds = impact.some((i) => i.atLeast);
  return (
    <>
      <table aria-label="Access: who gains or loses a permission">
        <thead>
          <tr>
            <th scope="col">Permission</th>
            <th scope="col">Users gaining it</th>
            <th scope="col">Users losing it</th>
          </tr>
        </thead>
        <tbody>
          {impact.map((i) => (
            // A permission may have a row held outright and rows under conditions: the condition is part of the row's identity.
            <tr key={`${i.permission}\n${i.condition ?? ""}`}>
              <td>
                <code>{i.permission}</code>
                {i.condition !== undefined && (
                  <>
                    {" "}
                    <span className="muted">only where</span> <code className="condition">{i.condition}</code> <span className="muted">holds</span>
                  </>
                )}
              </td>
              <td>
                {i.atLeast && "≥ "}
                {i.gaining}
                {sample(i.gainingSample, i.gaining, i.atLeast)}
                {pairs(i.gainingPairs, `Gaining ${i.permission} on`)}
              </td>
              <td>
                {i.atLeast && "≥ "}
                {i.losing}
                {sample(i.losingSample, i.losing, i.atLeast)}
                {pairs(i.losingPairs, `Losing ${i.permission} on`)}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {lowerBounds && <p className="muted">≥: the change reaches more than a plan examines; those counts are lower bounds.</p>}
    </>
  );
}
