import { useState, type FormEvent } from "react";
import { storeKey } from "../lib/session";

/** Paste a key. It is kept in this tab's sessionStorage only; the next page asks the API who it is. */
export function SignInPage({ onSignedIn, notice }: { onSignedIn: () => void; notice: string | undefined }) {
  const [key, setKey] = useState("");
  const submit = (event: FormEvent) => {
    event.preventDefault();
    const trimmed = key.trim();
    if (trimmed === "") return;
    storeKey(trimmed);
    setKey("");
    onSignedIn();
  };
  return (
    <main className="narrow">
      <h1>Portcullis console</h1>
      <p>Sign in with the operator key, or with an application's key to open that application.</p>
      {notice !== undefined && (
        <p role="alert" className="error-note">
          {notice}
        </p>
      )}
      <form onSubmit={submit}>
        <label htmlFor="api-key">API key</label>
        <input id="api-key" type="password" autoComplete="off" spellCheck={false} value={key} onChange={(e) => setKey(e.target.value)} required />
        <button type="submit">Sign in</button>
      </form>
    </main>
  );
}
