-- agentstore schema version 11 for postgres (prefix "agentstore_").
-- Released migration: never edit. The message search's text extraction
-- (V8's message_text) becomes a PL/pgSQL function with the same query:
-- as an SQL function with a recursive CTE it could not be inlined, so
-- the search trigger planned its body again in every writing transaction
-- (about 0.2 ms per append, measured 2026-12-03); PL/pgSQL keeps the
-- plan for the connection's life. Same text, same vectors: rows indexed
-- under V8 need no rebuild.
CREATE OR REPLACE FUNCTION "agentstore_message_text"(c json) RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN RETURN (
WITH RECURSIVE t(v, k, d, p) AS (SELECT c::jsonb, NULL::text, 0, ARRAY[]::bigint[]
UNION ALL SELECT x.v, x.k, t.d + 1, t.p || x.n FROM t CROSS JOIN LATERAL (
SELECT e.v, NULL::text AS k, e.n FROM jsonb_array_elements(CASE WHEN jsonb_typeof(t.v) = 'array' THEN t.v END) WITH ORDINALITY AS e(v, n)
UNION ALL SELECT o.value, o.key, o.n FROM jsonb_each(CASE WHEN jsonb_typeof(t.v) = 'object' THEN t.v END) WITH ORDINALITY AS o(key, value, n)) AS x
WHERE jsonb_typeof(t.v) IN ('array', 'object'))
SELECT left(translate(string_agg(left(t.v #>> '{}', 100000), chr(10) ORDER BY t.p), chr(57344) || chr(57345), ''), 100000)
FROM t WHERE jsonb_typeof(t.v) = 'string' AND (t.d <= 1 OR t.k IN ('text', 'content')))
; END
$$;
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (11, CURRENT_TIMESTAMP);
