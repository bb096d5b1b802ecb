import { Coalescer } from "../lib/coalescer.js";
import { NO_TELEMETRY, type Telemetry } from "../lib/telemetry.js";
import type { Db } from "../store/db.js";
import { lookupStore, type LookupInput, type LookupRow } from "../store/lookup-store.js";
import type { ReadReplicas } from "../store/read-replicas.js";
import type { Caller } from "./check.js";
import { unauthenticated, Violations } from "./errors.js";
import { exactRead } from "./exact-read.js";
import { check, identifierProblem, pageSize, tokenProblem } from "./formats.js";
import { decodePageToken, encodePageToken } from "./paging.js";

export interface LookupQuestion {
  userId: string;
  resource: string;
  action: string;
  tenantId: string | undefined;
  pageSize: number | undefined;
  pageToken: string;
}

export interface LookupAnswer {
  allInstances: boolean;
  resourceIds: string[];
  nextPageToken: string;
}

/**
 * Which instances of a resource a user may perform an action on. Roles
 * apply to every instance of the type, so they answer allInstances; grants
 * name instances, listed in ascending order and paged by the last id of the
 * page (a keyset cursor): grants written or deleted meanwhile, for this user
 * or others, never make a page repeat or skip an instance that stays granted.
 * Pages asked together share one statement per application (see
 * Coalescer and lookup-store), fresh like the check.
 */
export class Lookup {
  private readonly coalesced: Coalescer<LookupInput, LookupRow>;

  constructor(db: Db, replicas?: ReadReplicas, telemetry: Telemetry = NO_TELEMETRY) {
    this.coalesced = new Coalescer(
      (inputs) =>
        exactRead(db, replicas, async (q, onReplica) => {
          const read = await lookupStore.lookup(q, inputs, { replayed: onReplica });
          return { value: read.rows, replayed: read.replayed };
        }),
      // A page may hold 1,000 ids: a batch of 50 pages answers 50,000 at most.
      { ...db.reads, maxBatch: 50, reads: "lookup", telemetry },
    );
  }

  async lookup(caller: Caller, q: LookupQuestion): Promise<LookupAnswer> {
    const v = new Violations();
    check(v, "userId", identifierProblem(q.userId));
    check(v, "resource", tokenProblem(q.resource));
    check(v, "action", tokenProblem(q.action));
    if (q.tenantId !== undefined) check(v, "tenantId", identifierProblem(q.tenantId));
    v.throwIfAny();
    const limit = pageSize(q.pageSize);
    const after = decodePageToken(q.pageToken, { resourceId: "string" })?.resourceId ?? "";
    const input = { appId: caller.appId, keyHash: caller.keyHash, ...q, after, limit: limit + 1 };
    const row = await this.coalesced.call(input);
    if (!row.keyValid) throw unauthenticated("the API key is not valid: it is unknown or revoked");
    if (row.actions === null) v.add("resource", `"${q.resource}" is not a resource of the catalog`);
    else if (!row.actions.includes(q.action)) v.add("action", `"${q.action}" is not an action of resource "${q.resource}"`);
    v.throwIfAny();
    const resourceIds = row.resourceIds.slice(0, limit);
    const more = row.resourceIds.length > limit;
    return {
      allInstances: row.allInstances,
      resourceIds,
      nextPageToken: more ? encodePageToken({ resourceId: resourceIds[resourceIds.length - 1]! }) : "",
    };
  }
}
