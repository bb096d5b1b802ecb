/**
 * Errors are mapped here and nowhere else: domain and database errors to
 * Connect codes (toConnectError), and Connect codes to the REST status and
 * error body (restError). Every REST error body, whoever answers it (the
 * gateway, the fast path, Fastify's handlers, the HTTP layer's refusals), is
 * made by restErrorBody, which takes the request's id: {code, message,
 * details, requestId}.
 */
import { create, fromJson, toJson, type JsonObject as PbJsonObject } from "@bufbuild/protobuf";
import { StructSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import { DomainError, type ErrorCode, type JsonObject, type JsonValue } from "../../domain/errors.js";
import { toWellFormed } from "../../domain/formats.js";
import { isBadValue, isRetryable, isUnavailable, sqlState, SqlState } from "../../store/sqlstate.js";
import { DeadlinePassedError } from "../../store/db.js";

const domainToConnect: Record<ErrorCode, Code> = {
  invalid_argument: Code.InvalidArgument,
  unauthenticated: Code.Unauthenticated,
  permission_denied: Code.PermissionDenied,
  not_found: Code.NotFound,
  already_exists: Code.AlreadyExists,
  failed_precondition: Code.FailedPrecondition,
  resource_exhausted: Code.ResourceExhausted,
  unavailable: Code.Unavailable,
  unimplemented: Code.Unimplemented,
  internal: Code.Internal,
};

/** Connect code → the contract's code name and REST status. */
export const connectToRest: Record<Code, { code: string; status: number }> = {
  [Code.Canceled]: { code: "canceled", status: 499 },
  [Code.Unknown]: { code: "internal", status: 500 },
  [Code.InvalidArgument]: { code: "invalid_argument", status: 400 },
  [Code.DeadlineExceeded]: { code: "deadline_exceeded", status: 504 },
  [Code.NotFound]: { code: "not_found", status: 404 },
  [Code.AlreadyExists]: { code: "already_exists", status: 409 },
  [Code.PermissionDenied]: { code: "permission_denied", status: 403 },
  [Code.ResourceExhausted]: { code: "resource_exhausted", status: 429 },
  [Code.FailedPrecondition]: { code: "failed_precondition", status: 409 },
  [Code.Aborted]: { code: "aborted", status: 409 },
  [Code.OutOfRange]: { code: "invalid_argument", status: 400 },
  [Code.Unimplemented]: { code: "unimplemented", status: 501 },
  [Code.Internal]: { code: "internal", status: 500 },
  [Code.Unavailable]: { code: "unavailable", status: 503 },
  [Code.DataLoss]: { code: "internal", status: 500 },
  [Code.Unauthenticated]: { code: "unauthenticated", status: 401 },
};

/**
 * Any error thrown below the transport, as the ConnectError a client sees.
 * Domain errors keep their message and details (as google.protobuf.Struct);
 * an unreachable database is UNAVAILABLE; a value the database refused (a
 * data exception, a program limit) is INVALID_ARGUMENT, with the SQLSTATE but
 * nothing of the SQL or the database's words; a race lost on every attempt
 * (a serialization failure, a deadlock) is ABORTED; anything else is INTERNAL with
 * its text kept in the log only.
 */
export function toConnectError(error: unknown, log: Logger, requestId?: string): ConnectError {
  if (error instanceof ConnectError) return error;
  if (error instanceof DomainError) {
    // A message may quote a client's string before the guard has checked it
    // (the appId of a 403); an unpaired surrogate in it cannot be encoded in
    // grpc-message (encodeURIComponent throws) or in a binary Struct.
    return new ConnectError(
      toWellFormed(error.message),
      domainToConnect[error.code],
      undefined,
      error.details.map((d) => ({ desc: StructSchema, value: fromJson(StructSchema, wellFormedJson(d) as PbJsonObject) })),
    );
  }
  // The call stopped before the database finished, nothing committed: its
  // deadline passed (Postgres's statement_timeout, or the store saw it), or
  // a cancel stopped the statement; connect-node aborts a call whose client
  // went away with no reason of its own (an AbortError).
  if (error instanceof DeadlinePassedError) return new ConnectError(error.message, Code.DeadlineExceeded);
  if (sqlState(error) === SqlState.queryCanceled || (error instanceof DOMException && error.name === "AbortError")) {
    return new ConnectError("the call was cancelled before the database finished; nothing was changed", Code.Canceled);
  }
  if (isUnavailable(error)) {
    log.error({ err: error, requestId }, "database unavailable");
    return new ConnectError("the database cannot be reached; try again shortly", Code.Unavailable);
  }
  // A transaction that lost its race with concurrent writers on every attempt (Db.transaction
  // retries it): nothing committed, and the same call may well succeed.
  if (isRetryable(error)) {
    return new ConnectError(`the call met concurrent changes on every attempt (SQLSTATE ${sqlState(error)}); nothing was changed; try again`, Code.Aborted);
  }
  if (isBadValue(error)) {
    // Logged: it means an edge check let something through.
    log.warn({ err: error, requestId }, "the database refused a value of a request");
    return new ConnectError(
      `a value in the request is malformed, out of range or too large (SQLSTATE ${sqlState(error)})`,
      Code.InvalidArgument,
    );
  }
  const errorId = randomBytes(6).toString("hex");
  log.error({ err: error, errorId, requestId }, "internal error");
  return new ConnectError(`internal error (error id ${errorId}; the server log has the details)`, Code.Internal);
}

function wellFormedJson(value: JsonValue): JsonValue {
  if (typeof value === "string") return toWellFormed(value);
  if (Array.isArray(value)) return value.map(wellFormedJson);
  if (typeof value === "object" && value !== null) {
    const out: JsonObject = {};
    for (const [key, item] of Object.entries(value)) out[toWellFormed(key)] = wellFormedJson(item);
    return out;
  }
  return value;
}

export interface RestErrorBody {
  code: string;
  message: string;
  details: JsonObject[];
  /** The request's id, as its x-request-id header and its log lines carry it. */
  requestId: string;
}

/** The REST status and body of a ConnectError. */
export function restError(error: ConnectError, requestId: string): { status: number; body: RestErrorBody } {
  const { code, status } = connectToRest[error.code];
  const details = error.findDetails(StructSchema).map((s) => toJson(StructSchema, create(StructSchema, s)) as JsonObject);
  return { status, body: restErrorBody(requestId, code, error.rawMessage, details) };
}

/** The one REST error body: a ConnectError's (restError), or an error of the HTTP layer itself (bad JSON, unknown route, body too large). */
export function restErrorBody(requestId: string, code: string, message: string, details: JsonObject[] = []): RestErrorBody {
  return { code, message, details, requestId };
}
