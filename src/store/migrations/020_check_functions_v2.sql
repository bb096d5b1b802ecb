-- The check's functions, as new functions (portcullis_check_facts_v2,
-- portcullis_graph_check_v2): their rows changed shape, and a build from
-- before this migration still calls the old ones, unchanged, while a rolling
-- upgrade runs (and a build from after it sends its inline statement to a
-- standby that has not replayed this yet: check-store.ts). Two changes:
--
-- * They read a user's grants of the instance (and the graph's: its
--   conditional grants there, its grants on the walk's nodes, its
--   conditional grants anywhere for the second phase's flag) as two
--   branches, the user's id and the allUsers id ('') each probed by
--   equality (all-users.ts, EACH_HOLDER), the allUsers branch only where
--   the application has an allUsers grant (one probe a statement). Written
--   `user_id IN (user, '')` (migration 016), the generic plan read every
--   grant of the instance by the primary key and filtered the user: on an
--   instance shared with 4,000 users, 4,000 rows a check
--   (test/index-reads.test.ts; on the bench's data, 20,000 grants on one
--   document made one check's statement 4.2 ms).
-- * The statement's clock (a condition's `now`) is a column of its own,
--   read once, not a value in each question's row (about 0.5 µs of
--   Postgres's time a question).
--
-- The queries stay equal to check-store.ts's checkSql and graph-store.ts's
-- graphCheckSql (test/sql-rules.test.ts).
CREATE OR REPLACE FUNCTION portcullis_check_facts_v2(p_app text, p_keys text[], p_questions jsonb,
                                                     OUT keys json, OUT version text, OUT now_ms float8, OUT rows json)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
  SELECT
    (SELECT json_agg(EXISTS (SELECT 1 FROM api_keys k
                                   WHERE k.secret_hash = c.key_hash AND k.app_id = p_app AND k.revoked_at IS NULL) ORDER BY c.n)
           FROM unnest(p_keys) WITH ORDINALITY AS c(key_hash, n)),
    (SELECT v.version::text FROM model_versions v WHERE v.app_id = p_app),
    (extract(epoch FROM now()) * 1000)::float8,
    (SELECT json_agg(json_build_array(
        ARRAY(SELECT g.relation || coalesce(chr(10) || g.condition, '') FROM relationships g
              WHERE g.app_id = p_app AND g.user_id = q.user_id AND g.resource = q.resource AND g.resource_id = q.resource_id
                AND (g.expires_at IS NULL OR g.expires_at > now())
 UNION ALL SELECT g.relation || coalesce(chr(10) || g.condition, '') FROM relationships g
              WHERE g.app_id = p_app AND g.user_id = '' AND g.resource = q.resource AND g.resource_id = q.resource_id
                AND (g.expires_at IS NULL OR g.expires_at > now()) AND EXISTS (SELECT 1 FROM relationships e WHERE e.app_id = p_app AND e.user_id = '')),
        ARRAY(SELECT a.role_id || coalesce(chr(10) || a.condition, '') FROM role_assignments a
              WHERE a.app_id = p_app AND a.user_id = q.user_id)
      ) ORDER BY q.n)
     FROM ROWS FROM (jsonb_to_recordset(p_questions) AS (u text, r text, i text))
          WITH ORDINALITY AS q(user_id, resource, resource_id, n))
  INTO keys, version, now_ms, rows;
END
$$;

CREATE OR REPLACE FUNCTION portcullis_graph_check_v2(p_app text, p_keys text[], p_questions jsonb, p_groups jsonb, p_steps jsonb,
                                                     OUT keys json, OUT version text, OUT now_ms float8, OUT rows json)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
  WITH RECURSIVE
  q AS (SELECT * FROM ROWS FROM (jsonb_to_recordset(p_questions) AS (u text, r text, i text, a text))
             WITH ORDINALITY AS q(user_id, resource, resource_id, action, n)),
  gp AS (SELECT * FROM jsonb_to_recordset(p_groups) AS gp(r text, l text)),
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
      AND s.subject_relation <> '' AND ((s.expires_at IS NULL OR s.expires_at > now()) AND s.condition IS NULL)
    UNION ALL
    SELECT s.subject_resource, s.subject_id, ci.inherited
    FROM catalog_inherits ci
    JOIN subject_relationships s
      ON s.app_id = p_app AND s.resource = w.resource AND s.resource_id = w.resource_id AND s.relation = ci.through
     AND s.subject_relation = '' AND ((s.expires_at IS NULL OR s.expires_at > now()) AND s.condition IS NULL)
    WHERE ci.app_id = p_app AND ci.resource = w.resource AND ci.relation = w.relation) e(resource, resource_id, relation)
    WHERE w.depth < 16 AND NOT EXISTS (SELECT 1 FROM gp WHERE gp.r = w.resource AND gp.l = w.relation)
  ),
  met AS (
    SELECT w.n, w.root, w.resource, w.resource_id, w.relation, min(w.depth) AS depth
    FROM walk w JOIN gp ON gp.r = w.resource AND gp.l = w.relation
    GROUP BY w.n, w.root, w.resource, w.resource_id, w.relation
  ),
  member(user_id, resource, resource_id, relation, depth) AS (
    SELECT u.user_id, gp.r, e.resource_id, gp.l, 0
    FROM (SELECT DISTINCT q.user_id FROM q JOIN met ON met.n = q.n) u
    CROSS JOIN gp
    CROSS JOIN unnest(ARRAY[u.user_id, '']) AS h(user_id)
    CROSS JOIN LATERAL (
      SELECT g.resource_id FROM relationships g
      WHERE g.app_id = p_app AND g.user_id = h.user_id AND g.resource = gp.r AND g.relation = gp.l AND ((g.expires_at IS NULL OR g.expires_at > now()) AND g.condition IS NULL)
      OFFSET 0) e
    UNION
    SELECT m.user_id, t.r, e.resource_id, t.g, m.depth + 1
    FROM member m
    JOIN jsonb_to_recordset(p_steps) AS t(fr text, fl text, sr text, r text, p text, g text) ON t.fr = m.resource AND t.fl = m.relation
    CROSS JOIN LATERAL (
      SELECT s.resource_id FROM subject_relationships s
      WHERE s.app_id = p_app AND s.subject_resource = m.resource AND s.subject_id = m.resource_id AND s.subject_relation = t.sr
        AND s.resource = t.r AND s.relation = t.p AND ((s.expires_at IS NULL OR s.expires_at > now()) AND s.condition IS NULL)
      OFFSET 0) e
    WHERE m.depth < 16
  ),
  held AS (
    SELECT h.n, array_agg(DISTINCT h.root) AS roots
    FROM (
      SELECT w.n, w.root FROM walk w JOIN q ON q.n = w.n
      WHERE NOT EXISTS (SELECT 1 FROM gp WHERE gp.r = w.resource AND gp.l = w.relation)
        AND EXISTS (SELECT 1 FROM relationships g
                    WHERE g.app_id = p_app AND g.user_id = q.user_id AND g.resource = w.resource
                      AND g.resource_id = w.resource_id AND g.relation = w.relation AND ((g.expires_at IS NULL OR g.expires_at > now()) AND g.condition IS NULL)
 UNION ALL SELECT 1 FROM relationships g
                    WHERE g.app_id = p_app AND g.user_id = '' AND g.resource = w.resource
                      AND g.resource_id = w.resource_id AND g.relation = w.relation AND ((g.expires_at IS NULL OR g.expires_at > now()) AND g.condition IS NULL) AND EXISTS (SELECT 1 FROM relationships e WHERE e.app_id = p_app AND e.user_id = ''))
      UNION ALL
      SELECT m.n, m.root FROM met m JOIN q ON q.n = m.n
      WHERE EXISTS (SELECT 1 FROM member i
                    WHERE i.user_id = q.user_id AND i.resource = m.resource AND i.resource_id = m.resource_id
                      AND i.relation = m.relation AND i.depth + m.depth <= 16)
    ) h
    GROUP BY h.n
  )
  SELECT
    (SELECT json_agg(EXISTS (SELECT 1 FROM api_keys k
                                   WHERE k.secret_hash = c.key_hash AND k.app_id = p_app AND k.revoked_at IS NULL) ORDER BY c.n)
           FROM unnest(p_keys) WITH ORDINALITY AS c(key_hash, n)),
    (SELECT v.version::text FROM model_versions v WHERE v.app_id = p_app),
    (extract(epoch FROM now()) * 1000)::float8,
    (SELECT json_agg(json_build_array(
        coalesce(h.roots, '{}') || ARRAY(SELECT g.relation || chr(10) || g.condition FROM relationships g
              WHERE g.app_id = p_app AND g.user_id = q.user_id AND g.resource = q.resource AND g.resource_id = q.resource_id
                AND g.condition IS NOT NULL AND (g.expires_at IS NULL OR g.expires_at > now())
 UNION ALL SELECT g.relation || chr(10) || g.condition FROM relationships g
              WHERE g.app_id = p_app AND g.user_id = '' AND g.resource = q.resource AND g.resource_id = q.resource_id
                AND g.condition IS NOT NULL AND (g.expires_at IS NULL OR g.expires_at > now()) AND EXISTS (SELECT 1 FROM relationships e WHERE e.app_id = p_app AND e.user_id = '')),
        ARRAY(SELECT a.role_id || coalesce(chr(10) || a.condition, '') FROM role_assignments a WHERE a.app_id = p_app AND a.user_id = q.user_id),
        (EXISTS (SELECT 1 FROM subject_relationships s
                 WHERE s.app_id = p_app AND s.condition IS NOT NULL AND (s.expires_at IS NULL OR s.expires_at > now()))
         OR EXISTS (SELECT 1 FROM relationships g
                    WHERE g.app_id = p_app AND g.user_id = q.user_id AND g.condition IS NOT NULL AND (g.expires_at IS NULL OR g.expires_at > now())
                      AND NOT (g.resource = q.resource AND g.resource_id = q.resource_id
                               AND EXISTS (SELECT 1 FROM catalog_relations cr
                                           WHERE cr.app_id = p_app AND cr.resource = q.resource AND cr.relation = g.relation
                                             AND (q.action IS NULL OR q.action = ANY (cr.actions))))
 UNION ALL SELECT 1 FROM relationships g
                    WHERE g.app_id = p_app AND g.user_id = '' AND g.condition IS NOT NULL AND (g.expires_at IS NULL OR g.expires_at > now())
                      AND NOT (g.resource = q.resource AND g.resource_id = q.resource_id
                               AND EXISTS (SELECT 1 FROM catalog_relations cr
                                           WHERE cr.app_id = p_app AND cr.resource = q.resource AND cr.relation = g.relation
                                             AND (q.action IS NULL OR q.action = ANY (cr.actions)))) AND EXISTS (SELECT 1 FROM relationships e WHERE e.app_id = p_app AND e.user_id = '')))
      ) ORDER BY q.n)
     FROM q LEFT JOIN held h ON h.n = q.n)
  INTO keys, version, now_ms, rows;
END
$$;
