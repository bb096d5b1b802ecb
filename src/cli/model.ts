/**
 * `portcullis model export|plan|apply`: the model as a file (API.md,
 * "Models as files"), YAML or JSON, kept in git and reviewed as a diff. The
 * plan prints what apply would create, change and remove and who would gain
 * or lose which permission: in colour on a terminal, plain in a CI log, as
 * Markdown for a pull request's comment, or as the API's JSON.
 */
import { stringify } from "yaml";
import type { Api } from "./client.js";
import { EXIT, usageError } from "./errors.js";
import { readYamlMap } from "./yaml-file.js";
import { fileForm } from "../lib/model-file.js";

export type PlanFormat = "text" | "markdown" | "json";

interface Changes {
  created?: string[];
  changed?: string[];
  removed?: string[];
}

interface Impact {
  permission: string;
  gaining?: number;
  losing?: number;
  gainingSample?: string[];
  losingSample?: string[];
  /** The first (user, instance) pairs that change through grants. */
  gainingPairs?: { userId: string; resourceId: string }[];
  losingPairs?: { userId: string; resourceId: string }[];
  /** The counts are lower bounds: the change reaches more than the plan examines. */
  atLeast?: boolean;
  condition?: string;
}

interface StrandedUse {
  resource: string;
  relation?: string;
  subject?: string;
  expiredOnly?: boolean;
  reason?: string;
}

export interface PlanAnswer {
  version: string;
  catalog?: Changes;
  policies?: Changes;
  roles?: Changes;
  impact?: Impact[];
  /** Present when apply would refuse the document: its catalog strands grants. */
  stranding?: { message: string; uses?: StrandedUse[] };
}

const appPath = (appId: string) => `/api/v1/applications/${encodeURIComponent(appId)}`;

/** The key's own application, or --app. */
async function appOf(api: Api, app: string | undefined, command: string): Promise<string> {
  if (app !== undefined) return app;
  const me = await api.get<{ appId?: string }>("/api/v1/api-keys/current");
  if (me.appId === undefined) throw usageError(`${command}: --app is required with the operator key`);
  return me.appId;
}

/** A model file as an object, without the version exported with it (not an input). */
export async function readModelFile(file: string, stdin: NodeJS.ReadableStream): Promise<Record<string, unknown>> {
  // A model has no aliases to speak of.
  const { value } = await readYamlMap(file, stdin, "a model is a mapping with catalog, policies and roles (what model export prints)", { maxAliases: 100 });
  const { version: _, ...model } = value;
  return model;
}

export async function modelExport(
  api: Api,
  options: { app?: string | undefined; format: "yaml" | "json" },
  out: NodeJS.WritableStream,
): Promise<void> {
  const appId = await appOf(api, options.app, "model export");
  const doc = fileForm(await api.get<Record<string, unknown>>(`${appPath(appId)}/model`));
  if (options.format === "json") {
    out.write(`${JSON.stringify(doc, null, 2)}\n`);
    return;
  }
  out.write(`# yaml-language-server: $schema=${api.baseUrl.replace(/\/$/, "")}/model.schema.json\n`);
  out.write(stringify(doc, { lineWidth: 0 }));
}

/** Prints the plan; exit 1 (a negative answer) when apply would refuse it, so CI stops before the apply. */
export async function modelPlan(
  api: Api,
  file: string,
  options: { app?: string | undefined; format: PlanFormat },
  io: { out: NodeJS.WritableStream; stdin: NodeJS.ReadableStream },
): Promise<number> {
  const model = await readModelFile(file, io.stdin);
  const appId = await appOf(api, options.app, "model plan");
  const plan = await api.post<PlanAnswer>(`${appPath(appId)}/model/plan`, model);
  io.out.write(renderPlan(plan, options.format, colours(io.out), `plan of ${file} against ${appId}, version ${plan.version}`));
  return plan.stranding === undefined ? EXIT.ok : EXIT.negative;
}

export async function modelApply(
  api: Api,
  file: string,
  options: { app?: string | undefined; expectedVersion?: string | undefined; format: PlanFormat },
  io: { out: NodeJS.WritableStream; stdin: NodeJS.ReadableStream },
): Promise<void> {
  const model = await readModelFile(file, io.stdin);
  const appId = await appOf(api, options.app, "model apply");
  const body = options.expectedVersion === undefined ? model : { ...model, expectedVersion: options.expectedVersion };
  const applied = await api.put<PlanAnswer>(`${appPath(appId)}/model`, body);
  io.out.write(renderPlan(applied, options.format, colours(io.out), `applied ${file} to ${appId}: now version ${applied.version}`));
}

interface Paint {
  add: (s: string) => string;
  remove: (s: string) => string;
  change: (s: string) => string;
}

/** Colours only on a terminal; a CI log gets the same text plain. */
function colours(out: NodeJS.WritableStream): Paint {
  const tty = (out as { isTTY?: boolean }).isTTY === true;
  const wrap = (code: number) => (s: string) => (tty ? `\x1b[${code}m${s}\x1b[0m` : s);
  return { add: wrap(32), remove: wrap(31), change: wrap(33) };
}

export const count = (n: number, what: string) => `${n} ${what}${n === 1 ? "" : "s"}`;
const sampleText = (sample: string[] | undefined, n: number, atLeast = false) =>
  sample === undefined || sample.length === 0 ? "" : ` (${sample.join(", ")}${atLeast ? ", and maybe more" : n > sample.length ? `, and ${n - sample.length} more` : ""})`;
/** A count the plan may give as a lower bound: "at least 3 users". */
const counted = (n: number, what: string, atLeast: boolean | undefined) => `${atLeast === true ? "at least " : ""}${count(n, what)}`;
/** The permission as a line names it: with its condition when held only under one. */
const permissionName = (i: Impact) => (i.condition === undefined || i.condition === "" ? i.permission : `${i.permission} (when ${i.condition})`);
/** "alice on 42, bob on 43": who gains or loses it on which instance, through grants. */
const pairsText = (pairs: { userId: string; resourceId: string }[] | undefined) => (pairs ?? []).map((p) => `${p.userId} on ${p.resourceId}`).join(", ");

/** A stranded use as the refusal names it: `document`, `document#reviewer`, `"team#member" of document#viewer`. */
const usedName = (u: StrandedUse) =>
  u.relation === undefined || u.relation === "" ? u.resource : u.subject === undefined || u.subject === "" ? `${u.resource}#${u.relation}` : `"${u.subject}" of ${u.resource}#${u.relation}`;

/** The plan as a reviewer reads it. */
export function renderPlan(plan: PlanAnswer, format: PlanFormat, paint: Paint, title: string): string {
  if (format === "json") return `${JSON.stringify(plan, null, 2)}\n`;
  const stranding = plan.stranding;
  const uses = stranding?.uses ?? [];
  const parts = [
    ["catalog", plan.catalog],
    ["policies", plan.policies],
    ["roles", plan.roles],
  ] as const;
  const impact = plan.impact ?? [];
  const nothing = parts.every(([, c]) => (c?.created?.length ?? 0) + (c?.changed?.length ?? 0) + (c?.removed?.length ?? 0) === 0);
  if (format === "markdown") {
    const lines = [`### ${title}`, ""];
    if (stranding !== undefined) {
      // First, where a reviewer cannot miss it: the apply of this plan will be refused.
      lines.push("> [!WARNING]", `> **Apply would be refused** (409 failed_precondition): ${stranding.message}`, ">");
      for (const u of uses) lines.push(`> - \`${usedName(u)}\`: ${u.reason ?? "grants use it"}`);
      lines.push("");
    }
    if (nothing) lines.push("No changes.");
    for (const [name, c] of parts) {
      const rows = [
        ...(c?.created ?? []).map((n) => `| ➕ created | \`${n}\` |`),
        ...(c?.changed ?? []).map((n) => `| ✏️ changed | \`${n}\` |`),
        ...(c?.removed ?? []).map((n) => `| ➖ removed | \`${n}\` |`),
      ];
      if (rows.length > 0) lines.push(`**${name}**`, "", "| | |", "|---|---|", ...rows, "");
    }
    if (impact.length > 0) {
      lines.push("**access**", "", "| permission | gaining | losing |", "|---|---:|---:|");
      for (const i of impact) {
        const cell = (n: number, sample: string[] | undefined, pairs: Impact["gainingPairs"]) =>
          `${i.atLeast === true ? "≥ " : ""}${n}${sampleText(sample, n, i.atLeast)}${(pairs ?? []).length > 0 ? `<br>on: ${pairsText(pairs)}` : ""}`;
        lines.push(`| \`${permissionName(i)}\` | ${cell(i.gaining ?? 0, i.gainingSample, i.gainingPairs)} | ${cell(i.losing ?? 0, i.losingSample, i.losingPairs)} |`);
      }
      if (impact.some((i) => i.atLeast === true)) lines.push("", "≥: the change reaches more than a plan examines; the counts are lower bounds.");
      lines.push("");
    } else if (!nothing) lines.push("No user gains or loses a permission.", "");
    return `${lines.join("\n").trimEnd()}\n`;
  }
  const lines = [title];
  if (stranding !== undefined) {
    lines.push(paint.remove(`apply would be refused (409 failed_precondition): ${stranding.message}`));
    for (const u of uses) lines.push(paint.remove(`  ! ${usedName(u)}: ${u.reason ?? "grants use it"}`));
  }
  if (nothing) lines.push("  no changes");
  for (const [name, c] of parts) {
    const rows = [
      ...(c?.created ?? []).map((n) => paint.add(`  + ${n}`)),
      ...(c?.changed ?? []).map((n) => paint.change(`  ~ ${n}`)),
      ...(c?.removed ?? []).map((n) => paint.remove(`  - ${n}`)),
    ];
    if (rows.length > 0) lines.push(`${name}:`, ...rows);
  }
  if (impact.length > 0) {
    lines.push("access:");
    for (const i of impact) {
      const gains = i.gaining ?? 0;
      const losses = i.losing ?? 0;
      const name = permissionName(i);
      if (gains > 0) lines.push(paint.add(`  + ${name}: ${counted(gains, "user", i.atLeast)} ${gains === 1 ? "gains" : "gain"} it${sampleText(i.gainingSample, gains, i.atLeast)}`));
      if ((i.gainingPairs ?? []).length > 0) lines.push(paint.add(`      on: ${pairsText(i.gainingPairs)}`));
      if (losses > 0) lines.push(paint.remove(`  - ${name}: ${counted(losses, "user", i.atLeast)} ${losses === 1 ? "loses" : "lose"} it${sampleText(i.losingSample, losses, i.atLeast)}`));
      if ((i.losingPairs ?? []).length > 0) lines.push(paint.remove(`      on: ${pairsText(i.losingPairs)}`));
      if (i.atLeast === true) lines.push(paint.change(`  ~ ${name}: the change reaches more than a plan examines; the counts are lower bounds`));
    }
  } else if (!nothing) lines.push("access: no user gains or loses a permission");
  return `${lines.join("\n")}\n`;
}
