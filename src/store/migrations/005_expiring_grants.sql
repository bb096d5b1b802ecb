-- Expiring grants (docs/decisions.md). A grant with expires_at counts until the
-- database's clock passes it: every statement that reads grants for an answer
-- filters on it against now(), so every replica agrees at the same instant and
-- nothing waits for the sweep. NULL: the grant never expires.
ALTER TABLE relationships ADD COLUMN expires_at timestamptz;

-- The sweep finds each application's expired grants from here: a short range
-- per application, and only grants that have an expiry are in it.
CREATE INDEX relationships_expiry_idx ON relationships (app_id, expires_at) WHERE expires_at IS NOT NULL;
