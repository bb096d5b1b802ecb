-- The change feed's rows, made cheap to write (docs/change-feed.md):
-- a bulk write of 5,000 grants records 5,000 changes in its own statement,
-- so each change's cost counts against the write's.
--
-- A change's place in its transaction is (stmt, ord): stmt, a number the
-- recording statement takes once from change_statement_seq (in a scalar
-- subquery: on Citus the coordinator takes it once and the statement carries
-- the value), greater for each later statement of a transaction; ord, the
-- row's number within its statement. The trigger only sets xid now: a
-- counter it kept per transaction (a setting read and written for every
-- row) cost a third of the changes' time.
CREATE SEQUENCE change_statement_seq;

ALTER TABLE changes ADD COLUMN stmt bigint NOT NULL DEFAULT 0;
ALTER TABLE changes ALTER COLUMN stmt DROP DEFAULT;
ALTER TABLE changes DROP CONSTRAINT changes_pkey;
ALTER TABLE changes ADD PRIMARY KEY (app_id, xid, stmt, ord);

-- No foreign key to applications, as relationships has none: its check,
-- once for every change, cost as much as the trigger, and applications are
-- never deleted.
ALTER TABLE changes DROP CONSTRAINT changes_app_id_fkey;

-- The retention sweep walks the primary key from the oldest transaction
-- instead (store/changes-store.ts): one index less to keep for every change.
DROP INDEX changes_created_idx;

CREATE OR REPLACE FUNCTION portcullis_change_xid() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
  NEW.xid := pg_current_xact_id();
  RETURN NEW;
END
$$;
