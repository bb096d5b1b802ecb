/**
 * How the command line ends: its exit codes, and the errors that carry one.
 * A command throws CliError; main prints its message and exits with its code.
 */

export const EXIT = {
  ok: 0,
  /** A negative answer: a check denied, or an import that refused some rows (the report says where). */
  negative: 1,
  /** The command line itself is wrong: an unknown flag, a bad value, a missing key, an unreadable input. */
  usage: 2,
  /** The command could not finish: the service refused it or could not be reached (an import can resume). */
  stopped: 3,
} as const;

export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
    this.name = "CliError";
  }
}

export const usageError = (message: string) => new CliError(message, EXIT.usage);
export const stopError = (message: string) => new CliError(message, EXIT.stopped);
