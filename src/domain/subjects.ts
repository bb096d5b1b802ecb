/**
 * Subjects (API.md, "Groups and hierarchy"): what a relation's grant may
 * name as its holder, in the catalog's words, and a grant's holder when it
 * is not a user.
 */
import type { Subject } from "../store/relationships-store.js";
import { NAME_TOKEN } from "./formats.js";

export type { Subject };

/** A relation's default subjects: users only (every relation before hierarchy). */
export const USER_SUBJECTS: readonly string[] = ["user"];

/** One entry of a relation's `subjects`. */
export type SubjectType =
  | { kind: "user" }
  /** "team#member": everyone holding `relation` on one instance of `resource`. */
  | { kind: "set"; resource: string; relation: string }
  /** "folder": one instance of `resource` (a link). */
  | { kind: "link"; resource: string };

/** Reads one `subjects` entry; undefined when it is none of the three forms. */
export function parseSubjectType(text: string): SubjectType | undefined {
  if (text === "user") return { kind: "user" };
  const hash = text.indexOf("#");
  if (hash < 0) return NAME_TOKEN.test(text) ? { kind: "link", resource: text } : undefined;
  const resource = text.slice(0, hash);
  const relation = text.slice(hash + 1);
  return NAME_TOKEN.test(resource) && NAME_TOKEN.test(relation) ? { kind: "set", resource, relation } : undefined;
}

/** The `subjects` entry a grant's holder must match: "user", "team#member" or "folder". */
export const subjectTypeOf = (subject: Subject | undefined): string =>
  subject === undefined ? "user" : subject.relation === "" ? subject.resource : `${subject.resource}#${subject.relation}`;

/** A holder as people read it: "alice", "team:eng#member", "folder:runbooks". */
export const holderText = (userId: string, subject: Subject | undefined): string =>
  subject === undefined ? userId : `${subject.resource}:${subject.resourceId}${subject.relation === "" ? "" : `#${subject.relation}`}`;
