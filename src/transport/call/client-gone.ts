/** What both Node responses (HTTP/1.1 and the HTTP/2 compatibility layer) offer to tell a finished answer from a client that left. */
export interface ClosingResponse {
  readonly destroyed: boolean;
  readonly writableEnded: boolean;
  once(event: "close", listener: () => void): unknown;
}

/**
 * Calls `abort` if the response closes before it was sent: the client went
 * away (closed the connection, reset the stream). A response closes after
 * it is sent too; then nothing happens.
 */
export function onClientGone(res: ClosingResponse, abort: () => void): void {
  if (res.destroyed) abort();
  else res.once("close", () => res.writableEnded || abort());
}
