/**
 * `portcullis check` and `portcullis explain`: one question to the check
 * routes, answered for people (allowed or denied; explain's reasons as
 * role → policy → permission or grant → relation) or, with --json, as the
 * API's JSON. The exit code is the answer: 0 allowed, 1 denied.
 */
import type { Api } from "./client.js";
import { EXIT, usageError } from "./errors.js";

export interface Question {
  userId: string;
  resource: string;
  resourceId: string;
  action: string;
  tenantId?: string;
}

/** USER RESOURCE:ID ACTION → a question; the instance splits at its first colon (resource names have none, ids may). */
export function question(user: string, instance: string, action: string, tenant: string | undefined): Question {
  const colon = instance.indexOf(":");
  if (colon <= 0 || colon === instance.length - 1) {
    throw usageError(`RESOURCE:ID "${instance}": give the resource type and the instance's id with a colon between, e.g. document:d7`);
  }
  return {
    userId: user,
    resource: instance.slice(0, colon),
    resourceId: instance.slice(colon + 1),
    action,
    ...(tenant === undefined ? {} : { tenantId: tenant }),
  };
}

const said = (q: Question) => `${q.userId} ${q.resource}:${q.resourceId} ${q.action}${q.tenantId === undefined ? "" : ` (tenant ${q.tenantId})`}`;

export async function check(api: Api, q: Question, json: boolean, out: NodeJS.WritableStream): Promise<number> {
  const answer = await api.post<{ allowed?: boolean }>("/api/v1/authorization/check", q);
  const allowed = answer.allowed === true;
  out.write(json ? `${JSON.stringify({ allowed })}\n` : `${allowed ? "allowed" : "denied"}: ${said(q)}\n`);
  return allowed ? EXIT.ok : EXIT.negative;
}

interface ExplainGrant {
  userId?: string;
  /** An allUsers grant: every user holds it. */
  allUsers?: boolean;
  resource: string;
  resourceId: string;
  relation: string;
  subject?: { resource: string; resourceId: string; relation?: string };
  createdAt?: string;
  expiresAt?: string;
  /** One of the question's contextual grants: counted for it alone, never stored. */
  contextual?: boolean;
}

/** How a contextual grant is told from a stored one. */
const CONTEXTUAL = " (contextual)";

/** Who an allUsers grant names, in a sentence. */
const EVERY_USER = "every user";

/** A grant as a sentence: "alice is member of team:eng", "folder:runbooks is parent of document:42", "every user is viewer of folder:public". */
const sentence = (g: ExplainGrant): string => {
  const s = g.subject;
  const holder = g.allUsers === true ? EVERY_USER : s === undefined ? (g.userId ?? "") : `${s.resource}:${s.resourceId}${s.relation ? `#${s.relation}` : ""}`;
  return `${holder} is ${g.relation} of ${g.resource}:${g.resourceId}${g.contextual === true ? CONTEXTUAL : ""}`;
};

/** A `requires` or `unless` entry as explain shows it (docs/exclusion.md). */
interface RuleEntry {
  rule: string;
  through?: string;
  relation: string;
  holds: string;
  resource?: string;
  resourceId?: string;
  path?: ExplainGrant[];
}

/** An entry for people: "unless blocked", "requires member through org", and where it held, by which path. */
const entryText = (e: RuleEntry): string => {
  const what = `${e.rule} ${e.relation}${e.through ? ` through ${e.through}` : ""}`;
  if (e.holds !== "true") return `${what}: ${e.holds === "unknown" ? "cannot be decided (a condition lacks its facts)" : "does not hold"}`;
  return `${what}: holds on ${e.resource}:${e.resourceId}${(e.path ?? []).length > 0 ? ` (${e.path!.map(sentence).join(" → ")})` : ""}`;
};

export interface ExplainAnswer {
  allowed?: boolean;
  reasons?: {
    kind: string;
    relation?: string;
    grant?: ExplainGrant;
    path?: ExplainGrant[];
    roleId?: string;
    roleName?: string;
    tenantId?: string;
    policyId?: string;
    policyName?: string;
    permission?: string;
    requires?: RuleEntry[];
  }[];
  blocked?: { relation: string; entry?: RuleEntry }[];
  considered?: {
    relations?: { relation: string; actions?: string[] }[];
    roles?: { roleId: string; roleName: string; tenantId?: string }[];
  };
}

export async function explain(api: Api, q: Question, json: boolean, out: NodeJS.WritableStream): Promise<number> {
  const answer = await api.post<ExplainAnswer>("/api/v1/authorization/check/explain", q);
  const allowed = answer.allowed === true;
  if (json) {
    out.write(`${JSON.stringify(answer, null, 2)}\n`);
    return allowed ? EXIT.ok : EXIT.negative;
  }
  out.write(`${explainLines(q, answer).join("\n")}\n`);
  return allowed ? EXIT.ok : EXIT.negative;
}

/** Explain's answer for people: allowed or denied, the reasons, and what was considered. */
export function explainLines(q: Question, answer: ExplainAnswer): string[] {
  const allowed = answer.allowed === true;
  const lines = [`${allowed ? "allowed" : "denied"}: ${said(q)}`];
  const reasons = answer.reasons ?? [];
  if (reasons.length > 0) {
    lines.push("because:");
    for (const r of reasons) {
      if (r.kind === "role") {
        const tenant = r.tenantId === undefined ? "" : ` in tenant ${r.tenantId}`;
        lines.push(`  role "${r.roleName}" (${r.roleId})${tenant} → policy "${r.policyName}" (${r.policyId}) → ${r.permission}`);
      } else if ((r.path ?? []).length > 1) {
        // Through groups and links: the grants from the user's own to the instance's, in order.
        lines.push(`  ${r.relation} through ${r.path!.length - 1} hop${r.path!.length > 2 ? "s" : ""}: ${r.path!.map(sentence).join(" → ")}`);
      } else {
        const g = r.grant;
        const expiry = g?.expiresAt === undefined ? "" : `, until ${g.expiresAt}`;
        // A contextual grant was never stored: no time granted, only its expiry.
        const since = g?.createdAt !== undefined ? ` (granted ${g.createdAt}${expiry})` : expiry === "" ? "" : ` (${expiry.slice(2)})`;
        const contextual = g?.contextual === true ? CONTEXTUAL : "";
        lines.push(`  grant: ${g?.allUsers === true ? `${EVERY_USER} (allUsers)` : q.userId} is ${r.relation} of ${q.resource}:${q.resourceId}${contextual}${since}`);
      }
      for (const e of r.requires ?? []) lines.push(`    and ${entryText(e)}`);
    }
  } else if (!allowed && (answer.blocked ?? []).length === 0) {
    lines.push("no grant or role allows it");
  }
  const blocked = answer.blocked ?? [];
  if (blocked.length > 0) {
    lines.push("taken away:");
    for (const b of blocked) if (b.entry !== undefined) lines.push(`  ${b.relation}: ${entryText(b.entry)}`);
  }
  const relations = answer.considered?.relations ?? [];
  const roles = answer.considered?.roles ?? [];
  lines.push("considered:");
  lines.push(
    `  relations on ${q.resource}:${q.resourceId}: ${
      relations.length === 0 ? "none" : relations.map((r) => `${r.relation} (${(r.actions ?? []).join(", ") || "no actions"})`).join("; ")
    }`,
  );
  lines.push(
    `  roles: ${roles.length === 0 ? "none" : roles.map((r) => `"${r.roleName}" (${r.roleId})${r.tenantId === undefined ? "" : ` in tenant ${r.tenantId}`}`).join(", ")}`,
  );
  return lines;
}

/**
 * `portcullis who-can RESOURCE:ID ACTION`: every user who may, one a line,
 * all pages (--json: one JSON array). Where an allUsers grant lets every
 * user, stderr says so (stdout stays a list of ids, which a user named "*"
 * could not be told from) and the ids listed are those reached otherwise.
 * Exit 0 when someone may (every user, when allUsers), 1 when no one.
 */
export async function whoCan(
  api: Api,
  q: { resource: string; resourceId: string; action: string; tenantId?: string },
  json: boolean,
  out: NodeJS.WritableStream,
  err: NodeJS.WritableStream,
): Promise<number> {
  const all: string[] = [];
  let everyone = false;
  let pageToken = "";
  do {
    const page = await api.post<{ userIds?: string[]; nextPageToken?: string; allUsers?: boolean }>("/api/v1/authorization/subjects", { ...q, pageSize: 1000, pageToken });
    const ids = page.userIds ?? [];
    all.push(...ids);
    everyone ||= page.allUsers === true;
    if (!json && ids.length > 0) out.write(`${ids.join("\n")}\n`);
    pageToken = page.nextPageToken ?? "";
  } while (pageToken !== "");
  if (json) out.write(`${JSON.stringify(all)}\n`);
  if (everyone) {
    err.write(`${EVERY_USER} may: an allUsers grant gives ${q.resource}:${q.resourceId} a relation that implies ${q.action}${all.length > 0 ? "; the users listed may also through grants or roles of their own" : ""}\n`);
  }
  return everyone || all.length > 0 ? EXIT.ok : EXIT.negative;
}
