import { TransportProvider } from "@connectrpc/connect-query";
import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { Router } from "wouter";
import { App } from "./app";
import { NoticeProvider } from "./components/notice";
import { forgetKey } from "./lib/session";
import { consoleTransport } from "./lib/transport";
import "./styles.css";

const queryClient = new QueryClient({
  defaultOptions: { queries: { retry: false, refetchOnWindowFocus: false } },
});

/**
 * Sign-out, or a revoked or unknown key: forget it and every answer fetched
 * with it, back to sign-in (saying why, when it was not the user's choice).
 */
function signOut(reason?: string): void {
  forgetKey();
  queryClient.clear();
  window.dispatchEvent(new CustomEvent<string | undefined>("portcullis:signed-out", { detail: reason }));
}

const transport = consoleTransport(() => signOut("The key was refused: it is unknown or has been revoked. Sign in with another key."));

createRoot(document.getElementById("root")!).render(
  <StrictMode>
    <TransportProvider transport={transport}>
      <QueryClientProvider client={queryClient}>
        <Router base="/console">
          <NoticeProvider>
            <App onSignOut={() => signOut()} />
          </NoticeProvider>
        </Router>
      </QueryClientProvider>
    </TransportProvider>
  </StrictMode>,
);
