/**
 * Ask a question and read why: allowed or denied, and the explain answer as a
 * path a person can follow (a grant; or the chain of grants from the user's
 * own through groups and parents to the one on the instance, "alice is
 * member of team:eng → team:eng#member is viewer of folder:runbooks →
 * folder:runbooks is parent of document:42"; or role → policy → permission),
 * or, when denied, what the user holds there; and every condition evaluated
 * on the way, with what it read (the question may carry context and the
 * subject's, resource's and action's properties, typed as JSON objects,
 * components/question-facts.tsx). And the other way round: who
 * can perform the action on the instance, paged. The questions act on the
 * calling key's own application, so they take an application key.
 */
import { skipToken, useMutation, useQuery } from "@connectrpc/connect-query";
import { useState, type FormEvent } from "react";
import type { GetCurrentKeyResponse } from "../../../gen/authz/v1/applications_pb.js";
import type { RelationshipTuple } from "../../../gen/authz/v1/relationships_pb.js";
import { CatalogService } from "../../../gen/authz/v1/catalog_pb.js";
import { CheckService, type ExplainGrant, type ExplainResponse, type ExplainRuleEntry } from "../../../gen/authz/v1/check_pb.js";
import { ErrorNote, FieldError } from "../components/error-note";
import { ContextualGrantsField, readContextualGrants } from "../components/contextual-grants";
import { EvaluatedConditions } from "../components/evaluated-conditions";
import { PagerControls } from "../components/pager";
import { FACT_FIELDS, NO_FACT_TEXTS, QuestionFactsFields, readFacts, type FactField, type FactTexts } from "../components/question-facts";
import { apiProblem, reasonAt } from "../lib/errors";
import { grantSentence } from "../lib/holders";
import { usePager } from "../lib/pager";

/** Users shown a page in the "who can" list. */
const WHO_PAGE_SIZE = 50;

interface WhoQuestion {
  resource: string;
  resourceId: string;
  action: string;
  tenantId: string;
  contextualGrants: RelationshipTuple[];
}

/** The service's reason at a contextual grant, with the field it names ("contextualGrants[1].relation: …"). */
function contextualReason(problem: ReturnType<typeof apiProblem> | undefined): string | undefined {
  for (const [field, reason] of problem?.fields ?? []) if (field.startsWith("contextualGrants")) return `${field}: ${reason}`;
  return undefined;
}

export function CheckPage({ appId, caller }: { appId: string; caller: GetCurrentKeyResponse }) {
  const catalog = useQuery(CatalogService.method.getCatalog, { appId });
  const explain = useMutation(CheckService.method.explain);
  const [form, setForm] = useState({ userId: "", resource: "", resourceId: "", action: "", tenantId: "" });
  const [facts, setFacts] = useState<FactTexts>(NO_FACT_TEXTS);
  // The browser's reading of the facts at the last Check: a field that is not a JSON object is never sent.
  const [factProblems, setFactProblems] = useState<ReadonlyMap<FactField, string>>(new Map());
  const [contextual, setContextual] = useState("");
  // The browser's reading of the contextual grants at the last question: text that is not an array of grants is never sent.
  const [contextualProblem, setContextualProblem] = useState<string | undefined>();
  const [who, setWho] = useState<WhoQuestion | undefined>();
  const pager = usePager();
  const whoCan = useQuery(
    CheckService.method.whoCan,
    who === undefined || caller.kind === "operator"
      ? skipToken
      : {
          resource: who.resource,
          resourceId: who.resourceId,
          action: who.action,
          ...(who.tenantId === "" ? {} : { tenantId: who.tenantId }),
          contextualGrants: who.contextualGrants,
          pageSize: WHO_PAGE_SIZE,
          pageToken: pager.token,
        },
  );
  const resources = catalog.data?.resources ?? [];
  const resource = resources.find((r) => r.resource === form.resource);
  // The field errors of the last question asked: the check's, or the "who can" list's.
  const problem = who !== undefined && whoCan.error ? apiProblem(whoCan.error) : explain.error ? apiProblem(explain.error) : undefined;
  const set = (field: keyof typeof form) => (value: string) => setForm((f) => ({ ...f, [field]: value }));

  if (caller.kind === "operator") {
    return (
      <>
        <h1>Check</h1>
        <p>
          The questions act on the calling key's own application: create a key on the API keys page and sign in with it to ask them.
        </p>
      </>
    );
  }
  const submit = (event: FormEvent) => {
    event.preventDefault();
    setWho(undefined);
    const read = readFacts(facts);
    const grants = readContextualGrants(contextual);
    setFactProblems(read.ok ? new Map() : read.problems);
    setContextualProblem(grants.ok ? undefined : grants.problem);
    if (!read.ok || !grants.ok) {
      explain.reset();
      return;
    }
    explain.mutate({
      userId: form.userId,
      resource: form.resource,
      resourceId: form.resourceId,
      action: form.action,
      ...(form.tenantId === "" ? {} : { tenantId: form.tenantId }),
      ...read.facts,
      contextualGrants: grants.grants,
    });
  };
  // The fields that show their own errors: an error naming another gets the general note.
  const shown = (field: string) =>
    ["userId", "resource", "resourceId", "action", "tenantId"].includes(field) ||
    field.startsWith("contextualGrants") ||
    FACT_FIELDS.some((f) => field === f || field.startsWith(`${f}.`));
  const fieldProps = (field: keyof typeof form) => ({
    id: `check-${field}`,
    value: form[field],
    "aria-describedby": `check-${field}-error`,
  });
  return (
    <>
      <h1>Check</h1>
      {catalog.isError && <ErrorNote error={catalog.error} title="The catalog could not be read" />}
      <form onSubmit={submit} className="grid-form">
        <div className="field">
          <label htmlFor="check-userId">User</label>
          <input {...fieldProps("userId")} onChange={(e) => set("userId")(e.target.value)} required />
          <FieldError id="check-userId-error" reason={problem?.fields.get("userId")} />
        </div>
        <div className="field">
          <label htmlFor="check-resource">Resource</label>
          <select {...fieldProps("resource")} onChange={(e) => setForm((f) => ({ ...f, resource: e.target.value, action: "" }))} required>
            <option value="">Choose a resource</option>
            {resources.map((r) => (
              <option key={r.resource} value={r.resource}>
                {r.resource}
              </option>
            ))}
          </select>
          <FieldError id="check-resource-error" reason={problem?.fields.get("resource")} />
        </div>
        <div className="field">
          <label htmlFor="check-resourceId">Instance</label>
          <input {...fieldProps("resourceId")} onChange={(e) => set("resourceId")(e.target.value)} required />
          <FieldError id="check-resourceId-error" reason={problem?.fields.get("resourceId")} />
        </div>
        <div className="field">
          <label htmlFor="check-action">Action</label>
          <select {...fieldProps("action")} onChange={(e) => set("action")(e.target.value)} required>
            <option value="">Choose an action</option>
            {(resource?.actions ?? []).map((a) => (
              <option key={a} value={a}>
                {a}
              </option>
            ))}
          </select>
          <FieldError id="check-action-error" reason={problem?.fields.get("action")} />
        </div>
        <div className="field">
          <label htmlFor="check-tenantId">Tenant (optional)</label>
          <input {...fieldProps("tenantId")} onChange={(e) => set("tenantId")(e.target.value)} />
          <FieldError id="check-tenantId-error" reason={problem?.fields.get("tenantId")} />
        </div>
        <QuestionFactsFields
          texts={facts}
          onChange={(field, text) => setFacts((f) => ({ ...f, [field]: text }))}
          reasonOf={(field) => factProblems.get(field) ?? reasonAt(problem, field)}
        />
        <ContextualGrantsField text={contextual} onChange={setContextual} reason={contextualProblem ?? contextualReason(problem)} />
        <button type="submit" disabled={explain.isPending}>
          Check
        </button>
        <button
          type="button"
          className="secondary"
          aria-describedby="check-who-hint"
          onClick={() => {
            explain.reset();
            setFactProblems(new Map());
            const grants = readContextualGrants(contextual);
            setContextualProblem(grants.ok ? undefined : grants.problem);
            pager.reset();
            setWho(grants.ok ? { resource: form.resource, resourceId: form.resourceId, action: form.action, tenantId: form.tenantId, contextualGrants: grants.grants } : undefined);
          }}
        >
          Who can?
        </button>
      </form>
      <p id="check-who-hint" className="muted">
        “Who can?” lists every user who may perform the action on the instance (the user field is not needed): through their grants, groups and parents,
        or a role. Conditions are not evaluated there: a grant, assignment or policy with one does not count.
      </p>
      {problem !== undefined && (problem.fields.size === 0 || [...problem.fields.keys()].some((f) => !shown(f))) && <ErrorNote error={who !== undefined ? whoCan.error : explain.error} />}
      {who === undefined && explain.data !== undefined && <Answer appId={appId} answer={explain.data} />}
      {who !== undefined && whoCan.isFetching && <p role="status">Loading who can…</p>}
      {who !== undefined && whoCan.isSuccess && (
        <section aria-labelledby="who-can" className="answer">
          <h2 id="who-can">
            Who can {who.action} {who.resource} {who.resourceId}
            {who.tenantId === "" ? "" : ` (tenant ${who.tenantId})`}
          </h2>
          {whoCan.data.allUsers && (
            <p role="status" className="who-can-everyone">
              <strong>Every user may</strong>: an allUsers grant gives this instance, or one on its path, a relation that implies {who.action}.
              {whoCan.data.userIds.length > 0 && " These users may also through grants or roles of their own:"}
            </p>
          )}
          {whoCan.data.allUsersConditions.length > 0 && (
            <div className="who-can-everyone">
              <p role="status">
                <strong>Every user may where a condition holds</strong>: an allUsers grant with a condition, or one on a path through a row with a
                condition, gives a relation that implies {who.action}. Any one of:
              </p>
              <ul aria-label="Conditions under which every user may">
                {whoCan.data.allUsersConditions.map((c) => (
                  <li key={c}>
                    <code className="condition">{c}</code>
                  </li>
                ))}
              </ul>
            </div>
          )}
          {whoCan.data.userIds.length === 0 ? (
            !whoCan.data.allUsers &&
            whoCan.data.conditional.length === 0 &&
            whoCan.data.allUsersConditions.length === 0 && <p role="status">Nobody: no user may do this.</p>
          ) : (
            <>
              <p role="status">
                {pager.page === 1 && whoCan.data.nextPageToken === ""
                  ? `${whoCan.data.userIds.length} user${whoCan.data.userIds.length === 1 ? "" : "s"}:`
                  : `Page ${pager.page}: ${whoCan.data.userIds.length} users, in order of their ids.`}
              </p>
              <ul className="who-can" aria-label={`Users who can, page ${pager.page}`}>
                {whoCan.data.userIds.map((u) => (
                  <li key={u}>{u}</li>
                ))}
              </ul>
            </>
          )}
          {whoCan.data.conditional.length > 0 && (
            <>
              <p role="status">Only where a condition holds (not counted above):</p>
              <ul className="who-can-conditional" aria-label={`Only where a condition holds, page ${pager.page}`}>
                {whoCan.data.conditional.map((c) => (
                  <li key={c.userId}>
                    {c.userId}, where{" "}
                    {c.conditions.map((condition, i) => (
                      <span key={condition}>
                        {i > 0 && " or "}
                        <code className="condition">{condition}</code>
                      </span>
                    ))}{" "}
                    holds
                  </li>
                ))}
              </ul>
            </>
          )}
          <PagerControls pager={pager} nextPageToken={whoCan.data.nextPageToken} label="Users who can" />
        </section>
      )}
    </>
  );
}

const when = (ts: { seconds: bigint; nanos: number } | undefined) =>
  ts === undefined ? "" : new Date(Number(ts.seconds) * 1000 + Math.floor(ts.nanos / 1e6)).toISOString();

function Answer({ appId, answer }: { appId: string; answer: ExplainResponse }) {
  return (
    <section aria-labelledby="answer" className={answer.allowed ? "answer allowed" : "answer denied"}>
      <h2 id="answer">{answer.allowed ? "Allowed" : "Denied"}</h2>
      {answer.allowed ? (
        <>
          <p>Every way it is allowed:</p>
          <ol className="reasons">
            {answer.reasons.map((r, i) =>
              r.kind === "relation" ? (
                r.path.length > 1 ? (
                  <li key={i}>
                    Relation <strong>{r.relation}</strong> on this instance, through {r.path.length} grants:{" "}
                    <GrantPath path={r.path} />
                    <RuleEntries entries={r.requires} />
                  </li>
                ) : (
                  <li key={i}>
                    Grant: <strong>{r.relation}</strong> on this instance{r.grant?.allUsers === true && " to every user (allUsers)"}
                    {r.grant?.contextual === true ? ", contextual (this question's alone)" : `, given ${when(r.grant?.createdAt)}`}
                    {r.grant?.expiresAt !== undefined && <>, until {when(r.grant.expiresAt)}</>}
                    {r.grant?.condition !== undefined && (
                      <>
                        , where <code className="condition">{r.grant.condition}</code> held
                      </>
                    )}
                    <RuleEntries entries={r.requires} />
                  </li>
                )
              ) : (
                <li key={i}>
                  Role <strong>{r.roleName}</strong>
                  {r.tenantId !== undefined && <> (tenant {r.tenantId})</>} → policy <strong>{r.policyName}</strong> → permission <code>{r.permission}</code>
                </li>
              ),
            )}
          </ol>
        </>
      ) : (
        <>
          <p>What the user holds here:</p>
          <ul>
            {answer.considered?.relations.map((r) => (
              <li key={r.relation}>
                Relation <strong>{r.relation}</strong>, which allows {r.actions.length === 0 ? "nothing" : r.actions.join(", ")}
              </li>
            ))}
            {answer.considered?.roles.map((r) => (
              <li key={r.roleId}>
                Role <strong>{r.roleName}</strong>
                {r.tenantId !== undefined && <> (tenant {r.tenantId})</>}, whose policies do not hold this permission
              </li>
            ))}
            {(answer.considered?.relations.length ?? 0) + (answer.considered?.roles.length ?? 0) === 0 && answer.blocked.length === 0 && (
              <li>Nothing: no grant on this instance and no role in scope.</li>
            )}
          </ul>
        </>
      )}
      {answer.blocked.length > 0 && (
        <>
          <p>Taken away by a rule of the catalog:</p>
          <ul className="blocked" aria-label="Taken away">
            {answer.blocked.map((b) => (
              <li key={b.relation}>
                Relation <strong>{b.relation}</strong>: {b.entry === undefined ? "" : <RuleEntryText entry={b.entry} />}
              </li>
            ))}
          </ul>
        </>
      )}
      <EvaluatedConditions appId={appId} answer={answer} />
    </section>
  );
}

/** A relation's requires entries that held, each with where and its path (docs/exclusion.md). */
function RuleEntries({ entries }: { entries: ExplainRuleEntry[] }) {
  if (entries.length === 0) return null;
  return (
    <ul className="rule-entries" aria-label="Requires">
      {entries.map((e) => (
        <li key={e.index}>
          <RuleEntryText entry={e} />
        </li>
      ))}
    </ul>
  );
}

/** "unless blocked on this instance: holds on document:d1, by bob is blocked of document:d1". */
function RuleEntryText({ entry: e }: { entry: ExplainRuleEntry }) {
  const what = (
    <>
      {e.rule} <strong>{e.relation}</strong> {e.through === "" ? "on this instance" : `on an instance linked by ${e.through}`}
    </>
  );
  if (e.holds !== "true") return <>{what}: {e.holds === "unknown" ? "cannot be decided (a condition lacks its facts)" : "does not hold"}</>;
  return (
    <>
      {what}: holds on {e.resource}:{e.resourceId}
      {e.path.length > 0 && (
        <>
          , by <GrantPath path={e.path} />
        </>
      )}
    </>
  );
}

/**
 * The grants from the user's own to the one on the instance, in order, as a
 * chain: "alice is member of team:eng → team:eng#member is viewer of
 * folder:runbooks → folder:runbooks is parent of document:42". A list, so
 * a screen reader says how many steps; the arrows are drawn between items.
 */
function GrantPath({ path }: { path: ExplainGrant[] }) {
  return (
    <ol className="grant-path" aria-label="Path of grants">
      {path.map((g, i) => (
        <li key={i}>
          {i > 0 && <span aria-hidden="true"> → </span>}
          {grantSentence(g)}
          {g.contextual === true && <span className="muted"> (contextual)</span>}
          {g.expiresAt !== undefined && <span className="muted"> (until {when(g.expiresAt)})</span>}
          {g.condition !== undefined && (
            <>
              {" "}
              where <code className="condition">{g.condition}</code> held
            </>
          )}
        </li>
      ))}
    </ol>
  );
}
