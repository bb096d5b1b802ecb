-- Intersection and exclusion (API.md, "Relations within an instance, intersection and exclusion";
-- docs/exclusion.md): a relation's `requires` and `unless` entries, in the
-- catalog's order. Whoever holds the relation by its grants and `inherits`
-- holds it only if they also hold each `requires` entry's relation and no
-- `unless` entry's, on this instance (`through` '') or on the instances
-- linked by `through`. A table of their own rather than rows of
-- catalog_inherits: the walks that follow `inherits` read that table by
-- (resource, relation) and stay as they are.
CREATE TABLE catalog_operators (
  app_id    text NOT NULL,
  resource  text NOT NULL,
  relation  text NOT NULL,
  operator  text NOT NULL CHECK (operator IN ('requires', 'unless')),
  position  integer NOT NULL,
  through   text NOT NULL,
  target    text NOT NULL,
  PRIMARY KEY (app_id, resource, relation, operator, position),
  FOREIGN KEY (app_id, resource, relation) REFERENCES catalog_relations (app_id, resource, relation) ON DELETE CASCADE
);
