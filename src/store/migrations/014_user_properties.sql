-- Stored user properties (docs/api.md): the JSON object a
-- condition reads as subject.properties, one row per user that has any. A
-- user without a row has {}: writing {} deletes the row rather than
-- keeping an empty one, so a row always means properties to read.
--
-- Keyed by app_id first and referencing applications, as every table is;
-- on Citus it is distributed by app_id with the others (distribute.ts).
-- The object's size and depth are bounded by the service before it is
-- written (domain/user-properties.ts); the CHECK keeps anything but an
-- object out whatever writes it.
CREATE TABLE user_properties (
  app_id      text NOT NULL REFERENCES applications (app_id) ON DELETE CASCADE,
  user_id     text NOT NULL,
  properties  jsonb NOT NULL CHECK (jsonb_typeof(properties) = 'object'),
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (app_id, user_id)
);
