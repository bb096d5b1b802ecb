-- The change feed's table (docs/change-feed.md): each
-- change an application's writes make, in the transaction that makes it,
-- read back in commit order by transaction id and snapshot
-- (store/changes-store.ts). Nothing writes to it yet: the writes' capture
-- comes with the feed's API, so that the feed never has some kinds of
-- change and not others.
--
-- xid is the top-level transaction's id, set by the trigger below on the
-- node that stores the row. Not a column default: Citus evaluates a
-- default's volatile function on the coordinator, whose ids mean nothing to
-- the worker's snapshots. Not the row's xmin: inside a savepoint that is
-- the subtransaction's id, which snapshots do not list.
CREATE TABLE changes (
  app_id      text NOT NULL REFERENCES applications ON DELETE CASCADE,
  xid         xid8 NOT NULL,
  -- The change's place among its transaction's, given by the writer.
  ord         integer NOT NULL,
  kind        text NOT NULL,
  body        jsonb NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (app_id, xid, ord)
);

-- The retention sweep's order.
CREATE INDEX changes_created_idx ON changes (app_id, created_at);

CREATE FUNCTION portcullis_change_xid() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
  NEW.xid := pg_current_xact_id();
  RETURN NEW;
END
$$;

CREATE TRIGGER changes_xid BEFORE INSERT ON changes
FOR EACH ROW EXECUTE FUNCTION portcullis_change_xid();

-- How far the retention sweep has deleted, per application: the greatest
-- transaction id among the changes it deleted. A reader whose position
-- does not see every transaction up to it may have missed a deleted change,
-- and is told to start again (the 409 of a token older than retention).
CREATE TABLE change_horizons (
  app_id     text PRIMARY KEY REFERENCES applications ON DELETE CASCADE,
  swept_xid  xid8 NOT NULL
);
