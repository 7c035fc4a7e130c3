-- agentstore schema version 12 for sqlite (prefix "agentstore_").
-- Released migration: never edit. Version 12 limits PostgreSQL's search
-- index pending list; SQLite's full-text index has none. The version is
-- recorded so both chains keep the same versions.
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (12, CURRENT_TIMESTAMP);
