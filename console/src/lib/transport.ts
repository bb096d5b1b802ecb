/**
 * The one transport every page uses: the Connect protocol (JSON) to this
 * very origin, through the generated service descriptors, with the signed-in
 * key as X-API-Key. A call answered Unauthenticated (a revoked or unknown
 * key) signs the user out: the console goes back to the sign-in page.
 */
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { storedKey } from "./session";

export function consoleTransport(onSignedOut: () => void) {
  const withKey: Interceptor = (next) => async (req) => {
    const key = storedKey();
    if (key !== null) req.header.set("x-api-key", key);
    try {
      return await next(req);
    } catch (error) {
      if (error instanceof ConnectError && error.code === Code.Unauthenticated) onSignedOut();
      throw error;
    }
  };
  return createConnectTransport({ baseUrl: window.location.origin, interceptors: [withKey], useBinaryFormat: false });
}
