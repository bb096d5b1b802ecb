import { Coalescer } from "../lib/coalescer.js";
import type { Db, Queryable } from "../store/db.js";
import type { ReadReplicas, ReplicaRead } from "../store/read-replicas.js";
import { checkStore, type CheckInput } from "../store/check-store.js";
import { AccessModels, type AccessModel } from "./access-model.js";
import { invalidArgument, unauthenticated, Violations } from "./errors.js";
import { check, identifierProblem, LIMITS, tokenProblem } from "./formats.js";

export type CheckQuestion = Omit<CheckInput, "appId" | "keyHash">;

/** Who asks: the application key, which every check query verifies live. */
export interface Caller {
  appId: string;
  keyHash: string;
}

interface Answer {
  /** The calling key is live and belongs to the application. */
  keyValid: boolean;
  resourceKnown: boolean;
  actionKnown: boolean;
  allowed: boolean;
}

const REVOKED: Answer = { keyValid: false, resourceKnown: false, actionKnown: false, allowed: false };

/** Statements a batch may take when models change under it, before it settles for the newest model. */
const MAX_READS = 3;

/**
 * The permission check. One statement per application reads, for every
 * question of a batch, the key's validity, the user's relations on the
 * instance and roles, and the application's model version; the catalog and
 * what roles hold come from the in-memory model of that very version (read
 * again whenever the version moved). So every answer reflects every change
 * committed before the check began, on any replica of the service, at one
 * round trip per batch; checks and batch checks arriving together share one
 * statement (see Coalescer), a batch check's questions always the same one.
 * With read replicas, the statement runs on a hot standby that has replayed
 * everything committed before the batch began (see ReadReplicas).
 */
export class Checker {
  private readonly coalesced: Coalescer<CheckInput, Answer>;
  private readonly models: AccessModels;

  constructor(
    private readonly db: Db,
    private readonly replicas?: ReadReplicas,
  ) {
    this.models = new AccessModels(db);
    this.coalesced = new Coalescer((inputs) => this.answer(inputs), {
      maxBatch: LIMITS.batchChecks,
      ...db.reads,
    });
  }

  async check(caller: Caller, question: CheckQuestion): Promise<boolean> {
    const v = new Violations();
    validate(v, question, (field) => field);
    v.throwIfAny();
    const row = await this.coalesced.call({ appId: caller.appId, keyHash: caller.keyHash, ...question });
    if (!row.keyValid) throw revoked();
    known(v, question, row, (field) => field);
    v.throwIfAny();
    return row.allowed;
  }

  /** Up to 1,000 checks, answered from one statement; answers in request order. */
  async batch(caller: Caller, questions: CheckQuestion[]): Promise<boolean[]> {
    if (questions.length > LIMITS.batchChecks) {
      throw invalidArgument(`at most ${LIMITS.batchChecks} checks per call, got ${questions.length}`, [
        { field: "checks", reason: `${questions.length} checks exceed ${LIMITS.batchChecks}` },
      ]);
    }
    // An empty batch still asks the database, to verify the key.
    const at = (field: string, i: number) => `checks[${i}].${field}`;
    const v = new Violations();
    questions.forEach((q, i) => validate(v, q, (field) => at(field, i)));
    v.throwIfAny();
    const asked = questions.length === 0 ? [KEY_ONLY] : questions;
    const rows = await this.coalesced.callAll(asked.map((q) => ({ appId: caller.appId, keyHash: caller.keyHash, ...q })));
    if (!rows[0]!.keyValid) throw revoked();
    if (questions.length === 0) return [];
    rows.forEach((row, i) => known(v, questions[i]!, row, (field) => at(field, i)));
    v.throwIfAny();
    return rows.map((r) => r.allowed);
  }

  /**
   * Answers questions of any applications and keys: a statement per
   * application, plus a model read when a version moved. On a read replica
   * when there are some, else on the database.
   */
  private answer(inputs: readonly CheckInput[]): Promise<Answer[]> {
    if (this.replicas === undefined) return this.answerOn(this.db, false, inputs).then((read) => read.value);
    return this.replicas.read((q, onReplica) => this.answerOn(q, onReplica, inputs));
  }

  private async answerOn(q: Queryable, onReplica: boolean, inputs: readonly CheckInput[]): Promise<ReplicaRead<Answer[]>> {
    for (let reads = 1; ; reads++) {
      const { rows, replayed } = await checkStore.check(q, inputs, { replayed: onReplica });
      const models = new Map<string, AccessModel | undefined>();
      let moved = false;
      for (const [i, row] of rows.entries()) {
        const appId = inputs[i]!.appId;
        if (!row.keyValid || row.version === null || models.has(appId)) continue;
        // Read where the statement ran: never older than what it read.
        const model = this.models.cached(appId, row.version) ?? (await this.models.load(appId, q === this.db ? undefined : q));
        // A model newer than the statement is fresher still, but the answer
        // would mix two snapshots: read again, unless versions keep moving.
        if (model !== undefined && model.version !== row.version) moved = true;
        models.set(appId, model);
      }
      if (moved && reads < MAX_READS) continue;
      const value = rows.map((row, i): Answer => {
        const model = row.keyValid ? models.get(inputs[i]!.appId) : undefined;
        if (model === undefined) return REVOKED; // the application is gone: so are its keys
        const q = inputs[i]!;
        return {
          keyValid: true,
          resourceKnown: model.hasResource(q.resource),
          actionKnown: model.hasAction(q.resource, q.action),
          allowed: model.allows(q, row.relations, row.roles),
        };
      });
      return { value, replayed };
    }
  }
}

const revoked = () => unauthenticated("the API key is not valid: it is unknown or revoked");

/** A placeholder question, for a batch of none: the answer only says whether the key holds. */
const KEY_ONLY: CheckQuestion = { userId: "-", resource: "-", resourceId: "-", action: "-", tenantId: undefined };

function validate(v: Violations, q: CheckQuestion, at: (field: string) => string): void {
  check(v, at("userId"), identifierProblem(q.userId));
  check(v, at("resource"), tokenProblem(q.resource));
  check(v, at("resourceId"), identifierProblem(q.resourceId));
  check(v, at("action"), tokenProblem(q.action));
  if (q.tenantId !== undefined) check(v, at("tenantId"), identifierProblem(q.tenantId));
}

/** The catalog half of the answer: an unknown resource or action is a 400. */
function known(v: Violations, q: CheckQuestion, row: Answer, at: (field: string) => string): void {
  if (!row.resourceKnown) v.add(at("resource"), `"${q.resource}" is not a resource of the catalog`);
  else if (!row.actionKnown) v.add(at("action"), `"${q.action}" is not an action of resource "${q.resource}"`);
}
