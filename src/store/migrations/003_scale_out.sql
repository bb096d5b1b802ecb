-- Scale-out (docs/scale-out.md). On Citus every unique constraint of a
-- distributed table must include its distribution column, app_id. Event ids
-- are random and never looked up alone, so unique within an application is
-- as strong as it needs to be.
ALTER TABLE audit_events DROP CONSTRAINT audit_events_event_id_key;
ALTER TABLE audit_events ADD CONSTRAINT audit_events_event_id_key UNIQUE (app_id, event_id);
