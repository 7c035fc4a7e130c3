-- agentstore schema version 18 for mariadb (prefix "agentstore_").
-- Released migration: never edit. The worker queue's plain claim (no
-- session, no tag: WHERE session_id IS NULL AND tag IS NULL AND
-- visible_at <= now ORDER BY visible_at, id LIMIT n FOR UPDATE SKIP
-- LOCKED) had only the full index (visible_at, id), which holds tagged and
-- session-bound rows too: a poll walked (and locked) every visible tagged
-- or session-bound item before finding none (issue 24: 297 ms at 100,000
-- of each). MariaDB has no partial index; its stand-in for the other
-- chains' (visible_at, id) WHERE session_id IS NULL AND tag IS NULL is the
-- full index with the predicate's two columns first: the claim is one
-- range (NULL, NULL, ..now] read in the claim's order, so it reads only
-- visible plain rows and locks only the ones it takes. One ALTER: if it
-- fails, nothing changed; if it ran and the version row did not, running
-- Migrate again rebuilds the index once more.
SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',ANSI_QUOTES');
ALTER TABLE "agentstore_worker_queue" DROP INDEX "idx_agentstore_worker_queue_ready", ADD INDEX "idx_agentstore_worker_queue_ready" ("session_id","tag","visible_at","id");
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (18, CURRENT_TIMESTAMP) ON DUPLICATE KEY UPDATE version = version;
