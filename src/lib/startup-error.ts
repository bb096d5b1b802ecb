/**
 * A start-up mistake the operator can fix (a busy port, a data folder held by
 * another process): `main` prints its message as one line and exits non-zero,
 * with no stack trace, because the message says everything there is to say.
 */
export class StartupError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "StartupError";
  }
}
