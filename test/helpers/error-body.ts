/**
 * The one REST error body: exactly {code, message, details, requestId}, its
 * requestId the answer's own x-request-id (the id its log lines carry).
 */
import { expect } from "vitest";

export const ERROR_BODY_KEYS = ["code", "details", "message", "requestId"];

/**
 * `body` is an error body in the documented shape, and its requestId is
 * `requestIdHeader` (the answer's x-request-id: a Headers' get, or a raw
 * header value).
 */
export function expectErrorBody(body: unknown, requestIdHeader: string | string[] | null | undefined, said?: string): void {
  expect(Object.keys(body as object).sort(), said).toEqual(ERROR_BODY_KEYS);
  const { requestId } = body as { requestId: unknown };
  expect(typeof requestId, said).toBe("string");
  expect((requestId as string).length, said).toBeGreaterThan(0);
  expect(requestId, said).toBe(requestIdHeader);
}
