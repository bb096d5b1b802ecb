/**
 * The grants page's shared fields: a select of names and a text input, each
 * with its field error beside it, radio choices, and the error of a call that
 * no field shows; and the relation names the catalog gives a resource.
 */
import type { CatalogResource } from "../../../../gen/authz/v1/catalog_pb.js";
import { ErrorNote, FieldError } from "../../components/error-note";
import type { ApiProblem } from "../../lib/errors";

export const relationsOf = (resources: CatalogResource[], resource: string): string[] =>
  resources.find((r) => r.resource === resource)?.relations.map((r) => r.name) ?? [];

/** Every relation any resource has (for a relation chosen without a resource). */
export const allRelations = (resources: CatalogResource[]): string[] => [...new Set(resources.flatMap((r) => r.relations.map((x) => x.name)))].sort();

/** Props tying an input to its field error, only when there is one. */
export const errorProps = (id: string, reason: string | undefined) =>
  reason === undefined ? {} : { "aria-describedby": `${id}-error`, "aria-invalid": true as const };

/** A select of names (resources or relations), with a first "any"/"choose" option. */
export function ChoiceField({
  id,
  label,
  value,
  onChange,
  options,
  reason,
  required,
  anyLabel,
}: {
  id: string;
  label: string;
  value: string;
  onChange: (value: string) => void;
  options: string[];
  reason: string | undefined;
  required: boolean;
  anyLabel: string;
}) {
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      <select id={id} value={value} onChange={(e) => onChange(e.target.value)} required={required} {...errorProps(id, reason)}>
        <option value="">{anyLabel}</option>
        {options.map((o) => (
          <option key={o} value={o}>
            {o}
          </option>
        ))}
      </select>
      <FieldError id={`${id}-error`} reason={reason} />
    </div>
  );
}

export function TextField({
  id,
  label,
  value,
  onChange,
  reason,
  required,
}: {
  id: string;
  label: string;
  value: string;
  onChange: (value: string) => void;
  reason: string | undefined;
  required: boolean;
}) {
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      <input id={id} value={value} onChange={(e) => onChange(e.target.value)} required={required} autoComplete="off" {...errorProps(id, reason)} />
      <FieldError id={`${id}-error`} reason={reason} />
    </div>
  );
}

/** Radio buttons, one a choice, named `name`; each one's id is the name and its value. */
export function RadioChoices<T extends string>({
  name,
  choices,
  value,
  onChange,
}: {
  name: string;
  choices: readonly { value: T; label: string }[];
  value: T;
  onChange: (value: T) => void;
}) {
  return choices.map((c) => (
    <label key={c.value} className="check" htmlFor={`${name}-${c.value}`}>
      <input type="radio" id={`${name}-${c.value}`} name={name} checked={value === c.value} onChange={() => onChange(c.value)} />
      {c.label}
    </label>
  ));
}

/** The error of a call: next to its fields when the details name them, else as a note. */
export function OtherError({ error, problem, fields }: { error: unknown; problem: ApiProblem | undefined; fields: readonly string[] }) {
  if (problem === undefined) return null;
  if ([...problem.fields.keys()].some((f) => fields.includes(f))) return null;
  return <ErrorNote error={error} />;
}
