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
 * for this one (EACH_HOLDER): the check keeps its one round trip and its
 * one index, two descents instead of one.
 */
export const ALL_USERS_ID = "";

/** The same value as SQL text, for statements that name it (ALL_USERS_ID). */
export const ALL_USERS_SQL = "''";

/**
 * The rows of relationships a user holds by their own grants and by the
 * allUsers ones: `select(holder)` for the user, then for the allUsers id,
 * joined by UNION ALL, so each branch probes its holder by equality.
 * `select` reads relationships with `g.user_id = ${holder}` beside the
 * rest of its key (resource, instance, relation). Written `user_id IN
 * (user, '')` instead, a statement planned with the instance unknown (the
 * check's functions' generic plans, the JSON questions of every statement)
 * read every grant of the instance by the primary key and filtered the
 * user: correct, and thousands of rows a check on an instance shared with
 * thousands (test/index-reads.test.ts counts the rows).
 * `select` must end in a condition: ANY_ALL_USERS is joined to the allUsers
 * branch by AND.
 */
export const EACH_HOLDER = (user: string, select: (holder: string) => string): string =>
  `${select(user)}\n UNION ALL ${select(ALL_USERS_SQL)} AND ${ANY_ALL_USERS}`;

/**
 * Whether the application ($1) has an allUsers grant at all: one probe of
 * relationships_user_idx, which the planner runs once per statement (it
 * names no row of the query), so that in an application without one (most
 * are) the allUsers branch of EACH_HOLDER costs no descent per question.
 */
export const ANY_ALL_USERS = `EXISTS (SELECT 1 FROM relationships e WHERE e.app_id = $1 AND e.user_id = ${ALL_USERS_SQL})`;

/**
 * The two holders whose grants a user holds, as rows `h(user_id)`: the user,
 * and the allUsers grants' id. A statement that reads the user's grants of
 * a pair joins this and probes each by equality (`g.user_id = h.user_id`),
 * a short range of relationships_user_relation_idx each, where the pair
 * (not the instance) is known: the walks' first hop (migration 019).
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
