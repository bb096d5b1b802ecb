-- The change feed in commit order (docs/change-feed.md, "How it works").
-- Transaction ids are taken at a transaction's first write, not at its
-- commit: two transactions writing the same grant are serialized by its
-- row lock, and the one with the greater id can commit first. So each
-- transaction that records changes takes its application's next number from
-- change_clocks as its last statement, under that row's lock, which it holds
-- to its commit: numbers follow commits. The number goes to the
-- transaction, in change_commits (one row per transaction, beside its xid),
-- not to each change: a bulk write of 5,000 grants writes one more row, not
-- 5,000 more updates.
--
-- First, so that a server of the previous version, whose writes record
-- changes without a number, can record none from now on: its recording
-- statements name change_statement_seq, and fail (42P01) instead of
-- committing changes the feed would never give. Renaming it waits for the
-- transactions that used it, so the backfill below sees all their changes.
ALTER SEQUENCE change_statement_seq RENAME TO change_stmt_seq;

-- One row per transaction that recorded changes of the application: its
-- place (seq) and its id on the node that stores the application (set by
-- the trigger below, as changes.xid is: the changes of the transaction are
-- those with this xid).
CREATE TABLE change_commits (
  app_id      text NOT NULL,
  seq         bigint NOT NULL,
  xid         xid8 NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (app_id, seq)
);
-- A transaction has one place however often it asks (ON CONFLICT DO NOTHING).
CREATE UNIQUE INDEX change_commits_xid_key ON change_commits (app_id, xid);

-- The changes recorded before: numbered in transaction id order, the order
-- they were read in. Old tokens are placed in this order when used
-- (store/legacy-change-positions.ts).
INSERT INTO change_commits (app_id, seq, xid, created_at)
SELECT app_id, row_number() OVER (PARTITION BY app_id ORDER BY xid), xid, min(created_at)
FROM changes GROUP BY app_id, xid;

-- Each application's last number given: the row whose lock orders commits.
CREATE TABLE change_clocks (
  app_id  text PRIMARY KEY,
  seq     bigint NOT NULL
);
INSERT INTO change_clocks (app_id, seq) SELECT app_id, max(seq) FROM change_commits GROUP BY app_id;

-- The retention sweep's horizon in the new order: the greatest number any
-- of whose changes it deleted. swept_xid stays, for old tokens.
ALTER TABLE change_horizons ADD COLUMN swept_seq bigint NOT NULL DEFAULT 0;

-- The trigger sets the id of a row recorded without one, as every
-- recording statement does; a row given one keeps it: Citus copies a table's
-- rows into its shards when it distributes it, and the copies keep their ids.
CREATE OR REPLACE FUNCTION portcullis_change_xid() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
  IF NEW.xid IS NULL THEN
    NEW.xid := pg_current_xact_id();
  END IF;
  RETURN NEW;
END
$$;

CREATE TRIGGER change_commits_xid BEFORE INSERT ON change_commits
FOR EACH ROW EXECUTE FUNCTION portcullis_change_xid();
