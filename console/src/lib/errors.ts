/**
 * What the API said, for people: the message, and the field errors its
 * details carry ({field, reason}, see the error table in docs/api.md), so a page
 * can show each next to its field.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { StructSchema } from "@bufbuild/protobuf/wkt";
import { toJson } from "@bufbuild/protobuf";

export interface ApiProblem {
  code: Code;
  message: string;
  /** The error's details, as JSON objects. */
  details: Record<string, unknown>[];
  /** field path → reason, from the details that name a field. */
  fields: Map<string, string>;
}

export function apiProblem(error: unknown): ApiProblem {
  const e = ConnectError.from(error);
  const details = e.findDetails(StructSchema).map((d) => toJson(StructSchema, d) as Record<string, unknown>);
  const fields = new Map<string, string>();
  for (const d of details) {
    if (typeof d.field === "string" && typeof d.reason === "string" && !fields.has(d.field)) fields.set(d.field, d.reason);
  }
  return { code: e.code, message: e.rawMessage, details, fields };
}

/**
 * The first reason the API gave for a field path or anything under it
 * (`permissions` for `permissions[3]`, `resources[0]` for `resources[0].actions[1]`).
 */
export function reasonAt(problem: ApiProblem | undefined, path: string): string | undefined {
  if (problem === undefined) return undefined;
  for (const [field, reason] of problem.fields) {
    if (field === path || field.startsWith(`${path}[`) || field.startsWith(`${path}.`)) return reason;
  }
  return undefined;
}
