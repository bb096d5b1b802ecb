/**
 * Who holds a relation, in the catalog's words and in people's (API.md,
 * "Groups and hierarchy", "Everyone"). A relation's `subjects` name what its
 * grants may give it to: "user" (a user id), "user:*" (every user at once, by
 * an allUsers grant), "team#member" (a subject set: everyone who holds member
 * on one team) or "folder" (one folder: a link). A grant's holder is a user
 * id, every user, or a subject, shown as "alice", "every user",
 * "team:eng#member" or "folder:runbooks".
 */

/** The subjects entry of a relation every user may hold at once (a grant with allUsers). */
export const ALL_USERS_SUBJECT = "user:*";

/** One entry of a relation's `subjects`. */
export type SubjectType =
  | { kind: "user" }
  | { kind: "all-users" }
  | { kind: "set"; resource: string; relation: string }
  | { kind: "link"; resource: string };

export function parseSubjectType(text: string): SubjectType {
  // "user" and "user:*" mean user ids, whatever resources the catalog has.
  if (text === "user") return { kind: "user" };
  if (text === ALL_USERS_SUBJECT) return { kind: "all-users" };
  const hash = text.indexOf("#");
  return hash < 0 ? { kind: "link", resource: text } : { kind: "set", resource: text.slice(0, hash), relation: text.slice(hash + 1) };
}

/** A relation's subjects as stored; none (an older answer, or a request's default) means users only. */
export const effectiveSubjects = (subjects: readonly string[] | undefined): string[] => (subjects === undefined || subjects.length === 0 ? ["user"] : [...subjects]);

/** A link relation: its grants name only instances (a document's "parent" folder); it implies no actions. */
export const isLinkSubjects = (subjects: readonly string[]): boolean => subjects.length > 0 && subjects.every((s) => parseSubjectType(s).kind === "link");

/** A subjects entry for people: "users", "everyone with member on a team (team#member)", "one folder (a link)". */
export function describeSubjectType(text: string): string {
  const t = parseSubjectType(text);
  if (t.kind === "user") return "users";
  if (t.kind === "all-users") return "every user at once (an allUsers grant: public)";
  if (t.kind === "set") return `everyone with ${t.relation} on a ${t.resource} (${text})`;
  return `one ${t.resource} (a link)`;
}

/** A grant's holder that is not a user. */
export interface SubjectRef {
  resource: string;
  resourceId: string;
  /** Empty for a link. */
  relation: string;
}

/** Who an allUsers grant names, as people read it. */
export const EVERY_USER = "every user";

/** A holder as people read it: "alice", "every user", "team:eng#member", "folder:runbooks". */
export const holderText = (g: { userId: string; allUsers?: boolean; subject?: SubjectRef | undefined }): string =>
  g.allUsers === true
    ? EVERY_USER
    : g.subject === undefined || g.userId !== ""
      ? g.userId
      : `${g.subject.resource}:${g.subject.resourceId}${g.subject.relation === "" ? "" : `#${g.subject.relation}`}`;

/** One grant as a sentence: "alice is member of team:eng", "folder:runbooks is parent of document:42". */
export const grantSentence = (g: { userId: string; allUsers?: boolean; subject?: SubjectRef | undefined; resource: string; resourceId: string; relation: string }): string =>
  `${holderText(g)} is ${g.relation} of ${g.resource}:${g.resourceId}`;
