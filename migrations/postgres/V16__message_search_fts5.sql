-- agentstore schema version 16 for postgres (prefix "agentstore_").
-- Version 16 makes SQLite's message search index an FTS5 table in every
-- build; PostgreSQL's search index needs no change. The version is
-- recorded so every chain keeps the same versions.
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (16, CURRENT_TIMESTAMP);
