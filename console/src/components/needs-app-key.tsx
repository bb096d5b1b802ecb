/**
 * The /authorization/* routes (checks and grants) act on the calling key's
 * own application, so the operator key cannot use them: say so, and how.
 */
export function NeedsAppKey({ title, what }: { title: string; what: string }) {
  return (
    <>
      <h1>{title}</h1>
      <p>
        {what} act on the calling key's own application, so they take an application key: create one on the API keys page and
        choose “Sign in with this key”.
      </p>
    </>
  );
}
