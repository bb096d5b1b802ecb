-- Groups and hierarchy (docs/hierarchy.md): relations that reach through
-- other instances.
--
-- What a relation's grant may name as its holder: "user", a subject set
-- "team#member", or a resource alone, "folder" (a link). Every relation
-- before this migration held users only. A constant default: adding the
-- column rewrites nothing.
ALTER TABLE catalog_relations ADD COLUMN subjects text[] NOT NULL DEFAULT '{user}';

-- A relation's inheritance rules, in the catalog's order: whoever holds
-- `inherited` on the instance this one links to by its link relation
-- `through` holds `relation` here. The reverse walk (check, who can) finds
-- rules by (resource, relation), the primary key; the forward walk (lookup)
-- by the relation inherited.
CREATE TABLE catalog_inherits (
  app_id     text NOT NULL,
  resource   text NOT NULL,
  relation   text NOT NULL,
  position   integer NOT NULL,
  through    text NOT NULL,
  inherited  text NOT NULL,
  PRIMARY KEY (app_id, resource, relation, position),
  FOREIGN KEY (app_id, resource, relation) REFERENCES catalog_relations (app_id, resource, relation) ON DELETE CASCADE
);
CREATE INDEX catalog_inherits_inherited_idx ON catalog_inherits (app_id, inherited);

-- Grants whose holder is not a user: a subject set (subject_relation set:
-- everyone holding it on subject_resource:subject_id) or a link
-- (subject_relation ''). A table of their own rather than columns on
-- relationships: the user grants' table, its keys and the direct check's
-- statement stay as they were (no rewrite of a large table, no slower
-- check), and the walks read a table that holds only the edges of the graph.
CREATE TABLE subject_relationships (
  app_id            text NOT NULL,
  resource          text NOT NULL,
  resource_id       text NOT NULL,
  relation          text NOT NULL,
  subject_resource  text NOT NULL,
  subject_id        text NOT NULL,
  subject_relation  text NOT NULL,
  created_at        timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  expires_at        timestamptz,
  PRIMARY KEY (app_id, resource, resource_id, relation, subject_resource, subject_id, subject_relation)
);
-- The forward walk (lookup: from what a user holds to what it reaches) and
-- delete by subject: the grants a subject holds, by type and relation, in
-- resource_id order, with the expiry, so a page reads the index alone.
CREATE INDEX subject_relationships_subject_idx ON subject_relationships
  (app_id, subject_resource, subject_id, subject_relation, resource, relation, resource_id) INCLUDE (expires_at);
CREATE INDEX subject_relationships_expiry_idx ON subject_relationships (app_id, expires_at) WHERE expires_at IS NOT NULL;
