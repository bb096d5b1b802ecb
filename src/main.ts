/**
 * The service's entry point: read the configuration, start, and stop
 * gracefully on SIGTERM or SIGINT.
 */
import { createLogger, startPortcullis } from "./app.js";
import { ConfigError, loadConfig } from "./config.js";
import { StartupError } from "./lib/startup-error.js";

async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig(process.env);
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`portcullis: ${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
  const log = createLogger(config);
  if (config.adminKey !== undefined && config.adminKey.length < 16) {
    log.warn("AUTHZ_ADMIN_KEY is shorter than 16 characters; use a long random value outside development");
  }
  const service = await startPortcullis(config, { log });

  // Signals are heeded from the moment the port listens: an orchestrator may
  // stop a replica that is still opening or migrating its database.
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, "shutting down: finishing in-flight requests");
    service.close().then(
      () => process.exit(0),
      (error: unknown) => {
        log.error({ err: error }, "shutdown failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));

  const started = await service.ready.then(
    (value) => value,
    async (error: unknown) => {
      if (stopping) return undefined; // stopped before it was ready: stop() exits
      await service.close().catch(() => undefined);
      // The log lines so far ("listening", "stopped") before the failure's
      // own line, so that the reason is what a person reads last.
      await new Promise<void>((resolve) => log.flush(() => resolve()));
      throw error;
    },
  );
  if (started?.generatedOperatorKey !== undefined && !stopping) {
    // Printed once, on the first start: only its hash is stored.
    process.stdout.write(
      `\n  Operator API key (shown once, store it now): ${started.generatedOperatorKey}\n` +
        `  Use it as the X-API-Key header, or set AUTHZ_ADMIN_KEY to choose your own.\n\n`,
    );
  }
}

main().catch((error: unknown) => {
  // A mistake the operator can fix is one line; anything else keeps its stack.
  const text = error instanceof StartupError ? error.message : error instanceof Error ? (error.stack ?? error.message) : String(error);
  process.stderr.write(`portcullis: failed to start: ${text}\n`);
  process.exit(1);
});
