import { Coalescer } from "../lib/coalescer.js";
import type { JsonObject } from "../lib/json.js";
import { NO_TELEMETRY, type Telemetry } from "../lib/telemetry.js";
import type { Db, Queryable } from "../store/db.js";
import type { ReadReplicas, ReplicaRead } from "../store/read-replicas.js";
import { CheckStatements, type CheckInput, type ConditionalRelation, type ConditionalRole } from "../store/check-store.js";
import type { GraphGroups } from "../store/graph-store.js";
import { ALL_USERS_ID } from "../store/all-users.js";
import { conditionalPathsStore, type ConditionalPath, type ConditionalPathInput } from "../store/conditional-paths-store.js";
import { exactReads } from "./exact-read.js";
import { AccessModels, type AccessModel } from "./access-model.js";
import { invalidArgument, unauthenticated, unavailable, Violations } from "./errors.js";
import { LIMITS } from "./formats.js";
import { CONDITION_LIMITS, ConditionCache, type Condition } from "./conditions.js";
import { PROCESS_CPU } from "./fair-cpu.js";
import { settleWays } from "./decided-ways.js";
import { bindingsOf, NO_FACTS, withStoredProperties, type QuestionFacts } from "./question-facts.js";
import { candidateRoots, conditionTruths, OperatorAnswers, rolesOnly, type Evaluate } from "./operator-answers.js";
import { byDecision, known, knownInstance, openFacts, quickAnswer, validateInstance, validateQuestion, type CheckQuestion, type PermissionsQuestion } from "./check-questions.js";

export type { CheckQuestion, PermissionsQuestion } from "./check-questions.js";

/** How a question would be answered without evaluating a condition (Checker.ways). */
export type Ways = { outright: true } | { outright: false; conditions: string[] };

/** Who asks: the application key, which every check query verifies live. */
export interface Caller {
  appId: string;
  keyHash: string;
}

/**
 * What one statement read for one question: the user's relations on the
 * instance and roles, with the application's model at the version the same
 * statement read. No model: the calling key is revoked (or its application
 * is gone, and with it its keys).
 */
interface Facts {
  model: AccessModel | undefined;
  relations: string[];
  /** Relations held by grants with a condition: they count where it holds. */
  conditional: ConditionalRelation[];
  roles: string[];
  /** Roles by assignments with a condition: they count where it holds. */
  conditionalRoles: ConditionalRole[];
  /** A conditional row could lie on a path to the instance: its conditional paths may allow (conditional-paths-store.ts). */
  pathsPossible: boolean;
  /** The statement's clock, a condition's `now`. */
  nowMs: number | undefined;
}

const REVOKED: Facts = { model: undefined, relations: [], conditional: [], roles: [], conditionalRoles: [], pathsPossible: false, nowMs: undefined };

/** Statements a batch may take when models change under it, before it settles for the newest model. */
const MAX_READS = 3;
/**
 * Statements a batch may take when an application's model gains or loses
 * hierarchy under it again and again (each time the other statement must
 * answer): then it fails, as a busy service, rather than answer wrong.
 */
const MAX_SHAPE_READS = 10;

/**
 * The permission check, and the permissions of a user on instances. One
 * statement per application reads, for every question of a batch, the key's
 * validity, the user's relations on the instance and roles, and the
 * application's model version; the catalog and what roles hold come from
 * the in-memory model of that very version (read again whenever the version
 * moved). So every answer reflects every change committed before the
 * question arrived, on any replica of the service, at one round trip per
 * batch; checks, permissions questions and batches arriving together share
 * one statement (see Coalescer), a batch's questions always the same one.
 * With read replicas, the statement runs on a hot standby that has replayed
 * everything committed before the batch began (see ReadReplicas).
 */
export class Checker {
  private readonly coalesced: Coalescer<CheckInput, Facts>;
  /** The second phase: questions' conditional paths, asked only when nothing else allowed and one could (Facts.pathsPossible). */
  private readonly conditionalPaths: Coalescer<ConditionalPathInput, ConditionalPath[]>;
  private readonly models: AccessModels;
  private readonly statements = new CheckStatements();
  private readonly conditions = new ConditionCache();
  /** Where the catalog has `requires` or `unless`: the relations held, decided (operator-answers.ts). */
  private readonly operatorAnswers: OperatorAnswers;

  constructor(
    private readonly db: Db,
    private readonly replicas?: ReadReplicas,
    telemetry: Telemetry = NO_TELEMETRY,
  ) {
    this.models = new AccessModels(db, telemetry.metrics);
    this.coalesced = new Coalescer((inputs) => this.answer(inputs), {
      maxBatch: LIMITS.batchChecks,
      ...db.reads,
      reads: "checks",
      telemetry,
    });
    this.conditionalPaths = exactReads(db, replicas, conditionalPathsStore.paths, { maxBatch: LIMITS.batchChecks, reads: "conditional paths", telemetry });
    this.operatorAnswers = new OperatorAnswers(db, replicas, telemetry, this.models);
  }

  /**
   * Checks a batch's questions (`check` adds what it finds to `v`), then
   * throws the 400 if any. Weighing facts and contextual grants is as dear
   * as what they carry (64 KiB of facts, 100 grants with their conditions
   * a question): then in the application's turn.
   */
  private async inTurn(caller: Caller, all: readonly (readonly [unknown, PermissionsQuestion, ...unknown[]])[], check: (v: Violations) => void): Promise<void> {
    const v = new Violations();
    if (all.some(([, q]) => q.facts !== undefined || q.contextualGrants !== undefined)) await PROCESS_CPU.run(caller.appId, () => check(v));
    else check(v);
    v.throwIfAny();
  }

  /** The application's model at `version` (the one a page's statement read); undefined when the application is gone. */
  async modelAt(appId: string, version: string): Promise<AccessModel | undefined> {
    return this.models.cached(appId, version) ?? (await this.models.load(appId));
  }

  async check(caller: Caller, question: CheckQuestion): Promise<boolean> {
    const v = new Violations();
    validateQuestion(v, question, (field) => field);
    v.throwIfAny();
    const facts = await this.coalesced.call(inputOf(caller, question));
    const model = liveModel(facts);
    known(v, model, question, facts.nowMs, (field) => field);
    v.throwIfAny();
    return this.answerOne(caller, model, question, facts);
  }

  /**
   * Whether every user may, with the question's facts and contextual grants:
   * the check of the allUsers holder (ALL_USERS_ID), whose grants are the
   * allUsers ones (stored and contextual) and who holds no role. Who can
   * asks it where contextual grants could give everyone a path
   * (docs/contextual-grants.md); its question was validated there, and
   * whatever user it names, the allUsers holder is asked.
   */
  async everyoneMay(caller: Caller, question: CheckQuestion): Promise<boolean> {
    const q = { ...question, userId: ALL_USERS_ID };
    const facts = await this.coalesced.call(inputOf(caller, q));
    return this.answerOne(caller, liveModel(facts), q, facts);
  }

  /** One question's answer from its statement's facts: by the decision, from the facts alone, or after its conditions. */
  private async answerOne(caller: Caller, model: AccessModel, q: CheckQuestion, facts: Facts): Promise<boolean> {
    if (byDecision(model, q)) return (await this.withOperators(caller, [[model, q, facts]]))[0]!;
    return syncAnswer(model, q, facts) ?? (await this.decide(caller, [[model, q, facts]], [undefined]))[0]!;
  }

  /** Up to 1,000 checks, answered from one statement; answers in request order. */
  async batch(caller: Caller, questions: CheckQuestion[]): Promise<boolean[]> {
    const all = await this.batchFacts(caller, questions, "checks", validateQuestion);
    await this.inTurn(caller, all, (v) => all.forEach(([model, q, facts], i) => known(v, model, q, facts.nowMs, (field) => `checks[${i}].${field}`)));
    if (all.some(([model, q]) => byDecision(model, q))) return this.withOperators(caller, all);
    // No promise per question unless one has a condition to evaluate.
    const answers = all.map(([model, q, facts]) => syncAnswer(model, q, facts));
    if (!answers.includes(undefined)) return answers as boolean[];
    return this.decide(caller, all, answers);
  }

  /**
   * The answers syncAnswer left open (undefined): first the conditions on
   * the instance itself and of roles (conditionalWays); then, for those
   * still denied where a conditional row could lie on a path, the
   * conditional paths, one statement for all of them, evaluated with each
   * question's own facts.
   */
  private async decide(caller: Caller, all: [AccessModel, CheckQuestion, Facts][], answers: (boolean | undefined)[]): Promise<boolean[]> {
    const asked: StoredReads = new Map();
    const decided = await Promise.all(all.map(([model, q, facts], i) => answers[i] ?? this.allows(caller, model, q, facts, asked)));
    const open = decided.flatMap((allowed, i) => (allowed || answers[i] !== undefined || !all[i]![2].pathsPossible ? [] : [i]));
    if (open.length === 0) return decided;
    const paths = await this.conditionalPaths.callAll(open.map((i) => pathInput(caller, all[i]![1], all[i]![1].action)));
    await Promise.all(
      open.map(async (i, k) => {
        const [model, q, facts] = all[i]!;
        decided[i] = await this.holdsOneOf(caller, q, q.action, facts, pathWays(model, q.resource, q.action, paths[k]!), asked);
      }),
    );
    return decided;
  }

  /** The actions the user may perform on the instance, in catalog order: one check's statement. */
  async permissions(caller: Caller, question: PermissionsQuestion): Promise<string[]> {
    const v = new Violations();
    validateInstance(v, question, (field) => field);
    v.throwIfAny();
    const facts = await this.coalesced.call(inputOf(caller, question));
    const model = liveModel(facts);
    knownInstance(v, model, question, facts.nowMs, (field) => field);
    v.throwIfAny();
    if (byDecision(model, question)) return (await this.permissionsWithOperators(caller, [[model, question, facts]]))[0]!;
    if (plain(model, facts)) return model.actionsAllowed(question, facts.relations, facts.roles);
    return (await this.permissionsWithConditions(caller, [[model, question, facts]]))[0]!;
  }

  /** Up to 1,000 permissions questions, answered from one statement, in request order. */
  async batchPermissions(caller: Caller, questions: PermissionsQuestion[]): Promise<string[][]> {
    const all = await this.batchFacts(caller, questions, "requests", validateInstance);
    await this.inTurn(caller, all, (v) => all.forEach(([model, q, facts], i) => knownInstance(v, model, q, facts.nowMs, (field) => `requests[${i}].${field}`)));
    if (all.some(([model, q]) => byDecision(model, q))) return this.permissionsWithOperators(caller, all);
    if (all.every(([model, , facts]) => plain(model, facts))) return all.map(([model, q, facts]) => model.actionsAllowed(q, facts.relations, facts.roles));
    return this.permissionsWithConditions(caller, all);
  }

  /**
   * Permissions where conditions may count: the actions allowed outright or
   * by conditions on the instance and of roles; then, for the questions
   * where an action is still denied and a conditional row could lie on a
   * path, again with their conditional paths (one statement for all).
   */
  private async permissionsWithConditions(caller: Caller, all: [AccessModel, PermissionsQuestion, Facts][]): Promise<string[][]> {
    const asked: StoredReads = new Map();
    const allowed = await Promise.all(all.map(([model, q, facts]) => this.actionsAllowed(caller, model, q, facts, asked)));
    const open = allowed.flatMap((actions, i) => {
      const [model, q, facts] = all[i]!;
      return facts.pathsPossible && actions.length < model.catalogActions(q.resource).length ? [i] : [];
    });
    if (open.length === 0) return allowed;
    const paths = await this.conditionalPaths.callAll(open.map((i) => pathInput(caller, all[i]![1], null)));
    await Promise.all(
      open.map(async (i, k) => {
        const [model, q, facts] = all[i]!;
        allowed[i] = await this.actionsAllowed(caller, model, q, facts, asked, paths[k]);
      }),
    );
    return allowed;
  }

  /** Checks where the catalog has `requires` or `unless`: roles as always, the relations held decided (operator-answers.ts). */
  private async withOperators(caller: Caller, all: [AccessModel, CheckQuestion, Facts][]): Promise<boolean[]> {
    const asked: StoredReads = new Map();
    const allowed = await Promise.all(all.map(([model, q, facts]) => model.allows(q, [], facts.roles) || this.allows(caller, model, q, rolesOnly(facts), asked)));
    const items = all.flatMap(([model, question, facts], i) => {
      if (allowed[i]) return [];
      // Entries the check's own walk decided: answered from its facts, with no second statement.
      const quick = quickAnswer(model, question, facts);
      if (quick !== undefined) {
        allowed[i] = quick;
        return [];
      }
      const roots = candidateRoots(model, question.resource, [question.action], openFacts(question, facts));
      return roots.length > 0 ? [{ i, model, question, roots, actions: [question.action], contextual: question.contextualGrants }] : [];
    });
    const byRelations = await this.operatorAnswers.allowed(caller.appId, items, this.evaluate(caller, asked));
    items.forEach(({ i }, k) => (allowed[i] = byRelations[k]!.length > 0));
    return allowed;
  }

  /** Permissions where the catalog has `requires` or `unless`: the actions roles allow, and those the relations decided imply. */
  private async permissionsWithOperators(caller: Caller, all: [AccessModel, PermissionsQuestion, Facts][]): Promise<string[][]> {
    const asked: StoredReads = new Map();
    const allowed = await Promise.all(all.map(([model, q, facts]) => this.actionsAllowed(caller, model, q, rolesOnly(facts), asked)));
    const items = all.flatMap(([model, question, facts], i) => {
      const actions = model.catalogActions(question.resource).filter((a) => !allowed[i]!.includes(a));
      const roots = candidateRoots(model, question.resource, actions, openFacts(question, facts));
      return roots.length > 0 ? [{ i, model, question, roots, actions, contextual: question.contextualGrants }] : [];
    });
    const byRelations = await this.operatorAnswers.allowed(caller.appId, items, this.evaluate(caller, asked));
    items.forEach(({ i, model, question }, k) => (allowed[i] = orderedLike(model, question, new Set([...allowed[i]!, ...byRelations[k]!]))));
    return allowed;
  }

  /** Each condition's truth for a question and action, with its facts (operator-answers.ts). */
  private evaluate<Q extends PermissionsQuestion>(caller: Caller, asked: StoredReads): Evaluate<Q> {
    return async (q, action, sources, nowMs) => {
      const compiled = sources.map((source) => this.conditions.get(source));
      return conditionTruths(caller.appId, compiled, bindingsOf(q, action, await this.factsFor(caller, q, compiled, asked), nowMs));
    };
  }

  /**
   * The answer when grants and assignments with no condition, and roles'
   * permissions held outright, did not allow (syncAnswer): the
   * conditions that could allow the action, until one way holds.
   */
  private allows(caller: Caller, model: AccessModel, q: CheckQuestion, facts: Facts, asked?: StoredReads): Promise<boolean> {
    return this.holdsOneOf(caller, q, q.action, facts, conditionalWays(model, q, facts), asked);
  }

  /** Whether one of the ways (each conditions that must all hold) holds with the question's facts, for `action`. */
  private async holdsOneOf(caller: Caller, q: PermissionsQuestion, action: string, facts: Facts, ways: string[][], asked?: StoredReads): Promise<boolean> {
    if (ways.length === 0) return false;
    const compiled = ways.map((way) => way.map((source) => this.conditions.get(source)));
    const bindings = bindingsOf(q, action, await this.factsFor(caller, q, compiled.flat(), asked), facts.nowMs ?? Date.now());
    return holdsOne(caller.appId, compiled, bindings);
  }

  /** The question's facts, with the user's stored properties when a condition to evaluate may read them. */
  private factsFor(caller: Caller, q: PermissionsQuestion, conditions: readonly Condition[], asked?: StoredReads): Promise<QuestionFacts> | QuestionFacts {
    const facts = q.facts ?? NO_FACTS;
    return conditions.some((c) => c.readsSubjectProperties) ? withStoredProperties(this.db, caller.appId, q.userId, facts, asked) : facts;
  }

  /**
   * The actions allowed: those allowed outright, and each other action of
   * the resource that a way of conditions allows, evaluated with that
   * action as `action.name`.
   */
  private async actionsAllowed(
    caller: Caller,
    model: AccessModel,
    q: PermissionsQuestion,
    facts: Facts,
    asked?: StoredReads,
    paths: readonly ConditionalPath[] = [],
  ): Promise<string[]> {
    const plainActions = model.actionsAllowed(q, facts.relations, facts.roles);
    const allowed = new Set(plainActions);
    const waysOf = model
      .catalogActions(q.resource)
      .filter((action) => !allowed.has(action))
      .map((action) => ({
        action,
        ways: [...conditionalWays(model, { ...q, action }, facts), ...pathWays(model, q.resource, action, paths)].map((way) =>
          way.map((source) => this.conditions.get(source)),
        ),
      }))
      .filter(({ ways }) => ways.length > 0);
    if (waysOf.length === 0) return plainActions;
    const questionFacts = await this.factsFor(caller, q, waysOf.flatMap(({ ways }) => ways.flat()), asked);
    const nowMs = facts.nowMs ?? Date.now();
    for (const { action, ways } of waysOf) {
      if (await holdsOne(caller.appId, ways, bindingsOf(q, action, questionFacts, nowMs))) allowed.add(action);
    }
    return allowed.size === plainActions.length ? plainActions : orderedLike(model, q, allowed);
  }

  /**
   * How each question would be answered, without evaluating a condition:
   * `outright` when what holds with no condition allows; otherwise the
   * ways conditions could allow it, each one CEL expression (a way of
   * several conditions, an assignment's and its role's policy's, or those
   * on one conditional path, joined by `&&`, which holds exactly when all
   * do). None: denied whatever the facts. What lookup and who can list as
   * conditional answers: one statement for all, as a batch check; and, for
   * the questions a conditional row could lie on a path of, one more for
   * their conditional paths, as `decide` asks it. A question with facts has
   * its ways evaluated with them: allowed outright where one holds, and
   * otherwise only the ways they leave undecided (decided-ways.ts).
   */
  async ways(caller: Caller, questions: (CheckQuestion & { rolesOnly?: boolean })[]): Promise<Ways[]> {
    const all = await this.batchFacts(caller, questions, "checks", validateQuestion);
    // Roles only: what the user's roles give on every instance, whatever the instance's grants and paths.
    const facts = all.map(([, q, read]) => (q.rolesOnly === true ? { ...read, relations: [], conditional: [], pathsPossible: false } : read));
    const outright = all.map(([model, q], i) => model.allows(q, facts[i]!.relations, facts[i]!.roles));
    const open = all.flatMap((_, i) => (!outright[i] && facts[i]!.pathsPossible ? [i] : []));
    const paths = open.length === 0 ? [] : await this.conditionalPaths.callAll(open.map((i) => pathInput(caller, all[i]![1], all[i]![1].action)));
    const pathsOf = new Map(open.map((i, k) => [i, paths[k]!]));
    const asked: StoredReads = new Map();
    return Promise.all(
      all.map(async ([model, q], i): Promise<Ways> => {
        if (outright[i]) return { outright: true };
        const ways = [...conditionalWays(model, q, facts[i]!), ...pathWays(model, q.resource, q.action, pathsOf.get(i) ?? [])];
        if (q.facts === undefined || ways.length === 0) return { outright: false, conditions: [...new Set(ways.map(oneExpression))] };
        // With facts: each way evaluated as the check would, decided or left apart (decided-ways.ts).
        const compiled = ways.map((way) => way.map((source) => this.conditions.get(source)));
        const questionFacts = await this.factsFor(caller, q, compiled.flat(), asked);
        const nowMs = facts[i]!.nowMs ?? Date.now();
        return settleWays(caller.appId, compiled, ways.map(oneExpression), (reads) => bindingsOf(q, q.action, questionFacts, nowMs, reads));
      }),
    );
  }

  /**
   * The ways every user may perform the action on the instance only under
   * conditions: the allUsers id's conditional paths (an allUsers grant's row
   * is a user's grant every user holds: all-users.ts), each as one
   * expression, through the same batches as the check's second phase. Who
   * can asks it when its statement says there could be some.
   */
  async everyoneWays(caller: Caller, q: { resource: string; resourceId: string; action: string }): Promise<string[]> {
    const paths = await this.conditionalPaths.call({ appId: caller.appId, userId: ALL_USERS_ID, resource: q.resource, resourceId: q.resourceId, action: q.action });
    return [...new Set(paths.map((p) => oneExpression(p.conditions)))];
  }

  /** The facts of each question of a batch, from one statement, once the batch is valid and the key holds. */
  private async batchFacts<Q extends PermissionsQuestion>(
    caller: Caller,
    questions: Q[],
    field: string,
    validateOne: (v: Violations, q: Q, at: (field: string) => string) => void,
  ): Promise<[AccessModel, Q, Facts][]> {
    if (questions.length > LIMITS.batchChecks) {
      throw invalidArgument(`at most ${LIMITS.batchChecks} ${field} per call, got ${questions.length}`, [
        { field, reason: `${questions.length} ${field} exceed ${LIMITS.batchChecks}` },
      ]);
    }
    const contextual = questions.reduce((n, q) => n + (q.contextualGrants?.length ?? 0), 0);
    if (contextual > LIMITS.bulkEntries) {
      throw invalidArgument(`at most ${LIMITS.bulkEntries} contextual grants per call, as a bulk write takes, got ${contextual}`, [
        { field, reason: `${contextual} contextual grants in all exceed ${LIMITS.bulkEntries}` },
      ]);
    }
    await this.inTurn(caller, questions.map((q) => [undefined, q]), (v) => questions.forEach((q, i) => validateOne(v, q, (name) => `${field}[${i}].${name}`)));
    // An empty batch still asks the database, to verify the key.
    const asked: PermissionsQuestion[] = questions.length === 0 ? [KEY_ONLY] : questions;
    const facts = await this.coalesced.callAll(asked.map((q) => inputOf(caller, q)));
    const model = liveModel(facts[0]!);
    return questions.map((q, i) => [model, q, facts[i]!]);
  }

  /**
   * Answers questions of any applications and keys: a statement per
   * application, plus a model read when a version moved. On a read replica
   * when there are some, else on the database.
   */
  private answer(inputs: readonly CheckInput[]): Promise<Facts[]> {
    if (this.replicas === undefined) return this.answerOn(this.db, false, inputs).then((read) => read.value);
    return this.replicas.read((q, onReplica) => this.answerOn(q, onReplica, inputs));
  }

  private async answerOn(q: Queryable, onReplica: boolean, inputs: readonly CheckInput[]): Promise<ReplicaRead<Facts[]>> {
    for (let reads = 1; ; reads++) {
      // Applications whose model (as this replica last read it) has
      // hierarchy are asked the graph's statement, with that model's groups;
      // the others the direct one.
      const graph = new Map<string, GraphGroups>();
      for (const { appId } of inputs) {
        const latest = this.models.latest(appId);
        if (latest?.hierarchical === true && !graph.has(appId)) graph.set(appId, latest.groups());
      }
      const { rows, replayed } = await this.statements.check(q, inputs, { replayed: onReplica, graph: (appId) => graph.get(appId) });
      const models = new Map<string, AccessModel | undefined>();
      let moved = false;
      let misshapen = false;
      for (const [i, row] of rows.entries()) {
        const appId = inputs[i]!.appId;
        if (!row.keyValid || row.version === null || models.has(appId)) continue;
        // Read where the statement ran: never older than what it read.
        const model = this.models.cached(appId, row.version) ?? (await this.models.load(appId, q === this.db ? undefined : q));
        // A model newer than the statement is fresher still, but the answer
        // would mix two snapshots: read again, unless versions keep moving.
        if (model !== undefined && model.version !== row.version) moved = true;
        // The other statement was needed (the first question of an
        // application, or its model gained or lost hierarchy), or the walk
        // met the user's side at groups the model read does not have: its
        // facts would be wrong, so ask again, now with the model just read.
        if (model !== undefined && (model.hierarchical !== graph.has(appId) || (model.hierarchical && model.groups().key !== graph.get(appId)!.key))) {
          misshapen = true;
        }
        models.set(appId, model);
      }
      if (misshapen) {
        if (reads < MAX_SHAPE_READS) continue;
        throw unavailable("the access model kept changing under the check; try again");
      }
      if (moved && reads < MAX_READS) continue;
      const value = rows.map((row, i): Facts => {
        const model = row.keyValid ? models.get(inputs[i]!.appId) : undefined;
        if (model === undefined) return REVOKED; // the application is gone: so are its keys
        return {
          model,
          relations: row.relations,
          conditional: row.conditional,
          roles: row.roles,
          conditionalRoles: row.conditionalRoles,
          pathsPossible: row.pathsPossible,
          nowMs: row.nowMs,
        };
      });
      return { value, replayed };
    }
  }
}

/** A batch's reads of stored user properties, by user: each user's asked once. */
type StoredReads = Map<string, Promise<JsonObject | undefined>>;

/**
 * Facts with nothing conditional: answered from memory alone, with no CEL.
 * So is a question of a model whose policies have conditions
 * when none of the user's roles holds anything by one.
 */
const plain = (model: AccessModel, facts: Facts) =>
  !facts.pathsPossible &&
  facts.conditional.length === 0 &&
  facts.conditionalRoles.length === 0 &&
  (!model.policyConditions || facts.roles.every((roleId) => !model.roleHasConditions(roleId)));

/**
 * The check's answer when no condition needs evaluating: true when what
 * holds outright allows, false when no condition could; otherwise undefined
 * (conditionalWays has something to evaluate).
 */
function syncAnswer(model: AccessModel, q: CheckQuestion, facts: Facts): boolean | undefined {
  if (model.allows(q, facts.relations, facts.roles)) return true;
  return plain(model, facts) ? false : undefined;
}

/**
 * The ways conditions could allow the action, each a list of conditions
 * that must all hold: a conditional grant whose relation implies it (its
 * condition); a conditional assignment whose role holds it (the
 * assignment's condition, with a policy's when the role holds it only by a
 * conditional policy); a role held outright that holds it by a conditional
 * policy (that policy's condition). Any one way suffices.
 */
function conditionalWays(model: AccessModel, q: CheckQuestion, facts: Facts): string[][] {
  const ways: string[][] = [];
  for (const c of facts.conditional) if (model.actionsOf(q.resource, c.relation).has(q.action)) ways.push([c.condition]);
  for (const r of facts.conditionalRoles) {
    if (model.roleAllows(r.roleId, q)) ways.push([r.condition]);
    for (const policy of model.roleConditions(r.roleId, q)) ways.push([r.condition, policy]);
  }
  if (model.policyConditions) {
    for (const roleId of facts.roles) for (const policy of model.roleConditions(roleId, q)) ways.push([policy]);
  }
  return ways;
}

/**
 * The ways a question's conditional paths could allow the action: each
 * path whose relation on the instance implies it, by all its conditions
 * (a membership's, a subject set's, a link's, a grant's on a node on the
 * way), each evaluated with the question's facts: `resource` is the
 * instance asked about, never a node on the way.
 */
function pathWays(model: AccessModel, resource: string, action: string, paths: readonly ConditionalPath[]): string[][] {
  return paths.filter((p) => model.actionsOf(resource, p.relation).has(action)).map((p) => p.conditions);
}

/** A way as one CEL expression: its conditions joined by `&&`, each parenthesised, when there are several. */
const oneExpression = (way: readonly string[]) => (way.length === 1 ? way[0]! : way.map((c) => `(${c})`).join(" && "));

const pathInput = (caller: Caller, q: PermissionsQuestion, action: string | null): ConditionalPathInput => ({
  appId: caller.appId,
  userId: q.userId,
  resource: q.resource,
  resourceId: q.resourceId,
  action,
});

/**
 * Whether one way's conditions all hold; each condition evaluated once at
 * most, in `appId`'s turn, and all of them within CONDITION_LIMITS.questionBudget:
 * past it the rest count as errors.
 */
async function holdsOne(appId: string, ways: readonly (readonly Condition[])[], bindings: ReturnType<typeof bindingsOf>): Promise<boolean> {
  const outcomes = new Map<Condition, boolean>();
  let left = CONDITION_LIMITS.questionBudget;
  for (const way of ways) {
    let all = true;
    for (const c of way) {
      let outcome = outcomes.get(c);
      if (outcome === undefined) {
        const [evaluated, spent] = left <= 0 ? [undefined, 0] : await PROCESS_CPU.run(appId, () => c.evaluateWithin(bindings, Math.min(left, CONDITION_LIMITS.budget)));
        left -= spent;
        outcomes.set(c, (outcome = evaluated?.holds ?? false));
      }
      if (!outcome) {
        all = false;
        break;
      }
    }
    if (all) return true;
  }
  return false;
}

const inputOf = (caller: Caller, q: PermissionsQuestion & { action?: string; roots?: readonly string[] | undefined }): CheckInput => ({
  appId: caller.appId,
  keyHash: caller.keyHash,
  userId: q.userId,
  resource: q.resource,
  resourceId: q.resourceId,
  action: q.action ?? null,
  roots: q.roots,
});

/** The model the answer is evaluated against; a 401 when the key no longer holds. */
function liveModel(facts: Facts): AccessModel {
  if (facts.model === undefined) throw revoked();
  return facts.model;
}

const revoked = () => unauthenticated("the API key is not valid: it is unknown or revoked");

/** A placeholder question, for a batch of none: the answer only says whether the key holds. */
const KEY_ONLY: PermissionsQuestion = { userId: "-", resource: "-", resourceId: "-", tenantId: undefined };

/** The allowed actions in the resource's catalog order. */
function orderedLike(model: AccessModel, q: PermissionsQuestion, allowed: ReadonlySet<string>): string[] {
  return model.catalogActions(q.resource).filter((action) => allowed.has(action));
}
