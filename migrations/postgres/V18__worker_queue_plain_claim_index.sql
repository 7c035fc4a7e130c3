-- agentstore schema version 18 for postgres (prefix "agentstore_").
-- Version 18 gives MariaDB's worker queue the stand-in of the plain
-- claim's partial index (V9 here); this chain needs no change. The version
-- is recorded so every chain keeps the same versions.
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (18, CURRENT_TIMESTAMP);
