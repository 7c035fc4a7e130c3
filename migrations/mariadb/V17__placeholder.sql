-- agentstore schema version 17 for mariadb (prefix "agentstore_").
-- Placeholder of the version another branch owns (replaced at merge).
SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',ANSI_QUOTES');
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (17, CURRENT_TIMESTAMP) ON DUPLICATE KEY UPDATE version = version;
