/**
 * Typed domain errors. The domain throws these; the transport maps
 * them once (see transport/call/errors.ts) to Connect codes and HTTP statuses.
 */
import type { JsonObject, JsonValue } from "../lib/json.js";

export type ErrorCode =
  | "invalid_argument"
  | "unauthenticated"
  | "permission_denied"
  | "not_found"
  | "already_exists"
  | "failed_precondition"
  | "resource_exhausted"
  | "unavailable"
  | "unimplemented"
  | "internal";

export type { JsonObject, JsonValue };

export class DomainError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details: JsonObject[] = [],
  ) {
    super(message);
    this.name = "DomainError";
  }
}

export const invalidArgument = (message: string, details?: JsonObject[]) =>
  new DomainError("invalid_argument", message, details);
export const notFound = (message: string, details?: JsonObject[]) => new DomainError("not_found", message, details);
export const alreadyExists = (message: string, details?: JsonObject[]) =>
  new DomainError("already_exists", message, details);
export const failedPrecondition = (message: string, details?: JsonObject[]) =>
  new DomainError("failed_precondition", message, details);
export const permissionDenied = (message: string) => new DomainError("permission_denied", message);
export const unauthenticated = (message: string) => new DomainError("unauthenticated", message);
export const unavailable = (message: string) => new DomainError("unavailable", message);
/** A bound per key or per application is reached (429): the caller retries once some of its own work ends. */
export const resourceExhausted = (message: string) => new DomainError("resource_exhausted", message);

/** One bad field of a request, as listed in an invalid_argument error's details. */
export interface FieldViolation {
  field: string;
  reason: string;
}

/**
 * Collects the violations of one request so that a single 400 can name all of
 * them (the first `limit`), not just the first one found.
 */
export class Violations {
  readonly list: FieldViolation[] = [];
  count = 0;
  constructor(private readonly limit = 100) {}

  add(field: string, reason: string): void {
    this.count++;
    if (this.list.length < this.limit) this.list.push({ field, reason });
  }

  get empty(): boolean {
    return this.count === 0;
  }

  /** Throws an invalid_argument error naming the violations, if there are any. */
  throwIfAny(): void {
    if (this.empty) return;
    const [first] = this.list;
    const more = this.count > 1 ? ` (and ${this.count - 1} more)` : "";
    throw invalidArgument(
      `${first!.field}: ${first!.reason}${more}`,
      this.list.map((v) => ({ field: v.field, reason: v.reason })),
    );
  }
}
