-- The change feed's ord from the trigger too (issue 28): a transaction's
-- changes numbered in the order they were inserted, across all its
-- statements, by a counter local to the transaction on the node that stores
-- the rows. A writer then records its changes in the statement that makes
-- them (a CTE over the write's RETURNING) without carrying a count from one
-- statement to the next.
--
-- The counter is a setting local to the transaction (set_config's third
-- argument): a rolled-back savepoint rolls it back with its rows, and it
-- is gone at commit. On Citus the trigger runs on the worker, and every
-- statement of a transaction on one application's shard goes over the same
-- connection (Citus keeps a placement's connection for the transaction once
-- it has written there), so the count goes on from statement to statement.
CREATE OR REPLACE FUNCTION portcullis_change_xid() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
  n integer := coalesce(nullif(current_setting('portcullis.change_ord', true), ''), '0')::integer;
BEGIN
  NEW.xid := pg_current_xact_id();
  NEW.ord := n;
  PERFORM set_config('portcullis.change_ord', (n + 1)::text, true);
  RETURN NEW;
END
$$;
