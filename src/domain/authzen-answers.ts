/**
 * The check, lookup, who can and permissions as AuthZEN asks them: a type
 * or action the catalog lacks is a deny (an empty search), where the
 * Portcullis API answers a 400 naming it.
 *
 * Those questions find that out in the same statement that reads the
 * answer (the catalog at the version the answer reads), and say so as an
 * invalid_argument whose details name `resource` or `action` (a batch:
 * `checks[3].action`). The formats having been checked before (requests'
 * `answerable`), that is the only 400 they can give, so it is read here as
 * "the catalog has no such thing" for exactly the questions it names; a
 * 400 naming anything else is not ours to reinterpret and goes on.
 */
import type { Caller, CheckQuestion, Checker } from "./check.js";
import { DomainError } from "./errors.js";

const CATALOG_FIELD = /^(?:checks\[(\d+)\]\.)?(?:resource|action)$/;

/** The questions a 400 of the catalog names (0 for a single question's), or undefined when it is any other error. */
export function catalogRefusals(error: unknown): Set<number> | undefined {
  if (!(error instanceof DomainError) || error.code !== "invalid_argument" || error.details.length === 0) return undefined;
  const refused = new Set<number>();
  for (const detail of error.details) {
    const match = CATALOG_FIELD.exec(typeof detail.field === "string" ? detail.field : "");
    if (match === null) return undefined;
    refused.add(match[1] === undefined ? 0 : Number(match[1]));
  }
  return refused;
}

/** A single question's answer, or `whenUnknown` when the catalog lacks its resource type or action. */
export async function unlessUnknown<T>(ask: Promise<T>, whenUnknown: T): Promise<T> {
  try {
    return await ask;
  } catch (error) {
    if (catalogRefusals(error) === undefined) throw error;
    return whenUnknown;
  }
}

/**
 * The batch check's answers, a question the catalog cannot answer denied.
 * The questions it refused are left out and the rest asked again; a 400
 * names a hundred at most, so a batch of many unknown names takes a few
 * statements (rare: a PEP asks about what it knows). Each round removes at
 * least one question, so it ends.
 */
export async function decide(checker: Checker, caller: Caller, questions: readonly CheckQuestion[]): Promise<boolean[]> {
  const answers = questions.map(() => false);
  let pending = questions.map((_, i) => i);
  for (;;) {
    try {
      // Even with nothing left to ask: the statement verifies the key (the AuthZEN routes leave that to it).
      const got = await checker.batch(caller, pending.map((i) => questions[i]!));
      got.forEach((allowed, j) => (answers[pending[j]!] = allowed));
      return answers;
    } catch (error) {
      const refused = catalogRefusals(error);
      const rest = refused === undefined ? pending : pending.filter((_, j) => !refused.has(j));
      if (rest.length === pending.length) throw error;
      pending = rest;
    }
  }
}

/**
 * Verifies the calling key as every question's statement does, for a
 * request answered without one (a subject that is not a user): a revoked
 * key fails there too, on its very next call.
 */
export async function verifyKey(checker: Checker, caller: Caller): Promise<void> {
  await checker.batch(caller, []);
}
