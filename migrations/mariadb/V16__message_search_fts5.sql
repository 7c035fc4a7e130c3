-- agentstore schema version 16 for mariadb (prefix "agentstore_").
-- No change on MariaDB (V16 makes SQLite's search index an FTS5 table in
-- every build; MariaDB has no message search yet): this step records its
-- version.
-- Double-quoted identifiers whatever the server's sql_mode (Migrate's
-- connections have it already; Flyway, goose, golang-migrate and the mysql
-- client get it here).
SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',ANSI_QUOTES');
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (16, CURRENT_TIMESTAMP) ON DUPLICATE KEY UPDATE version = version;
