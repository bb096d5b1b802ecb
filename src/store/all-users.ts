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

/**
 * The two holders whose grants a user holds, as rows `h(user_id)`: the user,
 * and the allUsers grants' id. A statement that reads the user's grants of
 * a pair joins this and probes each by equality (`g.user_id = h.user_id`),
 * a short range of relationships_user_relation_idx each. Written with
 * USER_OR_ALL there instead, a generic plan read every grant of the pair
 * by the primary key and filtered the user (21,000 team memberships a
 * check in the bench's 4-hop world: migration 019, docs/performance.md).
 */
export const HOLDERS_OF = (user: string) => `unnest(ARRAY[${user}, ${ALL_USERS_SQL}]) AS h(user_id)`;

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
