-- agentstore schema version 15 for mariadb (prefix "agentstore_").
-- PLACEHOLDER (drop at merge): stands in for the parallel V15 so the chain is contiguous.
SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',ANSI_QUOTES');
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (15, CURRENT_TIMESTAMP) ON DUPLICATE KEY UPDATE version = version;
