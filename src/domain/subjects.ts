/**
 * Subjects (API.md, "Groups and hierarchy" and "Conditions and AuthZEN"):
 * what a relation's grant may name as its holder, in the catalog's words,
 * and a grant's holder when it is not a user.
 */
import { ALL_USERS_SUBJECT, isUserSubject } from "../store/all-users.js";
import type { Subject, Tuple } from "../store/relationships-store.js";
import { NAME_TOKEN } from "./formats.js";

export type { Subject };

/** A relation's default subjects: users only. */
export const USER_SUBJECTS: readonly string[] = ["user"];

export { ALL_USERS_SUBJECT, isUserSubject };

/** One entry of a relation's `subjects`. */
export type SubjectType =
  | { kind: "user" }
  /** "user:*": every user, by one grant with allUsers. */
  | { kind: "all-users" }
  /** "team#member": everyone holding `relation` on one instance of `resource`. */
  | { kind: "set"; resource: string; relation: string }
  /** "folder": one instance of `resource` (a link). */
  | { kind: "link"; resource: string };

/** Reads one `subjects` entry; undefined when it is none of the three forms. */
export function parseSubjectType(text: string): SubjectType | undefined {
  // Checked before the other forms: "user" and "user:*" mean user ids even
  // where the catalog has a resource named user.
  if (text === "user") return { kind: "user" };
  if (text === ALL_USERS_SUBJECT) return { kind: "all-users" };
  const hash = text.indexOf("#");
  if (hash < 0) return NAME_TOKEN.test(text) ? { kind: "link", resource: text } : undefined;
  const resource = text.slice(0, hash);
  const relation = text.slice(hash + 1);
  return NAME_TOKEN.test(resource) && NAME_TOKEN.test(relation) ? { kind: "set", resource, relation } : undefined;
}

/**
 * The `subjects` entry a grant's holder must match: "user", "user:*",
 * "team#member" or "folder"; undefined for a link to an instance of a
 * resource named user, which no entry can name ("user" there means user
 * ids), so no relation takes it.
 */
export function subjectTypeOf(t: Pick<Tuple, "subject" | "allUsers">): string | undefined {
  if (t.allUsers === true) return ALL_USERS_SUBJECT;
  if (t.subject === undefined) return "user";
  if (t.subject.relation !== "") return `${t.subject.resource}#${t.subject.relation}`;
  return isUserSubject(t.subject.resource) ? undefined : t.subject.resource;
}
