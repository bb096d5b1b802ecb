import { apiProblem } from "../lib/errors";

/** An API error, as the API said it, announced to screen readers. */
export function ErrorNote({ error, title }: { error: unknown; title?: string }) {
  if (error === null || error === undefined) return null;
  const problem = apiProblem(error);
  return (
    <div role="alert" className="error-note">
      {title !== undefined && <strong>{title}: </strong>}
      {problem.message}
    </div>
  );
}

/**
 * A field's error from the API's details, next to the field. Rendered (empty)
 * when there is none, so the field's aria-describedby always points at it.
 */
export function FieldError({ id, reason }: { id: string; reason: string | undefined }) {
  return (
    <span id={id} className="field-error">
      {reason}
    </span>
  );
}
