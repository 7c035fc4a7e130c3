-- agentstore schema version 19 for mariadb (prefix "agentstore_").
-- No change on MariaDB (V19 gives SQLite's change feed table its id order:
-- no (ord, id) index, no AUTOINCREMENT): this step records its version.
-- Double-quoted identifiers whatever the server's sql_mode (Migrate's
-- connections have it already; Flyway, goose, golang-migrate and the mysql
-- client get it here).
SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',ANSI_QUOTES');
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (19, CURRENT_TIMESTAMP) ON DUPLICATE KEY UPDATE version = version;
