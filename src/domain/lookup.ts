import { Coalescer } from "../lib/coalescer.js";
import { NO_TELEMETRY, type Telemetry } from "../lib/telemetry.js";
import type { Db } from "../store/db.js";
import { graphStore, type GraphLookupInput, type GraphLookupRow } from "../store/graph-store.js";
import type { ThroughPaths, ThroughPathsRow } from "../store/conditional-candidates.js";
import { lookupStore, type LookupInput, type LookupRow } from "../store/lookup-store.js";
import type { Queryable } from "../store/db.js";
import { AccessModels, type AccessModel } from "./access-model.js";
import type { ReadReplicas } from "../store/read-replicas.js";
import { Checker, type Caller, type Ways } from "./check.js";
import { splitPage } from "../store/conditional-candidates.js";
import { unavailable, Violations } from "./errors.js";
import { exactRead, exactReads, requireAnswerable, requireKey, sameQuestion } from "./exact-read.js";
import { check, identifierProblem, pageSize, tokenProblem } from "./formats.js";
import { decodePageToken, encodePageToken } from "./paging.js";
import { checkQuestionFacts, type QuestionFacts } from "./question-facts.js";
import { lowerReplay } from "../store/lsn.js";
import { allowedPage, type ReadIds } from "./operator-pages.js";
import { reachOf } from "./lookup-reach.js";
import { checkContextualForm, hasContextual, type ContextualGrant } from "./contextual-grants.js";
import { graphLookupOf, lookupSeeds, requireContextualGrants } from "./contextual-pages.js";
import { contextualPagesStore, type ContextualLookupInput } from "../store/contextual-pages-store.js";

export interface LookupQuestion {
  userId: string;
  resource: string;
  action: string;
  tenantId: string | undefined;
  pageSize: number | undefined;
  pageToken: string;
  /** What conditions read, as the check takes it: with it, conditional answers are evaluated (decided-ways.ts). */
  facts?: QuestionFacts | undefined;
  /** Grants counted for this question alone, as if stored (docs/contextual-grants.md). */
  contextualGrants?: readonly ContextualGrant[] | undefined;
}

export interface LookupAnswer {
  allInstances: boolean;
  /**
   * When not allInstances: the conditions under which a role gives the
   * action on every instance (any one holding suffices; none: no role does).
   */
  allInstancesConditions: string[];
  resourceIds: string[];
  /** Instances allowed only where a condition holds, listed apart (API.md): in the page's id range. */
  conditional: ConditionalAnswer[];
  /** The page in id order, plain and conditional answers together (what a search that evaluates conditions merges). */
  page: PageEntry[];
  nextPageToken: string;
}

/** An answer that holds only where one of its conditions holds (a CEL expression each). */
export interface ConditionalAnswer {
  id: string;
  conditions: string[];
}

/** An answer of a page: plain, or with the conditions under which it holds. */
export interface PageEntry {
  id: string;
  /** Absent: a plain answer. */
  conditions?: string[];
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
  private readonly coalesced: Coalescer<LookupInput, PlainPage>;
  /** The second statement, through conditional paths: asked only when the plain page's says a conditional row could lie on one. */
  private readonly throughPaths: Coalescer<GraphLookupInput & ThroughPaths, ThroughPathsRow>;
  private readonly models: AccessModels;
  /** The candidate pages of a question with contextual grants (contextual-pages-store.ts). */
  private readonly contextual: Coalescer<ContextualLookupInput, ThroughPathsRow>;

  constructor(
    private readonly db: Db,
    replicas?: ReadReplicas,
    telemetry: Telemetry = NO_TELEMETRY,
    private readonly checker: Checker = new Checker(db, replicas, telemetry),
  ) {
    this.models = new AccessModels(db, telemetry.metrics);
    this.coalesced = new Coalescer<LookupInput, PlainPage>(
      (inputs) => exactRead(db, replicas, (q, onReplica) => this.read(q, onReplica, inputs)),
      // A page may hold 1,000 ids: a batch of 50 pages answers 50,000 at most. Fifty callers
      // asking the same page wait for one statement (Coalescer, `key`).
      { ...db.reads, maxBatch: 50, reads: "lookup", telemetry, key: sameQuestion },
    );
    // Read as the plain pages are: on a replica that has replayed every commit before it, or the primary.
    this.throughPaths = exactReads(db, replicas, graphStore.lookupThroughPaths, { maxBatch: 50, reads: "lookup paths", telemetry });
    this.contextual = exactReads(db, replicas, contextualPagesStore.lookup, { maxBatch: 50, reads: "lookup contextual", telemetry });
  }

  /**
   * The pages of a batch: applications whose model has hierarchy by the
   * graph's statement (which needs the model's relations implying the
   * action and the pairs that reach them), the others by the direct one.
   * Each statement reads the model's version: when it is not the version
   * of the model the statement was chosen and built from, the batch is
   * asked again with the model of that version.
   */
  private async read(q: Queryable, onReplica: boolean, inputs: readonly LookupInput[]) {
    for (let reads = 1; ; reads++) {
      const used = new Map<string, AccessModel | undefined>(inputs.map((i) => [i.appId, this.models.latest(i.appId)]));
      const graph = inputs.flatMap((input, i) => {
        const model = used.get(input.appId);
        if (model?.hierarchical !== true) return [];
        // The relations implying the action, and those whose holders hold one of them within the instance.
        const answers = model.withinInstance(input.resource, model.relationsImplying(input.resource, input.action));
        // Where rules may take away, the page also says what reaches each id (lookup-reach.ts).
        return [{ i, input: { ...input, answers, ...model.inward(input.resource, answers), reach: model.operators } }];
      });
      const flat = inputs.flatMap((input, i) => (used.get(input.appId)?.hierarchical === true ? [] : [{ i, input }]));
      const [flatRead, graphRead] = await Promise.all([
        flat.length === 0 ? undefined : lookupStore.lookup(q, flat.map((f) => f.input), { replayed: onReplica }),
        graph.length === 0 ? undefined : graphStore.lookup(q, graph.map((g) => g.input), { replayed: onReplica }),
      ]);
      const rows = new Array<PlainPage>(inputs.length);
      flat.forEach((f, j) => (rows[f.i] = flatRead!.rows[j]!));
      graph.forEach((g, j) => (rows[g.i] = { ...graphRead!.rows[j]!, graph: g.input }));
      let stale = false;
      for (const [i, row] of rows.entries()) {
        const appId = inputs[i]!.appId;
        const model = used.get(appId);
        if (!row.keyValid || row.version === null || model?.version === row.version) continue;
        // Built from another model than the statement read: read that one, and ask again.
        stale = true;
        if (this.models.cached(appId, row.version) === undefined) await this.models.load(appId, q === this.db ? undefined : q);
      }
      if (!stale) return { value: rows, replayed: lowerReplay(flatRead?.replayed ?? null, graphRead?.replayed ?? null) };
      if (reads >= MAX_READS) throw unavailable("the access model kept changing under the lookup; try again");
    }
  }

  /**
   * The plain page `prior` merged with the instances reachable through
   * paths with conditional rows (graph-store.ts): the same question, its
   * model's edges as the plain page read them. Each instance not plain in
   * `prior` is a candidate, answered as the check would (Checker.ways).
   */
  private async withPaths(graph: GraphLookupInput, prior: string[]): Promise<string[]> {
    const row = await this.throughPaths.call({ ...graph, prior });
    requireKey(row);
    return row.ids;
  }

  async lookup(caller: Caller, q: LookupQuestion): Promise<LookupAnswer> {
    const v = new Violations();
    check(v, "userId", identifierProblem(q.userId));
    check(v, "resource", tokenProblem(q.resource));
    check(v, "action", tokenProblem(q.action));
    if (q.tenantId !== undefined) check(v, "tenantId", identifierProblem(q.tenantId));
    if (q.facts !== undefined) checkQuestionFacts(v, q.facts, (field) => field);
    checkContextualForm(v, q.contextualGrants, (field) => field);
    v.throwIfAny();
    const limit = pageSize(q.pageSize);
    const after = decodePageToken(q.pageToken, { resourceId: "string" })?.resourceId ?? "";
    const input = { appId: caller.appId, keyHash: caller.keyHash, userId: q.userId, resource: q.resource, action: q.action, tenantId: q.tenantId, after, limit: limit + 1 };
    const row = await this.coalesced.call(input);
    requireAnswerable(row, q);
    // The model the page was read by (read() leaves it cached): without it, the exact path.
    const model = row.version === null ? undefined : this.models.cached(caller.appId, row.version);
    if (hasContextual(q)) return this.lookupWithContextual(caller, q, input, row, limit, model ?? (await this.models.load(caller.appId)));
    if (model === undefined || model.operators) return this.lookupWithOperators(caller, q, input, row, limit, model);
    const merged = splitPage(row.pathsPossible && row.graph !== undefined ? await this.withPaths(row.graph, row.resourceIds) : row.resourceIds);
    const more = merged.length > limit;
    const ids = merged.slice(0, limit);
    // Candidates and the role's conditions: how the check's own statement would answer them.
    const asked = ids.filter((e) => e.candidate).map((e) => ({ ...question(q), resourceId: e.id, facts: q.facts }));
    const everyInstance = !row.allInstances && row.conditionalRole;
    // Two calls of the check, which asks them in one statement (its Coalescer gathers them).
    const [ways, roles] = await Promise.all([
      asked.length === 0 ? [] : this.checker.ways(caller, asked),
      // Not evaluated with the facts: "every instance" has no resource.id to evaluate them with.
      everyInstance ? this.checker.ways(caller, [{ ...question(q), rolesOnly: true }]).then((w) => w[0]!) : undefined,
    ]);
    const page = pageOf(ids, new Map(asked.map((a, i) => [a.resourceId, ways[i]!])));
    return {
      allInstances: row.allInstances || roles?.outright === true,
      allInstancesConditions: roles === undefined || roles.outright ? [] : roles.conditions,
      resourceIds: page.filter((e) => e.conditions === undefined).map((e) => e.id),
      conditional: page.flatMap((e) => (e.conditions === undefined ? [] : [{ id: e.id, conditions: e.conditions }])),
      page,
      nextPageToken: more ? encodePageToken({ resourceId: ids[ids.length - 1]!.id }) : "",
    };
  }

  /**
   * A page where the catalog has `requires` or `unless` (operator-pages.ts):
   * the walk's ids, each asked as the batch check asks it, with the
   * question's facts, walking from the relations that reach it where the
   * page says (lookup-reach.ts); what is allowed is listed plainly, and
   * nothing is listed apart as conditional (docs/exclusion.md). Roles
   * answer allInstances as they do everywhere: the rules do not touch them.
   */
  private async lookupWithOperators(
    caller: Caller,
    q: LookupQuestion,
    input: LookupInput,
    first: PlainPage,
    limit: number,
    model: AccessModel | undefined,
  ): Promise<LookupAnswer> {
    const read: ReadIds = async (after, chunk) => {
      const row = after === input.after && chunk === input.limit ? first : await this.coalesced.call({ ...input, after, limit: chunk });
      requireAnswerable(row, q);
      const ids = splitPage(row.pathsPossible && row.graph !== undefined ? await this.withPaths(row.graph, row.resourceIds) : row.resourceIds).map((e) => e.id);
      // How each id is reached (lookup-reach.ts), from the plain page's statement.
      const reach = model === undefined ? undefined : reachOf(model, q.resource, q.action, row);
      return { ids: ids.slice(0, chunk), full: ids.length >= chunk, reach };
    };
    return this.allowedAnswer(caller, q, input, first, limit, read);
  }

  /**
   * A page of a question with contextual grants (docs/contextual-grants.md):
   * the grants checked as writes against the model the first page's
   * statement read, then pages of candidates (contextual-pages-store.ts:
   * the stored walk through live rows, and the nodes the grants give), each
   * id asked as the batch check asks it with the grants, as where the
   * catalog has `requires` or `unless`. The first read's plain page is
   * merged in; the later reads need none, their walk covering its rows.
   */
  private async lookupWithContextual(
    caller: Caller,
    q: LookupQuestion,
    input: LookupInput,
    first: PlainPage,
    limit: number,
    model: AccessModel | undefined,
  ): Promise<LookupAnswer> {
    if (model === undefined) throw unavailable("the application's model could not be read; try again");
    const grants = q.contextualGrants ?? [];
    await requireContextualGrants(this.db, model, grants);
    const graph = { ...graphLookupOf(model, input), seeds: lookupSeeds(model, q.userId, grants) };
    const read: ReadIds = async (after, chunk) => {
      const prior = after === input.after && chunk === input.limit ? first.resourceIds : [];
      const row = await this.contextual.call({ ...graph, after, limit: chunk, prior });
      requireKey(row);
      const ids = splitPage(row.ids).map((e) => e.id);
      return { ids: ids.slice(0, chunk), full: ids.length >= chunk };
    };
    return this.allowedAnswer(caller, q, input, first, limit, read);
  }

  /** The page of the allowed ids among those `read` gives, each asked as the batch check asks it; nothing listed apart. */
  private async allowedAnswer(caller: Caller, q: LookupQuestion, input: LookupInput, first: PlainPage, limit: number, read: ReadIds): Promise<LookupAnswer> {
    const everyInstance = !first.allInstances && first.conditionalRole;
    const [page, roles] = await Promise.all([
      allowedPage(limit, input.after, read, async (ids, reach) => {
        // An id allowed as read is not asked; the others walk from the relations that reach them, where known.
        const asked = ids.filter((id) => reach?.get(id) !== true);
        const { userId, resource, action, tenantId, facts, contextualGrants } = q;
        const answers = asked.length === 0 ? [] : await this.checker.batch(
          caller,
          asked.map((resourceId) => {
            const roots = reach?.get(resourceId);
            return { userId, resource, resourceId, action, tenantId, facts, contextualGrants, roots: roots === true ? undefined : roots };
          }),
        );
        const allowed = new Map(asked.map((id, i) => [id, answers[i]!]));
        return ids.map((id) => allowed.get(id) ?? true);
      }),
      everyInstance ? this.checker.ways(caller, [{ ...question(q), rolesOnly: true }]).then((w) => w[0]!) : undefined,
    ]);
    return {
      allInstances: first.allInstances || roles?.outright === true,
      allInstancesConditions: roles === undefined || roles.outright ? [] : roles.conditions,
      resourceIds: page.ids,
      conditional: [],
      page: page.ids.map((id) => ({ id })),
      nextPageToken: page.more ? encodePageToken({ resourceId: page.ids[page.ids.length - 1]! }) : "",
    };
  }
}

/** A plain page, with the graph's question it was read by (none: the direct statement's). */
type PlainPage = GraphLookupRow & { graph?: GraphLookupInput };

/** The check's question for an instance of the lookup's (the roles' question names any instance: "-"). */
const question = (q: LookupQuestion) => ({ userId: q.userId, resource: q.resource, resourceId: "-", action: q.action, tenantId: q.tenantId });

/**
 * A merged page's entries: plain ids as they are; each candidate as the
 * check would answer it (`ways`): allowed outright (a plain answer: a
 * grant written since the page was read), with the conditions that could
 * allow it, or not at all (dropped: its grant is gone, or no longer
 * implies the action).
 */
export function pageOf(ids: readonly { id: string; candidate: boolean }[], ways: ReadonlyMap<string, Ways>): PageEntry[] {
  return ids.flatMap((e): PageEntry[] => {
    if (!e.candidate) return [{ id: e.id }];
    const way = ways.get(e.id)!;
    if (way.outright) return [{ id: e.id }];
    return way.conditions.length === 0 ? [] : [{ id: e.id, conditions: way.conditions }];
  });
}

/** Reads of a batch before it gives up on a model that keeps changing. */
const MAX_READS = 10;
