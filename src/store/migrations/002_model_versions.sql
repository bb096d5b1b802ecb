-- The version of each application's access model: its catalog and what its
-- roles hold. Every transaction that changes either takes a new value from
-- model_version_seq, so a replica that keeps the model in memory knows, from
-- the version its check statement reads, whether its copy is still exact.
-- Values come from one sequence, never reused: an application deleted and
-- created again can never meet a copy of its former model.
CREATE SEQUENCE model_version_seq;

CREATE TABLE model_versions (
  app_id   text PRIMARY KEY REFERENCES applications ON DELETE CASCADE,
  version  bigint NOT NULL DEFAULT nextval('model_version_seq')
);

INSERT INTO model_versions (app_id) SELECT app_id FROM applications;

-- The check reads a user's roles by (application, user): with role_id in
-- the index it is read from the index alone.
CREATE INDEX role_assignments_user_role_idx ON role_assignments (app_id, user_id, role_id);
DROP INDEX role_assignments_user_idx;
