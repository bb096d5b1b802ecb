/**
 * The audit log: newest first, paged, filtered by event type and target id,
 * each event expandable to what changed. The `data` shapes are those the
 * domain writes (src/domain/{applications,catalog,policies,roles}.ts):
 * a policy edit lists the permissions added and removed, a role edit the
 * policies attached and detached, and so on; anything else is shown as a
 * key/value list, or as JSON.
 */
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { useQuery } from "@connectrpc/connect-query";
import { useState, type FormEvent, type ReactNode } from "react";
import type { GetCurrentKeyResponse } from "../../../gen/authz/v1/applications_pb.js";
import { AuditService, type AuditEvent } from "../../../gen/authz/v1/audit_pb.js";
import { PolicyService } from "../../../gen/authz/v1/policies_pb.js";
import { RoleService } from "../../../gen/authz/v1/roles_pb.js";
import { ErrorNote, FieldError } from "../components/error-note";
import { PagerControls } from "../components/pager";
import { When } from "../components/timestamp";
import { apiProblem } from "../lib/errors";
import { usePager } from "../lib/pager";

/** Every event type the service writes. */
const EVENT_TYPES: { type: string; label: string }[] = [
  { type: "application.created", label: "Application created" },
  { type: "api_key.created", label: "API key created" },
  { type: "api_key.revoked", label: "API key revoked" },
  { type: "catalog.replaced", label: "Catalog replaced" },
  { type: "policy.created", label: "Policy created" },
  { type: "policy.updated", label: "Policy updated" },
  { type: "policy.deleted", label: "Policy deleted" },
  { type: "role.created", label: "Role created" },
  { type: "role.updated", label: "Role updated" },
  { type: "role.deleted", label: "Role deleted" },
  { type: "role.assigned", label: "Role assigned" },
  { type: "role.unassigned", label: "Role unassigned" },
  { type: "user.roles_removed", label: "All roles of a user removed" },
];

export function AuditPage({ appId }: { appId: string; caller: GetCurrentKeyResponse }) {
  const pager = usePager();
  const [filter, setFilter] = useState({ type: "", targetId: "" });
  const [typeDraft, setTypeDraft] = useState("");
  const [targetDraft, setTargetDraft] = useState("");
  const events = useQuery(AuditService.method.listAuditEvents, {
    appId,
    pageSize: 50,
    pageToken: pager.token,
    ...(filter.type === "" ? {} : { type: filter.type }),
    ...(filter.targetId === "" ? {} : { targetId: filter.targetId }),
  });
  // Names for the ids the events carry; an id stays an id when it is not found (deleted since).
  const policies = useQuery(PolicyService.method.listPolicies, { appId, pageSize: 1000 });
  const roles = useQuery(RoleService.method.listRoles, { appId, pageSize: 1000 });
  const names: Names = {
    policy: new Map((policies.data?.policies ?? []).map((p) => [p.policyId, p.name])),
    role: new Map((roles.data?.roles ?? []).map((r) => [r.roleId, r.name])),
  };
  const problem = events.error ? apiProblem(events.error) : undefined;
  const list = events.data?.events ?? [];

  const apply = (next: { type: string; targetId: string }) => {
    setTypeDraft(next.type);
    setTargetDraft(next.targetId);
    setFilter(next);
    pager.reset();
  };
  const submit = (event: FormEvent) => {
    event.preventDefault();
    apply({ type: typeDraft, targetId: targetDraft });
  };
  const filtered = filter.type !== "" || filter.targetId !== "";

  return (
    <>
      <h1>Audit log</h1>
      <section aria-labelledby="audit-filters">
        <h2 id="audit-filters">Filters</h2>
        <form onSubmit={submit} className="inline-form">
          <div className="field">
            <label htmlFor="audit-type">Event type</label>
            <select id="audit-type" value={typeDraft} onChange={(e) => apply({ type: e.target.value, targetId: targetDraft })} aria-describedby="audit-type-error">
              <option value="">Any type</option>
              {EVENT_TYPES.map((t) => (
                <option key={t.type} value={t.type}>
                  {t.type} ({t.label})
                </option>
              ))}
            </select>
            <FieldError id="audit-type-error" reason={problem?.fields.get("type")} />
          </div>
          <div className="field">
            <label htmlFor="audit-target">Target id</label>
            <input id="audit-target" value={targetDraft} onChange={(e) => setTargetDraft(e.target.value)} aria-describedby="audit-target-error" />
            <FieldError id="audit-target-error" reason={problem?.fields.get("targetId")} />
          </div>
          <button type="submit">Apply filters</button>
          {filtered && (
            <button type="button" onClick={() => apply({ type: "", targetId: "" })}>
              Clear filters
            </button>
          )}
        </form>
      </section>
      <section aria-labelledby="audit-events">
        <h2 id="audit-events">Events</h2>
        <p className="muted">
          Newest first
          {filter.type !== "" && (
            <>
              , only <code>{filter.type}</code>
            </>
          )}
          {filter.targetId !== "" && (
            <>
              , only about <code>{filter.targetId}</code>
            </>
          )}
          .
        </p>
        {problem !== undefined && (problem.fields.size === 0 || [...problem.fields.keys()].some((f) => f !== "type" && f !== "targetId")) && <ErrorNote error={events.error} />}
        {events.isPending && <p role="status">Loading events…</p>}
        {events.isSuccess &&
          (list.length === 0 && pager.page === 1 ? (
            <p>{filtered ? "No event matches these filters." : "No events yet."}</p>
          ) : (
            <table className="audit-table">
              <caption className="visually-hidden">Audit events, newest first</caption>
              <thead>
                <tr>
                  <th scope="col">Time</th>
                  <th scope="col">Type</th>
                  <th scope="col">Target</th>
                  <th scope="col">Actor key</th>
                  <th scope="col">What changed</th>
                </tr>
              </thead>
              <tbody>
                {list.map((e) => (
                  <EventRow key={e.eventId} event={e} names={names} onTarget={(targetId) => apply({ type: filter.type, targetId })} />
                ))}
              </tbody>
            </table>
          ))}
        <PagerControls pager={pager} nextPageToken={events.data?.nextPageToken} label="Audit events" />
      </section>
    </>
  );
}

interface Names {
  policy: Map<string, string>;
  role: Map<string, string>;
}

function EventRow({ event, names, onTarget }: { event: AuditEvent; names: Names; onTarget: (targetId: string) => void }) {
  const data: JsonObject = event.data ?? {};
  const targetName = typeof data.name === "string" ? data.name : event.targetType === "policy" ? names.policy.get(event.targetId) : event.targetType === "role" ? names.role.get(event.targetId) : undefined;
  return (
    <tr>
      <td>
        <When ts={event.occurredAt} />
      </td>
      <td>
        <code>{event.type}</code>
      </td>
      <td>
        {event.targetType} <code>{event.targetId}</code>
        {targetName !== undefined && targetName !== event.targetId && <span className="ra-small muted ra-block">{targetName}</span>}
        <button type="button" className="link-button ra-small" onClick={() => onTarget(event.targetId)} aria-label={`Only events about this: ${event.targetType} ${event.targetId}`}>
          Only events about this
        </button>
      </td>
      <td>
        <span title={`Key id: ${event.actorKeyId}`}>{event.actorKeyName}</span>
        {event.actorKeyName !== event.actorKeyId && (
          <span className="ra-small muted ra-block">
            <code>{event.actorKeyId}</code>
          </span>
        )}
      </td>
      <td>
        <details className="audit-data">
          <summary>{summaryOf(event.type, data)}</summary>
          <EventData type={event.type} data={data} names={names} />
        </details>
      </td>
    </tr>
  );
}

// ---------------------------------------------------------------------------
// What an event's data says

const strings = (v: JsonValue | undefined): string[] | undefined => (Array.isArray(v) && v.every((x) => typeof x === "string") ? (v as string[]) : undefined);
const count = (v: JsonValue | undefined) => (Array.isArray(v) ? v.length : 0);
const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;
const isObject = (v: JsonValue | undefined): v is JsonObject => typeof v === "object" && v !== null && !Array.isArray(v);

/** One line for the <summary>: the gist of the change. */
function summaryOf(type: string, data: JsonObject): string {
  const name = typeof data.name === "string" ? data.name : undefined;
  const edits = (what: string, added: string, removed: string) => [
    ...(isObject(data.name) ? ["renamed"] : []),
    ...(data.descriptionChanged === true ? ["description changed"] : []),
    ...(count(data[added]) > 0 ? [`${plural(count(data[added]), what)} ${what === "permission" ? "added" : "attached"}`] : []),
    ...(count(data[removed]) > 0 ? [`${plural(count(data[removed]), what, what === "policy" ? "policies" : undefined)} ${what === "permission" ? "removed" : "detached"}`] : []),
  ];
  const sentence = (parts: string[]) => (parts.length === 0 ? "Show data" : parts.join(", ").replace(/^./, (c) => c.toUpperCase()));
  switch (type) {
    case "policy.updated":
      return sentence(edits("permission", "permissionsAdded", "permissionsRemoved"));
    case "role.updated":
      return sentence(edits("policy", "policiesAttached", "policiesDetached"));
    case "role.assigned":
    case "role.unassigned":
      return typeof data.userId === "string" ? `User ${data.userId}` : "Show data";
    case "user.roles_removed":
      return `${plural(count(data.roles), "role")} removed`;
    case "catalog.replaced":
      return sentence([
        ...(typeof data.resourceCount === "number" ? [plural(data.resourceCount, "resource")] : []),
        `${plural(count(data.permissionsAdded), "permission")} added`,
        `${count(data.permissionsRemoved)} removed`,
      ]);
    default:
      return name !== undefined ? name : Object.keys(data).length === 0 ? "No data" : "Show data";
  }
}

const LABELS: Record<string, string> = {
  name: "Name",
  descriptionChanged: "Description changed",
  permissions: "Permissions",
  permissionsAdded: "Permissions added",
  permissionsRemoved: "Permissions removed",
  tenantId: "Tenant",
  force: "Forced delete",
  detachedRoleIds: "Roles detached",
  policyIds: "Policies",
  policiesAttached: "Policies attached",
  policiesDetached: "Policies detached",
  assignmentsRemoved: "Assignments removed",
  userId: "User",
  roles: "Roles removed",
  resourceCount: "Resources in the new catalog",
  resourcesAdded: "Resources added",
  resourcesRemoved: "Resources removed",
  relationsAdded: "Relations added",
  relationsRemoved: "Relations removed",
  scopes: "Scopes",
};

/** The order keys are shown in, per type; keys not listed follow in the data's order. */
const ORDER: Record<string, string[]> = {
  "policy.updated": ["name", "descriptionChanged", "permissionsAdded", "permissionsRemoved"],
  "role.updated": ["name", "descriptionChanged", "policiesAttached", "policiesDetached"],
  "catalog.replaced": ["resourceCount", "resourcesAdded", "resourcesRemoved", "permissionsAdded", "permissionsRemoved", "relationsAdded", "relationsRemoved"],
  "policy.deleted": ["name", "permissions", "force", "detachedRoleIds"],
  "role.deleted": ["name", "policyIds", "assignmentsRemoved"],
  "user.roles_removed": ["userId", "roles"],
};

/** Which keys hold ids of policies or roles, to show by name. */
const ID_KINDS: Record<string, keyof Names> = {
  policyIds: "policy",
  policiesAttached: "policy",
  policiesDetached: "policy",
  detachedRoleIds: "role",
};

const humanize = (key: string) => {
  const words = key.replace(/([a-z0-9])([A-Z])/g, "$1 $2").toLowerCase();
  return words.charAt(0).toUpperCase() + words.slice(1);
};

function EventData({ type, data, names }: { type: string; data: JsonObject; names: Names }) {
  const keys = Object.keys(data);
  const order = ORDER[type] ?? [];
  const shown = [...order.filter((k) => k in data), ...keys.filter((k) => !order.includes(k))];
  return (
    <div className="audit-data-body">
      {keys.length === 0 ? (
        <p className="muted">No data recorded.</p>
      ) : (
        <dl className="ra-facts">
          {shown.map((key) => (
            <div key={key} className="ra-fact">
              <dt>{LABELS[key] ?? humanize(key)}:</dt>
              <dd>
                <Value field={key} value={data[key]} names={names} />
              </dd>
            </div>
          ))}
        </dl>
      )}
      {keys.length > 0 && (
        <details className="raw-json">
          <summary>As JSON</summary>
          <pre>{JSON.stringify(data, null, 2)}</pre>
        </details>
      )}
    </div>
  );
}

/** A name from an id, with the id in small text; the id alone when the name is unknown. */
function Named({ id, name }: { id: string; name: string | undefined }) {
  if (name === undefined) return <code>{id}</code>;
  return (
    <>
      {name} <code className="ra-small muted">{id}</code>
    </>
  );
}

function Value({ field, value, names }: { field: string; value: JsonValue | undefined; names: Names }): ReactNode {
  if (value === undefined || value === null) return <span className="muted">none</span>;
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (typeof value === "number") return String(value);
  if (typeof value === "string") return value === "" ? <span className="muted">(empty)</span> : value;
  const list = strings(value);
  if (list !== undefined) {
    if (list.length === 0) return <span className="muted">none</span>;
    const kind = ID_KINDS[field];
    return (
      <ul className="ra-inline-list">
        {list.map((item, i) => (
          <li key={`${item}-${i}`}>{kind === undefined ? <code>{item}</code> : <Named id={item} name={names[kind].get(item)} />}</li>
        ))}
      </ul>
    );
  }
  if (Array.isArray(value)) {
    if (value.length === 0) return <span className="muted">none</span>;
    // user.roles_removed: [{roleId, name, tenantId?}]
    if (value.every((v) => isObject(v) && typeof v.roleId === "string")) {
      return (
        <ul className="ra-plain-list">
          {(value as JsonObject[]).map((r) => (
            <li key={String(r.roleId)}>
              <Named id={String(r.roleId)} name={typeof r.name === "string" ? r.name : undefined} />
              {typeof r.tenantId === "string" ? ` (tenant ${r.tenantId})` : " (application-wide)"}
            </li>
          ))}
        </ul>
      );
    }
    return <pre>{JSON.stringify(value, null, 2)}</pre>;
  }
  // {from, to}: a rename.
  if (Object.keys(value).length === 2 && typeof value.from === "string" && typeof value.to === "string") {
    return (
      <>
        from “{value.from}” to “{value.to}”
      </>
    );
  }
  return <pre>{JSON.stringify(value, null, 2)}</pre>;
}
