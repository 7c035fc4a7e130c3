-- agentstore schema version 15 for mariadb (prefix "agentstore_").
-- Message search on MariaDB (docs/search.md): a search_text column on the
-- messages table holding each message's indexed text (the strings of its
-- content, not the JSON: message_text), lower-cased with every run of
-- characters that are not letters, digits or marks made one space
-- (message_search_text), set by BEFORE INSERT / BEFORE UPDATE triggers in
-- the writing statement (so every append path, Fork's copy and the import
-- stay in step; deletes, cascades included, take the row's text with them);
-- and an InnoDB FULLTEXT index over it, built with stop words off (every
-- word of innodb_ft_min_token_size characters or more is indexed; shorter
-- words are checked by the Search query itself).
--
-- DDL commits statement by statement on MariaDB, and each statement can
-- run again: an interrupted step (the column added, the triggers created,
-- the backfill half done, no index) is finished by the next Migrate (the
-- backfill resumes at the rows still NULL). The backfill commits in
-- batches of 5000 rows; appends meanwhile are indexed by the triggers.
-- The FULLTEXT index's build rebuilds the messages table (InnoDB adds its
-- hidden FTS_DOC_ID column): writes to messages wait for it, reads do not. With binary logging on, CREATE FUNCTION needs SUPER (or
-- log_bin_trust_function_creators=1).
-- Double-quoted identifiers and standard string literals whatever the
-- server's sql_mode (Migrate's connections have them already; Flyway,
-- goose, golang-migrate and the mysql client get them here).
SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',ANSI_QUOTES,NO_BACKSLASH_ESCAPES');
ALTER TABLE "agentstore_messages" ADD COLUMN IF NOT EXISTS "search_text" longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci NULL;
-- The indexed text of a content: the content if it is a JSON string, the
-- strings of the top-level array, and every string value of a member named
-- text or content at any depth, in document order (JSON_SEARCH lists the
-- paths of every string in order), joined by newlines, without U+E000 and
-- U+E001, at most 100,000 characters; NULL for none or invalid JSON.
CREATE OR REPLACE FUNCTION "agentstore_message_text"(c longtext) RETURNS longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DETERMINISTIC NO SQL
BEGIN
  DECLARE p, v, t longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL
; DECLARE path text CHARACTER SET utf8mb4 COLLATE utf8mb4_bin
; DECLARE n, i int DEFAULT 0
; IF c IS NULL OR NOT JSON_VALID(c) THEN RETURN NULL
; END IF
; SET p = JSON_SEARCH(c, 'all', '%')
; IF p IS NULL THEN RETURN NULL
; END IF
; IF LEFT(p, 1) <> '[' THEN SET p = CONCAT('[', p, ']')
; END IF
; SET n = JSON_LENGTH(p)
; WHILE i < n AND (t IS NULL OR CHAR_LENGTH(t) < 100000) DO
    SET path = JSON_UNQUOTE(JSON_EXTRACT(p, CONCAT('$[', i, ']')))
  ; IF path = '$' OR path REGEXP '^[$][[][0-9]+[]]$' OR path REGEXP '[.](text|content)$' THEN
      SET v = JSON_UNQUOTE(JSON_EXTRACT(c, path))
    ; IF v IS NOT NULL THEN SET t = CONCAT_WS(CHAR(10), t, LEFT(v, 100000))
    ; END IF
  ; END IF
  ; SET i = i + 1
; END WHILE
; RETURN LEFT(REPLACE(REPLACE(t, CHAR(0xEE8080 USING utf8mb4), ''), CHAR(0xEE8081 USING utf8mb4), ''), 100000)
; END;
-- The column's value: the words of message_text, lower-cased, one space
-- between them ('' for none).
CREATE OR REPLACE FUNCTION "agentstore_message_search_text"(c longtext) RETURNS longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DETERMINISTIC NO SQL
RETURN COALESCE(LOWER(REGEXP_REPLACE("agentstore_message_text"(c), '[^\p{L}\p{N}\p{M}]+', ' ')), '');
CREATE TRIGGER IF NOT EXISTS "agentstore_messages_search_insert" BEFORE INSERT ON "agentstore_messages" FOR EACH ROW
SET NEW."search_text" = "agentstore_message_search_text"(NEW."content");
CREATE TRIGGER IF NOT EXISTS "agentstore_messages_search_update" BEFORE UPDATE ON "agentstore_messages" FOR EACH ROW
SET NEW."search_text" = IF(NEW."content" <=> OLD."content" AND NEW."search_text" IS NOT NULL, NEW."search_text", "agentstore_message_search_text"(NEW."content"));
-- The messages stored before this step, 5000 rows per transaction.
BEGIN NOT ATOMIC
  REPEAT
    UPDATE "agentstore_messages" SET "search_text" = "agentstore_message_search_text"("content") WHERE "search_text" IS NULL LIMIT 5000
  ; UNTIL ROW_COUNT() = 0 END REPEAT
; END;
SET SESSION innodb_ft_enable_stopword = OFF;
-- FORCE: the table is rebuilt with the index (as the first FULLTEXT index
-- rebuilds it anyway, to add InnoDB's hidden FTS_DOC_ID column); without it,
-- an index created again after one was dropped misses the rows written
-- meanwhile (MariaDB 10.11.19). A re-run that finds the index rebuilds the
-- table once more.
ALTER TABLE "agentstore_messages" ADD FULLTEXT INDEX IF NOT EXISTS "idx_agentstore_messages_search" ("search_text"), FORCE;
SET SESSION innodb_ft_enable_stopword = DEFAULT;
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (15, CURRENT_TIMESTAMP) ON DUPLICATE KEY UPDATE version = version;
