-- Portcullis schema. Every table is keyed by app_id first: applications are
-- the unit of isolation, and every query names one.
--
-- created_at columns that page cursors use keep millisecond precision, the
-- precision of a JS Date, so a cursor taken from a row compares equal to it.

CREATE TABLE applications (
  app_id      text PRIMARY KEY,
  name        text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);

-- API keys, stored only as SHA-256 hashes of the secret. app_id is NULL for
-- the operator key generated on first start.
CREATE TABLE api_keys (
  key_id      text PRIMARY KEY,
  app_id      text REFERENCES applications (app_id) ON DELETE CASCADE,
  kind        text NOT NULL CHECK (kind IN ('operator', 'application')),
  name        text NOT NULL,
  secret_hash text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  revoked_at  timestamptz,
  CONSTRAINT api_keys_secret_hash_key UNIQUE (secret_hash),
  CONSTRAINT api_keys_app_matches_kind CHECK ((kind = 'operator') = (app_id IS NULL))
);
CREATE INDEX api_keys_app_idx ON api_keys (app_id, created_at, key_id);
-- At most one live generated operator key, however many replicas start at once.
CREATE UNIQUE INDEX api_keys_one_operator_idx ON api_keys (kind) WHERE kind = 'operator' AND revoked_at IS NULL;

-- The catalog: one row per resource type, in the order the catalog lists them.
CREATE TABLE catalog_resources (
  app_id      text NOT NULL REFERENCES applications (app_id) ON DELETE CASCADE,
  resource    text NOT NULL,
  description text NOT NULL DEFAULT '',
  actions     text[] NOT NULL,
  position    integer NOT NULL,
  PRIMARY KEY (app_id, resource)
);

-- Every effective relation of every resource, built-ins included, with the
-- actions it implies resolved at write time so the check only looks them up.
CREATE TABLE catalog_relations (
  app_id      text NOT NULL,
  resource    text NOT NULL,
  relation    text NOT NULL,
  actions     text[] NOT NULL,
  built_in    boolean NOT NULL,
  position    integer NOT NULL,
  PRIMARY KEY (app_id, resource, relation),
  FOREIGN KEY (app_id, resource) REFERENCES catalog_resources (app_id, resource) ON DELETE CASCADE
);

CREATE TABLE policies (
  app_id      text NOT NULL REFERENCES applications (app_id) ON DELETE CASCADE,
  policy_id   text NOT NULL,
  name        text NOT NULL,
  description text NOT NULL DEFAULT '',
  tenant_id   text,
  created_at  timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (app_id, policy_id),
  CONSTRAINT policies_name_key UNIQUE (app_id, name)
);

CREATE TABLE policy_permissions (
  app_id      text NOT NULL,
  policy_id   text NOT NULL,
  resource    text NOT NULL,
  action      text NOT NULL,
  position    integer NOT NULL,
  PRIMARY KEY (app_id, policy_id, resource, action),
  FOREIGN KEY (app_id, policy_id) REFERENCES policies (app_id, policy_id) ON DELETE CASCADE
);
-- The catalog's orphan rule asks which policies hold a permission.
CREATE INDEX policy_permissions_permission_idx ON policy_permissions (app_id, resource, action);

CREATE TABLE roles (
  app_id      text NOT NULL REFERENCES applications (app_id) ON DELETE CASCADE,
  role_id     text NOT NULL,
  name        text NOT NULL,
  description text NOT NULL DEFAULT '',
  tenant_id   text,
  created_at  timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (app_id, role_id)
);
-- Role names are unique within their scope: the application-wide roles, or one tenant's.
CREATE UNIQUE INDEX roles_name_key ON roles (app_id, COALESCE(tenant_id, ''), name);

CREATE TABLE role_policies (
  app_id      text NOT NULL,
  role_id     text NOT NULL,
  policy_id   text NOT NULL,
  position    integer NOT NULL,
  PRIMARY KEY (app_id, role_id, policy_id),
  FOREIGN KEY (app_id, role_id) REFERENCES roles (app_id, role_id) ON DELETE CASCADE,
  FOREIGN KEY (app_id, policy_id) REFERENCES policies (app_id, policy_id)
);
CREATE INDEX role_policies_policy_idx ON role_policies (app_id, policy_id);

-- Every permission each role holds through its policies, with the role's
-- tenant: derived from role_policies and policy_permissions, kept in step by
-- the same transactions that change those (see role-permissions-store.ts),
-- so the check probes one primary key per assigned role instead of joining
-- roles, role_policies and policy_permissions on every call.
CREATE TABLE role_permissions (
  app_id      text NOT NULL,
  role_id     text NOT NULL,
  resource    text NOT NULL,
  action      text NOT NULL,
  tenant_id   text,
  PRIMARY KEY (app_id, role_id, resource, action),
  FOREIGN KEY (app_id, role_id) REFERENCES roles (app_id, role_id) ON DELETE CASCADE
);

CREATE TABLE role_assignments (
  app_id      text NOT NULL,
  role_id     text NOT NULL,
  user_id     text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  PRIMARY KEY (app_id, role_id, user_id),
  FOREIGN KEY (app_id, role_id) REFERENCES roles (app_id, role_id) ON DELETE CASCADE
);
CREATE INDEX role_assignments_user_idx ON role_assignments (app_id, user_id);

-- Direct grants. The primary key serves "who has a relation on this
-- instance" and the catalog's orphan rule (by resource, then relation); the
-- second index serves the check and "what does this user have".
-- No foreign key to applications: its per-row check cost a third of a 5,000
-- grant bulk write. Every writer locks the application row first
-- (lockApplication), and applications are never deleted.
CREATE TABLE relationships (
  app_id      text NOT NULL,
  resource    text NOT NULL,
  resource_id text NOT NULL,
  relation    text NOT NULL,
  user_id     text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  PRIMARY KEY (app_id, resource, resource_id, relation, user_id)
);
CREATE INDEX relationships_user_idx ON relationships (app_id, user_id, resource, resource_id, relation);

CREATE TABLE audit_events (
  app_id        text NOT NULL REFERENCES applications (app_id) ON DELETE CASCADE,
  seq           bigint GENERATED ALWAYS AS IDENTITY,
  event_id      text NOT NULL,
  type          text NOT NULL,
  occurred_at   timestamptz NOT NULL DEFAULT now(),
  actor_key_id  text NOT NULL,
  target_type   text NOT NULL,
  target_id     text NOT NULL,
  data          jsonb NOT NULL DEFAULT '{}'::jsonb,
  PRIMARY KEY (app_id, seq),
  CONSTRAINT audit_events_event_id_key UNIQUE (event_id)
);
CREATE INDEX audit_events_target_idx ON audit_events (app_id, target_id, seq);
CREATE INDEX audit_events_type_idx ON audit_events (app_id, type, seq);
