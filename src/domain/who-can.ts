import { Coalescer } from "../lib/coalescer.js";
import { NO_TELEMETRY, type Telemetry } from "../lib/telemetry.js";
import type { Db } from "../store/db.js";
import { graphStore, type WhoCanInput, type WhoCanRow } from "../store/graph-store.js";
import type { ThroughPaths, ThroughPathsRow } from "../store/conditional-candidates.js";
import type { ReadReplicas } from "../store/read-replicas.js";
import { ALL_USERS_ID } from "../store/all-users.js";
import { Checker, type Caller } from "./check.js";
import type { CheckQuestion } from "./check-questions.js";
import { pageOf, type ConditionalAnswer, type PageEntry } from "./lookup.js";
import { splitPage } from "../store/conditional-candidates.js";
import { unavailable, Violations } from "./errors.js";
import { exactReads, requireAnswerable, requireKey, sameQuestion } from "./exact-read.js";
import { check, identifierProblem, pageSize, tokenProblem } from "./formats.js";
import { decodePageToken, encodePageToken } from "./paging.js";
import { checkQuestionFacts, type QuestionFacts } from "./question-facts.js";
import { allowedPage, type ReadIds } from "./operator-pages.js";
import { checkContextualForm, contextEdges, hasContextual, type ContextualGrant } from "./contextual-grants.js";
import { requireContextualGrants, whoCanUsers } from "./contextual-pages.js";
import { contextualPagesStore, type ContextualWhoCanInput } from "../store/contextual-pages-store.js";
import type { AccessModel } from "./access-model.js";

export interface WhoCanQuestion {
  resource: string;
  resourceId: string;
  action: string;
  tenantId: string | undefined;
  pageSize: number | undefined;
  pageToken: string;
  /** What conditions read, as the check takes it: with it, conditional answers are evaluated (decided-ways.ts). */
  facts?: QuestionFacts | undefined;
  /** Grants counted for this question alone, as if stored (docs/contextual-grants.md). */
  contextualGrants?: readonly ContextualGrant[] | undefined;
}

export interface WhoCanAnswer {
  userIds: string[];
  /** Users allowed only where a condition holds, listed apart (API.md): in the page's id range. */
  conditional: ConditionalAnswer[];
  /** The page in id order, plain and conditional answers together. */
  page: PageEntry[];
  nextPageToken: string;
  /**
   * Every user may: an allUsers grant with no condition gives a relation
   * implying the action, on the instance or on a path to it (API.md,
   * "Everyone"). userIds still lists the users reached otherwise, so a
   * caller that enumerates users gets them; the same on every page.
   */
  allUsers: boolean;
  /**
   * When allUsers is false, the conditions under which every user may: an
   * allUsers grant with a condition, or one on a path through a row with a
   * condition (each path's conditions joined by &&); any one suffices, each
   * evaluated with the user's own facts. The same on every page.
   */
  allUsersConditions: string[];
}

/**
 * Who can (API.md: POST /api/v1/authorization/subjects): every user who may
 * perform the action on one instance, through their grants, subject sets
 * and links, or a role (application-wide, or of the tenant asked), in
 * ascending order, paged by the last id of the page (a keyset cursor, so a
 * page never repeats or skips a user who keeps access). One statement per
 * application for pages asked together, fresh like the check (see
 * store/graph-store.ts).
 */
export class WhoCan {
  private readonly coalesced: Coalescer<WhoCanInput, WhoCanRow>;
  /** The second statement, through conditional paths: asked only when the plain page's says a conditional row could lie on one. */
  private readonly throughPaths: Coalescer<WhoCanInput & ThroughPaths, ThroughPathsRow>;
  /** The candidate pages of a question with contextual grants (contextual-pages-store.ts). */
  private readonly contextual: Coalescer<ContextualWhoCanInput, ThroughPathsRow>;

  constructor(
    private readonly db: Db,
    replicas?: ReadReplicas,
    telemetry: Telemetry = NO_TELEMETRY,
    private readonly checker: Checker = new Checker(db, replicas, telemetry),
  ) {
    // A page may hold 1,000 ids: a batch of 50 pages answers 50,000 at most.
    // Fifty callers asking the same page wait for one statement (Coalescer, `key`).
    this.coalesced = exactReads(db, replicas, graphStore.whoCan, { maxBatch: 50, reads: "who can", telemetry, key: sameQuestion });
    // Read as the plain pages are: on a replica that has replayed every commit before it, or the primary.
    this.throughPaths = exactReads(db, replicas, graphStore.whoCanThroughPaths, { maxBatch: 50, reads: "who can paths", telemetry });
    this.contextual = exactReads(db, replicas, contextualPagesStore.whoCan, { maxBatch: 50, reads: "who can contextual", telemetry });
  }

  async whoCan(caller: Caller, q: WhoCanQuestion): Promise<WhoCanAnswer> {
    const v = new Violations();
    check(v, "resource", tokenProblem(q.resource));
    check(v, "resourceId", identifierProblem(q.resourceId));
    check(v, "action", tokenProblem(q.action));
    if (q.tenantId !== undefined) check(v, "tenantId", identifierProblem(q.tenantId));
    if (q.facts !== undefined) checkQuestionFacts(v, q.facts, (field) => field);
    checkContextualForm(v, q.contextualGrants, (field) => field);
    v.throwIfAny();
    const limit = pageSize(q.pageSize);
    const after = decodePageToken(q.pageToken, { userId: "string" })?.userId ?? "";
    const input: WhoCanInput = {
      appId: caller.appId,
      keyHash: caller.keyHash,
      resource: q.resource,
      resourceId: q.resourceId,
      action: q.action,
      tenantId: q.tenantId,
      after,
      limit: limit + 1,
    };
    const row = await this.coalesced.call(input);
    requireAnswerable(row, q);
    const model = row.version === null ? undefined : await this.checker.modelAt(caller.appId, row.version);
    if (hasContextual(q)) return this.whoCanWithContextual(caller, q, input, row, limit, model);
    if (model === undefined || model.version !== row.version || model.operators) return this.whoCanWithOperators(caller, q, input, row, limit);
    // Users reachable only through paths with conditional rows: the same page read again along every live row, merged with this one.
    const [paths, everyone] = await Promise.all([
      row.pathsPossible ? this.throughPaths.call({ ...input, prior: row.userIds }) : undefined,
      !row.allUsers && row.allUsersPathsPossible === true ? this.checker.everyoneWays(caller, q) : [],
    ]);
    if (paths !== undefined) requireKey(paths);
    const merged = splitPage(paths?.ids ?? row.userIds);
    const more = merged.length > limit;
    const ids = merged.slice(0, limit);
    // Candidates: how the check's own statement would answer them.
    const asked = ids
      .filter((e) => e.candidate)
      .map((e) => ({ userId: e.id, resource: q.resource, resourceId: q.resourceId, action: q.action, tenantId: q.tenantId, facts: q.facts }));
    const ways = asked.length === 0 ? [] : await this.checker.ways(caller, asked);
    const page = pageOf(ids, new Map(asked.map((a, i) => [a.userId, ways[i]!])));
    return {
      userIds: page.filter((e) => e.conditions === undefined).map((e) => e.id),
      conditional: page.flatMap((e) => (e.conditions === undefined ? [] : [{ id: e.id, conditions: e.conditions }])),
      page,
      nextPageToken: more ? encodePageToken({ userId: ids[ids.length - 1]!.id }) : "",
      allUsers: row.allUsers,
      allUsersConditions: everyone,
    };
  }

  /**
   * A page where the catalog has `requires` or `unless` (operator-pages.ts):
   * the walk's users, each asked as the batch check asks it, with the
   * question's facts. `allUsers` stays false and `allUsersConditions`
   * empty: an allUsers grant behind an `unless` gives everyone but some,
   * which no flag says; the users it reaches are not listed either, as
   * everywhere (docs/exclusion.md).
   */
  private async whoCanWithOperators(caller: Caller, q: WhoCanQuestion, input: WhoCanInput, first: WhoCanRow, limit: number): Promise<WhoCanAnswer> {
    const read: ReadIds = async (after, chunk) => {
      const row = after === input.after && chunk === input.limit ? first : await this.coalesced.call({ ...input, after, limit: chunk });
      requireAnswerable(row, q);
      const paths = row.pathsPossible ? await this.throughPaths.call({ ...input, after, limit: chunk, prior: row.userIds }) : undefined;
      if (paths !== undefined) requireKey(paths);
      const ids = splitPage(paths?.ids ?? row.userIds).map((e) => e.id);
      return { ids: ids.slice(0, chunk), full: ids.length >= chunk };
    };
    return this.allowedAnswer(caller, q, input, limit, read, { allUsers: false, allUsersConditions: [] });
  }

  /**
   * A page of a question with contextual grants (docs/contextual-grants.md):
   * the grants checked as writes against the model the first page's
   * statement read, then pages of candidates (contextual-pages-store.ts:
   * the holders of the outward walk through live rows and the grants'
   * subject sets and links, and the users the grants name on it), each asked
   * as the batch check asks it with the grants, as where the catalog has
   * `requires` or `unless`. `allUsers`: a stored allUsers path, or the
   * check of the allUsers holder with the grants and the question's facts
   * (Checker.everyoneMay: a contextual allUsers grant, or a stored one
   * reached through a contextual set or link); when neither,
   * `allUsersConditions` are the stored grants' (grants only add, so they
   * still suffice). Where the catalog has `requires` or `unless`, false and
   * none, as there.
   */
  private async whoCanWithContextual(
    caller: Caller,
    q: WhoCanQuestion,
    input: WhoCanInput,
    first: WhoCanRow,
    limit: number,
    model: AccessModel | undefined,
  ): Promise<WhoCanAnswer> {
    if (model === undefined || model.version !== first.version) throw unavailable("the application's model changed under the question; try again");
    const grants = q.contextualGrants ?? [];
    await requireContextualGrants(this.db, model, grants);
    const asked = { ...input, edges: contextEdges(grants), users: whoCanUsers(grants) };
    const read: ReadIds = async (after, chunk) => {
      const prior = after === input.after && chunk === input.limit ? first.userIds : [];
      const row = await this.contextual.call({ ...asked, after, limit: chunk, prior });
      requireKey(row);
      const ids = splitPage(row.ids).map((e) => e.id);
      return { ids: ids.slice(0, chunk), full: ids.length >= chunk };
    };
    const everyone = model.operators
      ? { allUsers: false, allUsersConditions: [] }
      : first.allUsers || (await this.checker.everyoneMay(caller, checkOf(q, ALL_USERS_ID)))
        ? { allUsers: true, allUsersConditions: [] }
        : { allUsers: false, allUsersConditions: first.allUsersPathsPossible === true ? await this.checker.everyoneWays(caller, q) : [] };
    return this.allowedAnswer(caller, q, input, limit, read, everyone);
  }

  /** The page of the allowed users among those `read` gives, each asked as the batch check asks it; nothing listed apart. */
  private async allowedAnswer(
    caller: Caller,
    q: WhoCanQuestion,
    input: WhoCanInput,
    limit: number,
    read: ReadIds,
    everyone: Pick<WhoCanAnswer, "allUsers" | "allUsersConditions">,
  ): Promise<WhoCanAnswer> {
    const page = await allowedPage(limit, input.after, read, (ids) =>
      this.checker.batch(
        caller,
        ids.map((userId) => checkOf(q, userId)),
      ),
    );
    return {
      userIds: page.ids,
      conditional: [],
      page: page.ids.map((id) => ({ id })),
      nextPageToken: page.more ? encodePageToken({ userId: page.ids[page.ids.length - 1]! }) : "",
      ...everyone,
    };
  }
}

/** A who can question asked of the check for `userId`, with its facts and contextual grants. */
const checkOf = (q: WhoCanQuestion, userId: string): CheckQuestion => ({
  userId,
  resource: q.resource,
  resourceId: q.resourceId,
  action: q.action,
  tenantId: q.tenantId,
  facts: q.facts,
  contextualGrants: q.contextualGrants,
});
