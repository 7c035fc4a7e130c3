-- agentstore schema version 15 for sqlite (prefix "agentstore_").
-- Version 15 gives MariaDB its message search index (a FULLTEXT index);
-- SQLite's (V8) needs no change. The version is recorded so every chain
-- keeps the same versions.
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (15, CURRENT_TIMESTAMP);
