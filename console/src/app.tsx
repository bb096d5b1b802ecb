/**
 * Who is signed in decides what the console shows: nobody, the sign-in page;
 * the operator key, the applications and any application's pages; an
 * application key, its own application's pages.
 */
import { useQuery } from "@connectrpc/connect-query";
import { useEffect, useState } from "react";
import { Route, Switch } from "wouter";
import { ApplicationService } from "../../gen/authz/v1/applications_pb.js";
import { AppPages } from "./pages/app-pages";
import { ApplicationsPage } from "./pages/applications";
import { SignInPage } from "./pages/sign-in";
import { storedKey } from "./lib/session";
import { ErrorNote } from "./components/error-note";
import { GoTo } from "./components/page-link";
import { appPaths, homePath } from "./lib/routes";

export function App({ onSignOut }: { onSignOut: () => void }) {
  const [key, setKey] = useState(storedKey());
  const [notice, setNotice] = useState<string | undefined>();
  useEffect(() => {
    const signedOut = (event: Event) => {
      setKey(null);
      setNotice((event as CustomEvent<string | undefined>).detail);
    };
    window.addEventListener("portcullis:signed-out", signedOut);
    return () => window.removeEventListener("portcullis:signed-out", signedOut);
  }, []);
  if (key === null) {
    return (
      <SignInPage
        notice={notice}
        onSignedIn={() => {
          setNotice(undefined);
          setKey(storedKey());
        }}
      />
    );
  }
  return <SignedIn onSignOut={onSignOut} />;
}

function SignedIn({ onSignOut }: { onSignOut: () => void }) {
  const me = useQuery(ApplicationService.method.getCurrentKey, {});
  if (me.isPending) return <p role="status">Signing in…</p>;
  if (me.isError) {
    return (
      <main className="narrow">
        <ErrorNote error={me.error} />
        <button type="button" onClick={onSignOut}>
          Sign out
        </button>
      </main>
    );
  }
  const caller = me.data;
  const home = caller.kind === "operator" ? homePath() : appPaths(caller.appId ?? "").catalog;
  return (
    <Switch>
      <Route path="/">{caller.kind === "operator" ? <ApplicationsPage onSignOut={onSignOut} /> : <GoTo to={home} />}</Route>
      <Route path="/apps/:appId" nest>
        {(params) => <AppPages appId={params.appId} caller={caller} onSignOut={onSignOut} />}
      </Route>
      <Route>
        <GoTo to={home} />
      </Route>
    </Switch>
  );
}
