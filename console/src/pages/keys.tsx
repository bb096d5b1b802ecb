/**
 * An application's API keys: the list, a new key with its scopes (the
 * secret is shown once, with a copy button), and revoking one.
 */
import { useMutation, useQuery } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import { ApplicationService } from "../../../gen/authz/v1/applications_pb.js";
import { DangerButton } from "../components/danger-button";
import { ErrorNote, FieldError } from "../components/error-note";
import { apiProblem } from "../lib/errors";
import { reloadAt } from "../components/page-link";
import { homePath } from "../lib/routes";
import { storeKey } from "../lib/session";

const SCOPES = [
  { scope: "check", label: "check: ask questions (check, explain, permissions, lookup)" },
  { scope: "read", label: "read: read the model" },
  { scope: "write", label: "write: change the model and grants" },
] as const;

export function KeysPage({ appId }: { appId: string }) {
  const queryClient = useQueryClient();
  const keys = useQuery(ApplicationService.method.listApiKeys, { appId, pageSize: 1000 });
  const create = useMutation(ApplicationService.method.createApiKey, { onSuccess: () => queryClient.invalidateQueries() });
  const revoke = useMutation(ApplicationService.method.deleteApiKey, { onSuccess: () => queryClient.invalidateQueries() });
  const [name, setName] = useState("");
  const [scopes, setScopes] = useState<string[]>(["check", "read", "write"]);
  const [confirming, setConfirming] = useState<string | undefined>();
  const [copied, setCopied] = useState(false);
  const problem = create.error ? apiProblem(create.error) : undefined;
  const created = create.data;

  const submit = (event: FormEvent) => {
    event.preventDefault();
    setCopied(false);
    create.mutate({ appId, name, scopes }, { onSuccess: () => setName("") });
  };
  const toggle = (scope: string, on: boolean) => setScopes((now) => (on ? [...new Set([...now, scope])] : now.filter((s) => s !== scope)));

  return (
    <>
      <h1>API keys</h1>
      <section aria-labelledby="new-key">
        <h2 id="new-key">New key</h2>
        <form onSubmit={submit}>
          <div className="field">
            <label htmlFor="key-name">Key name</label>
            <input id="key-name" value={name} onChange={(e) => setName(e.target.value)} required aria-describedby="key-name-error" />
            <FieldError id="key-name-error" reason={problem?.fields.get("name")} />
          </div>
          <fieldset>
            <legend>Scopes</legend>
            {SCOPES.map(({ scope, label }) => (
              <label key={scope} className="check">
                <input type="checkbox" checked={scopes.includes(scope)} onChange={(e) => toggle(scope, e.target.checked)} />
                {label}
              </label>
            ))}
            <FieldError id="key-scopes-error" reason={[...(problem?.fields.entries() ?? [])].find(([f]) => f.startsWith("scopes"))?.[1]} />
          </fieldset>
          <button type="submit" disabled={create.isPending || scopes.length === 0}>
            Create key
          </button>
        </form>
        {problem !== undefined && problem.fields.size === 0 && <ErrorNote error={create.error} />}
        {created !== undefined && (
          <div className="secret" role="status" aria-live="polite">
            <p>
              The secret of key <strong>{created.name}</strong> is shown this once: copy it now.
            </p>
            <output aria-label="New key secret">{created.key}</output>
            <button
              type="button"
              onClick={() => {
                void navigator.clipboard.writeText(created.key).then(() => setCopied(true));
              }}
            >
              Copy secret
            </button>
            {copied && <span> Copied.</span>}
            <button
              type="button"
              onClick={() => {
                // The console starts again as the new key (sessionStorage outlives the reload; no answer of the old key does).
                storeKey(created.key);
                reloadAt(homePath());
              }}
            >
              Sign in with this key
            </button>
          </div>
        )}
      </section>
      <section aria-labelledby="active-keys">
        <h2 id="active-keys">Active keys</h2>
        {keys.isError && <ErrorNote error={keys.error} />}
        {keys.isPending && <p role="status">Loading keys…</p>}
        {revoke.isError && <ErrorNote error={revoke.error} />}
        <table>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Id</th>
              <th scope="col">Scopes</th>
              <th scope="col">
                <span className="visually-hidden">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {(keys.data?.apiKeys ?? []).map((k) => (
              <tr key={k.keyId}>
                <td>{k.name}</td>
                <td>
                  <code>{k.keyId}</code>
                </td>
                <td>{k.scopes.join(", ")}</td>
                <td>
                  {confirming === k.keyId ? (
                    <>
                      <DangerButton onClick={() => revoke.mutate({ appId, keyId: k.keyId }, { onSettled: () => setConfirming(undefined) })}>
                        Revoke {k.name} now
                      </DangerButton>
                      <button type="button" className="secondary" onClick={() => setConfirming(undefined)}>
                        Cancel
                      </button>
                    </>
                  ) : (
                    <DangerButton onClick={() => setConfirming(k.keyId)} aria-label={`Revoke ${k.name}`}>
                      Revoke
                    </DangerButton>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </section>
    </>
  );
}
