-- agentstore schema version 10 for mariadb (prefix "agentstore_").
-- No change on MariaDB: the chain's V1 already creates the schema of version
-- 11 (docs/schema-and-migrations.md); this step records its version.
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (10, CURRENT_TIMESTAMP) ON DUPLICATE KEY UPDATE version = version;
