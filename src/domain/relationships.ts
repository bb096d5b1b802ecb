import { stoppable, type AbortOptions, type Db, type Queryable } from "../store/db.js";
import { relationshipsStore, type RelationshipRow, type Tuple } from "../store/relationships-store.js";
import { lockApplication, type Page } from "./applications.js";
import { invalidArgument, Violations } from "./errors.js";
import { check, identifierProblem, LIMITS, pageSize, tokenProblem } from "./formats.js";
import { decodePageToken, page } from "./paging.js";

type Relations = Map<string, Map<string, string[]>>;

/** Checks one tuple's formats and that its resource and relation are in the catalog. */
function checkTuple(v: Violations, at: string, t: Tuple, relations: Relations | undefined): void {
  const ok = [
    check(v, `${at}userId`, identifierProblem(t.userId)),
    check(v, `${at}resource`, tokenProblem(t.resource)),
    check(v, `${at}resourceId`, identifierProblem(t.resourceId)),
    check(v, `${at}relation`, tokenProblem(t.relation)),
  ];
  if (relations === undefined || !ok[1]) return;
  const ofResource = relations.get(t.resource);
  if (ofResource === undefined) {
    v.add(`${at}resource`, `"${t.resource}" is not a resource of the catalog`);
  } else if (ok[3] && !ofResource.has(t.relation)) {
    v.add(`${at}relation`, `"${t.relation}" is not a relation of resource "${t.resource}" (relations: ${[...ofResource.keys()].join(", ")})`);
  }
}

const tupleKey = (t: Tuple) => JSON.stringify([t.resource, t.resourceId, t.relation, t.userId]);

export type ListQuery =
  | { mode: "instance"; resource: string; resourceId: string; relation: string | undefined }
  | { mode: "user"; userId: string; resource: string; relation: string | undefined };

/** Direct grants: a user holds a relation on one resource instance. */
export class Relationships {
  constructor(private readonly db: Db) {}

  async write(appId: string, t: Tuple, options?: AbortOptions): Promise<{ row: RelationshipRow; created: boolean }> {
    const v = new Violations();
    checkTuple(v, "", t, undefined);
    v.throwIfAny();
    return this.db.transaction(async (tx) => {
      // FOR SHARE: a concurrent catalog change waits, so a grant never
      // lands on a relation the new catalog just dropped.
      await lockApplication(tx, appId, "share");
      checkTuple(v, "", t, await relationshipsStore.relationsOf(tx, appId));
      v.throwIfAny();
      return relationshipsStore.write(tx, appId, t);
    }, options);
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
   * Writes and deletes up to 5,000 grants in one transaction, all or nothing.
   * Every entry is checked first; any bad one fails the call, naming each
   * (the first 100) by index, and nothing is written.
   */
  async bulk(appId: string, writes: Tuple[], deletes: Tuple[], options?: AbortOptions): Promise<{ written: number; unchanged: number; deleted: number }> {
    const total = writes.length + deletes.length;
    if (total > LIMITS.bulkEntries) {
      throw invalidArgument(`at most ${LIMITS.bulkEntries} entries (writes and deletes together) per call, got ${total}`, [
        { field: "writes", reason: `${writes.length} writes and ${deletes.length} deletes exceed ${LIMITS.bulkEntries}` },
      ]);
    }
    return this.db.transaction(async (tx) => {
      await lockApplication(tx, appId, "share");
      const relations = await relationshipsStore.relationsOf(tx, appId);
      const v = new Violations(100);
      const written = new Map<string, number>();
      const check = (list: Tuple[], name: "writes" | "deletes") =>
        list.forEach((t, i) => {
          checkTuple(v, `${name}[${i}].`, t, relations);
          if (name === "writes") written.set(tupleKey(t), i);
          else if (written.has(tupleKey(t))) {
            v.add(`deletes[${i}]`, `the same grant is also in writes[${written.get(tupleKey(t))}]; a call may not both write and delete it`);
          }
        });
      check(writes, "writes");
      check(deletes, "deletes");
      if (!v.empty) throw bulkError(v);
      const deleted = await relationshipsStore.deleteMany(tx, appId, deletes);
      const inserted = await relationshipsStore.writeMany(tx, appId, writes);
      return { written: inserted, unchanged: writes.length - inserted, deleted };
    }, options);
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
    else check(v, "userId", identifierProblem(query.userId));
    if (query.relation !== undefined) check(v, "relation", tokenProblem(query.relation));
    v.throwIfAny();
    if (query.mode === "instance") {
      const position = decodePageToken(token, { relation: "string", userId: "string" });
      const listed = await relationshipsStore.listByInstance(
        this.db,
        appId,
        query,
        position && { relation: position.relation as string, userId: position.userId as string },
        limit + 1,
      );
      requireInCatalog(listed.catalogRelations, query.resource, query.relation);
      return page(listed.rows, limit, (last) => ({ relation: last.relation, userId: last.userId }));
    }
    const position = decodePageToken(token, { resourceId: "string", relation: "string" });
    const listed = await relationshipsStore.listByUser(
      this.db,
      appId,
      query,
      position && { resourceId: position.resourceId as string, relation: position.relation as string },
      limit + 1,
    );
    requireInCatalog(listed.catalogRelations, query.resource, query.relation);
    return page(listed.rows, limit, (last) => ({ resourceId: last.resourceId, relation: last.relation }));
  }
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
