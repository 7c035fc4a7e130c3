-- agentstore schema version 17 for mariadb (prefix "agentstore_").
-- The session queue's live-items index becomes (session_id, processed_at,
-- priority DESC, seq): MariaDB has no partial index, and the other
-- chains' (session_id, priority DESC, seq) WHERE processed_at IS NULL was
-- a full index here, so a claim's ordered walk stepped over every finished
-- item of the session (EXPLAIN ANALYZE: r_rows 1,501 for one row after
-- 1,500 completions). With processed_at second, the live items (processed_at
-- IS NULL) are one range of the index in the claim's order. One ALTER TABLE
-- (atomic in MariaDB 10.6+): it can run again.
-- Double-quoted identifiers whatever the server's sql_mode (Migrate's
-- connections have it already; Flyway, goose, golang-migrate and the mysql
-- client get it here).
SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',ANSI_QUOTES');
ALTER TABLE "agentstore_queue" DROP INDEX IF EXISTS "idx_agentstore_queue_session_status",
  ADD INDEX "idx_agentstore_queue_session_status" ("session_id", "processed_at", "priority" DESC, "seq");
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (17, CURRENT_TIMESTAMP) ON DUPLICATE KEY UPDATE version = version;
