/**
 * `portcullis grants export`: grants in the format `grants import` reads,
 * streamed page by page (1,000 a call) to stdout or a file: never more than
 * a page in memory.
 *
 * NDJSON (stdout, and any --out not named .csv): one object a line, the
 * holder first: `userId` for a user's grant, `allUsers: true` for an
 * allUsers one, else the flat keys `subjectResource`, `subjectResourceId`
 * and `subjectRelation` (absent for a link); then resource, resourceId,
 * relation, expiresAt and condition when set, and createdAt, which the
 * import ignores. A user's grant has the same keys whatever the catalog's
 * subjects. CSV (--out FILE.csv): a header row that always names the same
 * ten columns, userId, allUsers, subjectResource, subjectResourceId,
 * subjectRelation, resource, resourceId, relation, expiresAt, condition (the file is
 * streamed, so which holders come is not known when the header is
 * written), then one record a grant with the other holders' columns empty
 * (allUsers "true" or empty); no createdAt, which the CSV import does not take.
 *
 * What is exported, by the list route's modes: one instance (--resource and
 * --resource-id), a user's grants on a type (--user and --resource), every
 * grant on a type (--resource), and with neither, every type of the
 * application's catalog in turn (a user's grants everywhere with --user
 * alone); --all-users stands where --user does, for the allUsers grants;
 * --relation narrows any of them. Pages are separate reads, so a
 * grant written or deleted during an export may or may not be in it.
 *
 * With --out the grants go to a temporary file renamed at the end: a failed
 * export never leaves a file that looks complete.
 */
import { once } from "node:events";
import { createWriteStream } from "node:fs";
import { rename, rm } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import { formatOfName, type GrantFormat } from "../lib/grant-import/index.js";
import type { Api } from "./client.js";
import { usageError } from "./errors.js";

export interface ExportOptions {
  resource?: string | undefined;
  resourceId?: string | undefined;
  user?: string | undefined;
  /** The allUsers grants (the list route's allUsers), in --user's place. */
  allUsers?: boolean | undefined;
  relation?: string | undefined;
  includeExpired: boolean;
  out?: string | undefined;
}

interface Grant {
  /** "" when subject holds the grant, or every user. */
  userId: string;
  /** Every user holds the grant (the list route says false for the others). */
  allUsers?: boolean;
  subject?: { resource: string; resourceId: string; relation?: string };
  resource: string;
  resourceId: string;
  relation: string;
  createdAt?: string;
  expiresAt?: string;
  condition?: string;
}

const PAGE_SIZE = 1000;

export async function exportGrants(api: Api, options: ExportOptions, stdout: NodeJS.WritableStream, stderr: NodeJS.WritableStream): Promise<void> {
  if (options.resourceId !== undefined && options.resource === undefined) throw usageError("--resource-id needs --resource (the instance's type)");
  if (options.resourceId !== undefined && options.user !== undefined) throw usageError("--resource-id and --user cannot go together: export one instance, or one user's grants");
  if (options.allUsers === true && (options.user !== undefined || options.resourceId !== undefined)) {
    throw usageError("--all-users goes with --resource and --relation only: it exports the allUsers grants, which no one user or instance selects");
  }
  const started = performance.now();
  const resources = options.resource !== undefined ? [options.resource] : await catalogResources(api);

  const target = options.out === undefined ? undefined : resolve(options.out);
  const format: GrantFormat = target === undefined ? "ndjson" : formatOfName(target) === "csv" ? "csv" : "ndjson";
  const encode = format === "csv" ? csvLine : (g: Grant) => `${JSON.stringify(ndjsonLine(g))}\n`;
  const temp = target === undefined ? undefined : join(dirname(target), `.${basename(target)}.${process.pid}.tmp`);
  const out = temp === undefined ? stdout : createWriteStream(temp, { mode: 0o600 });
  const write = async (text: string) => {
    if (!out.write(text)) await once(out, "drain");
  };
  let count = 0;
  try {
    if (format === "csv") await write(`${CSV_COLUMNS.join(",")}\r\n`);
    for (const resource of resources) {
      let pageToken = "";
      do {
        const page = await api.get<{ relationships?: Grant[]; nextPageToken?: string }>("/api/v1/authorization/relationships", {
          resource,
          resourceId: options.resourceId,
          userId: options.user,
          allUsers: options.allUsers === true ? true : undefined,
          relation: options.relation,
          includeExpired: options.includeExpired ? true : undefined,
          pageSize: PAGE_SIZE,
          pageToken,
        });
        const grants = page.relationships ?? [];
        if (grants.length > 0) await write(grants.map(encode).join(""));
        count += grants.length;
        pageToken = page.nextPageToken ?? "";
      } while (pageToken !== "");
    }
    if (temp !== undefined && target !== undefined) {
      out.end();
      await once(out, "finish");
      await rename(temp, target);
    }
  } catch (error) {
    if (temp !== undefined) {
      (out as ReturnType<typeof createWriteStream>).destroy();
      await rm(temp, { force: true });
    }
    throw error;
  }
  const seconds = (performance.now() - started) / 1000;
  stderr.write(
    `exported ${count.toLocaleString("en-US")} grant${count === 1 ? "" : "s"} (${resources.length === 1 ? `resource ${resources[0]}` : `${resources.length} resources`}) ` +
      `in ${seconds.toFixed(1)} s${target === undefined ? "" : ` to ${options.out}`}\n`,
  );
}

/** A grant's subject when it has one (the list route says userId "" beside it). */
const subjectOf = (g: Grant) => (g.subject !== undefined && g.userId === "" ? g.subject : undefined);

/** Whether every user holds the grant. */
const everyone = (g: Grant) => g.allUsers === true && g.userId === "";

/** A grant in the import's keys, in its order: the holder (userId, allUsers, or the subject's flat keys), the grant, its expiry, createdAt. */
const ndjsonLine = (g: Grant) => {
  const subject = subjectOf(g);
  return {
    ...(everyone(g)
      ? { allUsers: true }
      : subject === undefined
      ? { userId: g.userId }
      : {
          subjectResource: subject.resource,
          subjectResourceId: subject.resourceId,
          ...((subject.relation ?? "") === "" ? {} : { subjectRelation: subject.relation }),
        }),
    resource: g.resource,
    resourceId: g.resourceId,
    relation: g.relation,
    ...(g.expiresAt === undefined ? {} : { expiresAt: g.expiresAt }),
    ...(g.condition === undefined ? {} : { condition: g.condition }),
    ...(g.createdAt === undefined ? {} : { createdAt: g.createdAt }),
  };
};

/** The CSV export's columns, every one in every file (the holder's, the grant's, the expiry). */
const CSV_COLUMNS = ["userId", "allUsers", "subjectResource", "subjectResourceId", "subjectRelation", "resource", "resourceId", "relation", "expiresAt", "condition"] as const;

/** RFC 4180: a field with a comma, a quote or a line break goes in quotes, its quotes doubled. */
const csvField = (value: string) => (/[",\r\n]/.test(value) ? `"${value.replaceAll('"', '""')}"` : value);

/** A grant as one CSV record under CSV_COLUMNS. */
const csvLine = (g: Grant): string => {
  const subject = subjectOf(g);
  const fields: Record<(typeof CSV_COLUMNS)[number], string> = {
    userId: subject === undefined ? g.userId : "",
    allUsers: everyone(g) ? "true" : "",
    subjectResource: subject?.resource ?? "",
    subjectResourceId: subject?.resourceId ?? "",
    subjectRelation: subject?.relation ?? "",
    resource: g.resource,
    resourceId: g.resourceId,
    relation: g.relation,
    expiresAt: g.expiresAt ?? "",
    condition: g.condition ?? "",
  };
  return `${CSV_COLUMNS.map((c) => csvField(fields[c])).join(",")}\r\n`;
};

/** The resource types of the calling key's application, from its catalog. */
async function catalogResources(api: Api): Promise<string[]> {
  const appId = await ownApplication(api, "grants export");
  const catalog = await api.get<{ resources?: { resource: string }[] }>(`/api/v1/applications/${encodeURIComponent(appId)}/resources`);
  return (catalog.resources ?? []).map((r) => r.resource);
}

/** The application of the calling key; the /authorization routes act on it, so they take an application key. */
export async function ownApplication(api: Api, command: string, why = "grants belong to the key's own application"): Promise<string> {
  const me = await api.get<{ kind?: string; appId?: string }>("/api/v1/api-keys/current");
  if (me.appId === undefined || me.kind !== "application") {
    throw usageError(`${command} needs an application key (${why}); this is the operator key`);
  }
  return me.appId;
}
