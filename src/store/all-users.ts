/**
 * How an allUsers grant (API.md, "Everyone") is stored: apart from the
 * statements that read it, so that relationships-store and grant-write-store
 * (which import each other's parts) both take it from below.
 */

/**
 * The subjects entry of a relation that every user may hold at once, by one
 * grant with `allUsers` (public documents). Like "user", the word means user
 * ids whatever the catalog's resources are called: a resource named `user`
 * never turns "user:*" into "every instance of user".
 */
export const ALL_USERS_SUBJECT = "user:*";

/** Whether a subjects entry names users (one user id, or all of them) rather than instances. */
export const isUserSubject = (text: string): boolean => text === "user" || text === ALL_USERS_SUBJECT;

/** The holder fields of a grant these read (relationships-store's Tuple). */
interface Holder {
  userId: string;
  subject?: unknown;
  allUsers?: boolean | undefined;
}

/**
 * The user_id an allUsers grant is stored under (migration 016): the empty
 * string, which no user id can be (formats.ts: 1 to 256 characters, and
 * every id a grant, a question or a filter names is checked so). A reserved
 * value rather than a column or a table: the grant stays a row of
 * relationships under its primary key (one allUsers grant per instance and
 * relation, upserted, deleted and listed as any other), and every question
 * that probes a user's grants probes the same index for the user's id and
 * for this one (`user_id IN ($user, '')`): the check keeps its one round
 * trip and its one index, two descents instead of one.
 */
export const ALL_USERS_ID = "";

/** The same value as SQL text, for statements that name it (ALL_USERS_ID). */
export const ALL_USERS_SQL = "''";

/** A holder condition matching a user's own grants and the allUsers ones: `${column} IN (${user}, '')`. */
export const USER_OR_ALL = (column: string, user: string) => `${column} IN (${user}, ${ALL_USERS_SQL})`;

/** The user_id a user grant (or an allUsers one) is stored under. */
export const storedUserId = (t: Holder): string => (t.allUsers === true ? ALL_USERS_ID : t.userId);

/**
 * A row of relationships as the domain takes it: one stored under
 * ALL_USERS_ID is an allUsers grant (userId ""). `subject` unset: a user's
 * table's row; a subject's rows say userId "" beside their subject.
 */
export function fromStored<T extends Holder>(row: T): T {
  if (row.userId !== ALL_USERS_ID || (row.subject !== undefined && row.subject !== null)) return row;
  return { ...row, allUsers: true };
}
