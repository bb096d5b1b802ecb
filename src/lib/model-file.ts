/**
 * A model document as a file writes it (`portcullis model export`, the
 * console's download): a rule within an instance is {relation: editor}, as
 * the catalog's contract writes it, not with the empty `through` the API's
 * answer carries (both read back the same). Shared by the command line and
 * the console, so their files are the same bytes.
 */

type Json = Record<string, unknown>;

/** A relation's inherits with each empty `through` left out; anything else as it is. */
export const fileRules = (inherits: unknown): unknown =>
  Array.isArray(inherits) ? (inherits as Json[]).map(({ through, ...rest }) => (through === "" ? rest : { through, ...rest })) : inherits;

/** A relation's rule lists (inherits, requires, unless) in their file form; an empty requires or unless left out. */
export function fileRelation(r: Json): Json {
  const out: Json = { ...r };
  for (const list of ["inherits", "requires", "unless"]) {
    if (!(list in out)) continue;
    if (list !== "inherits" && Array.isArray(out[list]) && (out[list] as unknown[]).length === 0) delete out[list];
    else out[list] = fileRules(out[list]);
  }
  return out;
}

/** The document with every relation's rules in their file form (fileRules). */
export function fileForm(doc: Json): Json {
  if (!Array.isArray(doc.catalog)) return doc;
  const relations = (list: unknown) => (Array.isArray(list) ? (list as Json[]).map(fileRelation) : list);
  return { ...doc, catalog: (doc.catalog as Json[]).map((e) => ("relations" in e ? { ...e, relations: relations(e.relations) } : e)) };
}
