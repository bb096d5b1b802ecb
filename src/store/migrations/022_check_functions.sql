-- The check's functions, each planned once per connection, are made by
-- migrate() from the statements' own text and named by a hash of it
-- (src/store/check-functions.ts). This table records them: a generation is
-- the set of functions one build calls, first created at the earliest
-- created_at of its rows. migrate() keeps this build's generation and the
-- newest before it (the two builds of a rolling upgrade) and drops the
-- functions only older generations name. Local to the coordinator on Citus,
-- as schema_migrations is.
CREATE TABLE check_functions (
  generation text NOT NULL,
  name       text NOT NULL,
  kind       text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (generation, name)
);

-- The fixed-name functions of migrations 006 to 019: the builds calling
-- them are from before 020, and migrate() refuses them at their next start;
-- while they run, a missing function sends them their inline statement.
DROP FUNCTION IF EXISTS portcullis_check_facts(text, text[], jsonb);
DROP FUNCTION IF EXISTS portcullis_graph_facts(text, text[], jsonb);
DROP FUNCTION IF EXISTS portcullis_graph_check(text, text[], jsonb, jsonb, jsonb);

-- The functions of migration 020, which the builds of 020 and 021 call,
-- where an older build made them: the generation before this build's first,
-- dropped once two newer generations are recorded.
INSERT INTO check_functions (generation, name, kind)
SELECT 'v2', f.name, f.kind
FROM (VALUES ('portcullis_check_facts_v2', 'check'), ('portcullis_graph_check_v2', 'graph check')) AS f(name, kind)
WHERE to_regproc(f.name) IS NOT NULL;
