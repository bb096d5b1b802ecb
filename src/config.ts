/**
 * The one typed configuration of the service. `main` reads it from the
 * environment once and passes it down; nothing below reads process.env.
 */
export interface Config {
  readonly host: string;
  readonly port: number;
  /** Postgres connection string; undefined runs on embedded PGlite. */
  readonly databaseUrl: string | undefined;
  /** PGlite data folder, used when databaseUrl is undefined. */
  readonly dataDir: string;
  /** Operator key; undefined means "use the stored one, generating it on first start". */
  readonly adminKey: string | undefined;
  readonly logLevel: LogLevel;
  /** Connections in the Postgres pool of this replica. */
  readonly pgPoolMax: number;
  /** How long shutdown waits for in-flight requests before closing connections. */
  readonly shutdownGraceMs: number;
}

export type LogLevel = "fatal" | "error" | "warn" | "info" | "debug" | "trace" | "silent";

const logLevels: readonly LogLevel[] = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];

export class ConfigError extends Error {}

/** Reads and validates the configuration; throws ConfigError naming the bad variable. */
export function loadConfig(env: Readonly<Record<string, string | undefined>>): Config {
  const logLevel = (env.LOG_LEVEL ?? "info").toLowerCase();
  if (!logLevels.includes(logLevel as LogLevel)) {
    throw new ConfigError(`LOG_LEVEL must be one of ${logLevels.join(", ")}, got "${env.LOG_LEVEL}"`);
  }
  return {
    host: nonEmpty(env.HOST) ?? "127.0.0.1",
    port: intVar(env, "PORT", 8080, 0, 65535),
    databaseUrl: nonEmpty(env.DATABASE_URL),
    dataDir: nonEmpty(env.AUTHZ_DATA_DIR) ?? "./data",
    adminKey: nonEmpty(env.AUTHZ_ADMIN_KEY),
    logLevel: logLevel as LogLevel,
    pgPoolMax: intVar(env, "PG_POOL_MAX", 20, 1, 1000),
    shutdownGraceMs: intVar(env, "SHUTDOWN_GRACE_MS", 10_000, 0, 600_000),
  };
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === "" ? undefined : value;
}

function intVar(
  env: Readonly<Record<string, string | undefined>>,
  name: string,
  fallback: number,
  min: number,
  max: number,
): number {
  const raw = nonEmpty(env[name]);
  if (raw === undefined) return fallback;
  if (!/^\d+$/.test(raw.trim())) throw new ConfigError(`${name} must be a whole number, got "${raw}"`);
  const value = Number(raw.trim());
  if (value < min || value > max) throw new ConfigError(`${name} must be between ${min} and ${max}, got ${value}`);
  return value;
}
