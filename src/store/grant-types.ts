/** The shapes of a grant, as the stores write and read it (relationships-store.ts, grant-write-store.ts). */

/** A grant's holder other than a user: a subject set (with relation) or a linked instance (relation ""). */
export interface Subject {
  resource: string;
  resourceId: string;
  /** "" for a link. */
  relation: string;
}

/**
 * A grant: its holder is the user `userId`, or, when `subject` is set (and
 * userId ""), a subject set or a linked instance, or, when `allUsers` is
 * true (and userId ""), every user. User grants, allUsers ones included,
 * live in relationships, the others in subject_relationships (migration 007).
 */
export interface Tuple {
  userId: string;
  resource: string;
  resourceId: string;
  relation: string;
  subject?: Subject | undefined;
  /** Every user holds the grant (API.md, "Everyone"); only where the relation's subjects include "user:*". */
  allUsers?: boolean | undefined;
}

/** A grant to write: the tuple, and when it stops counting (null: never). */
export interface GrantWrite extends Tuple {
  expiresAt: Date | null;
  /** A CEL expression's source, checked when written (domain/conditions.ts); null or absent: the grant always counts. */
  condition?: string | null | undefined;
}

export interface RelationshipRow extends Tuple {
  createdAt: Date;
  expiresAt: Date | null;
  condition: string | null;
}
