-- The graph's check function of 008, its relations held gathered for the
-- whole batch at once and joined to the questions (store/graph-store.ts,
-- graphCheckSql, whose text this stays equal to: test/sql-rules.test.ts).
-- 008 read them per question, and each question scanned the whole batch's
-- walk: 50 checks through 4 hops made a walk of 800 rows, scanned 50 times,
-- 5 of the statement's 7 ms (EXPLAIN ANALYZE, Postgres 15). The same
-- signature and the same answers, so a replica still running the code of
-- 008 calls it unchanged.
CREATE OR REPLACE FUNCTION portcullis_graph_facts(p_app text, p_keys text[], p_questions jsonb,
                                                  OUT keys json, OUT version text, OUT rows json)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
  WITH RECURSIVE
    q AS (SELECT * FROM ROWS FROM (jsonb_to_recordset(p_questions) AS (u text, r text, i text, a text))
               WITH ORDINALITY AS q(user_id, resource, resource_id, action, n)),
    walk(n, root, resource, resource_id, relation, depth) AS (
      SELECT q.n, cr.relation, q.resource, q.resource_id, cr.relation, 0
      FROM q JOIN catalog_relations cr ON cr.app_id = p_app AND cr.resource = q.resource
      WHERE q.action IS NULL OR q.action = ANY (cr.actions)
      UNION
      SELECT w.n, w.root, e.resource, e.resource_id, e.relation, w.depth + 1
      FROM walk w CROSS JOIN LATERAL (
      SELECT s.subject_resource, s.subject_id, s.subject_relation
      FROM subject_relationships s
      WHERE s.app_id = p_app AND s.resource = w.resource AND s.resource_id = w.resource_id AND s.relation = w.relation
        AND s.subject_relation <> '' AND (s.expires_at IS NULL OR s.expires_at > now())
      UNION ALL
      SELECT s.subject_resource, s.subject_id, ci.inherited
      FROM catalog_inherits ci
      JOIN subject_relationships s
        ON s.app_id = p_app AND s.resource = w.resource AND s.resource_id = w.resource_id AND s.relation = ci.through
       AND s.subject_relation = '' AND (s.expires_at IS NULL OR s.expires_at > now())
      WHERE ci.app_id = p_app AND ci.resource = w.resource AND ci.relation = w.relation) e(resource, resource_id, relation)
      WHERE w.depth < 16
    ),
    held AS (
      SELECT w.n, array_agg(DISTINCT w.root) AS roots
      FROM walk w JOIN q ON q.n = w.n
      WHERE EXISTS (SELECT 1 FROM relationships g
                    WHERE g.app_id = p_app AND g.user_id = q.user_id AND g.resource = w.resource
                      AND g.resource_id = w.resource_id AND g.relation = w.relation AND (g.expires_at IS NULL OR g.expires_at > now()))
      GROUP BY w.n
    )
    SELECT
      (SELECT json_agg(EXISTS (SELECT 1 FROM api_keys k
                                     WHERE k.secret_hash = c.key_hash AND k.app_id = p_app AND k.revoked_at IS NULL) ORDER BY c.n)
             FROM unnest(p_keys) WITH ORDINALITY AS c(key_hash, n)),
      (SELECT v.version::text FROM model_versions v WHERE v.app_id = p_app),
      (SELECT json_agg(json_build_array(
          coalesce(h.roots, '{}'),
          ARRAY(SELECT a.role_id FROM role_assignments a WHERE a.app_id = p_app AND a.user_id = q.user_id)
        ) ORDER BY q.n)
       FROM q LEFT JOIN held h ON h.n = q.n)
  INTO keys, version, rows;
END
$$;
