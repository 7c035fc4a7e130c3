-- agentstore schema version 19 for postgres (prefix "agentstore_").
-- Version 19 gives SQLite's change feed table its id order (no (ord, id)
-- index, no AUTOINCREMENT); this chain needs no change. The version is
-- recorded so every chain keeps the same versions.
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (19, CURRENT_TIMESTAMP);
