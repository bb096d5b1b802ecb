/**
 * What a question may tell conditions beyond its ids (API.md, "Conditions
 * and AuthZEN"): `context`, `subjectProperties`, `resourceProperties` and
 * `actionProperties`, JSON objects of 64 KiB at most in all, checked here
 * once for every kind of question.
 */
import type { JsonObject } from "../lib/json.js";
import type { Queryable } from "../store/db.js";
import { userPropertiesStore } from "../store/user-properties-store.js";
import { ConditionBindings, type ConditionRead } from "./conditions.js";
import type { Violations } from "./errors.js";

export interface QuestionFacts {
  context: JsonObject;
  subjectProperties: JsonObject;
  resourceProperties: JsonObject;
  actionProperties: JsonObject;
}

export const NO_FACTS: QuestionFacts = { context: {}, subjectProperties: {}, resourceProperties: {}, actionProperties: {} };

/** The most a question's four objects may weigh together, as JSON text (UTF-8 bytes). */
export const QUESTION_FACTS_MAX_BYTES = 65_536;

const FIELDS = ["context", "subjectProperties", "resourceProperties", "actionProperties"] as const;

/** Adds a violation when the question's objects weigh more than the limit together, naming the heaviest. */
export function checkQuestionFacts(v: Violations, facts: QuestionFacts, at: (field: string) => string): void {
  if (WEIGHED.has(facts)) return;
  let total = 0;
  let heaviest: { field: string; bytes: number } = { field: FIELDS[0], bytes: 0 };
  for (const field of FIELDS) {
    const object = facts[field];
    if (Object.keys(object).length === 0) continue;
    const bytes = Buffer.byteLength(JSON.stringify(object));
    total += bytes;
    if (bytes > heaviest.bytes) heaviest = { field, bytes };
  }
  if (total > QUESTION_FACTS_MAX_BYTES) {
    v.add(
      at(heaviest.field),
      `context, subjectProperties, resourceProperties and actionProperties weigh ${total} bytes of JSON together; at most ${QUESTION_FACTS_MAX_BYTES} (${heaviest.field}: ${heaviest.bytes})`,
    );
  } else WEIGHED.add(facts);
}

/**
 * Facts already weighed and within the bound, by identity: a lookup or who
 * can where the catalog has requires and unless asks its one facts object
 * with each id it checks (operator-pages.ts), up to 1,000 a batch, and is
 * not made to weigh 64 KiB a thousand times.
 */
const WEIGHED = new WeakSet<QuestionFacts>();

/** A question's values as conditions see them, for the action `action`. */
export function bindingsOf(
  q: { userId: string; resource: string; resourceId: string },
  action: string,
  facts: QuestionFacts,
  nowMs: number,
  reads?: ConditionRead[],
): ConditionBindings {
  return new ConditionBindings(
    {
      subject: { id: q.userId, properties: facts.subjectProperties },
      resource: { type: q.resource, id: q.resourceId, properties: facts.resourceProperties },
      action: { name: action, properties: facts.actionProperties },
      context: facts.context,
      now: new Date(nowMs),
    },
    reads,
  );
}

/**
 * The question's facts with the user's stored properties under its
 * subjectProperties, key by key (API.md: "the stored object with the
 * question's subjectProperties laid over it"). One statement, asked only by
 * a question whose conditions may read them.
 */
export async function withStoredProperties(
  q: Queryable,
  appId: string,
  userId: string,
  facts: QuestionFacts,
  /** Reads already asked by the same call (a batch), by user: one statement per user, not per question. */
  asked?: Map<string, Promise<JsonObject | undefined>>,
): Promise<QuestionFacts> {
  let read = asked?.get(userId);
  if (read === undefined) {
    read = userPropertiesStore.get(q, appId, userId);
    asked?.set(userId, read);
  }
  const stored = await read;
  if (stored === undefined) return facts;
  return { ...facts, subjectProperties: { ...stored, ...facts.subjectProperties } };
}
