/**
 * Postgres errors classified by SQLSTATE (never by message text). Both `pg`
 * and PGlite put the SQLSTATE in `error.code`.
 */
export const SqlState = {
  uniqueViolation: "23505",
  foreignKeyViolation: "23503",
  checkViolation: "23514",
  serializationFailure: "40001",
  deadlockDetected: "40P01",
  tooManyConnections: "53300",
  /** A statement stopped by a cancel request or statement_timeout. */
  queryCanceled: "57014",
  adminShutdown: "57P01",
  crashShutdown: "57P02",
  cannotConnectNow: "57P03",
  /** What Citus answers for a generic plan it cannot distribute (see check-store). */
  featureNotSupported: "0A000",
  /** A function the database does not have (yet: a standby that has not replayed a migration). */
  undefinedFunction: "42883",
  // Class 22, data exception: 22P02 invalid text representation (1.5 as a
  // bigint), 22007/22008 bad or out-of-range datetime, 22021 a NUL or bytes
  // not in the encoding, 22001 a string too long for its column.
  dataExceptionClass: "22",
  // Class 54, program limit exceeded: 54000 a value too large for an index
  // row, 54001 statement too complex.
  programLimitClass: "54",
} as const;

export function sqlState(error: unknown): string | undefined {
  if (typeof error !== "object" || error === null) return undefined;
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/** A transaction that lost a race and may simply be run again. */
export function isRetryable(error: unknown): boolean {
  const state = sqlState(error);
  return state === SqlState.serializationFailure || state === SqlState.deadlockDetected;
}

/**
 * The database refused a value of the request itself (malformed, out of
 * range, too large to index): the client's fault, a 400, never a 500. The
 * edge checks (text-fields, paging) should leave this a safety net.
 */
export function isBadValue(error: unknown): boolean {
  const state = sqlState(error);
  return state !== undefined && (state.startsWith(SqlState.dataExceptionClass) || state.startsWith(SqlState.programLimitClass));
}

// Node socket errors seen when the server is down or the network drops.
const connectionErrnos = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "ENOTFOUND", "EHOSTUNREACH"]);

/** The database cannot be reached (or is refusing work): answer 503, not 500. */
export function isUnavailable(error: unknown): boolean {
  const state = sqlState(error);
  if (state !== undefined) {
    return (
      state.startsWith("08") || // connection exception
      state === SqlState.tooManyConnections ||
      state === SqlState.adminShutdown ||
      state === SqlState.crashShutdown ||
      state === SqlState.cannotConnectNow
    );
  }
  if (error instanceof DatabaseUnavailableError) return true;
  if (typeof error !== "object" || error === null) return false;
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" && connectionErrnos.has(code);
}

/**
 * Raised by an engine when it cannot get a connection at all (pool timeout,
 * server gone): known by where it happened, since such errors carry no code.
 */
export class DatabaseUnavailableError extends Error {
  constructor(options: { cause: unknown }) {
    super("the database cannot be reached", options);
    this.name = "DatabaseUnavailableError";
  }
}

/**
 * Whether the error is a unique violation. Which constraint is for the
 * caller to know from its statement, never from the error: Citus relays a
 * worker's violation with no constraint field and the shard's constraint
 * name (policies_name_key_102104). So a statement whose violation must be
 * told apart can violate only one unique constraint (ids are generated
 * here, so only a name can collide).
 */
export function isUniqueViolation(error: unknown): boolean {
  return sqlState(error) === SqlState.uniqueViolation;
}
