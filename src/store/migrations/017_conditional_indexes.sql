-- Lookup and who can list conditional answers apart (docs/conditions.md):
-- each page reads, beside the plain answers,
-- the candidates a condition could allow. These partial indexes hold only
-- the rows with a condition, so reading the candidates of a user or a role
-- with none costs one probe of an empty range, however many plain grants
-- or assignments they have. Rows with a condition are few: the indexes
-- stay small, and building them reads each table once.
CREATE INDEX relationships_conditional_user_idx ON relationships (app_id, user_id, resource, resource_id)
  WHERE condition IS NOT NULL;
CREATE INDEX role_assignments_conditional_idx ON role_assignments (app_id, role_id, user_id)
  WHERE condition IS NOT NULL;
