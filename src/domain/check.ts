import type { Db } from "../store/db.js";
import { checkStore, type CheckInput } from "../store/check-store.js";
import { invalidArgument, Violations } from "./errors.js";
import { check, identifierProblem, LIMITS, tokenProblem } from "./formats.js";

/** The permission check. Reads committed state only, so every answer is fresh. */
export class Checker {
  constructor(private readonly db: Db) {}

  async check(appId: string, input: CheckInput): Promise<boolean> {
    const [allowed] = await this.run(appId, [input], (field) => field);
    return allowed!;
  }

  /** Up to 1,000 checks in one round trip; answers in request order. */
  async batch(appId: string, inputs: CheckInput[]): Promise<boolean[]> {
    if (inputs.length > LIMITS.batchChecks) {
      throw invalidArgument(`at most ${LIMITS.batchChecks} checks per call, got ${inputs.length}`, [
        { field: "checks", reason: `${inputs.length} checks exceed ${LIMITS.batchChecks}` },
      ]);
    }
    if (inputs.length === 0) return [];
    return this.run(appId, inputs, (field, i) => `checks[${i}].${field}`);
  }

  private async run(appId: string, inputs: CheckInput[], at: (field: string, i: number) => string): Promise<boolean[]> {
    const v = new Violations();
    inputs.forEach((c, i) => {
      check(v, at("userId", i), identifierProblem(c.userId));
      check(v, at("resource", i), tokenProblem(c.resource));
      check(v, at("resourceId", i), identifierProblem(c.resourceId));
      check(v, at("action", i), tokenProblem(c.action));
      if (c.tenantId !== undefined) check(v, at("tenantId", i), identifierProblem(c.tenantId));
    });
    v.throwIfAny();
    const rows = await checkStore.check(this.db, appId, inputs);
    rows.forEach((row, i) => {
      const c = inputs[i]!;
      if (!row.resourceKnown) v.add(at("resource", i), `"${c.resource}" is not a resource of the catalog`);
      else if (!row.actionKnown) v.add(at("action", i), `"${c.action}" is not an action of resource "${c.resource}"`);
    });
    v.throwIfAny();
    return rows.map((r) => r.allowed);
  }
}
