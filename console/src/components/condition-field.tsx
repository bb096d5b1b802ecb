/**
 * A CEL condition (docs/conditions.md) as the console edits and shows it,
 * the same wherever a grant, a role assignment or a policy takes one. The
 * field is optional (empty: no condition), and the service's 400 for a bad
 * one (CEL's message and position, in a detail naming `condition`) is shown
 * beside it, as every field error is.
 */
import { FieldError } from "./error-note";

/** The example a field shows unless told another: the rule conditions are most often written for. */
const OWNER_EXAMPLE = "resource.properties.ownerID == subject.id";

export function ConditionField({
  id,
  label,
  hint,
  example = OWNER_EXAMPLE,
  value,
  onChange,
  reason,
}: {
  id: string;
  label: string;
  /** A condition that fits the place, as the empty field's placeholder. */
  example?: string;
  /** What the condition does here, read out with the field. */
  hint?: string;
  value: string;
  onChange: (value: string) => void;
  /** The service's reason, when it refused the condition. */
  reason: string | undefined;
}) {
  const describedBy = [...(hint === undefined ? [] : [`${id}-hint`]), `${id}-error`].join(" ");
  return (
    <div className="field condition-field">
      <label htmlFor={id}>{label}</label>
      {/* A textarea: a condition runs long, and CEL's position names a line and a column. */}
      <textarea
        id={id}
        rows={2}
        spellCheck={false}
        autoComplete="off"
        placeholder={example}
        value={value}
        onChange={(e) => onChange(e.target.value)}
        aria-describedby={describedBy}
        aria-invalid={reason === undefined ? undefined : true}
      />
      {hint !== undefined && (
        <span id={`${id}-hint`} className="muted ra-small ra-block">
          {hint}
        </span>
      )}
      <FieldError id={`${id}-error`} reason={reason} />
    </div>
  );
}

/** A condition in a list or a sentence: its source as code, or "none" (the thing always counts). */
export function ConditionText({ condition }: { condition: string | undefined }) {
  return condition === undefined ? <span className="muted">none</span> : <code className="condition">{condition}</code>;
}

/**
 * The condition a form sends: its text as typed, or undefined when it is
 * empty or blank. A blank one means "none" to a person; the service would
 * refuse it as an empty condition.
 */
export const conditionInput = (text: string): string | undefined => (text.trim() === "" ? undefined : text);
