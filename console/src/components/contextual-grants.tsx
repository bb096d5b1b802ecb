/**
 * A question's contextual grants (docs/contextual-grants.md): grants counted
 * for this question alone, never stored, typed as a JSON array of grants in
 * the bulk write's shape. The browser reads the text first (each grant
 * through the generated schema, fromJson), so a typo is named at the field
 * without a call; the service's own 400 (a relation the catalog lacks, an
 * expiry already past) is shown there too, naming the grant.
 */
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { RelationshipTupleSchema, type RelationshipTuple } from "../../../gen/authz/v1/relationships_pb.js";
import { readJson } from "../lib/json-object";
import { FieldError } from "./error-note";

const EXAMPLE = '[{"userId": "dee", "resource": "team", "resourceId": "eng", "relation": "member"}]';

export type ContextualText = { ok: true; grants: RelationshipTuple[] } | { ok: false; problem: string };

/** The text as grants; none when it is blank. */
export function readContextualGrants(text: string): ContextualText {
  if (text.trim() === "") return { ok: true, grants: [] };
  const read = readJson(text);
  if (!read.ok) return read;
  const value = read.value;
  if (!Array.isArray(value)) return { ok: false, problem: "a JSON array of grants is needed ([{…}, …])" };
  const grants: RelationshipTuple[] = [];
  for (const [i, grant] of value.entries()) {
    if (typeof grant !== "object" || grant === null || Array.isArray(grant)) return { ok: false, problem: `grant ${i + 1}: a JSON object is needed` };
    try {
      grants.push(fromJson(RelationshipTupleSchema, grant as JsonValue));
    } catch (error) {
      return { ok: false, problem: `grant ${i + 1}: ${error instanceof Error ? error.message : String(error)}` };
    }
  }
  return { ok: true, grants };
}

export function ContextualGrantsField({ text, onChange, reason }: { text: string; onChange: (text: string) => void; reason: string | undefined }) {
  return (
    <div className="field contextual-grants">
      <label htmlFor="check-contextualGrants">Contextual grants (optional)</label>
      <textarea
        id="check-contextualGrants"
        rows={3}
        spellCheck={false}
        autoComplete="off"
        placeholder={EXAMPLE}
        value={text}
        onChange={(e) => onChange(e.target.value)}
        aria-describedby="check-contextualGrants-hint check-contextualGrants-error"
        aria-invalid={reason === undefined ? undefined : true}
      />
      <span id="check-contextualGrants-hint" className="muted ra-small ra-block">
        A JSON array of grants, as a bulk write takes them: counted for this question and “Who can?” alone, never stored.
      </span>
      <FieldError id="check-contextualGrants-error" reason={reason} />
    </div>
  );
}
