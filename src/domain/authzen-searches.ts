/**
 * AuthZEN's Search APIs (docs/authzen.md) on the questions Portcullis
 * already answers: Subject Search on who can, Resource Search on lookup
 * (every known instance of the type where a role allows the action on all),
 * Action Search on the permissions question. Each is ascending and paged by
 * keyset (authzen-paging.ts); a subject that is not a user, or a type or
 * action the catalog lacks, is an empty search, not a 400.
 *
 * Who can and lookup list what only a condition allows apart
 * (`conditional`); a search evaluates each such candidate with the
 * request's context and properties (the check's batch) and lists those that
 * hold, in the page's order (withConditionalCandidates). Action Search
 * evaluates conditions as the permissions question does. A role that gives
 * the action on every instance only under a condition is not evaluated by
 * Resource Search: it lists the instances other ways allow.
 */
import type { Db } from "../store/db.js";
import { knownInstancesStore } from "../store/known-instances-store.js";
import { knownUsersStore } from "../store/known-users-store.js";
import type { ReadReplicas } from "../store/read-replicas.js";
import { unlessUnknown, verifyKey } from "./authzen-answers.js";
import { EMPTY_PAGE, pageOf, pageStart, type PageInput, type PageStart, type SearchPage } from "./authzen-paging.js";
import { answerable, evaluationOf, factsOf, type Evaluation, type RequestParts } from "./authzen-requests.js";
import type { Caller, Checker, CheckQuestion } from "./check.js";
import { Violations } from "./errors.js";
import { exactRead } from "./exact-read.js";
import type { Lookup, PageEntry } from "./lookup.js";
import { encodePageToken } from "./paging.js";
import type { WhoCan } from "./who-can.js";

export interface SearchInput extends RequestParts {
  page?: PageInput | undefined;
}

export interface SearchDeps {
  checker: Checker;
  lookup: Lookup;
  whoCan: WhoCan;
  db: Db;
  replicas?: ReadReplicas | undefined;
}

export class AccessSearches {
  constructor(private readonly deps: SearchDeps) {}

  /**
   * Subject Search: user ids, from who can (users named by grants or
   * assigned a role). subject.id is not asked (ignored when given). Where
   * an allUsers grant lets every user (who can's `allUsers`), every user the
   * application knows (named by grants, role assignments or stored
   * properties), as Resource Search pages every known instance; where one
   * would under conditions (`allUsersConditions`), every known user for
   * whom the check allows, with the request's facts.
   */
  async subjects(caller: Caller, request: SearchInput): Promise<SearchPage> {
    const e = required(request, { subjectId: false, action: true, resourceId: true });
    const start = pageStart(request.page, ["subject", e.subject.type, e.action.name, e.resource.type, e.resource.id]);
    if (!answerable(e)) return this.empty(caller);
    const { whoCan } = this.deps;
    const asked = whoCan.whoCan(caller, {
      resource: e.resource.type,
      resourceId: e.resource.id,
      action: e.action.name,
      tenantId: undefined,
      pageSize: start.limit,
      pageToken: start.after === "" ? "" : encodePageToken({ userId: start.after }),
    });
    const answer = await unlessUnknown(asked, undefined);
    if (answer === undefined) return EMPTY_PAGE;
    const question = (id: string): CheckQuestion => ({
      userId: id,
      resource: e.resource.type,
      resourceId: e.resource.id,
      action: e.action.name,
      tenantId: undefined,
      facts: factsOf(e),
    });
    if (answer.allUsers || answer.allUsersConditions.length > 0) {
      const { db, replicas } = this.deps;
      // Read where checks read (a replica that has replayed every change before it, or the primary).
      const known = await exactRead(db, replicas, async (q, onReplica) => {
        const read = await knownUsersStore.page(q, { appId: caller.appId, after: start.after, limit: start.limit + 1 }, { replayed: onReplica });
        return { value: read.ids, replayed: read.replayed };
      });
      if (answer.allUsers) return pageOf(start, known, false);
      // Every user may where a condition holds, which may read the user
      // (subject.id, subject.properties): each known user of the page is
      // asked as the check asks it, one batch, and listed where allowed.
      const page = known.slice(0, start.limit);
      const allowed = page.length === 0 ? [] : await this.deps.checker.batch(caller, page.map(question));
      return pageOf(start, page.filter((_, i) => allowed[i]), known.length > start.limit, page[page.length - 1]);
    }
    return withConditionalCandidates(this.deps.checker, caller, start, answer, question);
  }

  /**
   * Resource Search: instance ids of resource.type, from lookup: where a role
   * allows the action on every instance, every instance the application
   * knows (those its live grants name); else those the user's grants reach.
   * resource.id is not asked (ignored when given).
   */
  async resources(caller: Caller, request: SearchInput): Promise<SearchPage> {
    const e = required(request, { subjectId: true, action: true, resourceId: false });
    const start = pageStart(request.page, ["resource", e.subject.type, e.subject.id, e.action.name, e.resource.type]);
    if (!answerable(e)) return this.empty(caller);
    const { lookup, db, replicas } = this.deps;
    const asked = lookup.lookup(caller, {
      userId: e.subject.id,
      resource: e.resource.type,
      action: e.action.name,
      tenantId: undefined,
      pageSize: start.limit,
      pageToken: start.after === "" ? "" : encodePageToken({ resourceId: start.after }),
    });
    const answer = await unlessUnknown(asked, undefined);
    if (answer === undefined) return EMPTY_PAGE;
    if (!answer.allInstances) {
      return withConditionalCandidates(this.deps.checker, caller, start, answer, (id) => ({
        userId: e.subject.id,
        resource: e.resource.type,
        resourceId: id,
        action: e.action.name,
        tenantId: undefined,
        facts: factsOf(e),
      }));
    }
    // Read where checks read (a replica that has replayed every change before it, or the primary).
    const known = await exactRead(db, replicas, async (q, onReplica) => {
      const read = await knownInstancesStore.page(q, { appId: caller.appId, resource: e.resource.type, after: start.after, limit: start.limit + 1 }, { replayed: onReplica });
      return { value: read.ids, replayed: read.replayed };
    });
    return pageOf(start, known, false);
  }

  /** Action Search: the actions of resource.type the user may perform on the instance, from the permissions question (conditions evaluated with the request's facts). */
  async actions(caller: Caller, request: SearchInput): Promise<SearchPage> {
    const e = required(request, { subjectId: true, action: false, resourceId: true });
    const start = pageStart(request.page, ["action", e.subject.type, e.subject.id, e.resource.type, e.resource.id]);
    if (!answerable(e)) return this.empty(caller);
    const asked = this.deps.checker.permissions(caller, {
      userId: e.subject.id,
      resource: e.resource.type,
      resourceId: e.resource.id,
      tenantId: undefined,
      facts: factsOf(e),
    });
    const actions = await unlessUnknown(asked, []);
    // Catalog order is the permissions question's; a search's is ascending.
    const after = [...actions].sort(ascending).filter((name) => name > start.after);
    return pageOf(start, after, false);
  }

  /** Nothing to search for, once the key is known to hold. */
  private async empty(caller: Caller): Promise<SearchPage> {
    await verifyKey(this.deps.checker, caller);
    return EMPTY_PAGE;
  }
}

/** The search's entities, or a 400 naming each required part that is missing. */
function required(request: SearchInput, requires: Parameters<typeof evaluationOf>[3]): Evaluation {
  const v = new Violations();
  const e = evaluationOf(request, v, "", requires);
  v.throwIfAny();
  return e!;
}

/**
 * A page of who can or lookup as a search lists it: the plain answers, and
 * the conditional ones whose conditions hold with the request's facts
 * (asked as the check's batch, one question per candidate, in one
 * statement), in the page's order. The cursor is the page's own, so a
 * candidate that does not hold is passed over, never met again.
 */
async function withConditionalCandidates(
  checker: Checker,
  caller: Caller,
  start: PageStart,
  answer: { page: readonly PageEntry[]; nextPageToken: string },
  question: (id: string) => CheckQuestion,
): Promise<SearchPage> {
  const candidates = answer.page.filter((e) => e.conditions !== undefined);
  const held = candidates.length === 0 ? [] : await checker.batch(caller, candidates.map((e) => question(e.id)));
  const holds = new Set(candidates.filter((_, i) => held[i]).map((e) => e.id));
  const ids = answer.page.filter((e) => e.conditions === undefined || holds.has(e.id)).map((e) => e.id);
  return pageOf(start, ids, answer.nextPageToken !== "", lastOf(answer.page));
}

const lastOf = (page: readonly PageEntry[]) => page[page.length - 1]?.id;

const ascending = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
