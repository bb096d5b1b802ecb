/**
 * The conditions explain evaluated for its answer (docs/conditions.md): for
 * each, whose it is (a grant's on the instance, a role assignment's, or a
 * policy's through a role), whether it held and what it came to, CEL's
 * message when it did not, and every value it read, found or missing. Missing
 * values are the usual reason a condition denies: the question lacked a fact.
 */
import { toJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import type { ConditionRead, EvaluatedCondition, ExplainResponse } from "../../../gen/authz/v1/check_pb.js";
import { appPaths } from "../lib/routes";
import { PageLink } from "./page-link";

/** What a condition came to, in words ("true" is the only outcome that holds). */
const OUTCOMES: Record<string, string> = {
  true: "it came to true",
  false: "it came to false",
  error: "its evaluation failed",
  "not a bool": "it came to a value that is not a bool",
};

/** Role and policy names the answer itself carries, by id (the conditions name only ids). */
function namesOf(answer: ExplainResponse) {
  const roles = new Map<string, string>();
  const policies = new Map<string, string>();
  for (const r of answer.reasons) {
    if (r.roleId !== undefined && r.roleName !== undefined) roles.set(r.roleId, r.roleName);
    if (r.policyId !== undefined && r.policyName !== undefined) policies.set(r.policyId, r.policyName);
  }
  for (const r of answer.considered?.roles ?? []) roles.set(r.roleId, r.roleName);
  return { roles, policies };
}

type Names = ReturnType<typeof namesOf>;

export function EvaluatedConditions({ appId, answer }: { appId: string; answer: ExplainResponse }) {
  if (answer.conditions.length === 0) return null;
  const names = namesOf(answer);
  return (
    <>
      <h3 id="answer-conditions">Conditions evaluated</h3>
      <ol aria-labelledby="answer-conditions" className="evaluated-conditions">
        {answer.conditions.map((c, i) => (
          <Evaluated key={i} appId={appId} condition={c} names={names} index={i + 1} />
        ))}
      </ol>
    </>
  );
}

function Evaluated({ appId, condition: c, names, index }: { appId: string; condition: EvaluatedCondition; names: Names; index: number }) {
  return (
    <li className={c.holds ? "condition-held" : "condition-failed"}>
      <p>
        <strong>{c.holds ? "Held" : "Did not hold"}</strong> ({OUTCOMES[c.outcome] ?? c.outcome}): <code className="condition">{c.condition}</code>,{" "}
        <Source appId={appId} condition={c} names={names} />
      </p>
      {c.message !== "" && <p className="condition-message">{c.message}</p>}
      <Reads reads={c.reads} caption={`Values condition ${index} read`} />
    </li>
  );
}

/** Whose condition it is: a policy's (through a role), a role assignment's, or a grant's. */
function Source({ appId, condition: c, names }: { appId: string; condition: EvaluatedCondition; names: Names }) {
  const role = c.roleId === undefined ? undefined : <PageLink to={appPaths(appId).role(c.roleId)}>{names.roles.get(c.roleId) ?? c.roleId}</PageLink>;
  if (c.policyId !== undefined) {
    return (
      <>
        the condition of policy <PageLink to={appPaths(appId).policy(c.policyId)}>{names.policies.get(c.policyId) ?? c.policyId}</PageLink>
        {role !== undefined && <>, through role {role}</>}
      </>
    );
  }
  if (role !== undefined) return <>the condition of the user&apos;s assignment of role {role}</>;
  return (
    <>
      the condition of the grant of <strong>{c.relation}</strong> on this instance
    </>
  );
}

function Reads({ reads, caption }: { reads: ConditionRead[]; caption: string }) {
  if (reads.length === 0) return <p className="muted">It read no value.</p>;
  return (
    <table className="condition-reads">
      <caption>{caption}</caption>
      <thead>
        <tr>
          <th scope="col">Path</th>
          <th scope="col">Value</th>
        </tr>
      </thead>
      <tbody>
        {reads.map((r, i) => (
          <tr key={i}>
            <td>
              <code>{r.path}</code>
            </td>
            <td>{r.found ? <code>{JSON.stringify(r.value === undefined ? null : toJson(ValueSchema, r.value))}</code> : <span className="muted">missing</span>}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
