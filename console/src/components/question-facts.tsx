/**
 * What a question tells conditions beyond its ids (docs/conditions.md, "What
 * a condition sees"): `context` and the subject's, resource's and action's
 * properties, each a JSON object typed as text. Each is read in the browser
 * first (lib/json-object.ts), so a typo is named at its field without a
 * call; the service's own 400 (its 64 KiB bound, a string it refuses) is
 * shown at the field it names too.
 */
import type { JsonObject } from "@bufbuild/protobuf";
import { readJsonObject } from "../lib/json-object";
import { FieldError } from "./error-note";

export const FACT_FIELDS = ["context", "subjectProperties", "resourceProperties", "actionProperties"] as const;
export type FactField = (typeof FACT_FIELDS)[number];
export type FactTexts = Record<FactField, string>;
export const NO_FACT_TEXTS: FactTexts = { context: "", subjectProperties: "", resourceProperties: "", actionProperties: "" };

const ABOUT: Record<FactField, { label: string; hint: string; example: string }> = {
  context: { label: "Context", hint: "Read as context: the circumstances of the question.", example: '{"ticket": "T-12"}' },
  subjectProperties: {
    label: "Subject properties",
    hint: "Read as subject.properties, laid over the properties stored for the user, key by key.",
    example: '{"department": "finance"}',
  },
  resourceProperties: { label: "Resource properties", hint: "Read as resource.properties.", example: '{"ownerID": "ann"}' },
  actionProperties: { label: "Action properties", hint: "Read as action.properties.", example: '{"amount": 120}' },
};

/** The texts as the request's objects, or each field's problem when one is not a JSON object. */
export function readFacts(texts: FactTexts): { ok: true; facts: Partial<Record<FactField, JsonObject>> } | { ok: false; problems: Map<FactField, string> } {
  const facts: Partial<Record<FactField, JsonObject>> = {};
  const problems = new Map<FactField, string>();
  for (const field of FACT_FIELDS) {
    const read = readJsonObject(texts[field]);
    if (!read.ok) problems.set(field, read.problem);
    else if (read.value !== undefined) facts[field] = read.value;
  }
  return problems.size === 0 ? { ok: true, facts } : { ok: false, problems };
}

export function QuestionFactsFields({
  texts,
  onChange,
  reasonOf,
}: {
  texts: FactTexts;
  onChange: (field: FactField, text: string) => void;
  /** The problem to show at a field: the browser's reading, else the service's 400. */
  reasonOf: (field: FactField) => string | undefined;
}) {
  return (
    <fieldset className="question-facts" aria-describedby="check-facts-hint">
      <legend>What conditions read (optional)</legend>
      <p id="check-facts-hint" className="muted ra-small">
        Each a JSON object, or empty. Only conditions read them; “Who can?” does not evaluate conditions.
      </p>
      <div className="grid-form">
        {FACT_FIELDS.map((field) => {
          const id = `check-${field}`;
          const reason = reasonOf(field);
          return (
            <div className="field" key={field}>
              <label htmlFor={id}>{ABOUT[field].label}</label>
              <textarea
                id={id}
                rows={3}
                spellCheck={false}
                autoComplete="off"
                placeholder={ABOUT[field].example}
                value={texts[field]}
                onChange={(e) => onChange(field, e.target.value)}
                aria-describedby={`${id}-hint ${id}-error`}
                aria-invalid={reason === undefined ? undefined : true}
              />
              <span id={`${id}-hint`} className="muted ra-small ra-block">
                {ABOUT[field].hint}
              </span>
              <FieldError id={`${id}-error`} reason={reason} />
            </div>
          );
        })}
      </div>
    </fieldset>
  );
}
