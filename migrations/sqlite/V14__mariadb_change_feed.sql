-- agentstore schema version 14 for sqlite (prefix "agentstore_").
-- Released migration: never edit. Version 14 gives MariaDB the session
-- change feed (V10 here). The version is recorded so every chain keeps the
-- same versions.
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (14, CURRENT_TIMESTAMP);
