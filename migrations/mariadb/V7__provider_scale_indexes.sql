-- agentstore schema version 7 for mariadb (prefix "agentstore_").
-- No change on MariaDB: the chain's V1 already creates the schema of version
-- 11 (docs/schema-and-migrations.md); this step records its version.
-- Double-quoted identifiers whatever the server's sql_mode (Migrate's
-- connections have it already; Flyway, goose, golang-migrate and the mysql
-- client get it here).
SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',ANSI_QUOTES');
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (7, CURRENT_TIMESTAMP) ON DUPLICATE KEY UPDATE version = version;
