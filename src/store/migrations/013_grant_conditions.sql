-- Conditions on grants (docs/conditions.md;
-- src/domain/conditions.ts): a grant may carry a CEL expression that must
-- hold for the grant to count. Stored as its source; compiled and checked
-- when written, evaluated by the service.
--
-- A column with no default: adding it rewrites nothing, whatever the size
-- of relationships.
ALTER TABLE relationships ADD COLUMN condition text;
ALTER TABLE subject_relationships ADD COLUMN condition text;
-- And on role assignments: the role counts for the user where it holds.
ALTER TABLE role_assignments ADD COLUMN condition text;

