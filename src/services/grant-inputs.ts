import type { Timestamp } from "@bufbuild/protobuf/wkt";
import type { Subject } from "../domain/subjects.js";
import type { GrantInput } from "../domain/relationships.js";
import type { Tuple } from "../store/relationships-store.js";
import { instantOf } from "./instants.js";

type SubjectMessage = { resource: string; resourceId: string; relation: string };

export const subjectOf = (s: SubjectMessage | undefined): Subject | undefined =>
  s === undefined ? undefined : { resource: s.resource, resourceId: s.resourceId, relation: s.relation };

/** A grant as a write's message carries it (a bulk write's entry, a question's contextual grant). */
export const grantInputOf = (t: Omit<Tuple, "subject"> & { subject?: SubjectMessage | undefined; expiresAt?: Timestamp | undefined; condition?: string }): GrantInput => ({
  userId: t.userId,
  resource: t.resource,
  resourceId: t.resourceId,
  relation: t.relation,
  subject: subjectOf(t.subject),
  allUsers: t.allUsers === true,
  expiresAt: instantOf(t.expiresAt),
  condition: t.condition,
});
