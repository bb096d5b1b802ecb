/**
 * Keeping the model from the command line: `catalog get`, `catalog put FILE`
 * (the whole catalog, replaced atomically, as PUT does) and `keys create`
 * (its secret printed once).
 */
import type { Api } from "./client.js";
import { usageError } from "./errors.js";
import { nestingProblem, readText } from "./yaml-file.js";

const appPath = (appId: string) => `/api/v1/applications/${encodeURIComponent(appId)}`;

export async function catalogGet(api: Api, app: string | undefined, out: NodeJS.WritableStream): Promise<void> {
  const appId = app ?? (await appOfKey(api, "catalog get"));
  const catalog = await api.get<unknown>(`${appPath(appId)}/resources`);
  out.write(`${JSON.stringify(catalog, null, 2)}\n`);
}

/** Replaces the catalog with a file's (`-`: stdin): the JSON `catalog get` prints, edited, is a valid input. */
export async function catalogPut(
  api: Api,
  file: string,
  app: string,
  json: boolean,
  io: { out: NodeJS.WritableStream; stdin: NodeJS.ReadableStream },
): Promise<void> {
  const text = await readText(file, io.stdin);
  // Before JSON.parse's value meets anything recursive (JSON.stringify overflows at a few thousand levels).
  const deep = nestingProblem(text);
  if (deep !== undefined) throw usageError(`FILE ${file}: ${deep}`);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw usageError(`FILE ${file}: not JSON (${error instanceof Error ? error.message : String(error)})`);
  }
  if (typeof body !== "object" || body === null || Array.isArray(body) || !("resources" in body)) {
    throw usageError(`FILE ${file}: a catalog is a JSON object with "resources" (what catalog get prints)`);
  }
  const answer = await api.put<{ resources?: { resource: string }[] }>(`${appPath(app)}/resources`, body);
  if (json) out(io.out, answer);
  else {
    const names = (answer.resources ?? []).map((r) => r.resource);
    io.out.write(`catalog of ${app} replaced: ${names.length} resource${names.length === 1 ? "" : "s"}${names.length > 0 ? ` (${names.join(", ")})` : ""}\n`);
  }
}

export async function keysCreate(
  api: Api,
  options: { app: string; name: string; scopes?: string[] | undefined; json: boolean },
  io: { out: NodeJS.WritableStream; err: NodeJS.WritableStream },
): Promise<void> {
  const answer = await api.post<{ keyId: string; name: string; key: string; scopes?: string[] }>(`${appPath(options.app)}/api-keys`, {
    name: options.name,
    ...(options.scopes === undefined ? {} : { scopes: options.scopes }),
  });
  if (options.json) {
    out(io.out, answer);
    return;
  }
  // The secret alone on stdout (KEY=$(portcullis keys create …)); what it is, on stderr.
  io.out.write(`${answer.key}\n`);
  io.err.write(
    `created key ${answer.keyId} "${answer.name}" of application ${options.app}, scopes ${(answer.scopes ?? []).join(", ")}.\n` +
      `The secret above is shown this once (only its hash is stored): keep it now.\n`,
  );
}

/** The scopes list of --scopes: "check,read,write". */
export function scopesList(text: string): string[] {
  const scopes = text.split(",").map((s) => s.trim());
  if (scopes.some((s) => s === "")) throw usageError(`--scopes "${text}": a comma-separated list such as check,read,write`);
  return scopes;
}

async function appOfKey(api: Api, command: string): Promise<string> {
  const me = await api.get<{ kind?: string; appId?: string }>("/api/v1/api-keys/current");
  if (me.appId === undefined) throw usageError(`${command}: --app is required with the operator key`);
  return me.appId;
}

const out = (stream: NodeJS.WritableStream, value: unknown) => stream.write(`${JSON.stringify(value, null, 2)}\n`);
