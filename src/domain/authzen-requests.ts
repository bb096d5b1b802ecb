/**
 * AuthZEN requests (docs/authzen.md), read into Portcullis's questions: the
 * entities a request names, the defaults an Access Evaluations item takes
 * from the top level, what is required where (a 400 naming the field in the
 * standard's own names: `subject.type`, `evaluations[2].resource.id`), and
 * the facts conditions read.
 *
 * The standard's rule that an unknown subject type, resource type or action
 * is a deny, not an error, is kept by `questionOf`: a request that names
 * something Portcullis cannot hold is answered without a question.
 */
import type { JsonObject } from "../lib/json.js";
import type { CheckQuestion } from "./check.js";
import type { Violations } from "./errors.js";
import { identifierProblem, tokenProblem } from "./formats.js";
import { QUESTION_FACTS_MAX_BYTES, type QuestionFacts } from "./question-facts.js";

/** A subject or a resource as a request gives it: "" where it leaves a part out (proto3 strings). */
export interface EntityInput {
  type: string;
  id: string;
  properties?: JsonObject | undefined;
}

/** An action as a request gives it. */
export interface ActionInput {
  name: string;
  properties?: JsonObject | undefined;
}

/** The four parts of a request or of an Access Evaluations item, each possibly absent. */
export interface RequestParts {
  subject?: EntityInput | undefined;
  action?: ActionInput | undefined;
  resource?: EntityInput | undefined;
  context?: JsonObject | undefined;
}

/** One evaluation with everything it requires. */
export interface Evaluation {
  subject: Required<EntityInput>;
  action: Required<ActionInput>;
  resource: Required<EntityInput>;
  context: JsonObject;
}

/** The only subject type: Portcullis's subjects are users. */
export const USER_TYPE = "user";

/**
 * An item's parts over the top level's (the standard's "Default values"):
 * an entity the item gives replaces the top-level one whole, except its
 * required parts (type, id; an action's name), which fall back to the
 * top-level ones when the item leaves them out (the certification's
 * c-3-2-7: top-level `resource: {type: "record"}` and an item's
 * `resource: {id: "record-1"}` make record-1 a record).
 */
export function withDefaults(top: RequestParts, item: RequestParts): RequestParts {
  const entity = (own: EntityInput | undefined, fallback: EntityInput | undefined): EntityInput | undefined =>
    own === undefined ? fallback : { type: own.type || (fallback?.type ?? ""), id: own.id || (fallback?.id ?? ""), properties: own.properties };
  return {
    subject: entity(item.subject, top.subject),
    action: item.action === undefined ? top.action : { name: item.action.name || (top.action?.name ?? ""), properties: item.action.properties },
    resource: entity(item.resource, top.resource),
    context: item.context ?? top.context,
  };
}

/** Which parts a kind of request requires: an Access Evaluation all; a search leaves the searched entity's id out. */
export interface RequiredParts {
  subjectId: boolean;
  action: boolean;
  resourceId: boolean;
}

export const EVALUATION_REQUIRES: RequiredParts = { subjectId: true, action: true, resourceId: true };

/**
 * The evaluation the parts make, or undefined with a violation for each
 * part the standard requires that is missing, named under `prefix`
 * (`evaluations[2].`). A part a search does not require is "" when absent.
 */
export function evaluationOf(parts: RequestParts, v: Violations, prefix = "", requires: RequiredParts = EVALUATION_REQUIRES): Evaluation | undefined {
  const before = v.count;
  const missing = (field: string) => v.add(`${prefix}${field}`, "is required");
  const entity = (name: "subject" | "resource", given: EntityInput | undefined, idRequired: boolean): Required<EntityInput> => {
    if (given === undefined) missing(name);
    else {
      if (given.type === "") missing(`${name}.type`);
      if (idRequired && given.id === "") missing(`${name}.id`);
    }
    return { type: given?.type ?? "", id: idRequired ? (given?.id ?? "") : "", properties: given?.properties ?? {} };
  };
  const subject = entity("subject", parts.subject, requires.subjectId);
  let action: Required<ActionInput> = { name: "", properties: {} };
  if (requires.action) {
    if (parts.action === undefined) missing("action");
    else if (parts.action.name === "") missing("action.name");
    action = { name: parts.action?.name ?? "", properties: parts.action?.properties ?? {} };
  }
  const resource = entity("resource", parts.resource, requires.resourceId);
  const context = parts.context ?? {};
  checkFacts(v, { subject, action, resource, context }, prefix);
  return v.count > before ? undefined : { subject, action, resource, context };
}

/** The evaluation's objects as conditions read them. */
export function factsOf(e: Evaluation): QuestionFacts {
  return { context: e.context, subjectProperties: e.subject.properties, resourceProperties: e.resource.properties, actionProperties: e.action.properties };
}

/**
 * The check an evaluation asks, or undefined when it names what no
 * application can hold, which the standard answers with a deny (or an empty
 * search), not a 400: a subject type other than "user", a type or action
 * name outside the catalog's format, an id no grant can carry (over 256
 * characters, control characters). A type or action of the right form that
 * the catalog lacks is found by the check itself (see authzen-answers.ts).
 */
export function questionOf(e: Evaluation): CheckQuestion | undefined {
  if (!answerable(e)) return undefined;
  return { userId: e.subject.id, resource: e.resource.type, resourceId: e.resource.id, action: e.action.name, tenantId: undefined, facts: factsOf(e) };
}

/** Whether the parts a question uses could name something of an application (the ones a search leaves out are ""). */
export function answerable(e: Evaluation): boolean {
  if (e.subject.type !== USER_TYPE || tokenProblem(e.resource.type) !== undefined) return false;
  if (e.subject.id !== "" && identifierProblem(e.subject.id) !== undefined) return false;
  if (e.resource.id !== "" && identifierProblem(e.resource.id) !== undefined) return false;
  return e.action.name === "" || tokenProblem(e.action.name) === undefined;
}

/** Where each of a question's objects is in an AuthZEN request. */
const FACT_FIELDS: [string, (e: Evaluation) => JsonObject][] = [
  ["context", (e) => e.context],
  ["subject.properties", (e) => e.subject.properties],
  ["resource.properties", (e) => e.resource.properties],
  ["action.properties", (e) => e.action.properties],
];

/**
 * The bounds the check puts on a question's objects (question-facts.ts),
 * named as AuthZEN names them: 64 KiB of JSON together (the heaviest named),
 * and finite numbers (JSON's 1e400 parses as Infinity, which no JSON can
 * carry back and I-JSON excludes; a binary Value may carry NaN).
 */
function checkFacts(v: Violations, e: Evaluation, prefix: string): void {
  let total = 0;
  let heaviest = { field: "context", bytes: 0 };
  for (const [field, of] of FACT_FIELDS) {
    const object = of(e);
    if (Object.keys(object).length === 0) continue;
    if (nonFinite(object, `${prefix}${field}`, v)) continue;
    const bytes = Buffer.byteLength(JSON.stringify(object));
    total += bytes;
    if (bytes > heaviest.bytes) heaviest = { field, bytes };
  }
  if (total > QUESTION_FACTS_MAX_BYTES) {
    v.add(
      `${prefix}${heaviest.field}`,
      `context and the subject's, resource's and action's properties weigh ${total} bytes of JSON together; at most ${QUESTION_FACTS_MAX_BYTES} (${heaviest.field}: ${heaviest.bytes})`,
    );
  }
}

/** Adds a violation for the first number in `value` that is not finite; true when there was one. Iterative: a binary Struct may nest deep. */
function nonFinite(value: unknown, path: string, v: Violations): boolean {
  const stack: { node: unknown; at: string }[] = [{ node: value, at: path }];
  while (stack.length > 0) {
    const { node, at } = stack.pop()!;
    if (typeof node === "number" && !Number.isFinite(node)) {
      v.add(at, `must be a finite number, got ${String(node)}`);
      return true;
    }
    if (Array.isArray(node)) node.forEach((item, i) => stack.push({ node: item, at: `${at}[${i}]` }));
    else if (typeof node === "object" && node !== null) for (const [key, item] of Object.entries(node)) stack.push({ node: item, at: `${at}.${key}` });
  }
  return false;
}
