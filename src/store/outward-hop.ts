/**
 * The outward walks' one step (check, explain, who can, the conditional
 * paths), shared by their statements (graph-store.ts has how they walk).
 */

/** Subject sets and links followed at most, from the instance (API.md). */
export const MAX_HOPS = 16;

/**
 * One step outward from the walk's row `w`: the subject sets granted the
 * relation on w's instance, and, for each rule of w's relation through a
 * link, the instances w's instance links to, with the relation inherited
 * (each one hop, taken below the bound only); and, for each rule with no
 * link (`through` ''), the same instance with the relation inherited (no
 * hop: API.md, "Relations within an instance"). The catalog refuses a
 * relation that depends on itself by such rules alone, so they add a
 * finite number of rows at each depth. Each row says its `hops` (1 or 0)
 * after its (resource, id, relation). `grants` says which rows are edges
 * (the check's walk: PLAIN_GRANT, those with no condition; explain's and
 * the conditional paths': LIVE_GRANT), `carried` what each edge adds after
 * its hops (a column list starting with a comma, of the row `s`), and
 * `none` what a step within the instance, which follows no grant, carries
 * instead. Without `within` the steps within an instance are left out: the
 * check's statement for a catalog that has no such rule (AccessModel's
 * `within`), one index probe less a node.
 */
export const outwardHop = (grants: (s: string) => string, carried = "", none = "", within = true) => `
    SELECT s.subject_resource, s.subject_id, s.subject_relation, 1${carried}
    FROM subject_relationships s
    WHERE s.app_id = $1 AND s.resource = w.resource AND s.resource_id = w.resource_id AND s.relation = w.relation
      AND s.subject_relation <> '' AND ${grants("s")} AND w.depth < ${MAX_HOPS}
    UNION ALL
    SELECT s.subject_resource, s.subject_id, ci.inherited, 1${carried}
    FROM catalog_inherits ci
    JOIN subject_relationships s
      ON s.app_id = $1 AND s.resource = w.resource AND s.resource_id = w.resource_id AND s.relation = ci.through
     AND s.subject_relation = '' AND ${grants("s")}
    WHERE ci.app_id = $1 AND ci.resource = w.resource AND ci.relation = w.relation AND ci.through <> '' AND w.depth < ${MAX_HOPS}${
      within
        ? `
    UNION ALL
    SELECT w.resource, w.resource_id, ci.inherited, 0${none}
    FROM catalog_inherits ci
    WHERE ci.app_id = $1 AND ci.resource = w.resource AND ci.relation = w.relation AND ci.through = ''`
        : ""
    }`;

/**
 * One step from the walk's row `w` into each `requires` and `unless` entry
 * of w's relation (docs/exclusion.md): the same instance with the entry's
 * relation, or each instance w's instance links to by the entry's
 * `through` (a live link), with it. Each row starts its own bound (its
 * depth is 0), and ends with the entry's operator ("requires" or
 * "unless"). `grants`, `carried` and `none` as outwardHop's: which links
 * are followed, what a step through one carries of its row `s`, and what a
 * step within the instance carries instead.
 */
export const operatorHop = (grants: (s: string) => string, carried = "", none = "") => `
    SELECT w.resource, w.resource_id, o.target, 0${none}, o.operator
    FROM catalog_operators o
    WHERE o.app_id = $1 AND o.resource = w.resource AND o.relation = w.relation AND o.through = ''
    UNION ALL
    SELECT s.subject_resource, s.subject_id, o.target, 0${carried}, o.operator
    FROM catalog_operators o
    JOIN subject_relationships s
      ON s.app_id = $1 AND s.resource = w.resource AND s.resource_id = w.resource_id AND s.relation = o.through
     AND s.subject_relation = '' AND ${grants("s")}
    WHERE o.app_id = $1 AND o.resource = w.resource AND o.relation = w.relation AND o.through <> ''`;

/**
 * outwardHop's two steps through a question's contextual grants instead of
 * stored rows (`ctx`: r, i, l, sr, si, sl, the grant r:i#l held by
 * sr:si#sl; docs/contextual-grants.md), each led by UNION ALL: a subject
 * set one hop on, and a link by a rule of w's relation one hop on, below
 * the bound. `carried` as outwardHop's, of the row `c`; `on` a further
 * condition on `c` (who can's: the question's own).
 */
export const contextHop = (carried = "", on = "") => `
    UNION ALL
    SELECT c.sr, c.si, c.sl, 1${carried}
    FROM ctx c WHERE c.r = w.resource AND c.i = w.resource_id AND c.l = w.relation AND c.sl <> ''${on} AND w.depth < ${MAX_HOPS}
    UNION ALL
    SELECT c.sr, c.si, ci.inherited, 1${carried}
    FROM catalog_inherits ci JOIN ctx c ON c.r = w.resource AND c.i = w.resource_id AND c.l = ci.through AND c.sl = ''
    WHERE ci.app_id = $1 AND ci.resource = w.resource AND ci.relation = w.relation AND ci.through <> ''${on} AND w.depth < ${MAX_HOPS}`;

/** operatorHop's step through a contextual link (`ctx`, as contextHop's) into a `requires` or `unless` entry, at depth 0, led by UNION ALL. */
export const contextOperatorHop = (carried = "") => `
    UNION ALL
    SELECT c.sr, c.si, o.target, 0${carried}, o.operator
    FROM catalog_operators o JOIN ctx c ON c.r = w.resource AND c.i = w.resource_id AND c.l = o.through AND c.sl = ''
    WHERE o.app_id = $1 AND o.resource = w.resource AND o.relation = w.relation AND o.through <> ''`;
