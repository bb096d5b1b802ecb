import { ALL_USERS_ID, storedUserId } from "../store/all-users.js";
import { eachATransaction, stoppable, type AbortOptions, type Db } from "../store/db.js";
import { changesStore } from "../store/changes-store.js";
import {
  holderPosition,
  relationshipsStore,
  type HolderPosition,
  type GrantFilter,
  type GrantWrite,
  type RelationshipRow,
  type Tuple,
} from "../store/relationships-store.js";
import { ALL_USERS_SUBJECT, subjectTypeOf, type Subject } from "./subjects.js";
import { applicationLock, requireApplication, type Page } from "./applications.js";
import { conditionProblem } from "./conditions.js";
import { invalidArgument, Violations } from "./errors.js";
import { check, identifierProblem, instantProblem, LIMITS, pageSize, show, tokenProblem } from "./formats.js";
import { decodePageToken, page } from "./paging.js";

/** resource → relation → the relation's subjects (what its grants may name as holder). */
export type Relations = ReadonlyMap<string, ReadonlyMap<string, string[]>>;

/**
 * Checks a holder's form: a userId, a subject, or allUsers (true; false is
 * none), exactly one of the three. Returns whether it is good. A second
 * holder is named as the field at fault: subject beside a userId, allUsers
 * beside either.
 */
function checkHolder(v: Violations, at: string, t: Tuple): boolean {
  const given = [
    ...(t.userId !== "" ? ["userId"] : []),
    ...(t.subject !== undefined ? ["subject"] : []),
    ...(t.allUsers === true ? ["allUsers"] : []),
  ];
  if (given.length === 0) {
    v.add(`${at}userId`, "is required: a grant names its holder by userId, by subject or by allUsers: true, exactly one of them");
    return false;
  }
  if (given.length > 1) {
    v.add(`${at}${given[given.length - 1]}`, `a grant names its holder by userId, by subject or by allUsers: true, exactly one of them; given: ${given.join(" and ")}`);
    return false;
  }
  if (t.allUsers === true) return true;
  if (t.subject === undefined) return check(v, `${at}userId`, identifierProblem(t.userId));
  return checkSubject(v, (field) => `${at}subject.${field}`, t.subject);
}

/** A holder type as people read it, in the catalog's words: "a userId", "allUsers: true (every user)", "a subject set team#member", "a linked folder". */
const holderTypeText = (type: string): string =>
  type === "user" ? "a userId" : type === ALL_USERS_SUBJECT ? "allUsers: true (every user)" : type.includes("#") ? `a subject set ${type}` : `a linked ${type}`;

/** The field that names a tuple's holder. */
const holderField = (t: Tuple): string => (t.allUsers === true ? "allUsers" : t.subject === undefined ? "userId" : "subject");

/** A subject's form: resource, resourceId, and relation when it is a set ("" for a link). */
function checkSubject(v: Violations, at: (field: "resource" | "resourceId" | "relation") => string, subject: Subject): boolean {
  const ok = [
    check(v, at("resource"), tokenProblem(subject.resource)),
    check(v, at("resourceId"), identifierProblem(subject.resourceId)),
    subject.relation === "" || check(v, at("relation"), tokenProblem(subject.relation)),
  ];
  return ok.every(Boolean);
}

/** Checks one tuple's formats and that its resource, relation and holder's type are in the catalog. */
function checkTuple(v: Violations, at: string, t: Tuple, relations: Relations | undefined): void {
  const ok = [
    checkHolder(v, at, t),
    check(v, `${at}resource`, tokenProblem(t.resource)),
    check(v, `${at}resourceId`, identifierProblem(t.resourceId)),
    check(v, `${at}relation`, tokenProblem(t.relation)),
  ];
  if (relations === undefined || !ok[1]) return;
  const ofResource = relations.get(t.resource);
  if (ofResource === undefined) {
    v.add(`${at}resource`, `"${t.resource}" is not a resource of the catalog`);
    return;
  }
  const subjects = ofResource.get(t.relation);
  if (!ok[3]) return;
  if (subjects === undefined) {
    v.add(`${at}relation`, `"${t.relation}" is not a relation of resource "${t.resource}" (relations: ${[...ofResource.keys()].join(", ")})`);
  } else if (ok[0]) {
    const type = subjectTypeOf(t);
    if (type !== undefined && subjects.includes(type)) return;
    const wanted = subjects.map(holderTypeText).join(", ");
    // allUsers where the relation's subjects lack "user:*": say how to allow it.
    // A link to a resource named user: "user" in subjects means user ids, never that resource.
    const hint =
      t.allUsers === true
        ? `; a relation every user may hold lists "${ALL_USERS_SUBJECT}" in its subjects`
        : type === undefined
          ? '; in subjects "user" means user ids, so no relation links to a resource named user'
          : "";
    v.add(`${at}${holderField(t)}`, `${t.resource}#${t.relation} is held by ${wanted} (its subjects in the catalog), not ${type === undefined ? `a linked ${t.subject!.resource}` : holderTypeText(type)}${hint}`);
  }
}

/**
 * A grant as a caller sends it: the tuple and, optionally, when it stops
 * counting, in milliseconds since the epoch (finer digits already dropped;
 * NaN for a timestamp that is no instant).
 */
export interface GrantInput extends Tuple {
  expiresAt?: number | undefined;
  /** A CEL expression that must hold for the grant to count ("" or absent: none). */
  condition?: string | undefined;
}

/** Checks a write's condition: CEL that Portcullis takes (domain/conditions.ts). */
function checkCondition(v: Violations, at: string, g: GrantInput): boolean {
  return g.condition === undefined || g.condition === "" || check(v, `${at}condition`, conditionProblem(g.condition));
}

/** Checks an expiry's form: an instant a Timestamp can hold. */
function checkExpiryForm(v: Violations, at: string, g: GrantInput): boolean {
  return g.expiresAt === undefined || check(v, `${at}expiresAt`, instantProblem(g.expiresAt));
}

/**
 * Checks that an expiry lies ahead of the database's clock (`now`, read in
 * the writing transaction): a grant written already expired would be a
 * write that changes no answer, which is a caller's mistake.
 */
function checkExpiryAhead(v: Violations, at: string, g: GrantInput, now: number): void {
  if (g.expiresAt !== undefined && g.expiresAt <= now) {
    v.add(`${at}expiresAt`, `${new Date(g.expiresAt).toISOString()} is not in the future (the database's clock reads ${new Date(now).toISOString()})`);
  }
}

/**
 * Checks one grant as a write takes it (`at` the prefix of its fields:
 * "writes[3]."): its form, that the catalog (`relations`, resource →
 * relation → subjects) has its resource, relation and holder's type, its
 * expiry ahead of the database's clock `now`, and its condition. The bulk
 * write's check; a question's contextual grants take it in two parts
 * (checkGrantForm, checkGrantAgainst: contextual-grants.ts).
 */
export function checkGrant(v: Violations, at: string, g: GrantInput, relations: Relations | undefined, now: number): void {
  const formOk = checkExpiryForm(v, at, g);
  checkTuple(v, at, g, relations);
  if (formOk) checkExpiryAhead(v, at, g, now);
  checkCondition(v, at, g);
}

/** A grant's form alone, before a catalog or a clock is read: its holder and ids, its expiry's form, its condition's CEL. */
export function checkGrantForm(v: Violations, at: string, g: GrantInput): void {
  checkExpiryForm(v, at, g);
  checkTuple(v, at, g, undefined);
  checkCondition(v, at, g);
}

/** The rest of checkGrant, for a grant whose form checkGrantForm found good: the catalog has it, and its expiry lies ahead of `now`. */
export function checkGrantAgainst(v: Violations, at: string, g: GrantInput, relations: Relations, now: number): void {
  checkTuple(v, at, g, relations);
  checkExpiryAhead(v, at, g, now);
}

const toWrite = (g: GrantInput): GrantWrite => ({
  userId: g.userId,
  resource: g.resource,
  resourceId: g.resourceId,
  relation: g.relation,
  ...(g.subject === undefined ? {} : { subject: g.subject }),
  ...(g.allUsers === true ? { allUsers: true } : {}),
  expiresAt: g.expiresAt === undefined ? null : new Date(g.expiresAt),
  condition: g.condition === undefined || g.condition === "" ? null : g.condition,
});

const tupleKey = (t: Tuple) =>
  JSON.stringify([t.resource, t.resourceId, t.relation, t.userId, t.allUsers === true, t.subject?.resource, t.subject?.resourceId, t.subject?.relation]);

export type ListQuery =
  | { mode: "instance"; resource: string; resourceId: string; relation: string | undefined; includeExpired: boolean }
  | { mode: "subject"; subject: Subject; resource: string; relation: string | undefined; includeExpired: boolean }
  /** A user's grants on a type; with allUsers (userId ""), the allUsers grants on it: the type's public instances. */
  | { mode: "user"; userId: string; allUsers?: boolean; resource: string; relation: string | undefined; includeExpired: boolean }
  | { mode: "resource"; resource: string; relation: string | undefined; includeExpired: boolean };

/**
 * The filters a delete by filter accepts (relation may narrow each), as
 * API.md lists them; allUsers (true) takes userId's place in each: every
 * allUsers grant, or those on one type.
 */
const DELETE_FILTERS: readonly (readonly (keyof GrantFilter)[])[] = [["userId"], ["resource", "resourceId"], ["userId", "resource"]];

/** What a delete by filter matches: GrantFilter's fields, and allUsers (true) in userId's place. */
export interface DeleteFilter extends GrantFilter {
  allUsers?: boolean;
}

/** Direct grants: a user holds a relation on one resource instance. */
export class Relationships {
  constructor(private readonly db: Db) {}

  /**
   * Writes one grant. An existing grant gets the expiry given (none when
   * none is): `created` is false, and the stored grant is returned.
   */
  async write(appId: string, g: GrantInput, options?: AbortOptions): Promise<{ row: RelationshipRow; created: boolean }> {
    const v = new Violations();
    checkTuple(v, "", g, undefined);
    checkExpiryForm(v, "", g);
    checkCondition(v, "", g);
    v.throwIfAny();
    const grant = toWrite(g);
    // Shared: a concurrent catalog change waits, so a grant never lands on
    // a relation the new catalog just dropped.
    const locked = { ...options, lock: applicationLock(appId, "share") };
    // The common case, a new grant the catalog takes, in one statement: a
    // transaction of its own, sent with its BEGIN, lock and COMMIT (one round
    // trip on Postgres), so the change feed's clock it takes last is held
    // only while Postgres commits.
    const holderType = subjectTypeOf(g);
    const inserted = holderType === undefined ? undefined : await relationshipsStore.insertAllowed(eachATransaction(this.db, locked), appId, grant, holderType);
    if (inserted !== undefined) return { row: inserted, created: true };
    return this.db.transaction(async (tx) => {
      // Otherwise: which of no application, a grant the catalog refuses, a
      // past expiry, or a grant already there (its expiry then replaced).
      await requireApplication(tx, appId);
      checkTuple(v, "", g, await relationshipsStore.relationsOf(tx, appId));
      if (g.expiresAt !== undefined) checkExpiryAhead(v, "", g, await relationshipsStore.clock(tx));
      v.throwIfAny();
      return relationshipsStore.write(tx, appId, grant);
    }, locked);
  }

  async delete(appId: string, t: Tuple, options?: AbortOptions): Promise<boolean> {
    const v = new Violations();
    checkTuple(v, "", t, undefined);
    v.throwIfAny();
    // One statement, no transaction: it stops on its own when the caller does.
    const q = stoppable(this.db, options);
    // A resource or relation outside the catalog is a 400, as on write (no
    // stored grant can have one: the catalog refuses to orphan grants).
    checkTuple(v, "", t, await relationshipsStore.relationsOf(q, appId));
    v.throwIfAny();
    return relationshipsStore.delete(q, appId, t);
  }

  /**
   * Deletes every grant matching all the filter's fields, expired or not, in
   * one statement (so one transaction): userId alone, resource and
   * resourceId, or userId and resource, each optionally narrowed by
   * relation; allUsers (true) in userId's place deletes the allUsers
   * grants (stored under ALL_USERS_ID). Returns how many went.
   */
  async deleteMatching(appId: string, filter: DeleteFilter, options?: AbortOptions): Promise<number> {
    if (filter.subject !== undefined) return this.deleteHeldBy(appId, filter, options);
    const given = (Object.keys(filter) as (keyof DeleteFilter)[]).filter((k) => (k === "allUsers" ? filter.allUsers === true : filter[k] !== undefined));
    // allUsers stands where userId does; both at once name two holders.
    const narrowed: (keyof GrantFilter)[] = given.filter((k) => k !== "relation").map((k) => (k === "allUsers" ? "userId" : k));
    if (
      (filter.allUsers === true && filter.userId !== undefined) ||
      !DELETE_FILTERS.some((accepted) => accepted.length === narrowed.length && accepted.every((k) => narrowed.includes(k)))
    ) {
      throw invalidArgument(
        `delete grants by userId (or allUsers: true) alone, by resource and resourceId, or by userId (or allUsers: true) and resource; relation may narrow any of them. Given: ${given.length === 0 ? "none" : given.join(", ")}`,
        [{ field: "filter", reason: "accepted filters: userId or allUsers, resource+resourceId, userId or allUsers+resource (each optionally with relation)" }],
      );
    }
    const v = new Violations();
    if (filter.userId !== undefined) check(v, "userId", identifierProblem(filter.userId));
    const resourceOk = filter.resource === undefined || check(v, "resource", tokenProblem(filter.resource));
    if (filter.resourceId !== undefined) check(v, "resourceId", identifierProblem(filter.resourceId));
    const relationOk = filter.relation === undefined || check(v, "relation", tokenProblem(filter.relation));
    v.throwIfAny();
    const q = stoppable(this.db, options);
    if (filter.resource !== undefined && resourceOk && relationOk) {
      // As the single delete: a resource or relation outside the catalog is a 400.
      const relations = (await relationshipsStore.relationsOf(q, appId)).get(filter.resource);
      requireInCatalog(relations === undefined ? null : [...relations.keys()], filter.resource, filter.relation);
    }
    const { allUsers, ...rest } = filter;
    return relationshipsStore.deleteMatching(q, appId, allUsers === true ? { ...rest, userId: ALL_USERS_ID } : rest);
  }

  /**
   * Deletes every grant whose holder is one instance (`subject` alone, as a
   * set or a link): the team or the folder is gone. One statement.
   */
  private async deleteHeldBy(appId: string, filter: DeleteFilter, options?: AbortOptions): Promise<number> {
    const others = [
      ...(["userId", "resource", "resourceId", "relation"] as const).filter((k) => filter[k] !== undefined),
      ...(filter.allUsers === true ? ["allUsers"] : []),
    ];
    if (others.length > 0) {
      throw invalidArgument(`subject deletes by itself: every grant whose holder is that instance. Given besides it: ${others.join(", ")}`, [
        { field: "subject", reason: "a delete by subject takes no other field" },
      ]);
    }
    const subject = filter.subject!;
    const v = new Violations();
    const ok = check(v, "subject.resource", tokenProblem(subject.resource));
    check(v, "subject.resourceId", identifierProblem(subject.resourceId));
    v.throwIfAny();
    const q = stoppable(this.db, options);
    if (ok && !(await relationshipsStore.relationsOf(q, appId)).has(subject.resource)) {
      v.add("subject.resource", `"${subject.resource}" is not a resource of the catalog`);
      v.throwIfAny();
    }
    return relationshipsStore.deleteMatching(q, appId, { subject: { resource: subject.resource, resourceId: subject.resourceId } });
  }

  /**
   * Writes and deletes up to 5,000 grants in one transaction, all or nothing.
   * Every entry is checked first; any bad one fails the call, naming each
   * (the first 100) by index, and nothing is written.
   */
  async bulk(appId: string, writes: GrantInput[], deletes: GrantInput[], options?: AbortOptions): Promise<{ written: number; unchanged: number; deleted: number }> {
    const total = writes.length + deletes.length;
    if (total > LIMITS.bulkEntries) {
      throw invalidArgument(`at most ${LIMITS.bulkEntries} entries (writes and deletes together) per call, got ${total}`, [
        { field: "writes", reason: `${writes.length} writes and ${deletes.length} deletes exceed ${LIMITS.bulkEntries}` },
      ]);
    }
    return this.db.transaction(async (tx) => {
      await requireApplication(tx, appId);
      const relations = await relationshipsStore.relationsOf(tx, appId);
      const now = writes.some((g) => g.expiresAt !== undefined) ? await relationshipsStore.clock(tx) : 0;
      const v = new Violations(100);
      // The first write of each grant; a repeat with the same expiry is
      // unchanged, one with another expiry is a contradiction.
      const written = new Map<string, number>();
      const distinct: GrantInput[] = [];
      writes.forEach((g, i) => {
        checkGrant(v, `writes[${i}].`, g, relations, now);
        const first = written.get(tupleKey(g));
        if (first === undefined) {
          written.set(tupleKey(g), i);
          distinct.push(g);
        } else if (writes[first]!.expiresAt !== g.expiresAt) {
          v.add(`writes[${i}].expiresAt`, `the same grant is also in writes[${first}] with another expiry; a call may give a grant one expiry`);
        } else if ((writes[first]!.condition ?? "") !== (g.condition ?? "")) {
          v.add(`writes[${i}].condition`, `the same grant is also in writes[${first}] with another condition; a call may give a grant one condition`);
        }
      });
      deletes.forEach((g, i) => {
        checkTuple(v, `deletes[${i}].`, g, relations);
        if (g.expiresAt !== undefined) v.add(`deletes[${i}].expiresAt`, "a delete takes no expiresAt");
        if (g.condition !== undefined && g.condition !== "") v.add(`deletes[${i}].condition`, "a delete takes no condition");
        if (written.has(tupleKey(g))) {
          v.add(`deletes[${i}]`, `the same grant is also in writes[${written.get(tupleKey(g))}]; a call may not both write and delete it`);
        }
      });
      if (!v.empty) throw bulkError(v);
      const deleted = await relationshipsStore.deleteMany(tx, appId, deletes);
      const changed = await relationshipsStore.writeMany(tx, appId, distinct.map(toWrite));
      // The transaction's place in the change feed's order, as its last write.
      if (deleted + changed > 0) await changesStore.seal(tx, appId);
      return { written: changed, unchanged: writes.length - changed, deleted };
    }, { ...options, lock: applicationLock(appId, "share") });
  }

  /**
   * One page of grants. The application is the calling key's own, so it
   * exists; the resource and relation are checked against the catalog read
   * in the same statement as the page.
   */
  async list(appId: string, query: ListQuery, size: number | undefined, token: string): Promise<Page<RelationshipRow>> {
    const limit = pageSize(size);
    const v = new Violations();
    check(v, "resource", tokenProblem(query.resource));
    if (query.mode === "instance") check(v, "resourceId", identifierProblem(query.resourceId));
    else if (query.mode === "user" && query.allUsers === true) {
      if (query.userId !== "") v.add("allUsers", "lists the allUsers grants on a type: give userId or allUsers, not both");
    } else if (query.mode === "user") check(v, "userId", identifierProblem(query.userId));
    // The list names its subject by query parameters: subjectResource, subjectResourceId, subjectRelation.
    else if (query.mode === "subject") checkSubject(v, (field) => `subject${field[0]!.toUpperCase()}${field.slice(1)}`, query.subject);
    if (query.relation !== undefined) check(v, "relation", tokenProblem(query.relation));
    v.throwIfAny();
    if (query.mode === "instance") {
      const position = holderCursor(token, decodePageToken(token, { relation: "string", kind: "number", a: "string", b: "string", c: "string" }));
      const listed = await relationshipsStore.listByInstance(this.db, appId, query, position, limit + 1);
      requireInCatalog(listed.catalogRelations, query.resource, query.relation);
      return page(listed.rows, limit, (last) => ({ relation: last.relation, ...holderPosition(last) }));
    }
    if (query.mode === "subject") {
      const position = decodePageToken(token, { resourceId: "string", relation: "string" });
      const listed = await relationshipsStore.listBySubject(this.db, appId, query, position, limit + 1);
      requireInCatalog(listed.catalogRelations, query.resource, query.relation);
      return page(listed.rows, limit, (last) => ({ resourceId: last.resourceId, relation: last.relation }));
    }
    if (query.mode === "resource") {
      // Every grant on the type, in primary-key order: what an export pages through.
      const position = holderCursor(
        token,
        decodePageToken(token, { resourceId: "string", relation: "string", kind: "number", a: "string", b: "string", c: "string" }),
      );
      const listed = await relationshipsStore.listByResource(this.db, appId, query, position, limit + 1);
      requireInCatalog(listed.catalogRelations, query.resource, query.relation);
      return page(listed.rows, limit, (last) => ({ resourceId: last.resourceId, relation: last.relation, ...holderPosition(last) }));
    }
    const position = decodePageToken(token, { resourceId: "string", relation: "string" });
    const listed = await relationshipsStore.listByUser(
      this.db,
      appId,
      { ...query, userId: storedUserId(query) },
      position && { resourceId: position.resourceId as string, relation: position.relation as string },
      limit + 1,
    );
    requireInCatalog(listed.catalogRelations, query.resource, query.relation);
    return page(listed.rows, limit, (last) => ({ resourceId: last.resourceId, relation: last.relation }));
  }
}

/**
 * A decoded position whose holder part is one a page issued: kind 0 (a
 * user, `a` its id) or 1 (a subject); the other string fields as they are.
 */
function holderCursor<K extends string>(token: string, position: Record<K | "kind", string | number> | undefined) {
  if (position === undefined) return undefined;
  if (position.kind !== 0 && position.kind !== 1) {
    throw invalidArgument(`pageToken: ${show(token)} is not a page token of this list`, [{ field: "pageToken", reason: "not a page token of this list" }]);
  }
  return position as Record<K, string> & HolderPosition;
}

/** A 400 when the resource (relations null) or the relation is not in the catalog. */
function requireInCatalog(relations: string[] | null, resource: string, relation: string | undefined): void {
  const v = new Violations();
  if (relations === null) v.add("resource", `"${resource}" is not a resource of the catalog`);
  else if (relation !== undefined && !relations.includes(relation)) {
    v.add("relation", `"${relation}" is not a relation of resource "${resource}"`);
  }
  v.throwIfAny();
}

function bulkError(v: Violations) {
  const shown = v.list.map((x) => `${x.field}: ${x.reason}`).join("; ");
  const more = v.count > v.list.length ? `; and ${v.count - v.list.length} more` : "";
  return invalidArgument(
    `${v.count} problem${v.count === 1 ? "" : "s"} in the bulk request, nothing was written: ${shown}${more}`,
    v.list.map((x) => {
      const match = /^(writes|deletes)\[(\d+)\]/.exec(x.field);
      return { ...(match ? { list: match[1]!, index: Number(match[2]) } : {}), field: x.field, reason: x.reason };
    }),
  );
}
