/**
 * An embedded Portcullis with no port and no data folder: the services on an
 * in-memory PGlite, reached through the REST gateway by Fastify's `inject`
 * (a request object in, a response object out, no socket). `portcullis
 * model test` runs a model file's assertions on one; it speaks exactly the
 * REST API a running service speaks (the same routes, checks and errors),
 * so a test file's bodies mean what they mean against production.
 *
 * A fresh PGlite database runs initdb, which takes seconds; the build dumps
 * a migrated one beside this module (`embedded-template.tgz`,
 * store/pglite-template.ts) and an instance starts from that copy instead.
 * Without it (a build that did not make one, or a PGlite that cannot read
 * it) an instance runs initdb: slower, and as correct, since the migrations
 * run either way.
 */
import { randomBytes } from "node:crypto";
import { writeFile } from "node:fs/promises";
import Fastify from "fastify";
import pino from "pino";
import { serviceBindings } from "./bindings.js";
import { LIMITS } from "./domain/formats.js";
import { KeyAuthenticator } from "./domain/keys.js";
import { migrate } from "./store/migrate.js";
import { PgliteDb } from "./store/pglite-db.js";
import { readTemplate, TEMPLATE_FILE } from "./store/pglite-template.js";
import { CallLimiter } from "./transport/call/call-limiter.js";
import { registerRestGateway, restRoutes } from "./transport/rest/rest-gateway.js";
import { withAuthZenRules } from "./transport/rest/authzen-gateway.js";

export interface Embedded {
  /** `fetch` for the REST API, answered in this process: any URL's path and query are the route. */
  readonly fetch: typeof fetch;
  /** This instance's operator key (it creates an application and that application's key). */
  readonly operatorKey: string;
  close(): Promise<void>;
}

export async function openEmbedded(): Promise<Embedded> {
  const db = await openDatabase();
  try {
    await migrate(db);
    // A key of this instance alone, never stored and never shown: it lives as long as the process.
    const operatorKey = `pcl_${randomBytes(24).toString("base64url")}`;
    const log = pino({ level: "silent" });
    const keys = new KeyAuthenticator(db, operatorKey);
    // PGlite is one connection: calls beyond two would only queue for it (as the service's default
    // for PGlite); one client, so both places may be its.
    const bindings = serviceBindings(db, { keys, log, limiter: new CallLimiter({ limit: 2, perOwner: 2 }) });
    // The service's own body limit: the same requests pass and fail as against a running service.
    const app = Fastify({ logger: false, bodyLimit: LIMITS.bodyBytes });
    // AuthZEN's routes by its own JSON rules, as the service serves them.
    registerRestGateway(app, withAuthZenRules(restRoutes(bindings)), { keys, log });
    await app.ready();
    return {
      fetch: injectFetch(app),
      operatorKey,
      async close() {
        await app.close();
        await db.close();
      },
    };
  } catch (error) {
    await db.close().catch(() => undefined);
    throw error;
  }
}

/**
 * The template, unzipped once a process (about 0.3 s of a core for its
 * 41 MB): a process that opens several instances (the tests run the command
 * line's program in theirs) reads it once; undefined when it cannot be read.
 */
let templateRead: Promise<Blob | undefined> | undefined;

async function openDatabase(): Promise<PgliteDb> {
  const template = await (templateRead ??= readTemplate(TEMPLATE_FILE).catch(() => undefined));
  if (template !== undefined) {
    try {
      return await PgliteDb.open(undefined, { template });
    } catch {
      // A template this PGlite cannot load: start from initdb below.
    }
  }
  return await PgliteDb.open(undefined);
}

/** The build's step: a migrated, empty database, dumped to `file`. */
export async function writeTemplate(file: URL): Promise<void> {
  const db = await PgliteDb.open(undefined);
  try {
    await migrate(db);
    await writeFile(file, Buffer.from(await (await db.dump()).arrayBuffer()));
  } finally {
    await db.close();
  }
}

/** `fetch` answered by the Fastify app in this process (light-my-request). */
function injectFetch(app: ReturnType<typeof Fastify>): typeof fetch {
  return async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    const res = await app.inject({
      method: (init?.method ?? "GET") as "GET",
      url: `${url.pathname}${url.search}`,
      headers: Object.fromEntries(new Headers(init?.headers).entries()),
      ...(typeof init?.body === "string" ? { payload: init.body } : {}),
    });
    const headers = new Headers();
    for (const [name, value] of Object.entries(res.headers)) {
      if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(", ") : String(value));
    }
    return new Response(res.statusCode === 204 ? null : res.rawPayload, { status: res.statusCode, headers });
  };
}
