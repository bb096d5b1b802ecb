import { Coalescer } from "../lib/coalescer.js";
import type { Db } from "../store/db.js";
import { checkStore, type CheckInput, type CheckRow } from "../store/check-store.js";
import { invalidArgument, unauthenticated, Violations } from "./errors.js";
import { check, identifierProblem, LIMITS, tokenProblem } from "./formats.js";

export type CheckQuestion = Omit<CheckInput, "appId" | "keyHash">;

/** Who asks: the application key, which every check query verifies live. */
export interface Caller {
  appId: string;
  keyHash: string;
}

/**
 * The permission check. Reads committed state only, so every answer is
 * fresh; single checks arriving together share one query (see Coalescer).
 */
export class Checker {
  private readonly single: Coalescer<CheckInput, CheckRow>;

  constructor(private readonly db: Db) {
    this.single = new Coalescer((inputs) => checkStore.check(db, inputs), {
      maxBatch: LIMITS.batchChecks,
      concurrency: db.concurrency,
    });
  }

  async check(caller: Caller, question: CheckQuestion): Promise<boolean> {
    const v = new Violations();
    validate(v, question, (field) => field);
    v.throwIfAny();
    const row = await this.single.call({ appId: caller.appId, keyHash: caller.keyHash, ...question });
    if (!row.keyValid) throw revoked();
    known(v, question, row, (field) => field);
    v.throwIfAny();
    return row.allowed;
  }

  /** Up to 1,000 checks in one round trip; answers in request order. */
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
    const rows = await checkStore.check(this.db, asked.map((q) => ({ appId: caller.appId, keyHash: caller.keyHash, ...q })));
    if (!rows[0]!.keyValid) throw revoked();
    if (questions.length === 0) return [];
    rows.forEach((row, i) => known(v, questions[i]!, row, (field) => at(field, i)));
    v.throwIfAny();
    return rows.map((r) => r.allowed);
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
function known(v: Violations, q: CheckQuestion, row: CheckRow, at: (field: string) => string): void {
  if (!row.resourceKnown) v.add(at("resource"), `"${q.resource}" is not a resource of the catalog`);
  else if (!row.actionKnown) v.add(at("action"), `"${q.action}" is not an action of resource "${q.resource}"`);
}
