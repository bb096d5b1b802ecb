import type { ChangeEvent } from "react";
import { FieldError } from "./error-note";

/**
 * A labelled text input (a textarea, given `rows`) with its field error below
 * it, which its aria-describedby names whether there is an error or not;
 * `wide` spans the form's grid.
 */
export function LabelledInput({
  label,
  onChange,
  reason,
  rows,
  wide,
  ...attributes
}: {
  id: string;
  label: string;
  value: string;
  onChange: (value: string) => void;
  reason: string | undefined;
  required?: boolean;
  maxLength?: number;
  rows?: number;
  wide?: boolean;
}) {
  const field = {
    ...attributes,
    onChange: (e: ChangeEvent<HTMLInputElement | HTMLTextAreaElement>) => onChange(e.target.value),
    "aria-describedby": `${attributes.id}-error`,
  };
  return (
    <div className={wide === true ? "field wide" : "field"}>
      <label htmlFor={attributes.id}>{label}</label>
      {rows === undefined ? <input {...field} /> : <textarea {...field} rows={rows} />}
      <FieldError id={`${attributes.id}-error`} reason={reason} />
    </div>
  );
}
