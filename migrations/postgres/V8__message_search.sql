-- agentstore schema version 8 for postgres (prefix "agentstore_").
-- Released migration: never edit. Full-text search over messages
-- (Sessions.Search): a tsvector column search_tsv on the messages table,
-- kept in step by a BEFORE INSERT OR UPDATE OF content trigger (in the
-- inserting statement, so every append path, Fork's copy and group commit
-- stay in step), and a GIN index over it. message_text extracts the
-- indexed text from the content JSON (the content string, the strings of
-- the top-level array, every string member named text or content);
-- message_tsv builds the vector with the text search configuration the
-- trigger names ('simple'; see docs/search.md to change it).
--
-- Online: a STORED generated column would rewrite the whole table under
-- an ACCESS EXCLUSIVE lock; instead the column is added nullable (no
-- rewrite, a brief lock), the trigger fills new rows from then on, and the
-- existing rows are filled in primary-key batches of 5000, each committed
-- on its own when the step runs outside a transaction (as Migrate and
-- Flyway run it: see the .conf file beside this one; inside a transaction
-- the batches commit together). Appends never wait on the backfill; a
-- session delete waits at most for one batch. The GIN index is then built
-- CONCURRENTLY. Every statement can run again after an interruption.
ALTER TABLE "agentstore_messages" ADD COLUMN IF NOT EXISTS "search_tsv" tsvector;
CREATE OR REPLACE FUNCTION "agentstore_message_text"(c json) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
WITH RECURSIVE t(v, k, d, p) AS (SELECT c::jsonb, NULL::text, 0, ARRAY[]::bigint[]
UNION ALL SELECT x.v, x.k, t.d + 1, t.p || x.n FROM t CROSS JOIN LATERAL (
SELECT e.v, NULL::text AS k, e.n FROM jsonb_array_elements(CASE WHEN jsonb_typeof(t.v) = 'array' THEN t.v END) WITH ORDINALITY AS e(v, n)
UNION ALL SELECT o.value, o.key, o.n FROM jsonb_each(CASE WHEN jsonb_typeof(t.v) = 'object' THEN t.v END) WITH ORDINALITY AS o(key, value, n)) AS x
WHERE jsonb_typeof(t.v) IN ('array', 'object'))
SELECT left(translate(string_agg(left(t.v #>> '{}', 100000), chr(10) ORDER BY t.p), chr(57344) || chr(57345), ''), 100000)
FROM t WHERE jsonb_typeof(t.v) = 'string' AND (t.d <= 1 OR t.k IN ('text', 'content'))
$$;
CREATE OR REPLACE FUNCTION "agentstore_message_tsv"(c json, cfg regconfig) RETURNS tsvector LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT to_tsvector(cfg, translate(COALESCE("agentstore_message_text"(c), ''), '!"#$%&''()*+,-./:;<=>?@[\]^_`{|}~', '                                '))
$$;
CREATE OR REPLACE FUNCTION "agentstore_message_search_tsv"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN NEW."search_tsv" := "agentstore_message_tsv"(NEW."content", CAST(TG_ARGV[0] AS regconfig)); RETURN NEW; END
$$;
DROP TRIGGER IF EXISTS "trg_messages_search" ON "agentstore_messages";
CREATE TRIGGER "trg_messages_search" BEFORE INSERT OR UPDATE OF "content" ON "agentstore_messages" FOR EACH ROW EXECUTE FUNCTION "agentstore_message_search_tsv"('simple');
DO $$
DECLARE can_commit boolean := txid_current_if_assigned() IS NULL; last_sid uuid; last_seq bigint; k_sid uuid; k_seq bigint
; BEGIN
LOOP
  SELECT b."session_id", b."seq" INTO k_sid, k_seq FROM (SELECT m."session_id", m."seq" FROM "agentstore_messages" m
    WHERE last_sid IS NULL OR (m."session_id", m."seq") > (last_sid, last_seq) ORDER BY m."session_id", m."seq" LIMIT 5000) b
    ORDER BY b."session_id" DESC, b."seq" DESC LIMIT 1
  ; EXIT WHEN NOT FOUND
  ; UPDATE "agentstore_messages" m SET "search_tsv" = "agentstore_message_tsv"(m."content", 'simple')
    WHERE (last_sid IS NULL OR (m."session_id", m."seq") > (last_sid, last_seq)) AND (m."session_id", m."seq") <= (k_sid, k_seq)
      AND m."search_tsv" IS NULL
  ; last_sid := k_sid
  ; last_seq := k_seq
  ; IF can_commit THEN COMMIT
  ; END IF
; END LOOP
; END
$$;
CREATE INDEX CONCURRENTLY IF NOT EXISTS "idx_agentstore_messages_search" ON "agentstore_messages" USING gin ("search_tsv");
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (8, CURRENT_TIMESTAMP);
